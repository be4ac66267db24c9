//! The upstream fault matrix (docs/design.md, "Behaviour under failure"): for each route — pass-through, cluster zone,
//! distributed zone with one faulty cluster among healthy ones, distributed zone with every
//! cluster faulty — and each way an upstream can fail, the reply the client sees and how long
//! it takes. Every cell must end in a reply that parses, carries the client's ID, and arrives
//! within its bound (at most `MESHDNS_TIMEOUT`).
//!
//! Each route is one table-driven test on tokio's paused clock; its cells run concurrently,
//! each with its own fakes and its own meshdns. The times are virtual: exact, whatever the
//! machine's load, so the bounds need no slack. Run with `--nocapture` to print the observed
//! matrix.

use crate::support;

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, Behaviour, FakeDns, Meshdns, Reply, query, rr, udp, with_edns};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// `MESHDNS_TIMEOUT` and `MESHDNS_ATTEMPT_TIMEOUT` of every cell, short to keep the suite fast.
const TIMEOUT: Duration = Duration::from_millis(800);
const ATTEMPT: Duration = Duration::from_millis(200);

/// The ways an upstream fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Never answers.
    Timeout,
    ServFail,
    Refused,
    FormErr,
    /// TC over UDP, and no TCP listener to ask again.
    TcWithoutTcp,
    /// Only a reply with another ID.
    WrongId,
    /// A reply with another ID, then the right one.
    WrongIdThenRight,
    /// A reply whose first owner name is a compression-pointer loop, then 50 ms later the
    /// right one: a malformed reply is no reply at all.
    PointerLoopThenRight,
    /// Only a reply to another question.
    WrongQuestion,
    /// Bytes that are no DNS message.
    Garbage,
    /// TC over UDP; over TCP half a frame, then close.
    TcpClosesMidFrame,
    /// TC over UDP; over TCP one byte every 20 ms (the whole frame would take seconds).
    TcpTrickles,
}

const FAULTS: [Fault; 12] = [
    Fault::Timeout,
    Fault::ServFail,
    Fault::Refused,
    Fault::FormErr,
    Fault::TcWithoutTcp,
    Fault::WrongId,
    Fault::WrongIdThenRight,
    Fault::PointerLoopThenRight,
    Fault::WrongQuestion,
    Fault::Garbage,
    Fault::TcpClosesMidFrame,
    Fault::TcpTrickles,
];

/// What the client must see.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expect {
    rcode: ResponseCode,
    /// TC set.
    truncated: bool,
    /// The answer lines, sorted.
    answers: Vec<String>,
    /// Every TTL at most this (partial gathered answers).
    max_ttl: u32,
    /// The reply comes within this long.
    within: Duration,
}

/// The pass-through name and its answer.
const WWW: &str = "www.example.com.";
/// The cluster-zone name as the client asks it, and as cluster b's DNS knows it.
const MEMBER: &str = "member-4.foo.ns.cluster.b.";
const MEMBER_UPSTREAM: &str = "member-4.foo.ns.svc.cluster.local.";
/// A headless service under the distributed zone: the union of every cluster's addresses.
const SERVICE: &str = "mongo.db.svc.distributed.local.";
const SERVICE_UPSTREAM: &str = "mongo.db.svc.cluster.local.";

fn behaviour(fault: Fault, answer: Answer) -> Behaviour {
    match fault {
        Fault::Timeout => Behaviour::Drop,
        Fault::ServFail => Behaviour::Answer(Answer::rcode(ResponseCode::ServFail)),
        Fault::Refused => Behaviour::Answer(Answer::rcode(ResponseCode::Refused)),
        Fault::FormErr => Behaviour::Answer(Answer::rcode(ResponseCode::FormErr)),
        Fault::TcWithoutTcp => Behaviour::TruncateUdp(answer),
        Fault::WrongId => Behaviour::WrongIdOnly(answer),
        Fault::WrongIdThenRight => Behaviour::WrongIdFirst(answer),
        Fault::PointerLoopThenRight => Behaviour::PointerLoopFirst(answer),
        Fault::WrongQuestion => Behaviour::WrongQuestionOnly(answer),
        Fault::Garbage => Behaviour::Garbage,
        Fault::TcpClosesMidFrame => Behaviour::CloseTcpMidFrame(answer),
        Fault::TcpTrickles => Behaviour::TrickleTcp(Duration::from_millis(20), answer),
    }
}

/// A fake that answers every query with `fault` (its real answer being `answer`).
async fn faulty(fault: Fault, answer: Answer) -> FakeDns {
    let builder = FakeDns::builder().otherwise(behaviour(fault, answer));
    let builder = if fault == Fault::TcWithoutTcp {
        builder.udp_only()
    } else {
        builder
    };
    builder.start().await
}

/// Cluster number `n`'s DNS, healthy: the service has address 10.n.0.1.
async fn healthy_cluster(n: u8) -> FakeDns {
    FakeDns::builder()
        .answer(SERVICE_UPSTREAM, RecordType::A, cluster_answer(n))
        .start()
        .await
}

fn cluster_answer(n: u8) -> Answer {
    Answer::records([rr::a(SERVICE_UPSTREAM, [10, n, 0, 1])])
}

fn timeouts() -> [(&'static str, String); 2] {
    [
        ("MESHDNS_TIMEOUT", format!("{}ms", TIMEOUT.as_millis())),
        (
            "MESHDNS_ATTEMPT_TIMEOUT",
            format!("{}ms", ATTEMPT.as_millis()),
        ),
    ]
}

async fn start(vars: &[(&str, String)]) -> Meshdns {
    let mut all: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let timeouts = timeouts();
    all.extend(timeouts.iter().map(|(k, v)| (*k, v.as_str())));
    Meshdns::start(&all).await
}

/// Asks `name` over UDP (EDNS 1232) and times the reply.
async fn ask(meshdns: &Meshdns, name: &str, rtype: RecordType) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = udp(meshdns.addr, &with_edns(query(name, rtype), 1232)).await;
    (reply, started.elapsed())
}

/// One cell's outcome: what was seen, and what is wrong with it (empty when it matches).
struct Cell {
    fault: Fault,
    seen: String,
    problems: Vec<String>,
}

/// meshdns over clusters a (local), b and c, each one of `clusters`: its reply to the gathered
/// question [`SERVICE`] A, and how long it took.
async fn ask_gathered([a, b, c]: [&FakeDns; 3]) -> (Reply, Duration) {
    let meshdns = start(&[
        ("MESHDNS_UPSTREAMS", a.addr.to_string()),
        ("MESHDNS_LOCAL_CLUSTER", "a".to_string()),
        (
            "MESHDNS_CLUSTERS",
            format!("a=; b={}; c={}", b.addr, c.addr),
        ),
    ])
    .await;
    ask(&meshdns, SERVICE, RecordType::A).await
}

/// The line of cluster `n`'s address for [`SERVICE`] in a gathered answer.
fn gathered_line(n: u8) -> String {
    format!("{SERVICE} A 10.{n}.0.1")
}

fn check(fault: Fault, reply: &Reply, elapsed: Duration, expect: &Expect) -> Cell {
    let mut answers = reply.answer_lines();
    answers.sort();
    let max_ttl = reply
        .msg
        .answers
        .iter()
        .map(|r| r.ttl)
        .max()
        .unwrap_or_default();
    let seen = format!(
        "{:?}{} answers={:?} max_ttl={} in {} ms",
        reply.msg.response_code,
        if reply.msg.truncation { " TC" } else { "" },
        answers,
        max_ttl,
        elapsed.as_millis()
    );
    let mut problems = Vec::new();
    if reply.msg.response_code != expect.rcode {
        problems.push(format!("rcode: expected {:?}", expect.rcode));
    }
    if reply.msg.truncation != expect.truncated {
        problems.push(format!("TC: expected {}", expect.truncated));
    }
    if answers != expect.answers {
        problems.push(format!("answers: expected {:?}", expect.answers));
    }
    if max_ttl > expect.max_ttl {
        problems.push(format!("TTL: expected at most {}", expect.max_ttl));
    }
    if elapsed > expect.within {
        problems.push(format!("time: expected within {:?}", expect.within));
    }
    Cell {
        fault,
        seen,
        problems,
    }
}

/// Runs every cell of a route concurrently and fails with the whole table when any is wrong.
async fn run_route<F, Fut>(route: &str, cell: F)
where
    F: Fn(Fault) -> Fut,
    Fut: std::future::Future<Output = Cell> + Send + 'static,
{
    let mut cells = JoinSet::new();
    for fault in FAULTS {
        cells.spawn(cell(fault));
    }
    let mut done = cells.join_all().await;
    done.sort_by_key(|c| FAULTS.iter().position(|f| *f == c.fault));
    let mut failed = false;
    for cell in &done {
        println!("{route:<24} {:<18?} {}", cell.fault, cell.seen);
        for problem in &cell.problems {
            failed = true;
            println!("    WRONG: {problem}");
        }
    }
    assert!(!failed, "some cells of the {route} route are wrong (above)");
}

fn servfail(within: Duration) -> Expect {
    Expect {
        rcode: ResponseCode::ServFail,
        truncated: false,
        answers: vec![],
        max_ttl: 0,
        within,
    }
}

fn rcode(rcode: ResponseCode) -> Expect {
    Expect {
        rcode,
        ..servfail(ATTEMPT)
    }
}

/// TC set, no records: the truncated UDP reply kept when TCP fails.
fn truncated(within: Duration) -> Expect {
    Expect {
        truncated: true,
        within,
        ..rcode(ResponseCode::NoError)
    }
}

fn answered(lines: &[String], max_ttl: u32, within: Duration) -> Expect {
    let mut answers = lines.to_vec();
    answers.sort();
    Expect {
        rcode: ResponseCode::NoError,
        truncated: false,
        answers,
        max_ttl,
        within,
    }
}

/// Pass-through and cluster zones share the outcomes of one upstream: the upstream's rcode
/// passes on (in cluster zones but for REFUSED and FORMERR, which become SERVFAIL); silence and unacceptable replies end in SERVFAIL at the deadline; a truncated
/// reply whose TCP retry fails is passed on with TC.
fn single_upstream_expect(fault: Fault, answer_line: &str) -> Expect {
    match fault {
        Fault::Timeout | Fault::WrongId | Fault::WrongQuestion | Fault::Garbage => {
            servfail(TIMEOUT)
        }
        Fault::ServFail => rcode(ResponseCode::ServFail),
        Fault::Refused => rcode(ResponseCode::Refused),
        Fault::FormErr => rcode(ResponseCode::FormErr),
        Fault::TcWithoutTcp | Fault::TcpClosesMidFrame => truncated(ATTEMPT),
        // The TCP retry after truncation has one attempt timeout; a peer that trickles past
        // it leaves the truncated UDP reply, passed on with TC.
        Fault::TcpTrickles => truncated(ATTEMPT * 2),
        Fault::WrongIdThenRight | Fault::PointerLoopThenRight => {
            answered(&[answer_line.to_string()], 30, ATTEMPT)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_upstream_fault_in_pass_through_ends_in_its_reply_within_its_bound() {
    run_route("pass-through", |fault| async move {
        let answer = Answer::records([rr::a(WWW, [192, 0, 2, 1])]);
        let upstream = faulty(fault, answer).await;
        let meshdns = start(&[("MESHDNS_UPSTREAMS", upstream.addr.to_string())]).await;
        let (reply, elapsed) = ask(&meshdns, WWW, RecordType::A).await;
        let expect = single_upstream_expect(fault, "www.example.com. A 192.0.2.1");
        check(fault, &reply, elapsed, &expect)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn each_upstream_fault_in_a_cluster_zone_ends_in_its_reply_within_its_bound() {
    run_route("cluster zone", |fault| async move {
        let local = healthy_cluster(1).await;
        let answer = Answer::records([rr::a(MEMBER_UPSTREAM, [10, 2, 0, 4])]);
        let peer = faulty(fault, answer).await;
        let meshdns = start(&[
            ("MESHDNS_UPSTREAMS", local.addr.to_string()),
            ("MESHDNS_LOCAL_CLUSTER", "a".to_string()),
            ("MESHDNS_CLUSTERS", format!("a=; b={}", peer.addr)),
        ])
        .await;
        let (reply, elapsed) = ask(&meshdns, MEMBER, RecordType::A).await;
        let expect = match fault {
            // A peer's REFUSED, FORMERR or NOTIMP is about meshdns's query: SERVFAIL.
            Fault::Refused | Fault::FormErr => rcode(ResponseCode::ServFail),
            _ => single_upstream_expect(fault, "member-4.foo.ns.cluster.b. A 10.2.0.4"),
        };
        check(fault, &reply, elapsed, &expect)
    })
    .await;
}

/// Clusters a and b healthy, c faulty: the answer is a's and b's union, partial (TTLs capped
/// at 5 s) unless c's real answer got through; c costs at most one attempt timeout.
#[tokio::test(start_paused = true)]
async fn one_faulty_cluster_costs_at_most_an_attempt_timeout_and_never_the_others_answers() {
    run_route("distributed, c faulty", |fault| async move {
        let (a, b) = (healthy_cluster(1).await, healthy_cluster(2).await);
        let c = faulty(fault, cluster_answer(3)).await;
        let (reply, elapsed) = ask_gathered([&a, &b, &c]).await;
        let expect = match fault {
            Fault::WrongIdThenRight | Fault::PointerLoopThenRight => answered(
                &[gathered_line(1), gathered_line(2), gathered_line(3)],
                30,
                ATTEMPT,
            ),
            // The straggler (a cluster of one endpoint, still up) keeps its retry: it is cut
            // two attempt timeouts after the healthy legs answered.
            _ => answered(
                &[gathered_line(1), gathered_line(2)],
                merge_partial_ttl(),
                ATTEMPT * 2,
            ),
        };
        check(fault, &reply, elapsed, &expect)
    })
    .await;
}

/// Every cluster faulty: SERVFAIL, unless the real answers got through.
#[tokio::test(start_paused = true)]
async fn every_cluster_faulty_is_servfail_unless_a_real_answer_got_through() {
    run_route("distributed, all faulty", |fault| async move {
        let a = faulty(fault, cluster_answer(1)).await;
        let b = faulty(fault, cluster_answer(2)).await;
        let c = faulty(fault, cluster_answer(3)).await;
        let (reply, elapsed) = ask_gathered([&a, &b, &c]).await;
        let expect = match fault {
            Fault::WrongIdThenRight | Fault::PointerLoopThenRight => answered(
                &[gathered_line(1), gathered_line(2), gathered_line(3)],
                30,
                ATTEMPT,
            ),
            // Silence (or a trickle): no leg ever answers, so only the deadline ends the wait.
            Fault::Timeout | Fault::WrongId | Fault::WrongQuestion | Fault::Garbage => {
                servfail(TIMEOUT)
            }
            Fault::TcpTrickles => servfail(TIMEOUT),
            _ => servfail(ATTEMPT),
        };
        check(fault, &reply, elapsed, &expect)
    })
    .await;
}

fn merge_partial_ttl() -> u32 {
    meshdns::testing::gather::PARTIAL_TTL
}
