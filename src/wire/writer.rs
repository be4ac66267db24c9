//! The writer of every reply meshdns encodes from hickory's [`Message`] parts (its own
//! one-question queries — a probe, a host name's lookup — are left to hickory's encoder): wire
//! bytes, record by record, with name compression that keeps working in big messages, and a
//! mark to undo what was written since (so a caller can leave out an RRset that does not fit).
//!
//! hickory-proto's own encoder compresses only the first 120 names of a message and remembers
//! at most 64 suffixes (its bounds against a quadratic search, CVE-2024-8508): past that every
//! owner of a big answer is written in full, and a gathered SRV set of 3 clusters × 250 hosts
//! grows past 65,535 bytes. Here each label written is remembered as (label, where the rest of
//! its name is), so finding the longest known suffix of a name costs one hash lookup per label
//! whatever the message's size, and every suffix written within reach of a pointer (the first
//! 16 KiB, RFC 1035 §4.1.4) can be pointed to. The names every owner and target share — the
//! question's, the zone's — come first in a message, so they are always within reach.
//!
//! Names match byte for byte: a pointer never respells a name (the client's spelling of its
//! question is echoed). Names inside RDATA are compressed only for RFC 1035's types (CNAME, NS,
//! PTR, MX, SOA; RFC 3597 §4); an SRV target is written in full (RFC 2782), but later names
//! (its glue's owner) may point to it.
//!
//! [`Message`]: hickory_proto::op::Message

use std::collections::HashMap;

use hickory_proto::ProtoError;
use hickory_proto::op::{Header, HeaderCounts, Metadata, Query};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR};
use hickory_proto::rr::{Name, RData, Record};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

use super::header::HEADER_LEN;

/// The largest offset a compression pointer can hold (14 bits).
const POINTER_REACH: usize = 0x3FFF;

/// Stands for "the root" as the rest of a name in a [`Suffix`]: no label is ever written there.
const ROOT: u16 = u16::MAX;

/// One label of a name written in the message: its bytes, and where the rest of its name (the
/// labels after it) can be found. Two names share a suffix exactly when the chains of these
/// keys from their last label agree.
#[derive(Clone, Copy)]
struct Suffix {
    rest: u16,
    len: u8,
    label: [u8; 63],
}

impl Suffix {
    fn new(label: &[u8], rest: u16) -> Option<Self> {
        let mut key = Self {
            rest,
            len: u8::try_from(label.len()).ok()?,
            label: [0; 63],
        };
        key.label.get_mut(..label.len())?.copy_from_slice(label);
        Some(key)
    }

    fn label(&self) -> &[u8] {
        &self.label[..usize::from(self.len)]
    }
}

impl PartialEq for Suffix {
    fn eq(&self, other: &Self) -> bool {
        self.rest == other.rest && self.label() == other.label()
    }
}

impl Eq for Suffix {}

/// Only the label's own bytes are hashed, not the padding.
impl std::hash::Hash for Suffix {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u16(self.rest);
        state.write(self.label());
    }
}

/// A position to go back to: the bytes and the suffixes written before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    len: usize,
    suffixes: usize,
}

/// A message being written: the header's place, then sections as the caller adds them.
pub(crate) struct MessageWriter {
    bytes: Vec<u8>,
    /// Where each suffix written within pointer reach starts.
    suffixes: HashMap<Suffix, u16, foldhash::fast::RandomState>,
    /// The keys of `suffixes` in the order they were added, for [`MessageWriter::undo`].
    added: Vec<Suffix>,
    /// The question's name and where it is: most owners are the question (every record of a
    /// gathered answer), and one comparison finds them.
    question: Option<(Name, u16)>,
    /// Where the labels of the name being written start (kept to spare an allocation a name).
    starts: Vec<usize>,
}

impl MessageWriter {
    /// A writer with room for `capacity` bytes; the header is written last
    /// ([`MessageWriter::finish`]), when the counts are known.
    pub(crate) fn new(capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity.max(HEADER_LEN));
        bytes.resize(HEADER_LEN, 0);
        Self {
            bytes,
            // About a new label every 16 bytes, as far as a pointer reaches.
            suffixes: HashMap::with_capacity_and_hasher(
                capacity.min(POINTER_REACH) / 16,
                Default::default(),
            ),
            added: Vec::new(),
            question: None,
            starts: Vec::with_capacity(8),
        }
    }

    /// How many bytes are written, the header's included.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            len: self.bytes.len(),
            suffixes: self.added.len(),
        }
    }

    /// Forgets everything written since `mark`, the suffixes it made known included.
    pub(crate) fn undo(&mut self, mark: Mark) {
        self.bytes.truncate(mark.len);
        for key in self.added.drain(mark.suffixes..) {
            self.suffixes.remove(&key);
        }
        if self
            .question
            .as_ref()
            .is_some_and(|(_, at)| usize::from(*at) >= mark.len)
        {
            self.question = None;
        }
    }

    pub(crate) fn question(&mut self, query: &Query) {
        let start = self.bytes.len();
        self.name(query.name(), true);
        if self.question.is_none()
            && let Ok(at) = u16::try_from(start)
            && start <= POINTER_REACH
        {
            self.question = Some((query.name().clone(), at));
        }
        self.u16(u16::from(query.query_type()));
        self.u16(u16::from(query.query_class()));
    }

    /// Writes one resource record; an error (data hickory cannot encode) leaves the writer as
    /// it was.
    pub(crate) fn record(&mut self, record: &Record) -> Result<(), ProtoError> {
        let mark = self.mark();
        let written = self.try_record(record);
        if written.is_err() {
            self.undo(mark);
        }
        written
    }

    fn try_record(&mut self, record: &Record) -> Result<(), ProtoError> {
        self.name(&record.name, true);
        self.u16(u16::from(record.record_type()));
        self.u16(u16::from(record.dns_class));
        self.bytes.extend_from_slice(&record.ttl.to_be_bytes());
        let length_at = self.bytes.len();
        self.u16(0);
        match &record.data {
            RData::CNAME(CNAME(target)) | RData::NS(NS(target)) | RData::PTR(PTR(target)) => {
                self.name(target, true);
            }
            RData::MX(mx) => {
                self.u16(mx.preference);
                self.name(&mx.exchange, true);
            }
            RData::SOA(soa) => {
                self.name(&soa.mname, true);
                self.name(&soa.rname, true);
                self.bytes.extend_from_slice(&soa.serial.to_be_bytes());
                for field in [soa.refresh, soa.retry, soa.expire] {
                    self.bytes.extend_from_slice(&field.to_be_bytes());
                }
                self.bytes.extend_from_slice(&soa.minimum.to_be_bytes());
            }
            RData::SRV(srv) => {
                for field in [srv.priority, srv.weight, srv.port] {
                    self.u16(field);
                }
                self.name(&srv.target, false);
            }
            RData::A(A(address)) => self.bytes.extend_from_slice(&address.octets()),
            RData::AAAA(AAAA(address)) => self.bytes.extend_from_slice(&address.octets()),
            // An empty record (legal in UPDATE messages only) has no data.
            RData::Update0(_) => {}
            other => {
                let mut data = Vec::new();
                let mut encoder = BinEncoder::new(&mut data);
                encoder.set_name_encoding(NameEncoding::Uncompressed);
                other.emit(&mut encoder)?;
                self.bytes.extend_from_slice(&data);
            }
        }
        let length = u16::try_from(self.bytes.len() - length_at - 2)
            .map_err(|_| ProtoError::Message("record data longer than 65535 bytes"))?;
        self.bytes[length_at..length_at + 2].copy_from_slice(&length.to_be_bytes());
        Ok(())
    }

    /// The message: the header (`metadata`, with the section counts) in its place.
    pub(crate) fn finish(mut self, metadata: &Metadata, counts: HeaderCounts) -> Vec<u8> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        let emitted = Header {
            metadata: *metadata,
            counts,
        }
        .emit(&mut BinEncoder::new(&mut header));
        if emitted.is_ok() && header.len() == HEADER_LEN {
            self.bytes[..HEADER_LEN].copy_from_slice(&header);
        }
        self.bytes
    }

    fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Writes `name`, ending in a pointer to the longest suffix already known when `compress`
    /// (else in full), and makes the suffixes it writes known to the names after it.
    fn name(&mut self, name: &Name, compress: bool) {
        if let Some((question, at)) = &self.question
            && compress
            && question.len() == name.len()
            && question.eq_case(name)
        {
            let pointer = 0xC000 | *at;
            self.u16(pointer);
            return;
        }
        // Written in full first; its labels are then read back from the message.
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        for label in name.iter() {
            starts.push(self.bytes.len());
            // A label of a `Name` is at most 63 bytes.
            self.bytes.push(label.len() as u8);
            self.bytes.extend_from_slice(label);
        }
        self.bytes.push(0);
        // The labels from `known` on are a suffix already in the message, starting at `rest`.
        let (mut known, mut rest) = (starts.len(), ROOT);
        while let Some(&start) = known.checked_sub(1).and_then(|i| starts.get(i)) {
            match Suffix::new(self.label_at(start), rest).and_then(|key| self.suffixes.get(&key)) {
                Some(&at) => (known, rest) = (known - 1, at),
                None => break,
            }
        }
        if compress && rest != ROOT {
            self.bytes.truncate(starts[known]);
            self.u16(0xC000 | rest);
        }
        // Labels from `known` on are known already; each new one is known with the rest of its
        // name as the label written after it, or as the known suffix.
        for &start in starts[..known].iter().rev() {
            let key = Suffix::new(self.label_at(start), rest);
            let Ok(at) = u16::try_from(start) else {
                break;
            };
            rest = at;
            if let Some(key) = key
                && start <= POINTER_REACH
                && !self.suffixes.contains_key(&key)
            {
                self.suffixes.insert(key, at);
                self.added.push(key);
            }
        }
        self.starts = starts;
    }

    /// The label written at `start` (its length byte there).
    fn label_at(&self, start: usize) -> &[u8] {
        let len = self.bytes.get(start).map_or(0, |&len| usize::from(len));
        self.bytes
            .get(start + 1..start + 1 + len)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use hickory_proto::op::{Edns, Message, OpCode};
    use hickory_proto::rr::RecordType;
    use hickory_proto::rr::rdata::{A, AAAA, MX, SOA, SRV, TXT};

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    /// `msg` through the writer, every record and the OPT record included.
    fn written(msg: &Message) -> Vec<u8> {
        let mut writer = MessageWriter::new(512);
        for query in &msg.queries {
            writer.question(query);
        }
        let opt = msg.edns.as_ref().map(Record::from);
        let sections = [&msg.answers, &msg.authorities, &msg.additionals];
        for record in sections.into_iter().flatten().chain(&opt) {
            writer.record(record).unwrap();
        }
        let count = |n: usize| u16::try_from(n).unwrap();
        let counts = HeaderCounts {
            queries: count(msg.queries.len()),
            answers: count(msg.answers.len()),
            authorities: count(msg.authorities.len()),
            additionals: count(msg.additionals.len() + opt.iter().count()),
        };
        writer.finish(&msg.metadata, counts)
    }

    fn record(owner: &str, data: RData) -> Record {
        Record::from_rdata(name(owner), 30, data)
    }

    /// An SRV set of `hosts` under `question`, each host with its address.
    fn srv_set(question: &str, hosts: usize) -> Message {
        let mut msg = Message::response(7, OpCode::Query);
        msg.add_query(Query::query(name(question), RecordType::SRV));
        for i in 0..hosts {
            let host = format!("a-mongo-{i}.mongo.db.svc.distributed.local.");
            let target = SRV::new(0, 50, 27017, name(&host));
            msg.add_answer(record(question, RData::SRV(target)));
            let ip = Ipv4Addr::from(0x0a00_0000 + u32::try_from(i).unwrap());
            msg.add_additional(record(&host, RData::A(A::from(ip))));
        }
        msg
    }

    #[test]
    fn every_kind_of_record_reads_back_as_written_with_its_spelling() {
        let mut msg = Message::response(0x1234, OpCode::Query);
        msg.metadata.authoritative = true;
        msg.add_query(Query::query(name("Mongo.DB.cluster.b."), RecordType::ANY));
        let (ns, hostmaster) = (name("ns.dns.cluster.b."), name("hostmaster.cluster.b."));
        let soa = SOA::new(ns.clone(), hostmaster, 7, 1, 2, 3, 5);
        for data in [
            RData::A(A::new(10, 0, 0, 1)),
            RData::AAAA(AAAA::from(Ipv6Addr::LOCALHOST)),
            RData::SRV(SRV::new(1, 2, 3, name("mongo-0.Mongo.DB.cluster.b."))),
            RData::CNAME(CNAME(name("other.db.cluster.b."))),
            RData::MX(MX::new(10, name("mail.db.cluster.b."))),
            RData::PTR(PTR(name("mongo-0.mongo.db.cluster.b."))),
            RData::TXT(TXT::new(vec!["replicaSet=rs0".into()])),
        ] {
            msg.add_answer(record("Mongo.DB.cluster.b.", data));
        }
        msg.add_authority(record("cluster.b.", RData::SOA(soa)));
        msg.add_authority(record("cluster.b.", RData::NS(NS(ns))));
        let glue = RData::A(A::new(10, 0, 0, 2));
        msg.add_additional(record("mongo-0.Mongo.DB.cluster.b.", glue));
        msg.set_edns(Edns::new());
        let bytes = written(&msg);
        let read = Message::from_vec(&bytes).unwrap();
        assert_eq!(read.metadata, msg.metadata);
        assert_eq!(read.queries, msg.queries);
        for (got, want) in [
            (&read.answers, &msg.answers),
            (&read.authorities, &msg.authorities),
            (&read.additionals, &msg.additionals),
        ] {
            assert_eq!(got, want);
            for (got, want) in got.iter().zip(want) {
                assert!(got.name.eq_case(&want.name), "{} {}", got.name, want.name);
            }
        }
        assert!(read.edns.is_some());
        // Every owner after the question's is a pointer, or a label and a pointer.
        assert!(
            bytes.len() < msg.to_vec().unwrap().len() + 8,
            "{} bytes",
            bytes.len()
        );
    }

    #[test]
    fn names_are_compressed_far_past_the_first_16_kib() {
        // 750 hosts: the answer section alone ends near 47,000 bytes.
        let msg = srv_set("_mongodb._tcp.mongo.db.svc.distributed.local.", 750);
        let mut answers_only = msg.clone();
        answers_only.additionals.clear();
        let bytes = written(&answers_only);
        assert_eq!(Message::from_vec(&bytes).unwrap(), answers_only);
        // Each SRV record: its owner a 2-byte pointer to the question, 10 bytes of type, class,
        // TTL and length, 6 of priority, weight and port, and the target in full (RFC 2782).
        let target = |i: usize| format!("a-mongo-{i}.mongo.db.svc.distributed.local.").len() + 1;
        let question = "_mongodb._tcp.mongo.db.svc.distributed.local.".len() + 1 + 4;
        let expected: usize =
            HEADER_LEN + question + (0..750).map(|i| 18 + target(i)).sum::<usize>();
        assert_eq!(bytes.len(), expected);
        assert!(bytes.len() > 2 * (POINTER_REACH + 1));
        // With the glue: each owner is the target's first label and a pointer to the service's
        // name in the question (or, in reach, a pointer to the target itself).
        let bytes = written(&msg);
        assert_eq!(Message::from_vec(&bytes).unwrap(), msg);
        let glue = bytes.len() - expected;
        let longest_owner = "a-mongo-749".len() + 1 + 2;
        assert!(glue <= 750 * (longest_owner + 14), "{glue} bytes of glue");
        assert!(bytes.len() <= 65_535, "{} bytes", bytes.len());
        // hickory's encoder gives up compressing after 120 names: not even the answers fit.
        let theirs = Message::from_vec(&answers_only.to_vec().unwrap()).unwrap();
        assert!(theirs.truncation && theirs.answers.len() < 750);
    }

    #[test]
    fn a_suffix_first_written_past_pointer_reach_is_written_again_in_full() {
        let mut msg = srv_set("_x._tcp.big.db.svc.cluster.local.", 400);
        // First seen past 16 KiB: later names cannot point to it, and must not try.
        let late = "late.elsewhere.example.";
        for i in 0..3u8 {
            msg.add_additional(record(late, RData::A(A::new(10, 9, 9, i))));
        }
        let bytes = written(&msg);
        assert!(bytes.len() > POINTER_REACH);
        assert_eq!(Message::from_vec(&bytes).unwrap(), msg);
        let full = late.len() + 1;
        let tail = 3 * (full + 10 + 4);
        let owners = &bytes[bytes.len() - tail..];
        assert_eq!(
            owners
                .windows(b"elsewhere".len())
                .filter(|w| w == b"elsewhere")
                .count(),
            3
        );
    }

    #[test]
    fn undone_records_leave_no_pointer_behind() {
        let mut writer = MessageWriter::new(512);
        let question = Query::query(name("q.example."), RecordType::A);
        writer.question(&question);
        let mark = writer.mark();
        let gone = record("gone.away.example.", RData::A(A::new(10, 0, 0, 1)));
        writer.record(&gone).unwrap();
        writer.undo(mark);
        assert_eq!(writer.size(), mark.len);
        // Written again from the same offset: the name must not point at itself.
        let kept = record("away.example.", RData::A(A::new(10, 0, 0, 2)));
        writer.record(&kept).unwrap();
        let counts = HeaderCounts {
            queries: 1,
            answers: 1,
            ..HeaderCounts::default()
        };
        let bytes = writer.finish(&Message::response(1, OpCode::Query).metadata, counts);
        let read = Message::from_vec(&bytes).unwrap();
        assert_eq!(read.answers, [kept]);
    }
}
