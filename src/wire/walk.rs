//! The full walk of a reply (docs/design.md, "Replies are walked once, fully"): what decides
//! that an upstream's bytes are a DNS message at all before anything is relayed, cached or
//! parsed. One pass over the message, in place: every name — the questions', every owner's,
//! those inside CNAME, NS, PTR, MX, SOA, SRV and ANAME data — followed through its compression
//! pointers ([`follow_name`]), every record framed inside the message, and the rules a full
//! decoder (hickory-proto, which the cluster route and the gathers parse with) adds about
//! records: no empty RDATA outside UPDATE, A and AAAA of their size, names in RDATA that fill
//! it exactly, one OPT owned by the root, OPT, SIG and TSIG only in the additional section, no
//! record of the query-only types (ANY, AXFR, IXFR, 0).
//!
//! It reads and never writes, allocates nothing, and owns no other rule: the RDATA of the
//! other types (TXT strings, SVCB parameters, the options of OPT) is checked for its framing
//! only — the reads that meshdns and a pod's stub resolver make of a reply are of names,
//! addresses and framing. (hickory reads EDNS options leniently — an option cut short by the
//! end of the RDATA is dropped, not refused — and the EDNS code of meshdns reads them where it
//! needs them, refusing what it cannot read.)

use super::header::opcode;
use super::name::follow_name;
use super::records::{RecordAt, Section, TYPE_OPT, TYPE_SOA, questions_end_by, records_from_by};

const OPCODE_UPDATE: u8 = 5;

const TYPE_A: u16 = 1;
const TYPE_NS: u16 = 2;
const TYPE_CNAME: u16 = 5;
const TYPE_PTR: u16 = 12;
const TYPE_MX: u16 = 15;
const TYPE_SIG: u16 = 24;
const TYPE_AAAA: u16 = 28;
const TYPE_SRV: u16 = 33;
const TYPE_TSIG: u16 = 250;
const TYPE_ANAME: u16 = 65305;
/// Types that only a question may carry (and the reserved 0): a record of one is malformed.
const QUESTION_ONLY_TYPES: [u16; 4] = [0, 251, 252, 255];

/// Whether `msg` walks fully as a full decoder reads it (see the module documentation): the
/// one check every upstream reply passes before it is accepted.
pub(crate) fn walks_fully(msg: &[u8]) -> bool {
    full_walk(msg).is_some()
}

fn full_walk(msg: &[u8]) -> Option<()> {
    let update = opcode(msg)? == OPCODE_UPDATE;
    let at = questions_end_by(msg, followed_end)?;
    let mut opt_seen = false;
    records_from_by(msg, at, followed_end, |record| {
        check_record(msg, record, update, &mut opt_seen)
    })?;
    Some(())
}

/// Where a name stored at `at` ends in place, once followed fully.
fn followed_end(msg: &[u8], at: usize) -> Option<usize> {
    follow_name(msg, at).map(|name| name.end)
}

/// The rules about one record (framed inside the message by the walk that found it).
fn check_record(msg: &[u8], record: &RecordAt, update: bool, opt_seen: &mut bool) -> Option<()> {
    let additional = record.section == Section::Additional;
    if matches!(record.rtype, TYPE_OPT | TYPE_SIG | TYPE_TSIG) && !additional {
        return None;
    }
    if record.rtype == TYPE_OPT {
        let owned_by_root = follow_name(msg, record.start)?.expanded == 1;
        if !owned_by_root || std::mem::replace(opt_seen, true) {
            return None;
        }
    }
    match record.rdata_len {
        // An empty RDATA means "any data" in UPDATE (RFC 2136); OPT may carry no options.
        0 => (update || record.rtype == TYPE_OPT).then_some(()),
        _ => check_rdata(msg, record),
    }
}

/// The RDATA of `record`, not empty, read as its type says.
fn check_rdata(msg: &[u8], record: &RecordAt) -> Option<()> {
    let (start, end) = (record.rdata_offset, record.end());
    // The RDATA holds `names` names from `at`, then `fixed` bytes, and ends there exactly.
    let names_then = |at: usize, names: usize, fixed: usize| {
        let mut at = at;
        for _ in 0..names {
            at = followed_end(msg, at)?;
        }
        (at.checked_add(fixed)? == end).then_some(())
    };
    match record.rtype {
        rtype if QUESTION_ONLY_TYPES.contains(&rtype) => None,
        TYPE_A => (record.rdata_len == 4).then_some(()),
        TYPE_AAAA => (record.rdata_len == 16).then_some(()),
        TYPE_CNAME | TYPE_NS | TYPE_PTR | TYPE_ANAME => names_then(start, 1, 0),
        TYPE_MX => names_then(start + 2, 1, 0),
        TYPE_SRV => names_then(start + 6, 1, 0),
        TYPE_SOA => names_then(start, 2, 20),
        _ => Some(()),
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::rdata::{A, CNAME};
    use hickory_proto::rr::{Name, RData, Record, RecordType};

    use super::*;
    use crate::wire::for_each_record;

    /// A reply with a CNAME (its target compressed against the question), an A record and OPT.
    fn reply() -> Vec<u8> {
        let name = Name::from_ascii("www.example.com.").unwrap();
        let target = Name::from_ascii("web.example.com.").unwrap();
        let mut msg = Message::response(7, hickory_proto::op::OpCode::Query);
        msg.add_query(Query::query(name.clone(), RecordType::A));
        msg.add_answer(Record::from_rdata(
            name,
            30,
            RData::CNAME(CNAME(target.clone())),
        ));
        msg.add_answer(Record::from_rdata(
            target,
            30,
            RData::A(A::new(192, 0, 2, 1)),
        ));
        msg.set_edns(Edns::new());
        msg.to_vec().unwrap()
    }

    /// The records of `msg`, as the framing walk finds them.
    fn records(msg: &[u8]) -> Vec<RecordAt> {
        let mut found = Vec::new();
        for_each_record(msg, |r| found.push(*r)).unwrap();
        found
    }

    #[test]
    fn a_reply_walks_fully_and_every_cut_of_it_does_not() {
        let msg = reply();
        assert!(walks_fully(&msg));
        for cut in 0..msg.len() {
            assert!(!walks_fully(&msg[..cut]), "cut at {cut}");
        }
    }

    #[test]
    fn a_pointer_loop_in_an_owner_or_in_rdata_does_not_walk() {
        let msg = reply();
        let [cname, a, _opt] = records(&msg)[..] else {
            panic!("three records");
        };
        for at in [cname.start, cname.rdata_offset, a.start] {
            let mut looping = msg.clone();
            let pointer = 0xc000 | u16::try_from(at).unwrap();
            looping[at..at + 2].copy_from_slice(&pointer.to_be_bytes());
            assert!(!walks_fully(&looping), "a loop at {at}");
        }
    }

    #[test]
    fn rdata_of_the_wrong_size_and_misplaced_records_do_not_walk() {
        let msg = reply();
        let [cname, a, opt] = records(&msg)[..] else {
            panic!("three records");
        };
        // An A record of 3 bytes (the fourth taken as the next record's start).
        let mut short = msg.clone();
        short[a.rdata_offset - 1] = 3;
        assert!(!walks_fully(&short));
        // A CNAME whose RDATA is longer than its name.
        let mut long = msg.clone();
        long[cname.rdata_offset - 1] += 1;
        assert!(!walks_fully(&long));
        // OPT counted in the answer section: the answer count takes one more, the additional one
        // less (ANCOUNT 3, ARCOUNT 0).
        let mut misplaced = msg.clone();
        misplaced[7] = 3;
        misplaced[11] = 0;
        assert!(!walks_fully(&misplaced));
        // An empty A record.
        let mut empty = msg[..a.start].to_vec();
        empty.extend_from_slice(&msg[a.start..a.rdata_offset - 2]);
        empty.extend_from_slice(&[0, 0]);
        empty.extend_from_slice(&msg[opt.start..]);
        assert!(!walks_fully(&empty));
        assert!(Message::from_vec(&empty).is_err(), "as hickory reads it");
    }
}
