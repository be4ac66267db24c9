//! No loops (docs/design.md, "Cluster-level mode"): a query meshdns sent upstream that comes
//! back to it — through a forwarder that relays it (CoreDNS's `forward`), through another
//! meshdns that rewrites its name, or because an endpoint is meshdns itself — is answered
//! SERVFAIL with an Extended DNS Error within one round trip and counted in
//! `meshdns_loops_total`; never answered from another cluster's records. Endpoints equal to a listen address are refused; a host name that resolves to one
//! is never asked. Two clients asking the same name at once are never taken for a loop.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Record, RecordType};
use support::{Answer, Behaviour, FakeDns, Meshdns, eventually, query, rr, udp, with_edns};
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

/// A query's deadline far beyond the test client's wait (`support::CLIENT_TIMEOUT`): a reply
/// that comes at all came before it, so a loop was answered at once and not left to end at
/// the deadline — no real-clock window needed.
const LONG_TIMEOUT: &str = "30s";

/// cluster a's pod as kube-dns knows it: what a loop must never hand out as cluster b's.
const MEMBER: &str = "mongo-0.mongo.db.svc.cluster.local.";
const LOCAL_POD: [u8; 4] = [10, 1, 0, 10];

/// A forwarder that relays every datagram as it is to a target set after it started (CoreDNS's
/// `forward`: the client's message, options included), and the reply back.
struct Relay {
    addr: SocketAddr,
    target: Arc<OnceLock<SocketAddr>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start() -> Relay {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        let target: Arc<OnceLock<SocketAddr>> = Arc::default();
        let to = Arc::clone(&target);
        let task = tokio::spawn(async move {
            let mut relayed = JoinSet::new();
            let mut buf = vec![0u8; 65_535];
            loop {
                let Ok((len, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let (Some(target), datagram) = (to.get().copied(), buf[..len].to_vec()) else {
                    continue;
                };
                let socket = Arc::clone(&socket);
                relayed.spawn(async move {
                    let out = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                    out.connect(target).await.unwrap();
                    out.send(&datagram).await.unwrap();
                    let mut reply = vec![0u8; 65_535];
                    if let Ok(Ok(len)) =
                        tokio::time::timeout(Duration::from_secs(5), out.recv(&mut reply)).await
                    {
                        let _ = socket.send_to(&reply[..len], from).await;
                    }
                });
            }
        });
        Relay {
            addr,
            target,
            _task: task,
        }
    }

    fn relay_to(&self, target: SocketAddr) {
        self.target.set(target).unwrap();
    }
}

/// kube-dns knowing cluster a's [`MEMBER`], and `endpoint_name` (a peer's DNS given by host
/// name) at 127.0.0.1.
async fn kube_dns(endpoint_name: Option<&str>) -> FakeDns {
    let mut builder = FakeDns::builder().answer(
        MEMBER,
        RecordType::A,
        Answer::records([rr::a(MEMBER, LOCAL_POD)]),
    );
    if let Some(name) = endpoint_name {
        builder = builder.answer(
            name,
            RecordType::A,
            Answer::records([rr::a(name, [127, 0, 0, 1])]),
        );
    }
    builder.start().await
}

/// meshdns of cluster a before `kube`, cluster b at `endpoint`, and `peer` relaying to it.
async fn meshdns_with_b(kube: &FakeDns, endpoint: &str, peer: &Relay) -> Meshdns {
    let clusters = format!("a=; b={endpoint}");
    let meshdns = Meshdns::before(
        kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_TIMEOUT", LONG_TIMEOUT),
        ],
    )
    .await;
    peer.relay_to(meshdns.addr);
    meshdns
}

async fn loops_total(meshdns: &Meshdns) -> f64 {
    meshdns.metric("meshdns_loops_total", &[]).await
}

/// The client got SERVFAIL saying "loop" (not the deadline's "no answer before the
/// deadline": with [`LONG_TIMEOUT`] the client would have given up first), and no address.
fn assert_loop_answered(reply: &support::Reply) {
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty(), "{:?}", reply.answer_lines());
    let text = support::extended_error_text(&reply.msg).expect("an Extended DNS Error");
    assert!(text.contains("loop"), "{text}");
}

#[tokio::test]
async fn a_zone_forwarded_back_by_kube_dns_is_servfail_with_ede_at_once_and_counted() {
    // kube-dns forwards cluster.c (a cluster meshdns does not have) to meshdns, relaying the
    // message as CoreDNS's forward does; meshdns passes cluster.c to kube-dns.
    let kube = Relay::start().await;
    let kube_addr = kube.addr.to_string();
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", &kube_addr),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_TIMEOUT", LONG_TIMEOUT),
    ])
    .await;
    kube.relay_to(meshdns.addr);
    for edns in [true, false] {
        let asked = query("mongo-0.mongo.db.cluster.c.", RecordType::A);
        let asked = if edns { with_edns(asked, 1232) } else { asked };
        // Answered at all means answered before the timeout (LONG_TIMEOUT).
        let reply = udp(meshdns.addr, &asked).await;
        if edns {
            assert_loop_answered(&reply);
        } else {
            assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
            assert!(reply.msg.edns.is_none(), "no OPT to a client without EDNS");
        }
    }
    assert_eq!(loops_total(&meshdns).await, 2.0);
}

#[tokio::test]
async fn an_endpoint_that_relays_back_to_meshdns_never_gives_the_local_pod() {
    // Cluster b's endpoint leads back to this meshdns (by IP): without the marker, cluster b's
    // member would be answered with cluster a's pod from kube-dns.
    let kube = kube_dns(None).await;
    let peer = Relay::start().await;
    let meshdns = meshdns_with_b(&kube, &peer.addr.to_string(), &peer).await;
    let reply = udp(
        meshdns.addr,
        &with_edns(query("mongo-0.mongo.db.cluster.b.", RecordType::A), 1232),
    )
    .await;
    // The cluster route's SERVFAIL carries the loop's Extended DNS Error, as pass-through's.
    assert_loop_answered(&reply);
    assert_eq!(loops_total(&meshdns).await, 1.0);
    assert!(
        kube.names().is_empty(),
        "kube-dns was asked {:?}: the looped query went on",
        kube.names()
    );
}

#[tokio::test]
async fn an_endpoint_name_that_leads_back_to_meshdns_is_a_counted_loop() {
    // b=peer.mesh.test resolves (through kube-dns) to a forwarder that relays to meshdns.
    let peer = Relay::start().await;
    let kube = kube_dns(Some("peer.mesh.test.")).await;
    let meshdns = meshdns_with_b(
        &kube,
        &format!("peer.mesh.test:{}", peer.addr.port()),
        &peer,
    )
    .await;
    // The name is resolved in the background: until then cluster b has no endpoint.
    let member_of_b = query("mongo-0.mongo.db.cluster.b.", RecordType::A);
    let mut reply = udp(meshdns.addr, &member_of_b).await;
    for _ in 0..50 {
        if loops_total(&meshdns).await > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        reply = udp(meshdns.addr, &member_of_b).await;
    }
    assert_eq!(loops_total(&meshdns).await, 1.0);
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty(), "{:?}", reply.answer_lines());
    assert!(
        !kube.names().iter().any(|n| n.eq_ignore_ascii_case(MEMBER)),
        "the looped query reached kube-dns: {:?}",
        kube.names()
    );
}

/// meshdns listening on 127.0.0.1:PORT with cluster b at `self.mesh.test:PORT`, a name kube-dns
/// resolves to `own(name)`: meshdns's own address in some spelling. It is never asked.
async fn an_endpoint_name_resolving_to_itself_is_never_asked(own: fn(&str) -> Record) {
    const NAME: &str = "self.mesh.test.";
    let port = support::free_port();
    let record = own(NAME);
    let kube = FakeDns::builder()
        .answer(
            MEMBER,
            RecordType::A,
            Answer::records([rr::a(MEMBER, LOCAL_POD)]),
        )
        .answer(NAME, record.record_type(), Answer::records([record]))
        .start()
        .await;
    let kube_addr = kube.addr.to_string();
    let clusters = format!("a=; b=self.mesh.test:{port}");
    let listen = format!("127.0.0.1:{port}");
    let meshdns = Meshdns::start_on(
        &listen,
        &[
            ("MESHDNS_LISTEN", &listen),
            ("MESHDNS_UPSTREAMS", &kube_addr),
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await;
    // Counted once its addresses are in the group (the count and the update happen together):
    // from then on cluster b's endpoints are what the name resolved to, less meshdns itself.
    let resolved = [("peer", "b"), ("result", "ok")];
    assert!(
        eventually(50, || async {
            meshdns
                .metric("meshdns_endpoint_resolutions_total", &resolved)
                .await
                == 1.0
        })
        .await,
        "the endpoint name was resolved and applied"
    );
    let reply = udp(
        meshdns.addr,
        &query("mongo-0.mongo.db.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty(), "{:?}", reply.answer_lines());
    assert_eq!(loops_total(&meshdns).await, 0.0, "never asked, so no loop");
    assert!(
        !kube.names().iter().any(|n| n.eq_ignore_ascii_case(MEMBER)),
        "meshdns asked itself: {:?}",
        kube.names()
    );
}

#[tokio::test]
async fn an_endpoint_name_that_resolves_to_meshdns_own_address_is_never_asked() {
    an_endpoint_name_resolving_to_itself_is_never_asked(|name| rr::a(name, [127, 0, 0, 1])).await;
}

#[tokio::test]
async fn an_endpoint_name_whose_aaaa_is_meshdns_own_address_ipv4_mapped_is_never_asked() {
    an_endpoint_name_resolving_to_itself_is_never_asked(|name| rr::aaaa(name, "::ffff:127.0.0.1"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_asking_the_same_name_at_once_are_never_a_loop() {
    const NAME: &str = "www.example.com.";
    let answer = Answer::records([rr::a(NAME, [192, 0, 2, 1])]);
    let kube = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Delay(Duration::from_millis(100), answer),
        )
        .start()
        .await;
    // With the cache (in-flight sharing) and without: 30 identical queries at once, as they
    // come when a forwarder in front relays many clients' lookups.
    for cache_size in ["0", "1000"] {
        let meshdns = Meshdns::before(&kube, &[("MESHDNS_CACHE_SIZE", cache_size)]).await;
        let mut clients = JoinSet::new();
        for _ in 0..30 {
            let addr = meshdns.addr;
            clients.spawn(
                async move { udp(addr, &with_edns(query(NAME, RecordType::A), 1232)).await },
            );
        }
        while let Some(reply) = clients.join_next().await {
            let reply = reply.unwrap();
            assert_eq!(reply.msg.response_code, ResponseCode::NoError);
            assert_eq!(reply.answer_lines().len(), 1);
        }
        assert_eq!(loops_total(&meshdns).await, 0.0, "cache size {cache_size}");
    }
}

#[test]
fn an_endpoint_equal_to_a_listen_address_is_refused_naming_the_variable_and_token() {
    use meshdns::Config;
    let config = |vars: &[(&str, &str)]| {
        let mut all = vec![
            ("MESHDNS_UPSTREAMS", "10.96.0.10"),
            ("MESHDNS_LOCAL_CLUSTER", "a"),
        ];
        all.extend_from_slice(vars);
        Config::from_vars(all.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    };
    let refused = [
        (
            vec![("MESHDNS_CLUSTERS", "a=; b=127.0.0.1:53")],
            "MESHDNS_CLUSTERS",
            "b=127.0.0.1:53",
        ),
        (
            vec![
                ("MESHDNS_LISTEN", "0.0.0.0:53"),
                ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1; c=127.0.0.1"),
            ],
            "MESHDNS_CLUSTERS",
            "c=127.0.0.1:53",
        ),
        (
            vec![
                ("MESHDNS_LISTEN", "[::]:5353"),
                ("MESHDNS_UPSTREAMS", "[::1]:5353"),
            ],
            "MESHDNS_UPSTREAMS",
            "[::1]:5353",
        ),
    ];
    for (vars, variable, token) in refused {
        let errors = config(&vars).expect_err(&format!("{vars:?} is refused"));
        assert_eq!(errors.len(), 1, "{errors}");
        let error = errors.iter().next().unwrap();
        assert_eq!(error.variable, variable, "{error}");
        assert_eq!(error.token, token, "{error}");
        assert!(error.reason.contains("own address"), "{error}");
    }
    for vars in [
        vec![("MESHDNS_CLUSTERS", "a=; b=127.0.0.1:30053")],
        vec![
            ("MESHDNS_LISTEN", "0.0.0.0:53"),
            ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1"),
        ],
        // The local cluster's entry is never asked by this pod.
        vec![
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=127.0.0.1; b=10.9.0.1"),
        ],
    ] {
        assert!(config(&vars).is_ok(), "{vars:?}: {:?}", config(&vars).err());
    }
}

/// A meshdns binary (a process of its own: its loop marker is not this test process's), killed
/// when dropped.
struct OtherProcess(std::process::Child);

impl Drop for OtherProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn two_meshdns_asking_each_other_over_rewritten_routes_cut_the_loop_at_once() {
    // A maps `svc.e.test` to the peer's `svc.d.test`, and the peer B (another process) maps
    // `svc.d.test` back to A's `svc.e.test`: each rewrites the name, and neither passes it
    // through. A's marker must travel in B's rewritten query for A to see its query come back;
    // before, each rewrite dropped the other's marker and the query went round until the
    // deadline.
    let (kube_a, kube_b) = (kube_dns(None).await, kube_dns(None).await);
    let b_addr = format!("127.0.0.1:{}", support::free_port());
    let to_b = format!("here=; svc={b_addr} domain=d.test");
    let a = Meshdns::before(
        &kube_a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "here"),
            ("MESHDNS_CLUSTER_ZONE", "{name}.e.test"),
            ("MESHDNS_CLUSTERS", &to_b),
        ],
    )
    .await;
    let to_a = format!("here=; svc={} domain=e.test", a.addr);
    let b = std::process::Command::new(env!("CARGO_BIN_EXE_meshdns"))
        .env_clear()
        .env("MESHDNS_LISTEN", &b_addr)
        .env("MESHDNS_ADMIN_LISTEN", "")
        .env("MESHDNS_UPSTREAMS", kube_b.addr.to_string())
        .env("MESHDNS_LOCAL_CLUSTER", "here")
        .env("MESHDNS_CLUSTER_ZONE", "{name}.d.test")
        .env("MESHDNS_CLUSTERS", &to_a)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(OtherProcess)
        .expect("the meshdns binary starts");
    let b_addr: SocketAddr = b_addr.parse().unwrap();
    let ping = query("www.example.com.", RecordType::A).to_vec().unwrap();
    assert!(
        eventually(50, || async {
            support::udp_raw_within(b_addr, &ping, Duration::from_millis(100))
                .await
                .is_some()
        })
        .await,
        "B serves"
    );
    let reply = udp(
        a.addr,
        &with_edns(query("mongo-0.mongo.db.svc.e.test.", RecordType::A), 1232),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty(), "{:?}", reply.answer_lines());
    assert_eq!(loops_total(&a).await, 1.0, "A saw its own query come back");
    assert!(
        ![kube_a.names(), kube_b.names()]
            .concat()
            .iter()
            .any(|n| n.contains("mongo")),
        "nobody passed the looping name to kube-dns: {:?} {:?}",
        kube_a.names(),
        kube_b.names()
    );
    drop(b);
}
