//! Byte-level views of DNS messages, for the paths that must not pay for a full parse:
//! reading and patching the header, comparing question sections, and walking resource records
//! to find their TTL fields.
//!
//! Every function here takes untrusted bytes and returns `None` (or `false`) on anything short
//! or malformed; none can panic. Full parsing and encoding stays with hickory-proto.

/// Length of the fixed DNS header.
pub const HEADER_LEN: usize = 12;

/// The largest message a DNS transport can carry (TCP's 2-byte length prefix).
pub const MAX_MESSAGE: usize = 65_535;

/// The UDP payload a client without EDNS accepts (RFC 1035).
pub const CLASSIC_UDP_SIZE: usize = 512;

const QR_BIT: u8 = 0x80;
const TC_BIT: u8 = 0x02;
const RD_BIT: u8 = 0x01;
const CD_BIT: u8 = 0x10;
/// The type of the EDNS pseudo-record.
pub const TYPE_OPT: u16 = 41;
/// Record type SOA.
pub const TYPE_SOA: u16 = 6;

/// The header RCODEs the byte-level paths tell apart.
pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;

/// A message with the 2-byte length prefix of DNS over TCP (RFC 1035 §4.2.2), or `None` when
/// it is longer than a length prefix can say.
pub fn tcp_framed(msg: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(msg.len()).ok()?;
    let mut framed = Vec::with_capacity(msg.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(msg);
    Some(framed)
}

/// The message ID, or `None` when the header is incomplete.
pub fn id(msg: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.first()?, *msg.get(1)?]))
}

/// Overwrites the ID; a message shorter than a header is left alone.
pub fn set_id(msg: &mut [u8], id: u16) {
    if let Some(field) = msg.get_mut(..2) {
        field.copy_from_slice(&id.to_be_bytes());
    }
}

/// Whether the QR bit says this is a response.
pub fn is_response(msg: &[u8]) -> bool {
    msg.get(2).is_some_and(|b| b & QR_BIT != 0)
}

/// Whether the TC bit is set.
pub fn is_truncated(msg: &[u8]) -> bool {
    msg.get(2).is_some_and(|b| b & TC_BIT != 0)
}

/// The RCODE of the header (the low 4 bits; extended bits live in OPT).
pub fn rcode(msg: &[u8]) -> Option<u8> {
    msg.get(3).map(|b| b & 0x0f)
}

fn count(msg: &[u8], index: usize) -> Option<u16> {
    let at = 4 + 2 * index;
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

/// QDCOUNT.
pub fn question_count(msg: &[u8]) -> Option<u16> {
    count(msg, 0)
}

/// The offset just past a (possibly compressed) name that starts at `at`.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len & 0xc0 {
            0x00 if len == 0 => return Some(at + 1),
            0x00 => at += 1 + usize::from(len),
            0xc0 => {
                msg.get(at + 1)?;
                return Some(at + 2);
            }
            _ => return None,
        }
    }
}

/// The bytes of the first question (name, type, class). Its name is never compressed because
/// nothing precedes it, so a compression pointer there makes it malformed: `None`. (Accepting
/// one would let a reply built from a request's header echo a name pointing at itself.)
pub fn first_question(msg: &[u8]) -> Option<&[u8]> {
    if question_count(msg)? == 0 {
        return None;
    }
    let end = skip_uncompressed_name(msg, HEADER_LEN)?.checked_add(4)?;
    msg.get(HEADER_LEN..end)
}

/// The longest name in wire form (RFC 1035 §3.1).
const MAX_NAME: usize = 255;

/// The offset just past a name of plain labels that starts at `start`; `None` at a pointer, or
/// when the name is longer than [`MAX_NAME`] (echoing one would make an unparseable reply).
fn skip_uncompressed_name(msg: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    loop {
        match *msg.get(at)? {
            0 if at + 1 - start <= MAX_NAME => return Some(at + 1),
            len @ 1..=63 => at += 1 + usize::from(len),
            _ => return None,
        }
    }
}

/// The name of the first question in wire form (labels and the root, no type or class).
pub fn first_question_name(msg: &[u8]) -> Option<&[u8]> {
    let question = first_question(msg)?;
    question.get(..question.len().checked_sub(4)?)
}

/// Whether two question sections are the same question: names compared ignoring ASCII case
/// (a server may or may not echo 0x20-mixed case), type and class exactly.
pub fn same_question(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.eq_ignore_ascii_case(b)
}

/// One resource record's TTL field, located in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlField {
    pub offset: usize,
    pub ttl: u32,
}

/// The TTL fields of every record in the answer, authority and additional sections (the OPT
/// pseudo-record excluded: its "TTL" carries EDNS flags). `None` if the message is malformed.
pub fn ttl_fields(msg: &[u8]) -> Option<Vec<TtlField>> {
    let mut fields = Vec::new();
    for_each_record(msg, |record| {
        if record.rtype != TYPE_OPT {
            fields.push(record.ttl);
        }
    })?;
    Some(fields)
}

/// The section a resource record sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Answer,
    Authority,
    Additional,
}

/// One resource record as located by [`for_each_record`]: enough to read or patch it in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt {
    pub section: Section,
    pub rtype: u16,
    pub class: u16,
    /// The TTL field (for OPT: extended RCODE, version and flags).
    pub ttl: TtlField,
    /// Where the RDATA starts; it is `rdata_len` bytes long and lies inside the message.
    pub rdata_offset: usize,
    pub rdata_len: usize,
}

/// Walks every resource record after the question section without allocating. `None` when
/// the message is malformed; `visit` may then already have seen the records before the fault,
/// so a caller that patches must walk once to validate first.
pub fn for_each_record(msg: &[u8], mut visit: impl FnMut(&RecordAt)) -> Option<()> {
    let questions = question_count(msg)?;
    let counts = [count(msg, 1)?, count(msg, 2)?, count(msg, 3)?];
    let mut at = HEADER_LEN;
    for _ in 0..questions {
        at = skip_name(msg, at)?.checked_add(4)?;
    }
    let sections = [Section::Answer, Section::Authority, Section::Additional];
    for (section, records) in sections.into_iter().zip(counts) {
        for _ in 0..records {
            at = skip_name(msg, at)?;
            let fixed = msg.get(at..at.checked_add(10)?)?;
            let rdata_len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
            let record = RecordAt {
                section,
                rtype: u16::from_be_bytes([fixed[0], fixed[1]]),
                class: u16::from_be_bytes([fixed[2], fixed[3]]),
                ttl: TtlField {
                    offset: at + 4,
                    ttl: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
                },
                rdata_offset: at + 10,
                rdata_len,
            };
            at += 10 + rdata_len;
            if at > msg.len() {
                return None;
            }
            visit(&record);
        }
    }
    Some(())
}

/// What the OPT pseudo-record (RFC 6891) of a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptInfo {
    /// The sender's UDP payload size (the record's CLASS).
    pub payload: u16,
    /// The upper 8 bits of the 12-bit RCODE.
    pub extended_rcode: u8,
    pub version: u8,
    /// The DO bit: the sender wants DNSSEC records.
    pub dnssec_ok: bool,
}

/// The OPT record of the additional section: `Some(None)` when there is none, `None` when the
/// message is malformed.
pub fn opt(msg: &[u8]) -> Option<Option<OptInfo>> {
    let mut found = None;
    for_each_record(msg, |record| {
        if record.section == Section::Additional && record.rtype == TYPE_OPT && found.is_none() {
            let [extended_rcode, version, flags, _] = record.ttl.ttl.to_be_bytes();
            found = Some(OptInfo {
                payload: record.class,
                extended_rcode,
                version,
                dnssec_ok: flags & 0x80 != 0,
            });
        }
    })?;
    Some(found)
}

/// Whether the CD (checking disabled) bit is set.
pub fn checking_disabled(msg: &[u8]) -> bool {
    msg.get(3).is_some_and(|b| b & CD_BIT != 0)
}

/// The OPCODE of the header.
pub fn opcode(msg: &[u8]) -> Option<u8> {
    msg.get(2).map(|b| (b >> 3) & 0x0f)
}

/// Copies the RD bit of `from` into `to` (a reply echoes the request's RD).
pub fn copy_recursion_desired(to: &mut [u8], from: &[u8]) {
    if let (Some(byte), Some(source)) = (to.get_mut(2), from.get(2)) {
        *byte = (*byte & !RD_BIT) | (source & RD_BIT);
    }
}

/// Writes `ttl` into a field found by [`ttl_fields`].
pub fn set_ttl(msg: &mut [u8], field: TtlField, ttl: u32) {
    if let Some(slot) = msg.get_mut(field.offset..field.offset + 4) {
        slot.copy_from_slice(&ttl.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};

    use super::*;

    fn sample() -> Vec<u8> {
        let name = Name::from_ascii("Mongo-0.mongo.db.svc.cluster.local.").unwrap();
        let mut msg = Message::response(0x1234, hickory_proto::op::OpCode::Query);
        msg.add_query(Query::query(name.clone(), RecordType::A));
        msg.add_answer(Record::from_rdata(
            name.clone(),
            30,
            RData::A(A::new(10, 1, 0, 1)),
        ));
        msg.add_additional(Record::from_rdata(name, 7, RData::A(A::new(10, 1, 0, 2))));
        msg.set_edns(hickory_proto::op::Edns::new());
        msg.to_vec().unwrap()
    }

    #[test]
    fn header_fields_read_and_patch() {
        let mut msg = sample();
        assert_eq!(id(&msg), Some(0x1234));
        set_id(&mut msg, 7);
        assert_eq!(id(&msg), Some(7));
        assert!(is_response(&msg));
        assert!(!is_truncated(&msg));
        assert_eq!(question_count(&msg), Some(1));
    }

    #[test]
    fn ttl_fields_skip_the_opt_record() {
        let mut msg = sample();
        let fields = ttl_fields(&msg).unwrap();
        assert_eq!(fields.iter().map(|f| f.ttl).collect::<Vec<_>>(), [30, 7]);
        set_ttl(&mut msg, fields[0], 3);
        let parsed = Message::from_vec(&msg).unwrap();
        assert_eq!(parsed.answers[0].ttl, 3);
        assert_eq!(parsed.additionals[0].ttl, 7);
    }

    #[test]
    fn questions_compare_ignoring_case() {
        let a = sample();
        let mut b = sample();
        b[HEADER_LEN + 1] = b'm';
        assert!(same_question(
            first_question(&a).unwrap(),
            first_question(&b).unwrap()
        ));
        b[HEADER_LEN + 2] = b'x';
        assert!(!same_question(
            first_question(&a).unwrap(),
            first_question(&b).unwrap()
        ));
    }

    #[test]
    fn truncated_and_garbage_input_gives_none() {
        let msg = sample();
        for cut in 0..msg.len() {
            let _ = ttl_fields(&msg[..cut]);
            let _ = first_question(&msg[..cut]);
        }
        assert_eq!(ttl_fields(&msg[..msg.len() - 1]), None);
        assert_eq!(id(&[1]), None);
        let mut looping = msg.clone();
        looping[HEADER_LEN] = 0x40; // reserved label type
        assert_eq!(first_question(&looping), None);
        // A first question whose name is longer than 255 bytes (labels of 63) is malformed.
        let mut long = msg[..HEADER_LEN].to_vec();
        for _ in 0..4 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(first_question(&long), None);
        long.drain(HEADER_LEN..HEADER_LEN + 64);
        assert!(first_question(&long).is_some());
        let mut pointing = msg.clone();
        pointing[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&[0xc0, 0x0c]); // to itself
        assert_eq!(first_question(&pointing), None);
    }

    #[test]
    fn records_are_walked_by_section_and_opt_is_read() {
        let msg = sample();
        let mut seen = Vec::new();
        for_each_record(&msg, |r| seen.push((r.section, r.rtype))).unwrap();
        assert_eq!(
            seen,
            [
                (Section::Answer, 1),
                (Section::Additional, 1),
                (Section::Additional, TYPE_OPT)
            ]
        );
        let info = opt(&msg).unwrap().unwrap();
        assert!(!info.dnssec_ok);
        assert_eq!(info.extended_rcode, 0);
        let mut plain = Message::query();
        plain.add_query(Query::query(Name::root(), RecordType::NS));
        assert_eq!(opt(&plain.to_vec().unwrap()), Some(None));
    }

    #[test]
    fn header_bits_read_and_copy() {
        let mut msg = sample();
        assert_eq!(opcode(&msg), Some(0));
        assert!(!checking_disabled(&msg));
        msg[3] |= CD_BIT;
        assert!(checking_disabled(&msg));
        let mut request = [0u8; HEADER_LEN];
        request[2] = RD_BIT;
        copy_recursion_desired(&mut msg, &request);
        assert_eq!(msg[2] & RD_BIT, RD_BIT);
        copy_recursion_desired(&mut msg, &[0u8; HEADER_LEN]);
        assert_eq!(msg[2] & RD_BIT, 0);
        for cut in 0..msg.len() {
            let _ = opt(&msg[..cut]);
            let _ = for_each_record(&msg[..cut], |_| {});
        }
    }
}
