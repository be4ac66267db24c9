//! The invariants that hold over sockets, checked by proptest over generated meshes and
//! replies: every SRV target meshdns writes for a gathered service resolves back through
//! meshdns to the addresses it came from; and a mutated upstream reply is relayed exactly when
//! it walks fully, else never relayed or cached (with the walk itself held to the decoder's
//! judgement, on the same mutations). The properties of the internals alone — rewriting a name
//! and back, merging, encoding to the client's size, routing every written target back — are
//! unit tests beside their code (src/rewrite.rs, src/gather/merge.rs, src/reply.rs,
//! src/route.rs).
//!
//! Failing seeds are saved beside this file (`properties.proptest-regressions`, [`saved`]) and
//! replayed first.

use std::collections::BTreeMap;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use hickory_proto::rr::rdata::SRV;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use crate::support;

use support::{Answer, Behaviour, FakeDns, Meshdns, query, rr, udp, with_edns};

/// The settings of a property of `cases` cases whose failing seeds are saved beside this file.
/// (By default proptest would look for them under `tests/proptest-regressions/`, as this module
/// is not the binary's root.)
fn saved(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

// --- Every SRV target meshdns writes resolves back (issue 24) ------------------------------

/// The gathered service of the round trip, in every cluster's domain.
const SERVICE: &str = "web.db.svc";

/// What one cluster holds for [`SERVICE`]: nothing, a ClusterIP service (the SRV target is the
/// service name itself), or a headless one with these pod host names.
#[derive(Debug, Clone)]
enum Shape {
    Absent,
    ClusterIp,
    Headless(Vec<String>),
}

/// One cluster of a generated mesh: its prefix (`None`: the default `NAME-`), its domain, and
/// what it holds.
#[derive(Debug, Clone)]
struct Peer {
    prefix: Option<&'static str>,
    domain: &'static str,
    shape: Shape,
}

const NAMES: [&str; 4] = ["a", "b", "c", "west"];
/// Prefixes none of which begins another: with nested prefixes (`b-` and `b-b-`) two
/// clusters could write the same target, and no routing can send it to both.
const PREFIXES: [&str; 4] = ["eu-", "us-", "x1-", "ap-"];

fn host() -> impl Strategy<Value = String> {
    // Some hosts begin like a prefix (`a-…`, `eu-…`): the fallback's case.
    (
        prop_oneof![Just(""), Just("a-"), Just("b-"), Just("eu-"), Just("west-")],
        "[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?",
    )
        .prop_map(|(start, rest)| format!("{start}{rest}"))
}

fn peer(index: usize) -> impl Strategy<Value = Peer> {
    (
        proptest::option::of(Just(PREFIXES[index])),
        prop_oneof![Just("cluster.local"), Just("west.example")],
        prop_oneof![
            1 => Just(Shape::Absent),
            2 => Just(Shape::ClusterIp),
            3 => proptest::collection::btree_set(host(), 1..4)
                .prop_map(|hosts| Shape::Headless(hosts.into_iter().collect())),
        ],
    )
        .prop_map(|(prefix, domain, shape)| Peer {
            prefix,
            domain,
            shape,
        })
}

fn mesh() -> impl Strategy<Value = Vec<Peer>> {
    (1..=4usize).prop_flat_map(|n| (0..n).map(peer).collect::<Vec<_>>())
}

/// Cluster `index`'s DNS, and the model of it: each SRV target as that cluster names it, with
/// its address (10.<index>.<pod>.7). What it does not hold is NXDOMAIN, as CoreDNS answers.
async fn peer_dns(index: usize, peer: &Peer) -> (FakeDns, Vec<(String, [u8; 4])>) {
    let in_domain = |relative: &str| format!("{relative}.{}.", peer.domain);
    let owner = in_domain(&format!("_http._tcp.{SERVICE}"));
    let targets: Vec<(String, [u8; 4])> = match &peer.shape {
        Shape::Absent => Vec::new(),
        Shape::ClusterIp => vec![(in_domain(SERVICE), [10, index as u8, 0, 7])],
        Shape::Headless(hosts) => (0u8..)
            .zip(hosts)
            .map(|(pod, host)| {
                (
                    in_domain(&format!("{host}.{SERVICE}")),
                    [10, index as u8, pod, 7],
                )
            })
            .collect(),
    };
    let nxdomain = Behaviour::Answer(Answer::nxdomain(&format!("{}.", peer.domain)));
    let mut fake = FakeDns::builder().otherwise(nxdomain);
    if !targets.is_empty() {
        let mut srv = Answer::records(targets.iter().map(|(t, _)| rr::srv(&owner, 80, t)));
        for (target, ip) in &targets {
            srv = srv.additional(rr::a(target, *ip));
            fake = fake.answer(target, RecordType::A, Answer::records([rr::a(target, *ip)]));
        }
        fake = fake.answer(&owner, RecordType::SRV, srv);
    }
    (fake.start().await, targets)
}

/// Starts the mesh, gathers the service's SRV, and resolves every target through meshdns:
/// the targets must be exactly the model's (each cluster's, with its prefix), and each must
/// resolve to the address it came from, and to nothing else.
async fn round_trip(peers: &[Peer]) -> Result<(), TestCaseError> {
    let mut fakes = Vec::new();
    let mut entries = Vec::new();
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (index, peer) in peers.iter().enumerate() {
        let (fake, targets) = peer_dns(index, peer).await;
        let name = NAMES[index];
        let prefix = peer.prefix.map_or(format!("{name}-"), str::to_string);
        let mut entry = match index {
            0 => format!("{name}= domain={}", peer.domain),
            _ => format!("{name}={} domain={}", fake.addr, peer.domain),
        };
        if let Some(prefix) = peer.prefix {
            entry.push_str(&format!(" prefix={prefix}"));
        }
        entries.push(entry);
        for (target, ip) in targets {
            let relative = target.trim_end_matches(&format!(".{}.", peer.domain));
            let client = format!("{prefix}{relative}.distributed.local.");
            let [o1, o2, o3, o4] = ip;
            expected
                .entry(client.clone())
                .or_default()
                .push(format!("{client} A {o1}.{o2}.{o3}.{o4}"));
        }
        fakes.push(fake);
    }
    let clusters = entries.join("; ");
    let meshdns = Meshdns::before(
        &fakes[0],
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await;
    let addr = meshdns.addr;
    let ask = |name: &str, rtype| {
        let msg = with_edns(query(name, rtype), 4096);
        async move { udp(addr, &msg).await }
    };
    let srv = ask(
        &format!("_http._tcp.{SERVICE}.distributed.local."),
        RecordType::SRV,
    )
    .await;
    let written: Vec<String> = srv
        .msg
        .answers
        .iter()
        .filter_map(|r| {
            r.try_borrow::<SRV>()
                .map(|srv| srv.data().target.to_ascii())
        })
        .collect();
    let mut sorted = written.clone();
    sorted.sort();
    prop_assert_eq!(
        sorted,
        expected.keys().cloned().collect::<Vec<_>>(),
        "{}",
        clusters
    );
    for target in written {
        let reply = ask(&target, RecordType::A).await;
        prop_assert_eq!(
            reply.msg.response_code,
            ResponseCode::NoError,
            "{} with {}",
            target,
            clusters
        );
        prop_assert_eq!(&reply.answer_lines(), &expected[&target], "{}", clusters);
    }
    Ok(())
}

proptest! {
    #![proptest_config(saved(48))]

    #[test]
    fn every_gathered_srv_target_resolves_back_to_the_addresses_it_came_from(peers in mesh()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(round_trip(&peers))?;
    }
}

// --- Replies are walked once, fully (issue 45) -----------------------------------------------

use meshdns::testing::fuzz as targets;

use support::{Patch, record_line, reply_bytes};

/// The pass-through name of the walk properties, and its reply: a CNAME, an address, an NS
/// and its glue, so that names are compressed in the owner, RDATA, authority and additional
/// sections.
const WALKED: &str = "www.example.com.";

fn walked_answer() -> Answer {
    Answer::records([
        rr::cname(WALKED, "web.example.com."),
        rr::a("web.example.com.", [192, 0, 2, 1]),
    ])
    .authority(rr::ns("example.com.", "ns1.example.com."))
    .additional(rr::a("ns1.example.com.", [192, 0, 2, 53]))
}

/// The query meshdns relays for a client asking [`WALKED`] with EDNS, as far as the fake's
/// reply depends on it (its question and EDNS), and that reply's bytes.
fn walked_exchange() -> (Vec<u8>, Vec<u8>) {
    let asked = with_edns(query(WALKED, RecordType::A), 1232);
    (
        asked.to_vec().unwrap(),
        reply_bytes(&asked, &walked_answer()),
    )
}

/// A mutation of a real reply where a walk can go wrong.
#[derive(Debug, Clone)]
enum Mutation {
    /// A section count (0 QD, 1 AN, 2 NS, 3 AR) set to a value.
    Count(usize, u16),
    /// The name that starts the nth record's owner (or its RDATA) made a compression pointer
    /// to `target`: a loop, a forward pointer, one into the middle of a label, or a good one.
    Pointer {
        record: usize,
        in_rdata: bool,
        target: u16,
    },
    /// The nth record's RDATA length set to a value.
    Length(usize, u16),
    /// The reply cut to its first bytes.
    Cut(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let small_or_any = || prop_oneof![0..8u16, any::<u16>()];
    prop_oneof![
        (0..4usize, small_or_any()).prop_map(|(section, value)| Mutation::Count(section, value)),
        (0..8usize, any::<bool>(), 0..160u16).prop_map(|(record, in_rdata, target)| {
            Mutation::Pointer {
                record,
                in_rdata,
                target,
            }
        }),
        (0..8usize, small_or_any()).prop_map(|(record, value)| Mutation::Length(record, value)),
        (0..160usize).prop_map(Mutation::Cut),
    ]
}

/// The mutation as byte edits to `reply`.
fn patch(reply: &[u8], mutation: &Mutation) -> Patch {
    let mut records = Vec::new();
    meshdns::testing::wire::for_each_record(reply, |r| records.push(*r))
        .expect("a reply that walks");
    let nth = |n: usize| records[n % records.len()];
    let u16_at = |at: usize, value: u16| {
        let [high, low] = value.to_be_bytes();
        Patch {
            bytes: vec![(at, high), (at + 1, low)],
            cut: None,
        }
    };
    match *mutation {
        Mutation::Count(section, value) => u16_at(4 + 2 * section, value),
        Mutation::Pointer {
            record,
            in_rdata,
            target,
        } => {
            let record = nth(record);
            let at = if in_rdata {
                record.rdata_offset
            } else {
                record.start
            };
            u16_at(at, 0xc000 | target)
        }
        Mutation::Length(record, value) => u16_at(nth(record).rdata_offset - 2, value),
        Mutation::Cut(len) => Patch {
            bytes: Vec::new(),
            cut: Some(len),
        },
    }
}

proptest! {
    #![proptest_config(saved(512))]

    #[test]
    fn the_full_walk_accepts_a_mutated_reply_exactly_when_the_decoder_does(m in mutation()) {
        let (_, reply) = walked_exchange();
        targets::walk_agrees_with_decoder(&patch(&reply, &m).apply(reply));
    }
}

/// What the client sees of a reply: its rcode and its answer section.
fn seen(msg: &Message) -> (ResponseCode, Vec<String>) {
    (
        msg.response_code,
        msg.answers.iter().map(record_line).collect(),
    )
}

/// kube-dns sends the mutated reply first and the right one 50 ms later; the client, asking
/// twice (the second time from the cache, if the first answer was cacheable), sees the mutated
/// reply only when it walks fully, else the right one — never anything that does not parse.
async fn relayed_or_refused(mutation: &Mutation) -> Result<(), TestCaseError> {
    let (asked, good) = walked_exchange();
    let patch = patch(&good, mutation);
    let mutated = patch.apply(good.clone());
    let id = Message::from_vec(&asked).unwrap().id;
    let expected = match meshdns::testing::upstream::acceptable(&mutated, id, &asked) {
        true => Message::from_vec(&mutated).map_err(|e| {
            TestCaseError::fail(format!("an accepted reply that does not parse: {e}"))
        })?,
        false => Message::from_vec(&good).unwrap(),
    };
    let upstream = FakeDns::builder()
        .on(
            WALKED,
            RecordType::A,
            Behaviour::PatchedFirst(patch, walked_answer()),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    for ask in ["first", "second"] {
        let reply = udp(meshdns.addr, &with_edns(query(WALKED, RecordType::A), 1232)).await;
        prop_assert_eq!(seen(&reply.msg), seen(&expected), "{} ask", ask);
    }
    Ok(())
}

proptest! {
    #![proptest_config(saved(32))]

    #[test]
    fn a_mutated_upstream_reply_is_relayed_when_it_walks_fully_and_else_never_relayed_or_cached(
        m in mutation()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(relayed_or_refused(&m))?;
    }
}
