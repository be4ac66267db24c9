//! Cache keys, built from the client's raw bytes (the hot path) or from a parsed question (the
//! gather legs), without allocating for names of ordinary length.

use std::hash::{Hash, Hasher};

use hickory_proto::rr::{DNSClass, Name, RecordType};

use crate::wire;

/// Key bytes kept on the stack; longer names (rare: 89+ bytes of wire name) spill to the heap.
const INLINE_KEY: usize = 96;

/// scope (2) + flags (1) + type (2) + class (2), then the lowercased wire name.
const PREFIX_LEN: usize = 7;

const FLAG_EDNS: u8 = 0x01;
const FLAG_DO: u8 = 0x02;
const FLAG_CD: u8 = 0x04;

/// Zone transfers: never answered from the cache (meshdns refuses them itself).
const TYPE_IXFR: u16 = 251;
const TYPE_AXFR: u16 = 252;

/// The request bits that change what a cached reply may contain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyFlags {
    /// The client sent an OPT record. Not in the design's key, deliberately: a reply cached for
    /// an EDNS client carries OPT, and a client that sent none must never receive one
    /// (RFC 6891 §7), nor a reply sized for EDNS.
    pub edns: bool,
    /// DO: the reply may carry RRSIGs.
    pub dnssec_ok: bool,
    /// CD: the upstream may have skipped validation.
    pub checking_disabled: bool,
}

impl KeyFlags {
    fn bits(self) -> u8 {
        let bit = |set: bool, flag: u8| if set { flag } else { 0 };
        bit(self.edns, FLAG_EDNS)
            | bit(self.dnssec_ok, FLAG_DO)
            | bit(self.checking_disabled, FLAG_CD)
    }
}

/// Which cache "namespace" a key lives in: the client's question, or one cluster's leg of a
/// gathered query (so cluster b's answer for `x.svc.cluster.local` never meets cluster c's, nor
/// a pass-through answer for the same name from kube-dns).
const SCOPE_CLIENT: u16 = 0;

/// What identifies a cached reply: lowercased question name, type, class, the DO/CD/EDNS
/// request bits, and the scope (client question or a cluster's leg).
#[derive(Clone)]
pub struct CacheKey {
    len: usize,
    inline: [u8; INLINE_KEY],
    heap: Option<Box<[u8]>>,
}

impl CacheKey {
    /// The key of a client's query, from its raw bytes: `None` unless the query may be
    /// answered from the cache ([`wire::plain_query`]) and its reply may be shared.
    pub fn from_request(request: &[u8]) -> Option<CacheKey> {
        Self::for_plain_query(&wire::plain_query(request)?, request)
    }

    /// [`from_request`](Self::from_request) for a caller that has read the query already
    /// (the cache-hit path walks the message once). `None` for what must never be shared:
    /// zone transfers, and queries with CLIENT-SUBNET (the reply may be scoped to the
    /// client's subnet). Allocates nothing unless the name is unusually long.
    pub fn for_plain_query(query: &wire::PlainQuery<'_>, request: &[u8]) -> Option<CacheKey> {
        let (name, fixed) = query
            .question
            .split_at(query.question.len().checked_sub(4)?);
        let qtype = wire::question_type(query.question)?;
        if qtype == TYPE_AXFR
            || qtype == TYPE_IXFR
            || query
                .opt
                .is_some_and(|o| o.options.contains(wire::OPTION_CLIENT_SUBNET))
        {
            return None;
        }
        let flags = KeyFlags {
            edns: query.opt.is_some(),
            dnssec_ok: query.opt.is_some_and(|o| o.dnssec_ok),
            checking_disabled: wire::checking_disabled(request),
        };
        let mut key = Self::with_prefix(SCOPE_CLIENT, flags, fixed, name.len());
        for (to, from) in key.bytes_mut()[PREFIX_LEN..].iter_mut().zip(name) {
            *to = from.to_ascii_lowercase();
        }
        Some(key)
    }

    /// The key a client query for this question would have: equal to
    /// [`from_request`](Self::from_request) of such a query.
    pub fn for_question(
        name: &Name,
        qtype: RecordType,
        qclass: DNSClass,
        flags: KeyFlags,
    ) -> CacheKey {
        Self::build(SCOPE_CLIENT, name, qtype, qclass, flags)
    }

    /// The key of one leg of a gathered query: the question as sent to cluster number
    /// `cluster` (its index in `Config::clusters`), with the flags of the leg's own request.
    /// The gather code stores each leg's reply under it so a failed leg can be filled from
    /// [`Cache::last_good`](super::Cache::last_good).
    pub fn for_leg(
        cluster: usize,
        name: &Name,
        qtype: RecordType,
        qclass: DNSClass,
        flags: KeyFlags,
    ) -> CacheKey {
        let scope = u16::try_from(cluster).map_or(u16::MAX, |c| c.saturating_add(1));
        Self::build(scope, name, qtype, qclass, flags)
    }

    /// Whether `question` (the bytes of a message's first question: name, type, class) asks
    /// what this key stands for, names compared ignoring case. The cache stores a reply only
    /// under its own question: serving patches the stored question with the client's, which
    /// is sound only when the two have the same length.
    pub fn is_question(&self, question: &[u8]) -> bool {
        let key = self.as_bytes();
        let Some((name, fixed)) = question.split_at_checked(question.len().wrapping_sub(4)) else {
            return false;
        };
        key.get(3..PREFIX_LEN) == Some(fixed)
            && key
                .get(PREFIX_LEN..)
                .is_some_and(|k| k.eq_ignore_ascii_case(name))
    }

    /// A key of `PREFIX_LEN + name_len` bytes with its prefix written: scope, flags, and the
    /// question's type and class (`fixed`, as on the wire); the name is the caller's to fill.
    fn with_prefix(scope: u16, flags: KeyFlags, fixed: &[u8], name_len: usize) -> CacheKey {
        let mut key = Self::empty(PREFIX_LEN + name_len);
        let bytes = key.bytes_mut();
        bytes[..2].copy_from_slice(&scope.to_be_bytes());
        bytes[2] = flags.bits();
        bytes[3..PREFIX_LEN].copy_from_slice(fixed);
        key
    }

    fn build(
        scope: u16,
        name: &Name,
        qtype: RecordType,
        qclass: DNSClass,
        flags: KeyFlags,
    ) -> CacheKey {
        let name_len = name.iter().map(|label| 1 + label.len()).sum::<usize>() + 1;
        let ([t0, t1], [c0, c1]) = (
            u16::from(qtype).to_be_bytes(),
            u16::from(qclass).to_be_bytes(),
        );
        let mut key = Self::with_prefix(scope, flags, &[t0, t1, c0, c1], name_len);
        let bytes = key.bytes_mut();
        let mut at = PREFIX_LEN;
        for label in name.iter() {
            // A Name's labels are at most 63 bytes, so the length fits.
            bytes[at] = label.len() as u8;
            for (to, from) in bytes[at + 1..].iter_mut().zip(label) {
                *to = from.to_ascii_lowercase();
            }
            at += 1 + label.len();
        }
        bytes[at] = 0;
        key
    }

    /// The key stored as `bytes` (what [`as_bytes`](Self::as_bytes) gave).
    pub(super) fn from_bytes(bytes: &[u8]) -> CacheKey {
        let mut key = Self::empty(bytes.len());
        key.bytes_mut().copy_from_slice(bytes);
        key
    }

    fn empty(len: usize) -> CacheKey {
        CacheKey {
            len,
            inline: [0; INLINE_KEY],
            heap: (len > INLINE_KEY).then(|| vec![0; len].into_boxed_slice()),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.heap {
            Some(heap) => heap,
            None => &mut self.inline[..self.len],
        }
    }

    /// The key as one byte string: what the cache's table is indexed by.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(heap) => heap,
            None => &self.inline[..self.len],
        }
    }

    /// Whether this is the key of a gathered leg (see [`for_leg`](Self::for_leg)).
    pub fn is_leg(&self) -> bool {
        self.as_bytes()[..2] != SCOPE_CLIENT.to_be_bytes()
    }

    /// The question name, lowercased, in wire form.
    pub fn name(&self) -> &[u8] {
        &self.as_bytes()[PREFIX_LEN..]
    }

    /// The request bits this key was built with.
    pub fn flags(&self) -> KeyFlags {
        let bits = self.as_bytes()[2];
        KeyFlags {
            edns: bits & FLAG_EDNS != 0,
            dnssec_ok: bits & FLAG_DO != 0,
            checking_disabled: bits & FLAG_CD != 0,
        }
    }
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CacheKey {}

impl Hash for CacheKey {
    // Hashes exactly like `[u8]`, so the table can store `Arc<[u8]>` and be searched with a key.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = self.as_bytes();
        f.debug_struct("CacheKey")
            .field("scope", &u16::from_be_bytes([bytes[0], bytes[1]]))
            .field("flags", &self.flags())
            .field("type", &u16::from_be_bytes([bytes[3], bytes[4]]))
            .field("class", &u16::from_be_bytes([bytes[5], bytes[6]]))
            .field("name", &String::from_utf8_lossy(&bytes[PREFIX_LEN..]))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::query;

    fn key(name: &str, qtype: RecordType, edns: Option<bool>, cd: bool) -> CacheKey {
        CacheKey::from_request(&query(name, qtype, edns, cd)).unwrap()
    }

    #[test]
    fn names_compare_case_insensitively() {
        let a = key(
            "Mongo-0.Mongo.DB.svc.cluster.local.",
            RecordType::A,
            None,
            false,
        );
        let b = key(
            "mongo-0.mongo.db.svc.cluster.local.",
            RecordType::A,
            None,
            false,
        );
        assert_eq!(a, b);
    }

    #[test]
    fn do_cd_edns_and_type_make_different_entries() {
        let base = key("a.example.", RecordType::A, Some(false), false);
        for other in [
            key("a.example.", RecordType::AAAA, Some(false), false),
            key("a.example.", RecordType::A, Some(true), false),
            key("a.example.", RecordType::A, Some(false), true),
            key("a.example.", RecordType::A, None, false),
            key("b.example.", RecordType::A, Some(false), false),
        ] {
            assert_ne!(base, other);
        }
        assert!(base.flags().edns && !base.flags().dnssec_ok);
    }

    #[test]
    fn parsed_questions_give_the_same_key_and_legs_their_own() {
        let name = Name::from_ascii("SRV.Example.").unwrap();
        let flags = KeyFlags {
            edns: true,
            dnssec_ok: true,
            checking_disabled: false,
        };
        let from_bytes = key("srv.example.", RecordType::SRV, Some(true), false);
        assert_eq!(
            CacheKey::for_question(&name, RecordType::SRV, DNSClass::IN, flags),
            from_bytes
        );
        let leg = CacheKey::for_leg(0, &name, RecordType::SRV, DNSClass::IN, flags);
        assert_ne!(leg, from_bytes);
        assert_ne!(
            leg,
            CacheKey::for_leg(1, &name, RecordType::SRV, DNSClass::IN, flags)
        );
    }

    #[test]
    fn long_names_spill_to_the_heap_and_still_match() {
        let long = format!("{}.example.", ["abcdefghij"; 20].join("."));
        let a = key(&long.to_uppercase(), RecordType::A, None, false);
        assert!(a.heap.is_some());
        assert_eq!(a, key(&long, RecordType::A, None, false));
    }

    #[test]
    fn garbage_requests_give_no_key() {
        let good = query("a.example.", RecordType::A, Some(false), false);
        for cut in 0..good.len() {
            assert!(CacheKey::from_request(&good[..cut]).is_none(), "cut {cut}");
        }
        let mut response = good.clone();
        response[2] |= 0x80;
        assert!(CacheKey::from_request(&response).is_none());
        let mut pointer = good.clone();
        pointer[wire::HEADER_LEN] = 0xc0;
        assert!(CacheKey::from_request(&pointer).is_none());
    }

    #[test]
    fn transfers_and_client_subnet_queries_are_never_shared() {
        for qtype in [RecordType::AXFR, RecordType::IXFR] {
            assert!(CacheKey::from_request(&query("a.example.", qtype, None, false)).is_none());
        }
        let mut msg = hickory_proto::op::Message::from_vec(&query(
            "a.example.",
            RecordType::A,
            Some(false),
            false,
        ))
        .unwrap();
        if let Some(edns) = msg.edns.as_mut() {
            edns.options_mut()
                .insert(hickory_proto::rr::rdata::opt::EdnsOption::Unknown(
                    wire::OPTION_CLIENT_SUBNET,
                    vec![0, 1, 24, 0, 10, 0, 0],
                ));
        }
        assert!(CacheKey::from_request(&msg.to_vec().unwrap()).is_none());
    }
}
