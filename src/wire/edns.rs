//! The OPT pseudo-record (EDNS, RFC 6891) read and edited in place: the sender's payload size,
//! version, DO bit, and which options it carries; and removing options without parsing the
//! rest of the message, so options meshdns does not use pass through byte for byte.
//! It reads an option's framing only: what an option means (the loop marker, CLIENT-SUBNET
//! for sharing) is its users'.

use super::header::{HEADER_LEN, TC_BIT, count, first_question};
use super::records::{RecordAt, Section, TYPE_OPT, for_each_record, record_at};

/// NSID (RFC 5001): the server's identity, for the client that asked.
pub(crate) const OPTION_NSID: u16 = 3;
/// CLIENT-SUBNET (RFC 7871): a reply may be scoped to the subnet, so it is never shared.
pub(crate) const OPTION_CLIENT_SUBNET: u16 = 8;
/// COOKIE (RFC 7873): made for one client and one server.
pub(crate) const OPTION_COOKIE: u16 = 10;
/// TCP-KEEPALIVE (RFC 7828): about one TCP connection.
pub(crate) const OPTION_TCP_KEEPALIVE: u16 = 11;
/// PADDING (RFC 7830): sized for one message.
pub(crate) const OPTION_PADDING: u16 = 12;
/// meshdns's loop marker, from the range RFC 6891 leaves for local and experimental use
/// (65001–65534): every query meshdns sends upstream carries it (see `loops`).
pub(crate) const OPTION_LOOP_MARKER: u16 = 65_423;
/// Record types that must stay last in a message (TSIG, and SIG for SIG(0)): a query signed
/// with one is never edited.
const TYPE_TSIG: u16 = 250;
const TYPE_SIG: u16 = 24;

/// Options about one hop, relayed in neither direction: COOKIE (made for one client and one
/// server), TCP-KEEPALIVE (about one TCP connection; never sent over UDP, RFC 7828 §3.2.1,
/// §3.3.2) and PADDING (sized for one message on one encrypted hop, RFC 7830). meshdns is a
/// server supporting none of them towards its clients, and a client towards its upstreams.
pub(crate) fn is_hop_by_hop_option(code: u16) -> bool {
    matches!(code, OPTION_COOKIE | OPTION_TCP_KEEPALIVE | OPTION_PADDING)
}

/// Options that belong to one client: the hop-by-hop ones, and NSID (the identity of the
/// server that answered, for the client that asked it). They reach only the client whose
/// query produced the reply, never a cached or shared copy.
pub(crate) fn is_per_client_option(code: u16) -> bool {
    code == OPTION_NSID || is_hop_by_hop_option(code)
}

/// Which of the codes above a message carries: those below 32 and the loop marker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OptionSet(u64);

impl OptionSet {
    pub(crate) fn contains(self, code: u16) -> bool {
        Self::bit(code).is_some_and(|bit| self.0 & (1 << bit) != 0)
    }

    fn insert(&mut self, code: u16) {
        if let Some(bit) = Self::bit(code) {
            self.0 |= 1 << bit;
        }
    }

    fn bit(code: u16) -> Option<u16> {
        match code {
            0..32 => Some(code),
            OPTION_LOOP_MARKER => Some(32),
            _ => None,
        }
    }
}

/// What the OPT pseudo-record of a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OptInfo {
    /// The sender's UDP payload size (the record's CLASS).
    pub payload: u16,
    /// The upper 8 bits of the 12-bit RCODE.
    pub(crate) extended_rcode: u8,
    pub(crate) version: u8,
    /// The DO bit: the sender wants DNSSEC records.
    pub(crate) dnssec_ok: bool,
    pub(crate) options: OptionSet,
    /// Where the option list (the record's RDATA) lies in the message, for
    /// [`for_each_option`].
    pub(crate) options_at: (usize, usize),
}

impl OptInfo {
    fn of(record: &RecordAt, msg: &[u8]) -> Option<OptInfo> {
        let [extended_rcode, version, flags, _] = record.ttl.ttl.to_be_bytes();
        let mut options = OptionSet::default();
        let options_at = (record.rdata_offset, record.end());
        for_each_option(msg, options_at, |code, _| options.insert(code))?;
        Some(OptInfo {
            payload: record.class,
            extended_rcode,
            version,
            dnssec_ok: flags & 0x80 != 0,
            options,
            options_at,
        })
    }
}

/// Calls `visit(code, range of the whole option)` for each option of the OPT record's RDATA,
/// which lies at `(start, end)` of `msg` ([`OptInfo::options_at`]); `None` when the option
/// list is malformed.
pub(crate) fn for_each_option(
    msg: &[u8],
    (start, end): (usize, usize),
    mut visit: impl FnMut(u16, std::ops::Range<usize>),
) -> Option<()> {
    let mut at = start;
    while at < end {
        let head = msg.get(at..at + 4)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let next = at + 4 + len;
        if next > end {
            return None;
        }
        visit(code, at..next);
        at = next;
    }
    Some(())
}

/// The OPT record of the additional section: `Some(None)` when there is none, `None` when the
/// message is malformed (its option list included). With several OPT records (itself an error
/// the full parse answers with FORMERR) the first is read.
pub(crate) fn opt(msg: &[u8]) -> Option<Option<OptInfo>> {
    match first_opt(msg)? {
        Some(record) => OptInfo::of(&record, msg).map(Some),
        None => Some(None),
    }
}

/// The first OPT record of the additional section: `Some(None)` when there is none, `None` when
/// the message does not walk.
fn first_opt(msg: &[u8]) -> Option<Option<RecordAt>> {
    let mut first = None;
    for_each_record(msg, |record| {
        if record.section == Section::Additional && record.rtype == TYPE_OPT && first.is_none() {
            first = Some(*record);
        }
    })?;
    Some(first)
}

#[cfg(test)]
/// Whether the OPT record of `msg` carries option `code` with exactly `data`.
pub(crate) fn has_option(msg: &[u8], code: u16, data: &[u8]) -> bool {
    let Some(Some(record)) = first_opt(msg) else {
        return false;
    };
    let mut found = false;
    let _ = for_each_option(msg, (record.rdata_offset, record.end()), |at, range| {
        found |= at == code && msg.get(range.start + 4..range.end) == Some(data);
    });
    found
}

/// `msg` with option `code` = `data` added to its OPT record — or to a new OPT record
/// (payload 512, no flags: the sender's limits stay as they were) when it has none — and the
/// UDP payload size of the OPT record it had (`None`: the record was added). `None` when the
/// message does not walk or is signed (TSIG, SIG(0)): the caller sends it as it is.
pub(crate) fn with_option(msg: &[u8], code: u16, data: &[u8]) -> Option<(Vec<u8>, Option<u16>)> {
    let mut opt = None;
    let mut signed = false;
    let end = for_each_record(msg, |record| {
        signed |= matches!(record.rtype, TYPE_TSIG | TYPE_SIG);
        if record.section == Section::Additional && record.rtype == TYPE_OPT && opt.is_none() {
            opt = Some(*record);
        }
    })?;
    if signed || end != msg.len() {
        return None;
    }
    let option_len = u16::try_from(data.len()).ok()?;
    let mut out = Vec::with_capacity(msg.len() + 15 + data.len());
    let payload = match opt {
        Some(record) => {
            let rdata_len = u16::try_from(record.rdata_len + 4 + data.len()).ok()?;
            out.extend_from_slice(&msg[..record.rdata_offset - 2]);
            out.extend_from_slice(&rdata_len.to_be_bytes());
            out.extend_from_slice(&msg[record.rdata_offset..record.end()]);
            push_option(&mut out, code, option_len, data);
            out.extend_from_slice(&msg[record.end()..]);
            Some(record.class)
        }
        None => {
            let arcount = count(msg, 3)?.checked_add(1)?;
            out.extend_from_slice(msg);
            out[10..12].copy_from_slice(&arcount.to_be_bytes());
            // Root owner, type OPT, class = payload 512, TTL = rcode/version/flags 0.
            out.extend_from_slice(&[0, 0, 41, 2, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&(option_len + 4).to_be_bytes());
            push_option(&mut out, code, option_len, data);
            None
        }
    };
    Some((out, payload))
}

fn push_option(out: &mut Vec<u8>, code: u16, len: u16, data: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
}

/// `reply` cut to its header, first question and OPT record, with TC set and nothing else: a
/// reply that cannot go out whole and cannot be trimmed record by record, which tells the
/// client to ask again over TCP. An OPT record stays (RFC 6891 §7: a reply to a query that
/// carried one carries one; a client that gets none may take the server for one without EDNS)
/// with its UDP size, extended RCODE, version and flags, but without options: those of a reply
/// that could not be re-encoded may not parse. A reply without a readable question keeps only
/// its header (and OPT record).
pub(crate) fn cut_to_question(reply: &[u8]) -> Vec<u8> {
    let question = first_question(reply).unwrap_or_default();
    let opt: Vec<u8> = (first_opt(reply).flatten())
        .map(|record| {
            // The root, type OPT, the UDP size and the TTL field as they are, no RDATA.
            let (class, ttl) = (record.class.to_be_bytes(), record.ttl.ttl.to_be_bytes());
            [&[0][..], &TYPE_OPT.to_be_bytes(), &class, &ttl, &[0, 0]].concat()
        })
        .unwrap_or_default();
    let mut cut = Vec::with_capacity(HEADER_LEN + question.len() + opt.len());
    cut.extend_from_slice(reply.get(..HEADER_LEN).unwrap_or(&[0; HEADER_LEN]));
    cut[2] |= TC_BIT;
    let (questions, additionals) = (u8::from(!question.is_empty()), u8::from(!opt.is_empty()));
    cut[4..HEADER_LEN].copy_from_slice(&[0, questions, 0, 0, 0, 0, 0, additionals]);
    cut.extend_from_slice(question);
    cut.extend_from_slice(&opt);
    cut
}

/// `msg` without its OPT record (ARCOUNT lowered), taken out in place: a reply to a query
/// whose OPT record was added on the way, for a client that sent none. `msg` unchanged as the
/// error when it has none or does not walk.
pub(crate) fn without_opt(mut msg: Vec<u8>) -> Result<Vec<u8>, Vec<u8>> {
    let found = first_opt(&msg)
        .flatten()
        .zip(count(&msg, 3).and_then(|arcount| arcount.checked_sub(1)));
    let Some((record, arcount)) = found else {
        return Err(msg);
    };
    msg.drain(record.start..record.end());
    msg[10..12].copy_from_slice(&arcount.to_be_bytes());
    Ok(msg)
}

/// A query that may be answered from the cache: its question bytes and OPT record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlainQuery<'a> {
    /// The question: name (plain labels), type, class.
    pub(crate) question: &'a [u8],
    pub(crate) opt: Option<OptInfo>,
}

/// The query as a [`PlainQuery`] when it is well-formed enough for the cache-hit path: a
/// standard query (QR clear, opcode QUERY) with one question of plain labels, no answer or
/// authority records, at most one additional record which is a version-0 OPT without a loop
/// marker (a query that may have come back to meshdns is looked at whole), and nothing after
/// it. Anything else (`None`) takes the full path and gets its proper answer there.
pub(crate) fn plain_query(msg: &[u8]) -> Option<PlainQuery<'_>> {
    let header = msg.get(..HEADER_LEN)?;
    let standard_query = header[2] & 0xf8 == 0;
    if !standard_query || count(msg, 0)? != 1 || count(msg, 1)? != 0 || count(msg, 2)? != 0 {
        return None;
    }
    let question = super::first_question(msg)?;
    let mut opt = None;
    let end = match count(msg, 3)? {
        0 => HEADER_LEN + question.len(),
        1 => {
            // The one record follows the question: read in place, the question not walked again.
            let record = record_at(msg, HEADER_LEN + question.len(), Section::Additional)
                .filter(|r| r.rtype == TYPE_OPT && msg.get(r.start) == Some(&0))?;
            let info = OptInfo::of(&record, msg)?;
            if info.version != 0 || info.options.contains(OPTION_LOOP_MARKER) {
                return None;
            }
            opt = Some(info);
            record.end()
        }
        _ => return None,
    };
    (end == msg.len()).then_some(PlainQuery { question, opt })
}

/// `msg` without the EDNS options that `drop` selects (OPT record's RDATA and length
/// rewritten, nothing else touched). `None` when it carries none of them, or when its OPT
/// record or option list is malformed: the caller keeps the message as it is.
pub(crate) fn without_options(msg: &[u8], drop: impl Fn(u16) -> bool) -> Option<Vec<u8>> {
    let record = first_opt(msg)??;
    let mut kept: Vec<std::ops::Range<usize>> = Vec::new();
    let mut dropped = false;
    for_each_option(msg, (record.rdata_offset, record.end()), |code, range| {
        if drop(code) {
            dropped = true;
        } else {
            kept.push(range);
        }
    })?;
    if !dropped {
        return None;
    }
    let kept_len: usize = kept.iter().map(ExactSizeIterator::len).sum();
    let mut out = Vec::with_capacity(msg.len());
    out.extend_from_slice(&msg[..record.rdata_offset - 2]);
    out.extend_from_slice(&u16::try_from(kept_len).ok()?.to_be_bytes());
    for range in kept {
        out.extend_from_slice(&msg[range]);
    }
    out.extend_from_slice(&msg[record.end()..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn query_with(options: &[(u16, &[u8])]) -> Vec<u8> {
        let mut msg = Message::query();
        let name = Name::from_ascii("a.example.").unwrap();
        msg.add_query(Query::query(name, RecordType::A));
        let mut edns = Edns::new();
        for (code, data) in options {
            edns.options_mut()
                .insert(EdnsOption::Unknown(*code, data.to_vec()));
        }
        msg.set_edns(edns);
        msg.to_vec().unwrap()
    }

    #[test]
    fn options_are_listed_and_removed_in_place() {
        let msg = query_with(&[(OPTION_COOKIE, &[1; 8]), (OPTION_NSID, &[])]);
        let info = opt(&msg).unwrap().unwrap();
        assert!(info.options.contains(OPTION_COOKIE) && info.options.contains(OPTION_NSID));
        assert!(!info.options.contains(OPTION_CLIENT_SUBNET));
        let stripped = without_options(&msg, |code| code == OPTION_COOKIE).unwrap();
        assert_eq!(stripped.len(), msg.len() - 12);
        let info = opt(&stripped).unwrap().unwrap();
        assert!(!info.options.contains(OPTION_COOKIE) && info.options.contains(OPTION_NSID));
        assert!(Message::from_vec(&stripped).is_ok());
        assert_eq!(
            without_options(&stripped, |code| code == OPTION_COOKIE),
            None
        );
    }

    #[test]
    fn hop_by_hop_options_are_stripped_and_nsid_kept_for_its_client() {
        let msg = query_with(&[
            (OPTION_COOKIE, &[1; 8]),
            (OPTION_TCP_KEEPALIVE, &[]),
            (OPTION_PADDING, &[0; 5]),
            (OPTION_NSID, &[]),
            (65001, b"private"),
        ]);
        let relayed = without_options(&msg, is_hop_by_hop_option).unwrap();
        let info = opt(&relayed).unwrap().unwrap();
        for code in [OPTION_COOKIE, OPTION_TCP_KEEPALIVE, OPTION_PADDING] {
            assert!(!info.options.contains(code), "{code}");
        }
        assert!(info.options.contains(OPTION_NSID));
        let shared = without_options(&relayed, is_per_client_option).unwrap();
        assert!(!opt(&shared).unwrap().unwrap().options.contains(OPTION_NSID));
        let edns = Message::from_vec(&shared).unwrap().edns.unwrap();
        assert!(edns.option(EdnsCode::Unknown(65001)).is_some());
    }

    #[test]
    fn an_option_running_past_its_record_is_malformed() {
        let mut msg = query_with(&[(OPTION_NSID, &[1, 2])]);
        let len = msg.len();
        msg[len - 3] = 9; // the option claims 9 bytes of data, the record holds 2
        assert_eq!(opt(&msg), None);
        assert_eq!(without_options(&msg, |_| true), None);
    }

    #[test]
    fn plain_queries_have_one_question_and_at_most_one_opt_last() {
        let good = query_with(&[]);
        assert!(plain_query(&good).unwrap().opt.is_some());
        let mut two_opts = good.clone();
        two_opts.extend_from_slice(&good[good.len() - 11..]);
        two_opts[11] = 2;
        assert!(plain_query(&two_opts).is_none());
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(plain_query(&trailing).is_none());
        let mut answer = good.clone();
        answer[7] = 1;
        assert!(plain_query(&answer).is_none());
        let mut version = good.clone();
        let at = version.len() - 5; // the OPT TTL's version byte
        version[at] = 1;
        assert!(plain_query(&version).is_none());
        let mut response = good;
        response[2] |= 0x80;
        assert!(plain_query(&response).is_none());
    }
}
