//! A small reader of DNS messages as bytes (RFC 1035 §4.1), for the checks hickory cannot make:
//! where a record lies, an EDNS option as it travels (code, length, data), a message with an
//! option hickory rejects, and the header of a message whose records hickory does not parse.
//! The tests check meshdns's bytes with hickory wherever hickory can say it; this reader is
//! theirs, and it may not use meshdns (no `meshdns::` path here), so that a check does not
//! share the bugs of what it checks. It walks names only as far as their end (labels up to a
//! zero byte or a compression pointer) and never follows a pointer.

use std::ops::Range;

use hickory_proto::op::Header;
use hickory_proto::serialize::binary::BinDecodable;

/// EDNS option codes (IANA's registry): NSID (RFC 5001), CLIENT-SUBNET (RFC 7871), COOKIE
/// (RFC 7873), TCP-KEEPALIVE (RFC 7828), PADDING (RFC 7830).
pub const OPTION_NSID: u16 = 3;
pub const OPTION_CLIENT_SUBNET: u16 = 8;
pub const OPTION_COOKIE: u16 = 10;
pub const OPTION_TCP_KEEPALIVE: u16 = 11;
pub const OPTION_PADDING: u16 = 12;
/// meshdns's loop marker, from the local and experimental range (docs/design.md, "No loops").
/// Written out here rather than taken from meshdns: meshdns of different versions meet on the
/// wire, so the code may not change.
pub const OPTION_LOOP_MARKER: u16 = 65_423;

const HEADER_LEN: usize = 12;
const TYPE_OPT: u16 = 41;

/// The header of `msg` as hickory reads it, whatever follows it.
pub fn header(msg: &[u8]) -> Header {
    Header::from_bytes(msg).expect("a DNS header")
}

/// The question of a message that asks one: its bytes (name, type, class) as sent.
pub fn question(msg: &[u8]) -> Option<&[u8]> {
    if count(msg, 0)? != 1 {
        return None;
    }
    msg.get(HEADER_LEN..questions_end(msg)?)
}

/// Where the question section of `msg` ends: where its first record starts.
pub fn questions_end(msg: &[u8]) -> Option<usize> {
    let mut at = HEADER_LEN;
    for _ in 0..count(msg, 0)? {
        at = name_end(msg, at)? + 4;
    }
    (at <= msg.len()).then_some(at)
}

/// The options of the OPT record of `msg` as they travel, (code, data) in order; `None` when
/// it has no OPT record or does not walk.
pub fn options(msg: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    let opt = opt_record(msg)?;
    let options = option_spans(msg, opt.rdata)?;
    Some(
        (options.into_iter())
            .map(|(code, whole)| (code, msg[whole.start + 4..whole.end].to_vec()))
            .collect(),
    )
}

/// `msg` without its OPT record (ARCOUNT one lower); `None` when it has none or does not walk.
pub fn without_opt(msg: &[u8]) -> Option<Vec<u8>> {
    let opt = opt_record(msg)?;
    let arcount = count(msg, 3)? - 1;
    let mut without = msg.to_vec();
    without.drain(opt.start..opt.rdata.end);
    without[10..12].copy_from_slice(&arcount.to_be_bytes());
    Some(without)
}

/// `msg` without the EDNS options `drop` selects (the OPT record's RDATA and its length
/// rewritten, nothing else touched); `None` when it carries none of them or does not walk.
pub fn without_options(msg: &[u8], drop: impl Fn(u16) -> bool) -> Option<Vec<u8>> {
    let opt = opt_record(msg)?;
    let (dropped, kept): (Vec<_>, Vec<_>) = option_spans(msg, opt.rdata.clone())?
        .into_iter()
        .partition(|(code, _)| drop(*code));
    if dropped.is_empty() {
        return None;
    }
    let rdata: Vec<u8> = kept
        .into_iter()
        .flat_map(|(_, whole)| &msg[whole])
        .copied()
        .collect();
    let rdlength = u16::try_from(rdata.len()).ok()?;
    let mut without = msg[..opt.rdata.start - 2].to_vec();
    without.extend_from_slice(&rdlength.to_be_bytes());
    without.extend_from_slice(&rdata);
    without.extend_from_slice(&msg[opt.rdata.end..]);
    Some(without)
}

/// Where a resource record lies in a message.
struct RecordSpan {
    /// Its owner name's first byte.
    start: usize,
    rtype: u16,
    rdata: Range<usize>,
}

/// The OPT record: the first record of type OPT in the additional section.
fn opt_record(msg: &[u8]) -> Option<RecordSpan> {
    let before = usize::from(count(msg, 1)?) + usize::from(count(msg, 2)?);
    records(msg)?
        .into_iter()
        .skip(before)
        .find(|record| record.rtype == TYPE_OPT)
}

/// The records of `msg` after its question section (answer, authority, additional), in
/// order; `None` when they do not fit in the message.
fn records(msg: &[u8]) -> Option<Vec<RecordSpan>> {
    let counts = [count(msg, 1)?, count(msg, 2)?, count(msg, 3)?];
    let total: usize = counts.into_iter().map(usize::from).sum();
    let mut at = questions_end(msg)?;
    let mut records = Vec::with_capacity(total);
    for _ in 0..total {
        let fixed = name_end(msg, at)?; // TYPE(2) CLASS(2) TTL(4) RDLENGTH(2), then RDATA
        let rtype = u16_at(msg, fixed)?;
        let rdata = fixed + 10..fixed + 10 + usize::from(u16_at(msg, fixed + 8)?);
        if rdata.end > msg.len() {
            return None;
        }
        let start = at;
        at = rdata.end;
        records.push(RecordSpan {
            start,
            rtype,
            rdata,
        });
    }
    Some(records)
}

/// The options of an OPT record whose RDATA lies at `rdata`: each option's code and where the
/// whole option (code, length, data) lies; `None` when one overruns the RDATA.
fn option_spans(msg: &[u8], rdata: Range<usize>) -> Option<Vec<(u16, Range<usize>)>> {
    let mut at = rdata.start;
    let mut options = Vec::new();
    while at < rdata.end {
        let code = u16_at(msg, at)?;
        let end = at + 4 + usize::from(u16_at(msg, at + 2)?);
        if end > rdata.end {
            return None;
        }
        options.push((code, at..end));
        at = end;
    }
    Some(options)
}

/// Where the name that starts at `at` ends: after its zero byte, or after the compression
/// pointer that ends it.
fn name_end(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        match *msg.get(at)? {
            0 => return Some(at + 1),
            len @ 1..=63 => at += 1 + usize::from(len),
            0xc0.. => return Some(at + 2).filter(|&end| end <= msg.len()),
            _ => return None,
        }
    }
}

/// Header count `section` (0 QDCOUNT, 1 ANCOUNT, 2 NSCOUNT, 3 ARCOUNT).
fn count(msg: &[u8], section: usize) -> Option<u16> {
    u16_at(msg, 4 + 2 * section)
}

fn u16_at(msg: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}
