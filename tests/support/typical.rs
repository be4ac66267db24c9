//! The typical cache entry, for the test that measures its memory (tests/memory/): member `i`
//! of a StatefulSet, a client's A query with EDNS and kube-dns's 81-byte reply to it, made
//! with hickory-proto alone.

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// The query for member `i` and kube-dns's reply to it with `ttl` (0: a reply that must not
/// be cached), as wire bytes. The address is 10.x.y.z with each octet under 250, distinct for
/// every `i` below 250³.
pub fn typical_with_ttl(i: usize, ttl: u32) -> (Vec<u8>, Vec<u8>) {
    let name = Name::from_ascii(format!("mongo-{i}.mongo.db.svc.cluster.local.")).unwrap();
    let mut query = Message::query();
    query.metadata.id = 0x1234;
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(name.clone(), RecordType::A));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    query.set_edns(edns.clone());
    let mut reply = Message::response(query.id, query.op_code);
    reply.metadata.recursion_desired = true;
    reply.metadata.recursion_available = true;
    reply.metadata.authoritative = true;
    reply.queries = query.queries.clone();
    let octet = |n: usize| u8::try_from(n % 250).unwrap();
    reply.add_answer(Record::from_rdata(
        name,
        ttl,
        RData::A(A::new(10, octet(i / 62_500), octet(i / 250), octet(i))),
    ));
    reply.set_edns(edns);
    (query.to_vec().unwrap(), reply.to_vec().unwrap())
}
