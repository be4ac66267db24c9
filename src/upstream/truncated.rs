//! Which questions a UDP group last answered too big for UDP, so that the next ask of the same
//! question goes over TCP at once instead of paying a UDP round trip for a truncated reply
//! (RFC 7766 allows TCP first). A gathered SRV of a large StatefulSet is truncated every time
//! it is asked; without this, every ask after its cache entry expired sent a datagram, got TC,
//! and asked again over TCP.
//!
//! What is remembered is a fingerprint of the question (the name in lower case, type, class)
//! and of the UDP size the query advertises (a client asking with 512 bytes and one with 1232
//! do not unlearn each other). An answer teaches the memory: one fetched over TCP after a
//! truncated UDP reply, or one over TCP larger than the query's UDP size, is remembered; one
//! that fits is forgotten, so a set that shrank goes back to UDP after one TCP ask. A truncated
//! reply kept because the TCP retry failed, and an exchange that fails, forget it: a server
//! without TCP keeps being asked over UDP (its truncated reply is still an answer), and one
//! whose TCP broke costs one failed exchange, not every other one.
//!
//! The memory belongs to the group, not to the cache entry: it survives the entry's expiry and
//! eviction, and works with the cache off; a reload that replaces the group (other endpoints)
//! starts it afresh, one that keeps the group keeps it. It is a fixed table of [`SLOTS`]
//! fingerprints (one page of memory per group, however many questions), each question in one
//! slot chosen by its hash: a question that lands on a remembered one's slot takes it over, and
//! the displaced question costs one UDP round trip again. The hash is seeded at random per
//! group, so no one can choose names that displace a given one. Lock-free: a load to read, a
//! store to remember.
//!
//! It only remembers, and says which transport to try first: the group asks it before an
//! exchange and tells it how the exchange went, and the exchange does the asking.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use super::exchange::Answered;
use super::marker::Marked;
use crate::wire;

/// Questions a group remembers at most (4 KiB of fingerprints).
pub(super) const SLOTS: usize = 512;

/// An empty slot.
const EMPTY: u64 = 0;

/// The questions last answered too big for UDP, for one group.
#[derive(Debug)]
pub(super) struct Truncated {
    hasher: foldhash::fast::RandomState,
    slots: Box<[AtomicU64]>,
}

impl Default for Truncated {
    fn default() -> Self {
        Self {
            hasher: foldhash::fast::RandomState::default(),
            slots: (0..SLOTS).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }
}

impl Truncated {
    /// `query`'s place in the memory, read once for its exchange; `None` for a query without
    /// a question.
    pub(super) fn fingerprint(&self, query: &Marked) -> Option<Fingerprint<'_>> {
        let question = wire::first_question(query.bytes())?;
        let name = wire::question_name(question)?;
        let advertised = query.advertised();
        let mut lower = [0; wire::MAX_NAME];
        let lower = lower.get_mut(..name.len())?;
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        let mut hasher = self.hasher.build_hasher();
        hasher.write(lower);
        hasher.write(question.get(name.len()..)?);
        hasher.write_usize(advertised);
        let print = hasher.finish().max(1);
        let slot = self.slots.get(print as usize % SLOTS)?;
        Some(Fingerprint {
            slot,
            print,
            advertised,
        })
    }
}

/// One question (with the UDP size it advertises) in a group's memory: its slot and
/// fingerprint (never [`EMPTY`]), made once per exchange for both the look before it and the
/// lesson after.
#[derive(Debug)]
pub(super) struct Fingerprint<'a> {
    slot: &'a AtomicU64,
    print: u64,
    /// The UDP payload size the query advertises.
    advertised: usize,
}

impl Fingerprint<'_> {
    /// Whether the question's last answer was too big for the UDP size it advertises: ask
    /// over TCP.
    pub(super) fn remembered(&self) -> bool {
        self.slot.load(Ordering::Relaxed) == self.print
    }

    /// Learns from how the question was answered (`None`: it was not). Remembered: an answer
    /// fetched over TCP after a truncated UDP reply, or one larger than the query's UDP size
    /// (asked over TCP at once). Forgotten: any other answer — a truncated reply kept because
    /// TCP failed included — and a failure (TCP may be what failed).
    pub(super) fn learn(&self, answered: Option<&Answered>) {
        let too_big = answered.is_some_and(|answered| {
            answered.fetched_after_tc || answered.bytes.len() > self.advertised
        });
        if too_big {
            self.slot.store(self.print, Ordering::Relaxed);
        } else {
            // Only this question's own mark: a slot another question took over stays.
            let _ =
                self.slot
                    .compare_exchange(self.print, EMPTY, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    /// An answer of `len` bytes; `fetched_after_tc` as given.
    fn answer(len: usize, fetched_after_tc: bool) -> Answered {
        Answered {
            bytes: vec![0; len],
            endpoint: "127.0.0.1:53".parse().unwrap(),
            rtt: None,
            fetched_after_tc,
        }
    }

    fn remembers(memory: &Truncated, query: &[u8]) -> bool {
        memory
            .fingerprint(&Marked::new(query))
            .is_some_and(|print| print.remembered())
    }

    fn learn(memory: &Truncated, query: &[u8], answered: Option<&Answered>) {
        memory
            .fingerprint(&Marked::new(query))
            .unwrap()
            .learn(answered);
    }

    fn query(name: &str, payload: Option<u16>) -> Vec<u8> {
        let mut msg = Message::query();
        let name = Name::from_ascii(name).unwrap();
        msg.add_query(Query::query(name, RecordType::SRV));
        if let Some(payload) = payload {
            let mut edns = Edns::new();
            edns.set_max_payload(payload);
            msg.set_edns(edns);
        }
        msg.to_vec().unwrap()
    }

    #[test]
    fn a_question_answered_too_big_is_remembered_until_an_answer_fits() {
        let memory = Truncated::default();
        let big = query("_mongodb._tcp.mongo.db.svc.cluster.local.", Some(1232));
        assert!(!remembers(&memory, &big), "nothing learnt yet: UDP first");
        learn(&memory, &big, Some(&answer(3000, true)));
        assert!(remembers(&memory, &big), "TC over UDP: TCP first next time");
        let shouted = query("_MONGODB._tcp.Mongo.db.svc.cluster.local.", Some(1232));
        assert!(
            remembers(&memory, &shouted),
            "the same question in other letter case"
        );
        learn(&memory, &big, Some(&answer(3000, false)));
        assert!(
            remembers(&memory, &big),
            "asked over TCP, still too big for UDP"
        );
        learn(&memory, &big, Some(&answer(1232, false)));
        assert!(
            !remembers(&memory, &big),
            "the set shrank to fit: UDP again"
        );
        learn(&memory, &big, Some(&answer(900, true)));
        assert!(
            remembers(&memory, &big),
            "a server that truncates below the advertised size"
        );
        learn(&memory, &big, None);
        assert!(!remembers(&memory, &big), "TCP failed: UDP again");
    }

    #[test]
    fn another_question_or_udp_size_is_not_remembered() {
        let memory = Truncated::default();
        let big = query("_mongodb._tcp.mongo.db.svc.cluster.local.", Some(1232));
        learn(&memory, &big, Some(&answer(3000, true)));
        let another = query("_pg._tcp.pg.db.svc.cluster.local.", Some(1232));
        assert!(!remembers(&memory, &another));
        let without_edns = query("_mongodb._tcp.mongo.db.svc.cluster.local.", None);
        assert!(!remembers(&memory, &without_edns));
        assert!(
            !remembers(&memory, b"\0\0"),
            "no question: nothing to remember"
        );
    }

    #[test]
    fn forgetting_one_question_keeps_another_in_the_same_slot() {
        let memory = Truncated::default();
        let first = query("first.example.", None);
        let first_print = memory.fingerprint(&Marked::new(&first)).unwrap();
        let same_slot = (0..100_000)
            .map(|i| query(&format!("q{i}.example."), None))
            .find(|other| {
                let other_print = memory.fingerprint(&Marked::new(other)).unwrap();
                std::ptr::eq(other_print.slot, first_print.slot)
                    && other_print.print != first_print.print
            })
            .expect("some name shares the slot");
        learn(&memory, &first, Some(&answer(3000, true)));
        learn(&memory, &same_slot, Some(&answer(3000, true)));
        assert!(
            remembers(&memory, &same_slot) && !remembers(&memory, &first),
            "taken over"
        );
        learn(&memory, &first, None);
        assert!(
            remembers(&memory, &same_slot),
            "the other question's mark stays"
        );
    }
}
