//! The fixed header and the question section, read and patched in place.
//! It reads the question's name only through the one name walker (`name`).

use super::name::skip_plain_name;

/// Length of the fixed DNS header.
pub(crate) const HEADER_LEN: usize = 12;

const QR_BIT: u8 = 0x80;
pub(super) const TC_BIT: u8 = 0x02;
const RD_BIT: u8 = 0x01;
const CD_BIT: u8 = 0x10;
const AD_BIT: u8 = 0x20;

/// The header RCODEs the byte-level paths tell apart.
pub(crate) const RCODE_NOERROR: u8 = 0;
pub(crate) const RCODE_SERVFAIL: u8 = 2;
pub(crate) const RCODE_NXDOMAIN: u8 = 3;

/// Section counts: 0 QDCOUNT, 1 ANCOUNT, 2 NSCOUNT, 3 ARCOUNT.
pub(super) fn count(msg: &[u8], index: usize) -> Option<u16> {
    let at = 4 + 2 * index;
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

/// The message ID, or `None` when the header is incomplete.
pub(crate) fn id(msg: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.first()?, *msg.get(1)?]))
}

/// Overwrites the ID; a message shorter than a header is left alone.
pub(crate) fn set_id(msg: &mut [u8], id: u16) {
    if let Some(field) = msg.get_mut(..2) {
        field.copy_from_slice(&id.to_be_bytes());
    }
}

/// Whether the QR bit says this is a response.
pub(crate) fn is_response(msg: &[u8]) -> bool {
    msg.get(2).is_some_and(|b| b & QR_BIT != 0)
}

/// Whether the TC bit is set.
pub(crate) fn is_truncated(msg: &[u8]) -> bool {
    msg.get(2).is_some_and(|b| b & TC_BIT != 0)
}

/// The RCODE of the header (the low 4 bits; extended bits live in OPT).
pub(crate) fn rcode(msg: &[u8]) -> Option<u8> {
    msg.get(3).map(|b| b & 0x0f)
}

/// The OPCODE of the header.
pub(crate) fn opcode(msg: &[u8]) -> Option<u8> {
    msg.get(2).map(|b| (b >> 3) & 0x0f)
}

/// Whether the CD (checking disabled) bit is set.
pub(crate) fn checking_disabled(msg: &[u8]) -> bool {
    msg.get(3).is_some_and(|b| b & CD_BIT != 0)
}

/// Whether the AD (authentic data) bit is set.
pub(crate) fn authentic_data(msg: &[u8]) -> bool {
    msg.get(3).is_some_and(|b| b & AD_BIT != 0)
}

/// RFC 6840 §5.8: a reply to a client that set neither AD nor DO (`dnssec_ok`, from its OPT
/// record) carries AD=0, whatever the upstream said; otherwise AD is left as it is.
pub(crate) fn clear_unasked_ad(reply: &mut [u8], request: &[u8], dnssec_ok: bool) {
    if !dnssec_ok
        && !authentic_data(request)
        && let Some(byte) = reply.get_mut(3)
    {
        *byte &= !AD_BIT;
    }
}

/// QDCOUNT.
pub(crate) fn question_count(msg: &[u8]) -> Option<u16> {
    count(msg, 0)
}

/// Copies the RD and CD bits of `from` into `to` (a reply echoes the request's).
pub(crate) fn copy_request_bits(to: &mut [u8], from: &[u8]) {
    if let (Some(byte), Some(source)) = (to.get_mut(2), from.get(2)) {
        *byte = (*byte & !RD_BIT) | (source & RD_BIT);
    }
    if let (Some(byte), Some(source)) = (to.get_mut(3), from.get(3)) {
        *byte = (*byte & !CD_BIT) | (source & CD_BIT);
    }
}

/// The bytes of the first question (name, type, class). Its name is never compressed because
/// nothing precedes it, so a compression pointer there makes it malformed: `None`. (Accepting
/// one would let a reply built from a request's header echo a name pointing at itself.)
pub(crate) fn first_question(msg: &[u8]) -> Option<&[u8]> {
    if question_count(msg)? == 0 {
        return None;
    }
    let end = skip_plain_name(msg, HEADER_LEN)?.checked_add(4)?;
    msg.get(HEADER_LEN..end)
}

#[cfg(test)]
/// The name of the first question in wire form (labels and the root, no type or class).
pub(crate) fn first_question_name(msg: &[u8]) -> Option<&[u8]> {
    question_name(first_question(msg)?)
}

/// The name of a question given as its bytes (name, type, class).
pub(crate) fn question_name(question: &[u8]) -> Option<&[u8]> {
    question.get(..question.len().checked_sub(4)?)
}

/// The type of a question given as its bytes (name, type, class).
pub(crate) fn question_type(question: &[u8]) -> Option<u16> {
    let at = question.len().checked_sub(4)?;
    Some(u16::from_be_bytes([
        *question.get(at)?,
        *question.get(at + 1)?,
    ]))
}

/// Whether two question sections are the same question: names compared ignoring ASCII case
/// (a server may or may not echo 0x20-mixed case), type and class exactly.
pub(crate) fn same_question(a: &[u8], b: &[u8]) -> bool {
    let at = a.len().saturating_sub(4);
    a.len() == b.len() && a[..at].eq_ignore_ascii_case(&b[..at]) && a[at..] == b[at..]
}

/// `reply` (a response without a question section) with `question` put in, QDCOUNT 1: how an
/// error reply that omitted the question goes back to the client who asked it. Only replies
/// with nothing but an OPT record after the header qualify (inserting the question moves
/// every offset, which a compression pointer in another record would not survive).
pub(crate) fn with_question(reply: &[u8], question: &[u8]) -> Option<Vec<u8>> {
    if question_count(reply)? != 0 || count(reply, 1)? != 0 || count(reply, 2)? != 0 {
        return None;
    }
    let mut only_root_owners = true;
    super::records::for_each_record(reply, |record| {
        only_root_owners &= reply.get(record.start) == Some(&0);
    })?;
    if !only_root_owners {
        return None;
    }
    let mut out = Vec::with_capacity(reply.len() + question.len());
    out.extend_from_slice(reply.get(..HEADER_LEN)?);
    out[4..6].copy_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(question);
    out.extend_from_slice(&reply[HEADER_LEN..]);
    Some(out)
}
