//! The fuzz targets (`src/testing/fuzz.rs`) on stable Rust: each target's corpus
//! (`fuzz/corpus/<target>/`) mutated by a seeded RNG — bit flips, interesting bytes, 16-bit
//! count and length fields, truncation, insertion, splicing — for a fixed time, every input
//! checked by the target's invariants. Then a socket-level run: mutated client queries through
//! every route, against fake upstreams whose replies are mutated too.
//!
//! `MESHDNS_FUZZ_SECS` sets the time per target (default 1 s: what CI runs);
//! `MESHDNS_FUZZ_SEED` the RNG seed (default: fixed, so a failure repeats). A failing input is
//! written to `target/fuzz-failures/` and its hex printed. The same targets run under
//! libFuzzer with `cargo fuzz run <target>` in `fuzz/` (see fuzz/README.md).
//!
//! A panic fails the test: meshdns aborts on one (docs/design.md, "Panics"), and the harness
//! catches it only to save the input first. CI runs this file in the test profile and again
//! with `--release`, the optimised profile that ships (cargo always unwinds in tests).

use meshdns::testing::fuzz as targets;

mod support;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{Meshdns, rr};
use tokio::net::UdpSocket;

fn budget() -> Duration {
    let secs = std::env::var("MESHDNS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs)
}

fn seed(salt: u64) -> u64 {
    let base = std::env::var("MESHDNS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6d65_7368);
    base ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .filter_map(|entry| Some(entry.ok()?.path()))
        .collect();
    files.sort();
    // Every seed is read, or the run fails: a corpus file silently skipped is coverage lost.
    let seeds: Vec<Vec<u8>> = (files.iter())
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("seed {}: {e}", f.display())))
        .collect();
    assert!(!seeds.is_empty(), "corpus {} is empty", dir.display());
    seeds
}

/// Values that break length and count fields.
const INTERESTING_U16: [u16; 8] = [0, 1, 2, 0x7f, 0xff, 0x100, 0x7fff, 0xffff];
const INTERESTING_U8: [u8; 8] = [0, 1, 0x3f, 0x40, 0x7f, 0x80, 0xc0, 0xff];

/// One to four mutations of a seed, sometimes spliced with another.
fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut input = seeds[rng.random_range(0..seeds.len())].clone();
    for _ in 0..rng.random_range(1..=4) {
        let len = input.len();
        match rng.random_range(0..8) {
            0 if len > 0 => {
                let at = rng.random_range(0..len);
                input[at] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let at = rng.random_range(0..len);
                input[at] = INTERESTING_U8[rng.random_range(0..INTERESTING_U8.len())];
            }
            2 if len > 1 => {
                // Header counts sit at even offsets 4..12; names and RDLENGTHs anywhere.
                let at = if rng.random_bool(0.5) && len >= 12 {
                    4 + 2 * rng.random_range(0..4)
                } else {
                    rng.random_range(0..len - 1)
                };
                let value = INTERESTING_U16[rng.random_range(0..INTERESTING_U16.len())];
                input[at..at + 2].copy_from_slice(&value.to_be_bytes());
            }
            3 if len > 0 => input.truncate(rng.random_range(0..len)),
            4 => {
                let at = rng.random_range(0..=len);
                let extra: Vec<u8> = (0..rng.random_range(1..16)).map(|_| rng.random()).collect();
                input.splice(at..at, extra);
            }
            5 if len > 2 => {
                // Duplicate a chunk (repeated records, pointer loops).
                let from = rng.random_range(0..len - 1);
                let to = rng.random_range(from + 1..=len.min(from + 64));
                let chunk = input[from..to].to_vec();
                let at = rng.random_range(0..=len);
                input.splice(at..at, chunk);
            }
            6 => {
                let other = &seeds[rng.random_range(0..seeds.len())];
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..=other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            _ if len > 13 => {
                // A compression pointer somewhere.
                let at = rng.random_range(12..len - 1);
                let target = rng.random_range(0..len.min(0x3fff)) as u16;
                input[at..at + 2].copy_from_slice(&(0xc000 | target).to_be_bytes());
            }
            _ => {}
        }
    }
    input.truncate(65_535 + 2);
    input
}

/// What one fuzz run covered.
struct Covered {
    /// Seeds of the corpus replayed as they are.
    seeds: usize,
    /// Mutated inputs that differ from every seed.
    novel: usize,
}

/// Runs `target` on its corpus and on mutations for the budget.
fn fuzz(index: usize, name: &str, target: fn(&[u8])) -> Covered {
    let seeds = corpus(name);
    let mut rng = StdRng::seed_from_u64(seed(index as u64));
    let started = Instant::now();
    let mut tried = 0usize;
    let run = |input: &[u8]| {
        if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{name}-{}.bin", input.len()));
            let _ = std::fs::write(&file, input);
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            panic!(
                "fuzz target {name} failed on input {hex} (saved to {})",
                file.display()
            );
        }
    };
    for input in &seeds {
        run(input);
        tried += 1;
    }
    let mut novel = 0usize;
    while started.elapsed() < budget() {
        for _ in 0..64 {
            let input = mutate(&mut rng, &seeds);
            run(&input);
            tried += 1;
            novel += usize::from(!seeds.contains(&input));
        }
    }
    println!("fuzz {name}: {tried} inputs ({novel} new), no failure");
    Covered {
        seeds: seeds.len(),
        novel,
    }
}

macro_rules! fuzz_tests {
    ($($index:literal => $test:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            let (name, target) = targets::TARGETS[$index];
            let covered = fuzz($index, name, target);
            // The whole corpus replayed, and the mutator made inputs the corpus does not hold.
            let files = std::fs::read_dir(corpus_dir(name)).unwrap().count();
            assert_eq!(covered.seeds, files, "every seed of {name} replayed");
            assert!(covered.novel >= 32, "{name}: only {} new inputs", covered.novel);
        }
    )*};
}

fuzz_tests! {
    0 => fuzz_client_query,
    1 => fuzz_upstream_passthrough,
    2 => fuzz_upstream_cluster,
    3 => fuzz_gather_merge,
    4 => fuzz_fit_wire,
    5 => fuzz_cache,
    6 => fuzz_wire,
}

/// A fake upstream that answers every query with a mutated reply: the right ID and question
/// most of the time (so meshdns accepts it and must cope with the rest), sometimes not.
async fn mangling_upstream(seeds: Arc<Vec<Vec<u8>>>, seed: u64) -> std::net::SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut buf = vec![0u8; 65_535];
        while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..len]) else {
                continue;
            };
            let question = query.queries.first().map(|q| q.to_bytes().unwrap());
            let base = {
                let mut reply = Message::response(query.id, query.op_code);
                reply.queries = query.queries.clone();
                if let Some(q) = query.queries.first() {
                    let name = q.name().clone();
                    let a = RData::A(A::new(10, 0, 0, 1));
                    let srv = RData::SRV(SRV::new(0, 0, 27017, name.clone()));
                    reply.add_answer(Record::from_rdata(name.clone(), 30, a));
                    reply.add_answer(Record::from_rdata(name, 30, srv));
                }
                reply.to_vec().unwrap()
            };
            let mut pool = (*seeds).clone();
            pool.push(base);
            let mut reply = mutate(&mut rng, &pool);
            if rng.random_bool(0.8) && reply.len() >= 12 {
                // Keep the header's ID and QR and the question acceptable.
                reply[..2].copy_from_slice(&query.id.to_be_bytes());
                reply[2] |= 0x80;
                if let Some(question) = &question {
                    let end = (12 + question.len()).min(reply.len());
                    reply.splice(12..end, question.iter().copied());
                    reply[4..6].copy_from_slice(&1u16.to_be_bytes());
                }
            }
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    addr
}

/// Client bytes and upstream bytes, mutated together, through every route over real sockets:
/// every reply parses, carries the client's ID, and fits 512 bytes (no EDNS) or the EDNS size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_the_request_path_over_sockets() {
    let upstream_seeds = Arc::new(corpus("upstream_cluster"));
    let a = mangling_upstream(Arc::clone(&upstream_seeds), seed(100)).await;
    let b = mangling_upstream(Arc::clone(&upstream_seeds), seed(101)).await;
    let c = mangling_upstream(Arc::clone(&upstream_seeds), seed(102)).await;
    let clusters = format!("a=; b={b}; c={c}");
    let vars = [
        ("MESHDNS_UPSTREAMS", a.to_string()),
        ("MESHDNS_LOCAL_CLUSTER", "a".to_string()),
        ("MESHDNS_CLUSTERS", clusters),
        ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local".to_string()),
        ("MESHDNS_TIMEOUT", "300ms".to_string()),
        ("MESHDNS_ATTEMPT_TIMEOUT", "100ms".to_string()),
        ("MESHDNS_CACHE_SIZE", "50".to_string()),
    ];
    let borrowed: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let meshdns = Meshdns::start(&borrowed).await;
    let config =
        meshdns::Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.clone()))).unwrap();
    let bounds = targets::ReplyBounds::new(&config);
    let names = [
        ("www.example.com.", RecordType::A),
        ("mongo-0.mongo.db.cluster.b.", RecordType::A),
        ("_mongodb._tcp.mongo.db.cluster.c.", RecordType::SRV),
        (
            "_mongodb._tcp.mongo.db.svc.distributed.local.",
            RecordType::SRV,
        ),
        ("mongo.db.svc.distributed.local.", RecordType::A),
        ("b-mongo-1.mongo.db.svc.distributed.local.", RecordType::A),
        (
            "_mongodb._tcp.mongo.db.svc.clusterset.local.",
            RecordType::SRV,
        ),
    ];
    let mut client_seeds: Vec<Vec<u8>> = corpus("client_query");
    for (name, rtype) in names {
        let mut msg = Message::query();
        msg.metadata.recursion_desired = true;
        msg.add_query(Query::query(rr::name(name), rtype));
        client_seeds.push(msg.to_vec().unwrap());
        client_seeds.push(support::with_edns(msg, 1232).to_vec().unwrap());
    }
    let mut rng = StdRng::seed_from_u64(seed(7));
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    socket.connect(meshdns.addr).await.unwrap();
    // The client size of each query sent, and whether its reply may be the upstream's bytes
    // verbatim (pass-through), by ID (IDs are sequential, so the latest wins).
    let limits = Arc::new(Mutex::new(HashMap::<u16, (usize, bool)>::new()));
    let receiver = {
        let (socket, limits) = (Arc::clone(&socket), Arc::clone(&limits));
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65_535];
            let mut replies = 0usize;
            while let Ok(Ok(len)) =
                tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await
            {
                let reply = &buf[..len];
                let id = u16::from_be_bytes(*reply.first_chunk().expect("a reply has a header"));
                let sent = limits.lock().unwrap().get(&id).copied();
                let (limit, verbatim) = sent.expect("every reply carries the ID of a query sent");
                assert!(len <= limit, "{len} bytes to a client of {limit}");
                // Pass-through replies are the upstream's bytes (docs/design.md): the client's
                // resolver judges their records. Every reply meshdns builds must parse.
                if let Err(error) = Message::from_vec(reply)
                    && !verbatim
                {
                    let hex: String = reply.iter().map(|b| format!("{b:02x}")).collect();
                    panic!("a reply meshdns built does not parse ({error}): {hex}");
                }
                replies += 1;
            }
            replies
        })
    };
    let started = Instant::now();
    let mut sent = 0usize;
    while started.elapsed() < budget() {
        for _ in 0..32 {
            let mut input = if rng.random_bool(0.5) {
                // Mostly well-formed queries, so that the upstream side is exercised too.
                client_seeds[rng.random_range(0..client_seeds.len())].clone()
            } else {
                mutate(&mut rng, &client_seeds)
            };
            input.truncate(4096);
            let id = sent as u16;
            if input.len() >= 2 {
                input[..2].copy_from_slice(&id.to_be_bytes());
            }
            limits.lock().unwrap().insert(id, bounds.of(&input));
            socket.send(&input).await.unwrap();
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let replies = receiver.await.expect("every reply checked");
    println!("socket fuzz: {sent} queries, {replies} replies");
    assert!(replies > 0);
    // And it still answers a plain query at the end.
    let reply = support::udp_raw(meshdns.addr, &client_seeds[client_seeds.len() - 1]).await;
    assert!(reply.is_some());
}

/// Not a test but the tool that writes the seed corpus (the files are in git); run it by hand
/// after changing the seeds: `cargo test --test fuzz write_seed_corpus -- --ignored`.
#[test]
#[ignore = "a tool: writes fuzz/corpus/ (cargo test --test fuzz write_seed_corpus -- --ignored)"]
fn write_seed_corpus() {
    for (target, seeds) in seed_corpus() {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed).unwrap();
        }
    }
}

/// A seed of a target that takes the client's UDP size first: `size`, big-endian, then `bytes`.
fn sized(size: u16, bytes: &[u8]) -> Vec<u8> {
    [&size.to_be_bytes()[..], bytes].concat()
}

/// Replies to the pass-through target's fixed query (ID 0x1234, `www.example.org. A` with
/// EDNS), each after the client size it is fitted to: an answer, NXDOMAIN with the SOA, an
/// answer too big for a 512-byte client, an error without a question section (a server that
/// could not parse the query), and an answer carrying COOKIE and NSID options.
fn passthrough_seeds() -> Vec<Vec<u8>> {
    use hickory_proto::op::{Edns, ResponseCode};
    use hickory_proto::rr::rdata::opt::{EdnsOption, NSIDPayload};
    let query = Message::from_vec(&targets::PASSTHROUGH_QUERY).expect("the target's query");
    let www = "www.example.org.";
    let reply = |rcode, answers: Vec<Record>, options: Vec<EdnsOption>| {
        let mut msg = Message::response(query.id, query.op_code);
        msg.metadata.response_code = rcode;
        msg.metadata.recursion_available = true;
        msg.queries = query.queries.clone();
        msg.answers = answers;
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        for option in options {
            edns.options_mut().insert(option);
        }
        msg.set_edns(edns);
        msg
    };
    let answer = reply(
        ResponseCode::NoError,
        vec![rr::a(www, [192, 0, 2, 1]), rr::a(www, [192, 0, 2, 2])],
        vec![],
    );
    let mut nxdomain = reply(ResponseCode::NXDomain, vec![], vec![]);
    nxdomain.add_authority(rr::soa("example.org."));
    let big = reply(
        ResponseCode::NoError,
        (0..100).map(|i| rr::a(www, [192, 0, 2, i])).collect(),
        vec![],
    );
    let mut questionless = Message::response(query.id, query.op_code);
    questionless.metadata.response_code = ResponseCode::FormErr;
    let cookie = [[0x11; 8], [0x22; 8]].concat();
    let nsid = NSIDPayload::new(b"kube-dns-7f9c".to_vec()).expect("a short NSID");
    let options = reply(
        ResponseCode::NoError,
        vec![rr::a(www, [192, 0, 2, 1])],
        vec![EdnsOption::Unknown(10, cookie), EdnsOption::NSID(nsid)],
    );
    [
        (512u16, answer),
        (1232, nxdomain),
        (512, big),
        (512, questionless),
        (1232, options),
    ]
    .iter()
    .map(|(size, msg)| sized(*size, &msg.to_vec().unwrap()))
    .collect()
}

/// The pass-through seeds on disk are the ones [`passthrough_seeds`] makes (that each is a
/// reply the exchange accepts for the target's query is a unit test of `src/testing/fuzz.rs`).
#[test]
fn the_pass_through_seeds_on_disk_are_the_ones_the_harness_makes() {
    assert!(
        corpus("upstream_passthrough") == passthrough_seeds(),
        "fuzz/corpus/upstream_passthrough/ is not what passthrough_seeds() makes: \
         cargo test --test fuzz write_seed_corpus -- --ignored (and remove stale files)"
    );
}

fn seed_corpus() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    use hickory_proto::op::{Edns, ResponseCode};
    let query = |name: &str, rtype: RecordType, edns: Option<u16>| {
        let mut msg = Message::query();
        msg.metadata.id = 0x1234;
        msg.metadata.recursion_desired = true;
        msg.add_query(Query::query(rr::name(name), rtype));
        if let Some(size) = edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            e.set_dnssec_ok(size > 1232);
            msg.set_edns(e);
        }
        msg
    };
    let reply_to = |q: &Message, answers: Vec<hickory_proto::rr::Record>, rcode| {
        let mut msg = Message::response(q.id, q.op_code);
        msg.metadata.response_code = rcode;
        msg.queries = q.queries.clone();
        msg.answers = answers;
        if q.edns.is_some() {
            msg.set_edns(Edns::new());
        }
        msg
    };
    let clients = [
        query("www.example.com.", RecordType::A, None),
        query("Mongo-0.mongo.db.cluster.b.", RecordType::A, Some(1232)),
        query(
            "_mongodb._tcp.mongo.db.svc.distributed.local.",
            RecordType::SRV,
            Some(4096),
        ),
        query(
            "b-mongo-1.mongo.db.svc.distributed.local.",
            RecordType::AAAA,
            None,
        ),
        query("dns-version.clusterset.local.", RecordType::TXT, Some(512)),
    ];
    let up = "mongo-0.mongo.db.svc.cluster.local.";
    let srv_owner = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let upstream_q = query(up, RecordType::A, Some(1232));
    let srv_q = query(srv_owner, RecordType::SRV, Some(1232));
    let mut nx = reply_to(&upstream_q, vec![], ResponseCode::NXDomain);
    nx.add_authority(support::rr::soa("cluster.local."));
    let mut srv = reply_to(
        &srv_q,
        vec![
            rr::srv(srv_owner, 27017, up),
            rr::srv(srv_owner, 27017, "mongo-1.mongo.db.svc.cluster.local."),
        ],
        ResponseCode::NoError,
    );
    srv.add_additional(rr::a(up, [10, 1, 1, 0]));
    let mut cname = reply_to(
        &upstream_q,
        vec![
            rr::cname(up, "alias.db.svc.cluster.local."),
            rr::a("alias.db.svc.cluster.local.", [10, 1, 1, 9]),
        ],
        ResponseCode::NoError,
    );
    cname.add_authority(rr::ns("cluster.local.", "ns.dns.cluster.local."));
    cname.add_additional(rr::a("ns.dns.cluster.local.", [10, 1, 0, 10]));
    let big = reply_to(
        &upstream_q,
        (0..60).map(|i| rr::a(up, [10, 1, 2, i])).collect(),
        ResponseCode::NoError,
    );
    let txt = reply_to(
        &query(up, RecordType::TXT, None),
        vec![rr::txt(up, "replicaSet=rs0"), rr::txt(up, "replicaSet=rs0")],
        ResponseCode::NoError,
    );
    let upstream: Vec<Vec<u8>> = [
        srv.clone(),
        nx.clone(),
        cname,
        big,
        txt,
        reply_to(&upstream_q, vec![], ResponseCode::ServFail),
    ]
    .iter()
    .map(|m| m.to_vec().unwrap())
    .collect();
    let framed = |parts: &[&[u8]]| {
        let mut out = Vec::new();
        for part in parts {
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    };
    let client_bytes: Vec<Vec<u8>> = clients.iter().map(|m| m.to_vec().unwrap()).collect();
    let with_limits: Vec<Vec<u8>> = upstream
        .iter()
        .zip([512u16, 1232, 4096, 512, 0, 65_535])
        .map(|(bytes, size)| sized(size, bytes))
        .collect();
    let a_reply = reply_to(
        &upstream_q,
        vec![rr::a(up, [10, 2, 0, 1])],
        ResponseCode::NoError,
    )
    .to_vec()
    .unwrap();
    let merge = vec![
        sized(
            512,
            &framed(&[&upstream[0], &upstream[0], &upstream[1], &[3]]),
        ),
        sized(1232, &framed(&[&a_reply, &upstream[3], b"garbage", &[0]])),
        sized(
            512,
            &framed(&[&upstream[1], &upstream[1], &upstream[1], &[1]]),
        ),
        sized(4096, &framed(&[&upstream[4], &upstream[4], &[], &[2]])),
        sized(
            512,
            &framed(&[&upstream[5], &upstream[0], &upstream[2], &[3]]),
        ),
    ];
    let cache: Vec<Vec<u8>> = [
        (&clients[0], vec![rr::a("www.example.com.", [192, 0, 2, 1])]),
        (
            &clients[1],
            vec![rr::a("Mongo-0.mongo.db.cluster.b.", [10, 2, 0, 1])],
        ),
    ]
    .iter()
    .map(|(q, answers)| {
        let q_bytes = q.to_vec().unwrap();
        let r = reply_to(q, answers.clone(), ResponseCode::NoError)
            .to_vec()
            .unwrap();
        let mut out = (q_bytes.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&q_bytes);
        out.extend_from_slice(&r);
        out
    })
    .chain([{
        let q_bytes = upstream_q.to_vec().unwrap();
        let mut out = (q_bytes.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&q_bytes);
        out.extend_from_slice(&upstream[1]);
        out
    }])
    .collect();
    let mut wire_seeds = client_bytes.clone();
    wire_seeds.extend(upstream.iter().cloned());
    vec![
        ("client_query", client_bytes),
        ("upstream_passthrough", passthrough_seeds()),
        ("upstream_cluster", with_limits.clone()),
        ("gather_merge", merge),
        ("fit_wire", with_limits),
        ("cache", cache),
        ("wire", wire_seeds),
    ]
}
