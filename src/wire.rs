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
const TYPE_OPT: u16 = 41;

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

/// The bytes of the first question (name, type, class), which is never compressed because
/// nothing precedes it.
pub fn first_question(msg: &[u8]) -> Option<&[u8]> {
    if question_count(msg)? == 0 {
        return None;
    }
    let end = skip_name(msg, HEADER_LEN)?.checked_add(4)?;
    msg.get(HEADER_LEN..end)
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
    let questions = question_count(msg)?;
    let records = (1..4).try_fold(0usize, |sum, i| Some(sum + usize::from(count(msg, i)?)))?;
    let mut at = HEADER_LEN;
    for _ in 0..questions {
        at = skip_name(msg, at)?.checked_add(4)?;
    }
    let mut fields = Vec::with_capacity(records);
    for _ in 0..records {
        at = skip_name(msg, at)?;
        let fixed = msg.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        if rtype != TYPE_OPT {
            fields.push(TtlField {
                offset: at + 4,
                ttl,
            });
        }
        at += 10 + rdlen;
        if at > msg.len() {
            return None;
        }
    }
    Some(fields)
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
    }
}
