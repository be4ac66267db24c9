//! Cache keys, built by one builder from a question's bytes — the client's (the hot path, and
//! the [`Request`](crate::request::Request) of a miss) or a gathered leg's query — without
//! allocating for names of ordinary length.
//!
//! Every key carries the identity of what answers it, never a position in a list: a client's
//! question the [`TargetId`] of its route's target, a gathered leg that of its cluster. A reload
//! that changes a target gives it a new identity, so the entries of the old one are never found
//! again (and age out of the table like any unused entry); a reload that removes or reorders
//! clusters can never file one cluster's records under another's.
//!
//! It owns the key's bytes and flags, the identities ([`TargetId::fresh`]) and whether a reply
//! may be shared between clients ([`may_share`]); which target keeps its identity over a reload
//! is the snapshot's to say, and it touches no entry.

use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::wire;

/// Key bytes kept on the stack; longer names (rare: 92+ bytes of wire name) spill to the heap.
const INLINE_KEY: usize = 104;

/// scope (8) + flags (1) + type (2) + class (2), then the lowercased wire name.
const PREFIX_LEN: usize = 13;

/// Where the flags byte sits in the key: after the scope.
const FLAGS_AT: usize = 8;

const FLAG_EDNS: u8 = 0x01;
const FLAG_DO: u8 = 0x02;
const FLAG_CD: u8 = 0x04;

/// Zone transfers: never answered from the cache (meshdns refuses them itself).
const TYPE_IXFR: u16 = 251;
const TYPE_AXFR: u16 = 252;

/// The request bits that change what a cached reply may contain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyFlags {
    /// The client sent an OPT record. Not in the design's key, deliberately: a reply cached for
    /// an EDNS client carries OPT, and a client that sent none must never receive one
    /// (RFC 6891 §7), nor a reply sized for EDNS.
    pub(crate) edns: bool,
    /// DO: the reply may carry RRSIGs.
    pub(crate) dnssec_ok: bool,
    /// CD: the upstream may have skipped validation.
    pub(crate) checking_disabled: bool,
}

impl KeyFlags {
    fn bits(self) -> u8 {
        let bit = |set: bool, flag: u8| if set { flag } else { 0 };
        bit(self.edns, FLAG_EDNS)
            | bit(self.dnssec_ok, FLAG_DO)
            | bit(self.checking_disabled, FLAG_CD)
    }
}

/// Which cache "namespace" a key lives in: a client's question under its route's target
/// ([`TargetId`], below 2^32), or one cluster's leg of a gathered query under the cluster's
/// (with the top bit set), so cluster b's leg for `x.svc.cluster.local` never meets cluster c's, nor a
/// pass-through answer for the same name from kube-dns.
const LEG_SCOPE_BIT: u64 = 1 << 63;

/// The identity of a route's target (kube-dns, a peer, the gathered zones, the answers made
/// locally), given when the target is built and handed on to the target that replaces it
/// when a reload leaves its configuration as it was. A client's key carries it
/// ([`CacheKey::for_target`]), so a reload invalidates a changed target's entries without
/// looking at them. 32 bits: a reload builds a few targets; at one reload a second, the
/// numbers last a century.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TargetId(u32);

impl TargetId {
    /// An identity no target has had before (in this process).
    pub(crate) fn fresh() -> TargetId {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        TargetId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What identifies a cached reply: lowercased question name, type, class, the DO/CD/EDNS
/// request bits, and the scope (client question or a cluster's leg).
#[derive(Clone)]
pub(crate) struct CacheKey {
    len: usize,
    inline: [u8; INLINE_KEY],
    heap: Option<Box<[u8]>>,
}

impl KeyFlags {
    /// The flags of a query whose header starts `msg` and whose OPT record says `opt`.
    pub(crate) fn of_query(msg: &[u8], opt: Option<&wire::OptInfo>) -> KeyFlags {
        KeyFlags {
            edns: opt.is_some(),
            dnssec_ok: opt.is_some_and(|o| o.dnssec_ok),
            checking_disabled: wire::checking_disabled(msg),
        }
    }
}

/// Whether the reply to a query for `question` (its bytes: name, type, class) with the OPT
/// record `opt` may be shared with other clients: not for zone transfers, nor for a query with
/// CLIENT-SUBNET (the reply may be scoped to the client's subnet).
pub(crate) fn may_share(question: &[u8], opt: Option<&wire::OptInfo>) -> bool {
    let transfer = matches!(wire::question_type(question), Some(TYPE_AXFR | TYPE_IXFR));
    let subnet = opt.is_some_and(|o| o.options.contains(wire::OPTION_CLIENT_SUBNET));
    !transfer && !subnet
}

impl CacheKey {
    /// The key of a client's query, from its raw bytes: `None` unless the query may be
    /// answered from the cache ([`wire::plain_query`]) and its reply may be shared.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn from_request(request: &[u8]) -> Option<CacheKey> {
        let query = wire::plain_query(request)?;
        let opt = query.opt.as_ref();
        may_share(query.question, opt)
            .then(|| Self::for_client(query.question, KeyFlags::of_query(request, opt)))
            .flatten()
    }

    /// The key of a client's question (its bytes: name, type, class), with the flags of its
    /// query, before its route is known ([`for_target`](Self::for_target) completes it).
    /// Allocates nothing unless the name is unusually long.
    pub(crate) fn for_client(question: &[u8], flags: KeyFlags) -> Option<CacheKey> {
        Self::new(0, flags, question)
    }

    /// This client's key under the target its route goes to: what the query is looked up,
    /// shared and stored under.
    pub(crate) fn for_target(&self, target: TargetId) -> CacheKey {
        let mut key = self.clone();
        key.set_target(target);
        key
    }

    /// [`for_target`](Self::for_target) in place (the cache-hit path copies no key).
    pub(crate) fn set_target(&mut self, target: TargetId) {
        self.bytes_mut()[..FLAGS_AT].copy_from_slice(&u64::from(target.0).to_be_bytes());
    }

    /// The key of one leg of a gathered query: the question as sent to the cluster whose
    /// identity (as a target) is `cluster`, with the flags of the leg's own request. The gather code stores
    /// each leg's reply under it so a failed leg can be filled from
    /// [`GatherDoor::last_good`](super::GatherDoor::last_good).
    pub(crate) fn for_leg(cluster: TargetId, question: &[u8], flags: KeyFlags) -> Option<CacheKey> {
        Self::new(LEG_SCOPE_BIT | u64::from(cluster.0), flags, question)
    }

    /// Whether `question` (the bytes of a message's first question: name, type, class) asks
    /// what this key stands for, names compared ignoring case. The cache stores a reply only
    /// under its own question: serving patches the stored question with the client's, which
    /// is sound only when the two have the same length.
    pub(crate) fn is_question(&self, question: &[u8]) -> bool {
        let key = self.as_bytes();
        let Some((name, fixed)) = question.split_at_checked(question.len().wrapping_sub(4)) else {
            return false;
        };
        key.get(FLAGS_AT + 1..PREFIX_LEN) == Some(fixed)
            && key
                .get(PREFIX_LEN..)
                .is_some_and(|k| k.eq_ignore_ascii_case(name))
    }

    /// The one builder of keys: scope, flags, then the question's type and class as on the
    /// wire and its name lowercased. `None` when `question` is shorter than a type and class.
    fn new(scope: u64, flags: KeyFlags, question: &[u8]) -> Option<CacheKey> {
        let (name, fixed) = question.split_at_checked(question.len().checked_sub(4)?)?;
        let mut key = Self::empty(PREFIX_LEN + name.len());
        let bytes = key.bytes_mut();
        bytes[..FLAGS_AT].copy_from_slice(&scope.to_be_bytes());
        bytes[FLAGS_AT] = flags.bits();
        bytes[FLAGS_AT + 1..PREFIX_LEN].copy_from_slice(fixed);
        for (to, from) in bytes[PREFIX_LEN..].iter_mut().zip(name) {
            *to = from.to_ascii_lowercase();
        }
        Some(key)
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

    /// Where the question (name, type, class) this key was built from lies in a message that
    /// asks or answers it, as its one question: right after the header. What a hit patches;
    /// the records start at its end.
    pub(crate) fn question_range(&self) -> Range<usize> {
        wire::HEADER_LEN..wire::HEADER_LEN + self.len - PREFIX_LEN + 4
    }

    /// The key as one byte string: what the cache's table is indexed by.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(heap) => heap,
            None => &self.inline[..self.len],
        }
    }

    fn scope(&self) -> u64 {
        let mut scope = [0; FLAGS_AT];
        scope.copy_from_slice(&self.as_bytes()[..FLAGS_AT]);
        u64::from_be_bytes(scope)
    }

    /// The request bits this key was built with.
    pub(crate) fn flags(&self) -> KeyFlags {
        let bits = self.as_bytes()[FLAGS_AT];
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
            .field("scope", &self.scope())
            .field("flags", &self.flags())
            .field("type", &u16::from_be_bytes([bytes[9], bytes[10]]))
            .field("class", &u16::from_be_bytes([bytes[11], bytes[12]]))
            .field("name", &String::from_utf8_lossy(&bytes[PREFIX_LEN..]))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::RecordType;
    use hickory_proto::rr::rdata::opt::EdnsOption;

    use super::*;
    use crate::cache::tests::query;

    fn key(name: &str, qtype: RecordType, edns: Option<bool>, cd: bool) -> CacheKey {
        CacheKey::from_request(&query(name, qtype, edns, cd)).unwrap()
    }

    #[test]
    fn names_compare_case_insensitively() {
        let a = |name| key(name, RecordType::A, None, false);
        assert_eq!(
            a("Mongo-0.Mongo.DB.svc.cluster.local."),
            a("mongo-0.mongo.db.svc.cluster.local.")
        );
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
    fn the_same_question_gives_the_same_key_and_legs_their_own() {
        let asked = query("SRV.Example.", RecordType::SRV, Some(true), false);
        let question = wire::first_question(&asked).unwrap();
        let flags = KeyFlags {
            edns: true,
            dnssec_ok: true,
            checking_disabled: false,
        };
        let from_request = key("srv.example.", RecordType::SRV, Some(true), false);
        assert_eq!(
            CacheKey::for_client(question, flags),
            Some(from_request.clone())
        );
        let b = TargetId::fresh();
        let leg = CacheKey::for_leg(b, question, flags).unwrap();
        assert_ne!(leg, from_request);
        assert_ne!(
            Some(leg.clone()),
            from_request.for_target(b).into(),
            "nor b's route"
        );
        let c = TargetId::fresh();
        assert_ne!(Some(leg), CacheKey::for_leg(c, question, flags));
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
        let request = query("a.example.", RecordType::A, Some(false), false);
        let mut msg = hickory_proto::op::Message::from_vec(&request).unwrap();
        if let Some(edns) = msg.edns.as_mut() {
            let subnet = vec![0, 1, 24, 0, 10, 0, 0];
            let option = EdnsOption::Unknown(wire::OPTION_CLIENT_SUBNET, subnet);
            edns.options_mut().insert(option);
        }
        assert!(CacheKey::from_request(&msg.to_vec().unwrap()).is_none());
    }
}
