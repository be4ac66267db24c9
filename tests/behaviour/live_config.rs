//! Live configuration (docs/design.md, "Live configuration" and "Configuration"): a
//! `MESHDNS_CONFIG_DIR` written exactly as the kubelet writes a mounted ConfigMap, changed
//! while clients ask (a pipelined batch across a reload included); and endpoints given by host
//! name, resolved through kube-dns, re-resolved as their TTL says (clamped to 5 s … 5 min) and
//! followed when they move, their last good addresses kept when a resolution fails.
//!
//! Generations (docs/design.md, "Live configuration"): what a query, a leg or a refresh of the
//! previous configuration brings back after a reload is neither cached nor served, a query
//! never waits on an exchange of the previous configuration, and gathered legs are cached by
//! their cluster's identity. Those tests run on the paused clock: a reload is made to happen
//! at a known virtual moment ([`reload`]).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType};
use support::configmap::ConfigMapDir;
use support::{
    Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, address_of, eventually, query, rr, udp,
};

const WWW: &str = "www.example.com.";
const MEMBER: &str = "member-0.mongo.db.svc.cluster.local.";
const MEMBER_1: &str = "member-1.mongo.db.svc.cluster.local.";

/// kube-dns answering [`WWW`], and `extra` records of its own.
async fn kube_dns(extra: &[(&str, [u8; 4])]) -> FakeDns {
    kube_dns_on(extra, "127.0.0.1:0").await
}

/// [`kube_dns`] on `on` (to replace one that stopped).
async fn kube_dns_on(extra: &[(&str, [u8; 4])], on: &str) -> FakeDns {
    let mut builder = FakeDns::builder().answer(
        WWW,
        RecordType::A,
        Answer::records([rr::a(WWW, [192, 0, 2, 1])]),
    );
    for (name, ip) in extra {
        builder = builder.answer(name, RecordType::A, Answer::records([rr::a(name, *ip)]));
    }
    builder.start_on(on).await
}

/// A peer cluster's DNS that knows [`MEMBER`] as `ip`.
async fn peer(ip: [u8; 4], on: &str) -> FakeDns {
    FakeDns::builder()
        .answer(MEMBER, RecordType::A, Answer::records([rr::a(MEMBER, ip)]))
        .start_on(on)
        .await
}

/// The address `member-0.mongo.db.cluster.<cluster>` resolves to through meshdns, if any.
async fn member_of(meshdns: &Meshdns, cluster: &str) -> Option<String> {
    address_of(meshdns, &format!("member-0.mongo.db.cluster.{cluster}.")).await
}

/// meshdns of cluster `a` in front of `kube`, reading `dir` as its `MESHDNS_CONFIG_DIR`, with
/// `vars` on top.
async fn with_dir(kube: &FakeDns, dir: &ConfigMapDir, vars: &[(&str, &str)]) -> Meshdns {
    let path = dir.path.display().to_string();
    let mut all = vec![
        ("MESHDNS_CONFIG_DIR", path.as_str()),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
    ];
    all.extend_from_slice(vars);
    Meshdns::before(kube, &all).await
}

/// `meshdns_endpoint_resolutions_total` of cluster b with `result`.
async fn resolutions(meshdns: &Meshdns, result: &str) -> f64 {
    meshdns
        .metric(
            "meshdns_endpoint_resolutions_total",
            &[("peer", "b"), ("result", result)],
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_added_in_the_directory_answers_without_a_failed_query_or_a_restart() {
    let kube = kube_dns(&[]).await;
    let (b, c) = (
        peer([10, 2, 0, 1], "127.0.0.1:0").await,
        peer([10, 3, 0, 1], "127.0.0.1:0").await,
    );
    let mut dir = ConfigMapDir::new("add", &[("MESHDNS_CLUSTERS", &format!("a=; b={}", b.addr))]);
    let meshdns = Arc::new(with_dir(&kube, &dir, &[]).await);
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    // A client asking 20 times a second, over both routes, all through the change.
    let (stop, asked, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let client = {
        let (meshdns, stop, asked, failed) = (
            Arc::clone(&meshdns),
            Arc::clone(&stop),
            Arc::clone(&asked),
            Arc::clone(&failed),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let www = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
                let member = member_of(&meshdns, "b").await;
                asked.fetch_add(2, Ordering::Relaxed);
                if www.msg.response_code != ResponseCode::NoError {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                if member.as_deref() != Some("10.2.0.1") {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    dir.update(&[(
        "MESHDNS_CLUSTERS",
        &format!("a=; b={}; c={}", b.addr, c.addr),
    )]);
    assert!(
        eventually(100, || async {
            member_of(&meshdns, "c").await.as_deref() == Some("10.3.0.1")
        })
        .await,
        "the new cluster answers"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    assert!(asked.load(Ordering::Relaxed) > 10);
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no query failed");
    assert_eq!(meshdns.config_reloads("applied").await, 1.0);
    assert_eq!(meshdns.config_reloads("rejected").await, 0.0);
}

/// docs/design.md, "A configuration that cannot be meant is refused": each such change is
/// rejected whole and counted, and the running configuration keeps answering.
#[tokio::test]
async fn a_change_that_cannot_be_meant_is_rejected_and_counted() {
    let kube = kube_dns(&[]).await;
    let b = peer([10, 2, 0, 1], "127.0.0.1:0").await;
    let good = format!("a=; b={}", b.addr);
    let mut dir = ConfigMapDir::new("cannot-be-meant", &[("MESHDNS_CLUSTERS", &good)]);
    let pod = [
        ("MESHDNS_POD_IP", "10.1.1.10"),
        ("MESHDNS_POD_NAMESPACE", "db"),
        ("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"),
    ];
    let meshdns = with_dir(&kube, &dir, &pod).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    let changes: [&[(&str, &str)]; 7] = [
        // Prefixes that nest.
        &[("MESHDNS_CLUSTERS", &format!("{good}; b-b=10.9.0.1"))],
        // A zone above the cluster domain.
        &[
            ("MESHDNS_CLUSTERS", &good),
            ("MESHDNS_DISTRIBUTED_ZONES", "local"),
        ],
        // A misspelt local cluster.
        &[
            ("MESHDNS_CLUSTERS", &good),
            ("MESHDNS_LOCAL_CLUSTER", "cluster-a"),
        ],
        // A peer claiming the pod's namespace, and its address.
        &[("MESHDNS_CLUSTERS", &format!("{good} namespaces=db"))],
        &[("MESHDNS_CLUSTERS", &format!("{good} cidr=10.1.0.0/16"))],
        // meshdns's own address, IPv4-mapped.
        &[("MESHDNS_CLUSTERS", "a=; b=[::ffff:127.0.0.1]:53")],
        // Two mistakes at once: one rejected reload.
        &[
            ("MESHDNS_CLUSTERS", &good),
            ("MESHDNS_TIMEOUT", "2"),
            ("MESHDNS_CACHE_SIZE", "many"),
        ],
    ];
    for (rejected, change) in (1..).zip(changes) {
        dir.update(change);
        assert!(
            eventually(100, || async {
                meshdns.config_reloads("rejected").await == f64::from(rejected)
            })
            .await,
            "{change:?} rejected"
        );
        assert_eq!(
            member_of(&meshdns, "b").await.as_deref(),
            Some("10.2.0.1"),
            "the running configuration stays after {change:?}"
        );
    }
    assert_eq!(meshdns.config_reloads("applied").await, 0.0);
}

/// Writes peers `b` and `c` into `dir` (a valid change) and waits until meshdns answers c's
/// member through `c` (at 10.3.0.1): the change is applied.
async fn apply_peers_b_and_c(meshdns: &Meshdns, dir: &mut ConfigMapDir, b: &FakeDns, c: &FakeDns) {
    dir.update(&[(
        "MESHDNS_CLUSTERS",
        &format!("a=; b={}; c={}", b.addr, c.addr),
    )]);
    assert!(
        eventually(100, || async {
            member_of(meshdns, "c").await.as_deref() == Some("10.3.0.1")
        })
        .await
    );
}

#[tokio::test]
async fn an_invalid_change_is_rejected_whole_and_the_running_configuration_stays() {
    let kube = kube_dns(&[]).await;
    let (b, c) = (
        peer([10, 2, 0, 1], "127.0.0.1:0").await,
        peer([10, 3, 0, 1], "127.0.0.1:0").await,
    );
    let mut dir = ConfigMapDir::new(
        "reject",
        &[("MESHDNS_CLUSTERS", &format!("a=; b={}", b.addr))],
    );
    let meshdns = with_dir(&kube, &dir, &[]).await;
    // A valid cluster list, but a timeout that cannot be meant: nothing of it is applied.
    dir.update(&[
        (
            "MESHDNS_CLUSTERS",
            &format!("a=; b={}; c={}", b.addr, c.addr),
        ),
        ("MESHDNS_TIMEOUT", "forever"),
    ]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("rejected").await == 1.0
        })
        .await
    );
    // Rejected once, not again and again: reading the directory is no change.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(meshdns.config_reloads("rejected").await, 1.0);
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    assert_eq!(
        member_of(&meshdns, "c").await,
        None,
        "cluster c was not added"
    );
    assert!(c.seen().is_empty());
    // Fixed, it is applied.
    apply_peers_b_and_c(&meshdns, &mut dir, &b, &c).await;
    assert_eq!(meshdns.config_reloads("applied").await, 1.0);
}

/// docs/design.md, "Observability": the alert on a rejected configuration stays while its cause
/// stays. `meshdns_config_last_reload_successful` is 0 while the directory holds what was
/// rejected, and 1 again once it is valid: the rejected file removed (nothing to apply), or a
/// good change applied.
#[tokio::test]
async fn last_reload_successful_stays_zero_while_the_rejected_file_stays_and_is_one_once_it_goes() {
    let kube = kube_dns(&[]).await;
    let (b, c) = (
        peer([10, 2, 0, 1], "127.0.0.1:0").await,
        peer([10, 3, 0, 1], "127.0.0.1:0").await,
    );
    let good = format!("a=; b={}", b.addr);
    let bad = [
        ("MESHDNS_CLUSTERS", good.as_str()),
        ("MESHDNS_TIMEOUT", "forever"),
    ];
    let mut dir = ConfigMapDir::new("gauge", &[("MESHDNS_CLUSTERS", &good)]);
    let meshdns = with_dir(&kube, &dir, &[]).await;
    let successful = || meshdns.metric("meshdns_config_last_reload_successful", &[]);
    assert_eq!(successful().await, 1.0);

    dir.update(&bad);
    assert!(eventually(100, || async { successful().await == 0.0 }).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(successful().await, 0.0, "still 0 while the bad file stays");

    // The bad file removed: the directory is the configuration in force again.
    dir.update(&[("MESHDNS_CLUSTERS", &good)]);
    assert!(eventually(100, || async { successful().await == 1.0 }).await);
    assert_eq!(meshdns.config_reloads("applied").await, 0.0);

    // Rejected again, then a good change applied.
    dir.update(&bad);
    assert!(eventually(100, || async { successful().await == 0.0 }).await);
    apply_peers_b_and_c(&meshdns, &mut dir, &b, &c).await;
    assert_eq!(successful().await, 1.0);
    assert_eq!(meshdns.config_reloads("rejected").await, 2.0);
}

#[tokio::test]
async fn a_setting_that_needs_a_restart_is_not_applied_and_the_rest_is() {
    let kube = kube_dns(&[]).await;
    let b = peer([10, 2, 0, 1], "127.0.0.1:0").await;
    let mut dir = ConfigMapDir::new("restart", &[("MESHDNS_MAX_INFLIGHT", "64")]);
    let meshdns = with_dir(&kube, &dir, &[]).await;
    dir.update(&[
        ("MESHDNS_MAX_INFLIGHT", "128"),
        ("MESHDNS_LISTEN", "127.0.0.1:1"),
        ("MESHDNS_CLUSTERS", &format!("a=; b={}", b.addr)),
    ]);
    assert!(
        eventually(100, || async {
            member_of(&meshdns, "b").await.as_deref() == Some("10.2.0.1")
        })
        .await
    );
    // Still serving where it was bound.
    let www = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(www.msg.response_code, ResponseCode::NoError);
    assert_eq!(meshdns.config_reloads("applied").await, 1.0);
}

/// An access list narrowed by a reload reaches a TCP connection opened before it: the list is
/// asked per query, not once per connection.
#[tokio::test]
async fn a_narrowed_allow_from_refuses_the_next_query_of_an_open_tcp_connection() {
    let kube = kube_dns(&[]).await;
    let mut dir = ConfigMapDir::new("allow", &[("MESHDNS_ALLOW_FROM", "127.0.0.0/8")]);
    let meshdns = with_dir(&kube, &dir, &[]).await;
    let mut connection = tokio::net::TcpStream::connect(meshdns.addr).await.unwrap();
    let mut ask = async |id: u16| {
        let mut msg = query(WWW, RecordType::A);
        msg.metadata.id = id;
        let framed = support::frame_of(&msg.to_vec().unwrap());
        connection.write_all(&framed).await.unwrap();
        let reply = support::read_frame(&mut connection).await.expect("a reply");
        support::rcode_of(&reply)
    };
    assert_eq!(ask(1).await, ResponseCode::NoError);
    dir.update(&[("MESHDNS_ALLOW_FROM", "10.0.0.0/8")]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    assert_eq!(ask(2).await, ResponseCode::Refused);
    assert_eq!(meshdns.dropped("not_allowed").await, 1.0);
}

/// The cache is never walked at a reload: a target's answers are cached under its identity,
/// which the reload hands on to an unchanged target (wherever it now is in the list) and not
/// to a changed one.
#[tokio::test]
async fn a_reload_that_moves_cluster_b_keeps_cluster_cs_and_pass_through_answers_and_drops_bs() {
    let kube = kube_dns(&[]).await;
    let (b, moved, c) = (
        peer([10, 2, 0, 1], "127.0.0.1:0").await,
        peer([10, 2, 0, 2], "127.0.0.1:0").await,
        peer([10, 3, 0, 1], "127.0.0.1:0").await,
    );
    let mut dir = ConfigMapDir::new(
        "cache",
        &[(
            "MESHDNS_CLUSTERS",
            &format!("a=; b={}; c={}", b.addr, c.addr),
        )],
    );
    let meshdns = with_dir(&kube, &dir, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    assert_eq!(member_of(&meshdns, "c").await.as_deref(), Some("10.3.0.1"));
    let asked = || {
        (
            kube.exchanges().len(),
            b.exchanges().len(),
            c.exchanges().len(),
        )
    };
    assert_eq!(asked(), (1, 1, 1));
    // Cluster b's endpoint moves, and c comes first now: b's cached answer goes, c's and
    // kube-dns's stay.
    let moved_line = format!("a=; c={}; b={}", c.addr, moved.addr);
    dir.update(&[("MESHDNS_CLUSTERS", &moved_line)]);
    assert!(
        eventually(100, || async {
            member_of(&meshdns, "b").await.as_deref() == Some("10.2.0.2")
        })
        .await,
        "cluster b is asked at its new endpoint, not answered from the cache"
    );
    udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(member_of(&meshdns, "c").await.as_deref(), Some("10.3.0.1"));
    assert_eq!(
        asked(),
        (1, 1, 1),
        "c's and the pass-through answers stayed cached"
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_name_endpoint_is_resolved_through_kube_dns_and_followed_when_it_moves() {
    const NAME: &str = "dns-b.example.test.";
    let first = peer([10, 2, 0, 1], "127.0.0.1:0").await;
    let port = first.addr.port();
    let second = peer([10, 2, 0, 2], &format!("127.0.0.2:{port}")).await;
    let kube = kube_dns(&[(NAME, [127, 0, 0, 1])]).await;
    let kube_addr = kube.addr;
    let peers = format!("b=dns-b.example.test:{port}");
    let meshdns = Meshdns::in_cluster_a(&kube, &peers).await;
    assert!(
        eventually(50, || async {
            member_of(&meshdns, "b").await.as_deref() == Some("10.2.0.1")
        })
        .await,
        "the name resolved and its address answers"
    );
    // The name now points elsewhere: followed once its TTL (30 s) has run out.
    drop(kube);
    tokio::time::sleep(Duration::from_millis(1)).await; // the stopped fake lets go of its port
    let kube = kube_dns_on(&[(NAME, [127, 0, 0, 2])], &kube_addr.to_string()).await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.2"));
    // kube-dns loses the name: the last good address stays in use.
    drop(kube);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _kube = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::rcode(ResponseCode::ServFail)))
        .start_on(&kube_addr.to_string())
        .await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.2"));
    assert!(resolutions(&meshdns, "ok").await >= 2.0);
    assert!(resolutions(&meshdns, "failed").await >= 1.0);
    assert!(!second.seen().is_empty());
}

#[tokio::test]
async fn an_endpoint_name_that_does_not_resolve_fails_its_cluster_not_the_start() {
    let kube = kube_dns(&[]).await;
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=nowhere.example.test:30053"),
        ],
    )
    .await;
    let reply = udp(
        meshdns.addr,
        &query("member-0.mongo.db.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    let www = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(www.msg.response_code, ResponseCode::NoError);
    assert!(
        eventually(50, || async {
            resolutions(&meshdns, "failed").await >= 1.0
        })
        .await
    );
}

// --- Generations ---------------------------------------------------------------------------

/// Writes `files` into `dir` the kubelet's way and returns once meshdns has applied them, on
/// the paused clock: inotify's thread is given real time to deliver the change while the
/// clock stands still (a blocking task holds it), then the settling delay runs out in virtual
/// time. So the reload lands about [`meshdns::testing::reload::SETTLE`] after the call, whatever the
/// machine's load, and the test's other timers keep their order around it.
async fn reload(meshdns: &Meshdns, dir: &mut ConfigMapDir, files: &[(&str, &str)]) {
    let applied = meshdns.config_reloads("applied").await;
    dir.update(files);
    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(300)))
        .await
        .unwrap();
    for _ in 0..5 {
        tokio::time::sleep(meshdns::testing::reload::SETTLE).await;
        if meshdns.config_reloads("applied").await > applied {
            return;
        }
    }
    panic!("the change was not applied");
}

/// A peer cluster's DNS that knows [`MEMBER`] as `ip` and answers after `delay`.
async fn slow_peer(ip: [u8; 4], delay: Duration) -> FakeDns {
    let answer = Answer::records([rr::a(MEMBER, ip)]);
    FakeDns::builder()
        .on(MEMBER, RecordType::A, Behaviour::Delay(delay, answer))
        .start()
        .await
}

/// meshdns in front of `kube` with caching on and one peer cluster, `cluster=endpoint`, in a
/// new configuration directory; one attempt may take `attempt`, a query a second more.
async fn one_cluster_cached(
    kube: &FakeDns,
    cluster: &str,
    endpoint: &FakeDns,
    attempt: Duration,
) -> (ConfigMapDir, Arc<Meshdns>) {
    let line = format!("a=; {cluster}={}", endpoint.addr);
    let dir = ConfigMapDir::new("generations", &[("MESHDNS_CLUSTERS", &line)]);
    let (attempt, timeout) = (
        format!("{}ms", attempt.as_millis()),
        format!("{}ms", (attempt + Duration::from_secs(1)).as_millis()),
    );
    let vars = [
        ("MESHDNS_CACHE_SIZE", "100"),
        ("MESHDNS_ATTEMPT_TIMEOUT", attempt.as_str()),
        ("MESHDNS_TIMEOUT", timeout.as_str()),
    ];
    let meshdns = Arc::new(with_dir(kube, &dir, &vars).await);
    (dir, meshdns)
}

/// Asks for `name` from a task of its own: a query left in flight.
fn in_flight(meshdns: &Arc<Meshdns>, name: &str) -> tokio::task::JoinHandle<Option<String>> {
    let (meshdns, name) = (Arc::clone(meshdns), name.to_string());
    tokio::spawn(async move { address_of(&meshdns, &name).await })
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_of_the_old_peer_is_neither_cached_nor_served_after_the_reload() {
    let kube = kube_dns(&[]).await;
    // Cluster b's old peer answers after 2 s; the new one at once.
    let old = slow_peer([10, 2, 0, 1], Duration::from_secs(2)).await;
    let new = peer([10, 2, 0, 2], "127.0.0.1:0").await;
    let (mut dir, meshdns) = one_cluster_cached(&kube, "b", &old, Duration::from_secs(3)).await;
    let pending = in_flight(&meshdns, "member-0.mongo.db.cluster.b.");
    tokio::time::sleep(Duration::from_millis(100)).await;
    reload(
        &meshdns,
        &mut dir,
        &[("MESHDNS_CLUSTERS", &format!("a=; b={}", new.addr))],
    )
    .await;
    assert!(
        !pending.is_finished(),
        "the reload came before the old answer"
    );
    // The query that started before the reload finishes on its configuration.
    assert_eq!(pending.await.unwrap().as_deref(), Some("10.2.0.1"));
    // Every query after it: the new peer, at once and 7 s later (the old answer's TTL is 30 s).
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.2"));
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.2"));
    assert_eq!(old.exchanges().len(), 1);
    assert_eq!(new.exchanges().len(), 1, "asked once, then cached");
}

#[tokio::test(start_paused = true)]
async fn a_cluster_removed_while_its_answer_is_pending_leaves_nothing_of_it_behind() {
    // kube-dns does not know cluster c's zone: after the removal its names go there.
    let kube = kube_dns(&[]).await;
    let c = slow_peer([10, 3, 0, 1], Duration::from_secs(2)).await;
    let (mut dir, meshdns) = one_cluster_cached(&kube, "c", &c, Duration::from_secs(3)).await;
    let pending = in_flight(&meshdns, "member-0.mongo.db.cluster.c.");
    tokio::time::sleep(Duration::from_millis(100)).await;
    reload(
        &meshdns,
        &mut dir,
        &[("MESHDNS_UPSTREAMS", &kube.addr.to_string())],
    )
    .await;
    assert!(!pending.is_finished());
    pending.await.unwrap();
    for _ in 0..3 {
        assert_eq!(member_of(&meshdns, "c").await, None, "kube-dns's REFUSED");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert_eq!(c.exchanges().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cluster_moved_off_a_black_holed_endpoint_answers_from_the_new_one_at_once() {
    let kube = kube_dns(&[]).await;
    let black_hole = FakeDns::silent().await;
    let healthy = FakeDns::builder()
        .answer(
            MEMBER,
            RecordType::A,
            Answer::records([rr::a(MEMBER, [10, 2, 0, 2])]),
        )
        .answer(
            MEMBER_1,
            RecordType::A,
            Answer::records([rr::a(MEMBER_1, [10, 2, 1, 2])]),
        )
        .start()
        .await;
    let (mut dir, meshdns) =
        one_cluster_cached(&kube, "b", &black_hole, Duration::from_secs(1)).await;
    // Queries for both members are stuck on the black hole when b moves.
    let stuck = ["member-0", "member-1"]
        .map(|member| in_flight(&meshdns, &format!("{member}.mongo.db.cluster.b.")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    reload(
        &meshdns,
        &mut dir,
        &[("MESHDNS_CLUSTERS", &format!("a=; b={}", healthy.addr))],
    )
    .await;
    // A new query for member-0 waits on no exchange of the old configuration: it is answered
    // while the old exchanges are still out (no time window: an order of events).
    let member_0 = address_of(&meshdns, "member-0.mongo.db.cluster.b.").await;
    assert_eq!(member_0.as_deref(), Some("10.2.0.2"));
    assert!(
        stuck.iter().all(|query| !query.is_finished()),
        "member-0 was answered only after the old configuration's exchanges ended"
    );
    // member-1 is asked only once the old exchange has failed: its failure is not inherited.
    for query in stuck {
        query.await.unwrap();
    }
    let member_1 = address_of(&meshdns, "member-1.mongo.db.cluster.b.").await;
    assert_eq!(member_1.as_deref(), Some("10.2.1.2"));
}

/// A cluster DNS that knows the `mongo` service of namespace `db` as `ip`, with `behaviour`
/// wrapping its answer.
fn service_dns(ip: [u8; 4], behaviour: impl FnOnce(Answer) -> Behaviour) -> FakeDnsBuilder {
    const SERVICE: &str = "mongo.db.svc.cluster.local.";
    let answer = Answer::records([rr::a(SERVICE, ip)]);
    FakeDns::builder().on(SERVICE, RecordType::A, behaviour(answer))
}

#[tokio::test(start_paused = true)]
async fn a_leg_finishing_after_a_reload_that_reordered_clusters_never_fills_another_clusters_leg() {
    const GATHERED: &str = "mongo.db.svc.distributed.local.";
    // a (local), b, c, d. c's leg takes 800 ms; d answers once, then is silent.
    let a = service_dns([10, 1, 0, 1], Behaviour::Answer).start().await;
    let b = service_dns([10, 2, 0, 1], Behaviour::Answer).start().await;
    let c = service_dns([10, 3, 0, 1], |answer| {
        Behaviour::Delay(Duration::from_millis(800), answer)
    })
    .start()
    .await;
    let d = service_dns([10, 4, 0, 1], |answer| Behaviour::AnswerThenDrop(1, answer))
        .start()
        .await;
    let clusters = |list: &[(&str, &FakeDns)]| {
        let mut line = vec!["a=".to_string()];
        line.extend(
            list.iter()
                .map(|(name, fake)| format!("{name}={}", fake.addr)),
        );
        line.join("; ")
    };
    let mut dir = ConfigMapDir::new(
        "reorder",
        &[(
            "MESHDNS_CLUSTERS",
            &clusters(&[("b", &b), ("c", &c), ("d", &d)]),
        )],
    );
    let vars = [
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CACHE_SIZE", "1000"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
        ("MESHDNS_TIMEOUT", "3s"),
    ];
    let meshdns = Arc::new(with_dir(&a, &dir, &vars).await);
    let addresses = |reply: &support::Reply| -> Vec<String> {
        reply
            .answer_lines()
            .iter()
            .filter_map(|line| line.rsplit(' ').next().map(str::to_string))
            .collect()
    };
    let first = {
        let meshdns = Arc::clone(&meshdns);
        tokio::spawn(async move { udp(meshdns.addr, &query(GATHERED, RecordType::A)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // c is removed while its leg is out: d moves from 4th to 3rd place.
    reload(
        &meshdns,
        &mut dir,
        &[("MESHDNS_CLUSTERS", &clusters(&[("b", &b), ("d", &d)]))],
    )
    .await;
    assert!(!first.is_finished(), "c's leg is still out");
    let first = first.await.unwrap();
    assert_eq!(
        addresses(&first),
        ["10.1.0.1", "10.2.0.1", "10.3.0.1", "10.4.0.1"],
        "the query of the old configuration"
    );
    // d is silent now: its leg is filled from d's own last answer, never from c's. Asked with
    // EDNS (another entry than the first query's, the same legs) and without.
    for _ in 0..3 {
        for (how, asked) in [
            (
                "edns",
                support::with_edns(query(GATHERED, RecordType::A), 1232),
            ),
            ("plain", query(GATHERED, RecordType::A)),
        ] {
            let reply = udp(meshdns.addr, &asked).await;
            assert_eq!(
                addresses(&reply),
                ["10.1.0.1", "10.2.0.1", "10.4.0.1"],
                "{how}"
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(d.exchanges().len() > 1, "d was asked again");
}

#[tokio::test(start_paused = true)]
async fn a_prefetch_started_before_a_reload_is_not_cached_after_it() {
    let kube = kube_dns(&[]).await;
    // The old peer takes a second for every answer (TTL 30 s), the prefetch's included.
    let old = slow_peer([10, 2, 0, 1], Duration::from_secs(1)).await;
    let new = peer([10, 2, 0, 2], "127.0.0.1:0").await;
    let (mut dir, meshdns) = one_cluster_cached(&kube, "b", &old, Duration::from_secs(2)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    // Popular, and in the last tenth of its TTL: the third hit starts a prefetch.
    tokio::time::sleep(Duration::from_millis(28_500)).await;
    for _ in 0..meshdns::testing::cache::PREFETCH_MIN_HITS {
        assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.1"));
    }
    reload(
        &meshdns,
        &mut dir,
        &[("MESHDNS_CLUSTERS", &format!("a=; b={}", new.addr))],
    )
    .await;
    assert_eq!(
        old.exchanges().len(),
        2,
        "the prefetch was asked before the reload"
    );
    // The prefetch's answer comes after the reload; the entry would have lived until 31 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(member_of(&meshdns, "b").await.as_deref(), Some("10.2.0.2"));
    assert_eq!(new.exchanges().len(), 1);
}

/// The endpoint name of cluster b in [`resolutions_of_an_endpoint_name`].
const ENDPOINT_NAME: &str = "dns-b.example.test.";

/// How many times meshdns asks kube-dns for cluster b's endpoint name (A) in its first 21 s,
/// kube-dns answering it with 127.0.0.1 and `ttl`.
async fn resolutions_of_an_endpoint_name(ttl: u32) -> usize {
    let mut record = rr::a(ENDPOINT_NAME, [127, 0, 0, 1]);
    record.ttl = ttl;
    let kube = FakeDns::builder()
        .answer(ENDPOINT_NAME, RecordType::A, Answer::records([record]))
        .answer(
            ENDPOINT_NAME,
            RecordType::AAAA,
            Answer::nodata("example.test."),
        )
        .start()
        .await;
    let _meshdns = Meshdns::in_cluster_a(&kube, "b=dns-b.example.test:30053").await;
    tokio::time::sleep(Duration::from_secs(21)).await;
    kube.seen()
        .iter()
        .filter(|seen| seen.rtype == RecordType::A && seen.name == ENDPOINT_NAME)
        .count()
}

/// An endpoint name is re-resolved when its TTL runs out, clamped to 5 s … 5 min
/// (docs/design.md, "Configuration": "re-resolved when its TTL runs out (clamped to 5 s … 5
/// min)"): a 1 s TTL is asked again every 5 s.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_with_a_short_ttl_is_re_resolved_every_five_seconds() {
    let asked = resolutions_of_an_endpoint_name(1).await;
    assert!((4..=6).contains(&asked), "asked {asked} times in 21 s");
}

/// A TTL with its top bit set counts as 0 (RFC 2181 §8; docs/design.md, "Cache"), so an
/// endpoint name answered with one is re-resolved at the 5 s floor, not held for the 5 min
/// ceiling as if the TTL were 68 years.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_whose_ttl_has_the_top_bit_set_is_re_resolved_at_the_floor() {
    let asked = resolutions_of_an_endpoint_name(0x8000_0000).await;
    assert!((4..=6).contains(&asked), "asked {asked} times in 21 s");
}

/// A resolution of an endpoint name that fails keeps the last good addresses (docs/design.md,
/// "Configuration": "the last good addresses are kept when resolution fails"), and so does
/// one half of it: when the A question fails (SERVFAIL) while AAAA answers, the name's IPv4
/// addresses are not dropped as if the name had lost them.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_whose_a_question_fails_once_keeps_its_ipv4_addresses() {
    let mut v4 = rr::a(ENDPOINT_NAME, [127, 0, 0, 1]);
    v4.ttl = 1;
    let mut v6 = rr::aaaa(ENDPOINT_NAME, "::1");
    v6.ttl = 1;
    let kube = FakeDns::builder()
        .on(
            ENDPOINT_NAME,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([v4]),
                Answer::rcode(ResponseCode::ServFail),
            ]),
        )
        .answer(ENDPOINT_NAME, RecordType::AAAA, Answer::records([v6]))
        .start()
        .await;
    let meshdns = Meshdns::in_cluster_a(&kube, "b=dns-b.example.test:30053").await;
    let series = |endpoint: &'static str| {
        let meshdns = &meshdns;
        async move {
            let scrape = meshdns.scrape().await;
            let endpoints = scrape.label_values("meshdns_upstream_healthy", "endpoint");
            endpoints.iter().any(|listed| listed == endpoint)
        }
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(series("127.0.0.1:30053").await, "resolved at first");
    assert!(series("[::1]:30053").await, "resolved at first");
    // The second resolution (after the 5 s floor) gets SERVFAIL for A.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        series("127.0.0.1:30053").await,
        "the IPv4 endpoint stays after a failed A question"
    );
}

/// A reload in the middle of a pipelined batch on one TCP connection (RFC 7766 §6.2.1.1):
/// every query gets its own complete reply; those read before the reload are answered on the
/// configuration they started on (the old kube-dns, docs/design.md "Live configuration":
/// "applied without dropping a query"), those read after on the new one — never a mix, never
/// a drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_in_the_middle_of_a_pipelined_batch_drops_and_mixes_nothing() {
    use support::configmap::ConfigMapDir;
    use tokio::io::AsyncWriteExt;
    let name = |i: usize| format!("q{i}.example.com.");
    let serving = |octet: u8, delay: u64| {
        let mut builder = FakeDns::builder();
        for i in 0..10 {
            let records: Vec<Record> = (0..3).map(|j| rr::a(&name(i), [10, octet, 0, j])).collect();
            let slow = Behaviour::Delay(Duration::from_millis(delay), Answer::records(records));
            builder = builder.on(&name(i), RecordType::A, slow);
        }
        builder
    };
    let old = serving(1, 300).start().await;
    let new = serving(2, 0).start().await;
    let (old_addr, new_addr) = (old.addr.to_string(), new.addr.to_string());
    let mut dir = ConfigMapDir::new("pipelined", &[("MESHDNS_UPSTREAMS", old_addr.as_str())]);
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::cached_failing_fast(&old, &[("MESHDNS_CONFIG_DIR", &path)]).await;
    let mut stream = tokio::net::TcpStream::connect(meshdns.addr).await.unwrap();
    let send = |range: std::ops::Range<usize>| {
        let mut frames = Vec::new();
        for i in range {
            let mut msg = query(&name(i), RecordType::A);
            msg.metadata.id = u16::try_from(i).unwrap();
            frames.extend(support::frame_of(&msg.to_vec().unwrap()));
        }
        frames
    };
    stream.write_all(&send(0..5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    dir.update(&[("MESHDNS_UPSTREAMS", new_addr.as_str())]);
    assert!(
        support::eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    stream.write_all(&send(5..10)).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..10 {
        let bytes = tokio::time::timeout(support::CLIENT_TIMEOUT, support::read_frame(&mut stream))
            .await
            .expect("a reply in time")
            .expect("a whole frame");
        let reply = Message::from_vec(&bytes).unwrap();
        let i = usize::from(reply.id);
        assert_eq!(
            reply.queries[0].name().to_ascii(),
            name(i),
            "reply {i} matched"
        );
        assert_eq!(reply.answers.len(), 3, "{i}: the whole set");
        let octets: Vec<u8> = (reply.answers.iter())
            .map(|r| match &r.data {
                RData::A(a) => a.0.octets()[1],
                other => panic!("{other:?}"),
            })
            .collect();
        let expected = if i < 5 { 1 } else { 2 };
        assert_eq!(
            octets, [expected; 3],
            "{i}: answered by one kube-dns, the right one"
        );
        seen.push(i);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}
