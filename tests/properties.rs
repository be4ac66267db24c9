//! Properties (issue 9), checked by proptest over generated names, legs and replies:
//! rewriting a name into a cluster's domain and back is the identity; a merged answer never
//! holds a record of a cluster that did not answer; an encoded reply never exceeds the
//! client's size.

use std::time::Duration;

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use meshdns::config::Config;
use meshdns::gather::{Leg, Naming, Scheme, merge};
use meshdns::reply::{encode_fitted, fit_wire};
use meshdns::rewrite::ZoneMap;
use proptest::prelude::*;

/// A DNS label: letters of either case, digits, hyphens (what Kubernetes names use), or any
/// byte at all (DNS allows it; the mapping must not care).
fn label() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::string::string_regex("[a-zA-Z0-9][a-zA-Z0-9-]{0,20}")
            .unwrap()
            .prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 1..=63),
    ]
}

fn name_under(zone: &Name, labels: &[Vec<u8>]) -> Option<Name> {
    Name::from_labels(labels.iter().map(Vec::as_slice).chain(zone.iter())).ok()
}

fn zone(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

proptest! {
    #[test]
    fn a_name_rewritten_into_a_cluster_domain_and_back_is_itself(
        labels in proptest::collection::vec(label(), 0..6),
        domain in prop_oneof![Just("svc.cluster.local."), Just("svc.west.example."), Just("svc.c.")],
        client in prop_oneof![Just("cluster.b."), Just("Cluster.West."), Just("b.mesh.internal.")],
    ) {
        let map = ZoneMap { client: zone(client), upstream: zone(domain) };
        let Some(name) = name_under(&map.client, &labels) else {
            return Ok(()); // longer than DNS allows: not a name a client can send
        };
        match map.to_upstream(&name) {
            Some(there) => {
                prop_assert!(map.upstream.zone_of(&there));
                let back = map.to_client(&there).expect("a rewritten name maps back");
                prop_assert!(back.eq_case(&name), "{} → {} → {}", name, there, back);
            }
            // Only a name that would be too long in the cluster's domain has no mapping.
            None => prop_assert!(
                name_under(&map.upstream, &labels).is_none(),
                "{} has no mapping though it fits", name
            ),
        }
    }
}

/// Three clusters (a local, b, c with its own prefix) and the distributed zone.
fn clusters() -> Config {
    let vars = [
        ("MESHDNS_UPSTREAMS", "127.0.0.1:9"),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        (
            "MESHDNS_CLUSTERS",
            "a=; b=127.0.0.1:9; c=127.0.0.1:9 prefix=west-",
        ),
        ("MESHDNS_ADMIN_LISTEN", ""),
    ];
    Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
}

/// What one cluster's leg does: fail, NXDOMAIN, or answer with `n` records (each address
/// says which cluster it came from: 10.<cluster>.…).
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Failed,
    NxDomain,
    Records(u8),
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Failed),
        Just(Outcome::NxDomain),
        (0u8..6).prop_map(Outcome::Records),
    ]
}

fn leg(cluster: u8, outcome: Outcome, qtype: RecordType) -> Leg {
    let upstream = zone("_mongodb._tcp.mongo.db.svc.cluster.local.");
    let mut reply = Message::response(1, OpCode::Query);
    reply.add_query(Query::query(upstream.clone(), qtype));
    match outcome {
        Outcome::Failed => return Leg::Failed,
        Outcome::NxDomain => reply.metadata.response_code = ResponseCode::NXDomain,
        Outcome::Records(n) => {
            for i in 0..n {
                let host = zone(&format!("mongo-{i}.mongo.db.svc.cluster.local."));
                let ip = A::new(10, cluster, 0, i);
                match qtype {
                    RecordType::SRV => {
                        let srv = SRV::new(0, 50, 27017, host.clone());
                        reply.add_answer(Record::from_rdata(upstream.clone(), 30, RData::SRV(srv)));
                        reply.add_additional(Record::from_rdata(host, 30, RData::A(ip)));
                    }
                    _ => {
                        reply.add_answer(Record::from_rdata(upstream.clone(), 30, RData::A(ip)));
                    }
                }
            }
        }
    }
    Leg::Answered(reply)
}

proptest! {
    #[test]
    fn a_merged_answer_holds_no_record_of_a_cluster_that_did_not_answer(
        outcomes in proptest::array::uniform3(outcome()),
        srv in any::<bool>(),
    ) {
        let config = clusters();
        let qtype = if srv { RecordType::SRV } else { RecordType::A };
        let question = zone("_mongodb._tcp.mongo.db.svc.distributed.local.");
        let mut request = Message::query();
        request.add_query(Query::query(question.clone(), qtype));
        let legs: Vec<(usize, Leg)> = outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| (i, leg(i as u8 + 1, *o, qtype)))
            .collect();
        let naming = Naming { zone: zone("distributed.local."), scheme: Scheme::Prefix };
        let merged = merge(&request, &naming, &config.clusters, &legs, Duration::from_secs(5));
        let answered = |cluster: u8| {
            matches!(outcomes[usize::from(cluster) - 1], Outcome::Records(n) if n > 0)
        };
        let prefixes = ["a-", "b-", "west-"];
        for record in merged.reply.answers.iter().chain(&merged.reply.additionals) {
            match &record.data {
                RData::A(a) => {
                    let cluster = a.0.octets()[1];
                    prop_assert!(answered(cluster), "{} from cluster {} that did not answer", record, cluster);
                }
                RData::SRV(srv) => {
                    let first = String::from_utf8_lossy(srv.target.iter().next().unwrap_or_default()).to_string();
                    let from = prefixes.iter().position(|p| first.starts_with(p)).expect("a prefixed target");
                    prop_assert!(answered(from as u8 + 1), "{} from a cluster that did not answer", record);
                }
                _ => {}
            }
        }
        // And every record of every cluster that answered is there.
        let expected: usize = outcomes.iter().map(|o| match o { Outcome::Records(n) => usize::from(*n), _ => 0 }).sum();
        prop_assert_eq!(merged.reply.answers.len(), expected);
    }
}

proptest! {
    #[test]
    fn an_encoded_reply_never_exceeds_the_clients_size(
        answers in 0usize..300,
        name_len in 1usize..60,
        edns in any::<bool>(),
        limit in 512usize..=65_535,
    ) {
        let owner = zone(&format!("{}.example.", "x".repeat(name_len)));
        let mut reply = Message::response(7, OpCode::Query);
        reply.add_query(Query::query(owner.clone(), RecordType::A));
        if edns {
            reply.set_edns(Edns::new());
        }
        for i in 0..answers {
            let ip = A::new(10, (i >> 8) as u8, i as u8, 1);
            reply.add_answer(Record::from_rdata(owner.clone(), 30, RData::A(ip)));
            reply.add_additional(Record::from_rdata(zone(&format!("h{i}.example.")), 30, RData::A(ip)));
        }
        let out = encode_fitted(&reply, limit);
        prop_assert!(out.len() <= limit, "{} > {}", out.len(), limit);
        let parsed = Message::from_vec(&out).unwrap();
        prop_assert_eq!(parsed.id, 7);
        prop_assert_eq!(parsed.edns.is_some(), edns, "OPT kept when the client sent one");
        let full = reply.to_vec().unwrap();
        let cut = fit_wire(full.clone(), limit);
        prop_assert!(cut.len() <= limit);
        // Whole RRsets only (docs/design.md, "Truncation"): additional records go first,
        // without TC; TC says the answer RRset was left out, and then none of it is there.
        if full.len() <= limit {
            prop_assert!(!parsed.truncation);
        }
        let kept = parsed.answers.len();
        prop_assert!(kept == 0 || kept == answers, "{} of the {} records of one RRset", kept, answers);
        prop_assert_eq!(parsed.truncation, kept < answers);
    }
}
