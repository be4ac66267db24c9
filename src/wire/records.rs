//! Walking the resource records of a message in place: where each record sits, its type,
//! class, TTL field and RDATA, without allocating. The cache rewrites TTLs through this walk
//! and the EDNS module finds the OPT record with it. It frames records and writes TTL fields
//! as its caller says: what a record's data must hold to be trusted is the full walk's
//! (`walk`), and what a TTL should be is the caller's.

use super::header::{HEADER_LEN, count};
use super::name::skip_name;

/// Record type OPT (the EDNS pseudo-record).
pub(super) const TYPE_OPT: u16 = 41;
/// Record type SOA.
pub(crate) const TYPE_SOA: u16 = 6;

/// The section a resource record sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Answer,
    Authority,
    Additional,
}

/// One resource record's TTL field, located in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlField {
    pub(crate) offset: usize,
    pub(crate) ttl: u32,
}

/// One resource record as located by [`for_each_record`]: enough to read or patch it in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt {
    pub(crate) section: Section,
    /// Where the record (its owner name) starts.
    pub start: usize,
    pub(crate) rtype: u16,
    pub(crate) class: u16,
    /// The TTL field (for OPT: extended RCODE, version and flags).
    pub(crate) ttl: TtlField,
    /// Where the RDATA starts; it is `rdata_len` bytes long and lies inside the message.
    pub rdata_offset: usize,
    pub(crate) rdata_len: usize,
}

impl RecordAt {
    /// The offset just past the record.
    pub(crate) fn end(&self) -> usize {
        self.rdata_offset + self.rdata_len
    }
}

/// A TTL as RFC 2181 §8 reads it: a value with the top bit set counts as 0.
pub(crate) fn ttl_value(ttl: u32) -> u32 {
    if ttl > i32::MAX as u32 { 0 } else { ttl }
}

/// How a walk finds where a name stored in place ends: [`skip_name`] (framing only, for the
/// many reads of messages already walked fully) or the full walk's, which follows every
/// compression pointer (the `walk` module).
pub(super) type NameSkip = fn(&[u8], usize) -> Option<usize>;

/// The offset just past the question section, or `None` when it does not walk.
pub(crate) fn questions_end(msg: &[u8]) -> Option<usize> {
    questions_end_by(msg, skip_name)
}

/// [`questions_end`] with names skipped by `skip`.
pub(super) fn questions_end_by(msg: &[u8], skip: NameSkip) -> Option<usize> {
    let mut at = HEADER_LEN;
    for _ in 0..count(msg, 0)? {
        at = skip(msg, at)?.checked_add(4)?;
        if at > msg.len() {
            return None;
        }
    }
    Some(at)
}

/// Walks every resource record after the question section; returns the offset just past the
/// last one. `None` when the message is malformed; `visit` may then already have seen the
/// records before the fault, so a caller that patches must walk once to validate first.
pub fn for_each_record(msg: &[u8], visit: impl FnMut(&RecordAt)) -> Option<usize> {
    records_from(msg, questions_end(msg)?, visit)
}

/// [`for_each_record`] for a message whose question section the caller knows to end at `at`:
/// the questions are not walked again.
fn records_from(msg: &[u8], at: usize, mut visit: impl FnMut(&RecordAt)) -> Option<usize> {
    records_from_by(msg, at, skip_name, |record| {
        visit(record);
        Some(())
    })
}

/// [`records_from`] with owner names skipped by `skip`, stopped (`None`) by the first record
/// `visit` refuses.
pub(super) fn records_from_by(
    msg: &[u8],
    mut at: usize,
    skip: NameSkip,
    mut visit: impl FnMut(&RecordAt) -> Option<()>,
) -> Option<usize> {
    let counts = [count(msg, 1)?, count(msg, 2)?, count(msg, 3)?];
    let sections = [Section::Answer, Section::Authority, Section::Additional];
    for (section, records) in sections.into_iter().zip(counts) {
        for _ in 0..records {
            let record = record_at_by(msg, at, section, skip)?;
            at = record.end();
            visit(&record)?;
        }
    }
    Some(at)
}

/// The resource record of `section` that starts at `start`; `None` when it runs past the
/// message. For a caller that knows where a record starts without walking those before it.
pub(super) fn record_at(msg: &[u8], start: usize, section: Section) -> Option<RecordAt> {
    record_at_by(msg, start, section, skip_name)
}

/// [`record_at`] with the owner name skipped by `skip`.
pub(super) fn record_at_by(
    msg: &[u8],
    start: usize,
    section: Section,
    skip: NameSkip,
) -> Option<RecordAt> {
    let at = skip(msg, start)?;
    let fixed = msg.get(at..at.checked_add(10)?)?;
    let rdata_len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    let record = RecordAt {
        section,
        start,
        rtype: u16::from_be_bytes([fixed[0], fixed[1]]),
        class: u16::from_be_bytes([fixed[2], fixed[3]]),
        ttl: TtlField {
            offset: at + 4,
            ttl: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
        },
        rdata_offset: at + 10,
        rdata_len,
    };
    (record.end() <= msg.len()).then_some(record)
}

#[cfg(any(test, feature = "testing"))]
/// The TTL fields of every record in the answer, authority and additional sections (the OPT
/// pseudo-record excluded: its "TTL" carries EDNS flags). `None` if the message is malformed.
pub(crate) fn ttl_fields(msg: &[u8]) -> Option<Vec<TtlField>> {
    let mut fields = Vec::new();
    for_each_record(msg, |record| {
        if record.rtype != TYPE_OPT {
            fields.push(record.ttl);
        }
    })?;
    Some(fields)
}

/// Writes `ttl` into a field found by [`for_each_record`].
pub(crate) fn set_ttl(msg: &mut [u8], field: TtlField, ttl: u32) {
    if let Some(slot) = msg.get_mut(field.offset..field.offset + 4) {
        slot.copy_from_slice(&ttl.to_be_bytes());
    }
}

/// Rewrites every TTL (OPT excluded) of `target`, a copy of `source`, as `f(ttl)`; the records
/// start at `records_at` (the question section's end, which the caller knows). Walking the
/// source while writing the copy needs no list of offsets, so nothing is allocated.
pub(crate) fn rewrite_ttls(
    source: &[u8],
    target: &mut [u8],
    records_at: usize,
    f: impl Fn(u32) -> u32,
) {
    debug_assert_eq!(questions_end(source), Some(records_at));
    let _ = records_from(source, records_at, |record| {
        if record.rtype != TYPE_OPT {
            set_ttl(target, record.ttl, f(record.ttl.ttl));
        }
    });
}
