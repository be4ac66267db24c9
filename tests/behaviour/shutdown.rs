//! SIGTERM during load (docs/design.md, "Limits and bad input"): the built binary, with queries
//! in flight to a slow upstream, gets SIGTERM; every query in flight — over UDP and over TCP —
//! is still answered, and the process exits 0 without running out its `SHUTDOWN_GRACE`.
//!
//! A real process on the real clock, so the test orders events instead of timing them: SIGTERM
//! goes once the upstream holds every query, and the grace not running out shows in the log
//! (meshdns warns when it does). Time limits here only keep a hung run from hanging the suite.
//!
//! The other tests run `meshdns::run` on the test's own runtime, with the fakes on a runtime of
//! their own, so that the runtime's count of live tasks is meshdns's alone: however `run` ends
//! (told to stop, with connections open, at the end of its grace time, or because a listener
//! broke), every task it started has ended when it returns.

use crate::support;
use crate::support::dot::{ClientFiles, Pki, SERVER_NAME};

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use support::configmap::ConfigMapDir;
use support::{
    Answer, Behaviour, FakeDns, frame_of, free_port, query, read_frame, rr, udp_raw_within,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const FAST: &str = "fast.example.com.";
const SLOW_ANSWER: Duration = Duration::from_millis(1000);
const IN_FLIGHT: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_in_flight_queries_and_exits_0() {
    let upstream = FakeDns::builder()
        .answer(
            FAST,
            RecordType::A,
            Answer::records([rr::a(FAST, [192, 0, 2, 1])]),
        )
        .otherwise(Behaviour::Delay(
            SLOW_ANSWER,
            Answer::rcode(ResponseCode::NoError),
        ))
        .start()
        .await;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshdns"))
        .env_clear()
        .env("MESHDNS_LISTEN", addr.to_string())
        .env("MESHDNS_UPSTREAMS", upstream.addr.to_string())
        .env("MESHDNS_ADMIN_LISTEN", "")
        .env("MESHDNS_TIMEOUT", "4s")
        .env("MESHDNS_ATTEMPT_TIMEOUT", "3s")
        .env("MESHDNS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the meshdns binary starts");

    // Ready when it answers (a closed port fails a try at once: pause between tries).
    let fast = query(FAST, RecordType::A).to_vec().unwrap();
    let mut tries = 0;
    while udp_raw_within(addr, &fast, Duration::from_millis(100))
        .await
        .is_none()
    {
        tries += 1;
        assert!(tries < 100, "meshdns did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Queries in flight: over UDP from one socket, and one over TCP.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(addr).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..IN_FLIGHT {
        let msg = query(&format!("slow{i}.example.com."), RecordType::A);
        ids.push(msg.id);
        socket.send(&msg.to_vec().unwrap()).await.unwrap();
    }
    let tcp_query = query("slow-tcp.example.com.", RecordType::A);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(&frame_of(&tcp_query.to_vec().unwrap()))
        .await
        .unwrap();
    // In flight: every query has reached the upstream, which holds its answer for a second.
    let mut polls = 0;
    while upstream
        .names()
        .iter()
        .filter(|name| name.starts_with("slow"))
        .count()
        < IN_FLIGHT + 1
    {
        polls += 1;
        assert!(polls < 500, "the queries did not reach the upstream");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    // Every query in flight is answered.
    let mut buf = vec![0u8; 65_535];
    let mut answered = Vec::new();
    while answered.len() < IN_FLIGHT {
        let len = tokio::time::timeout(Duration::from_secs(3), socket.recv(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {IN_FLIGHT} UDP queries answered",
                    answered.len()
                )
            })
            .unwrap();
        let reply = Message::from_vec(&buf[..len]).unwrap();
        assert_eq!(reply.response_code, ResponseCode::NoError);
        answered.push(reply.id);
    }
    answered.sort_unstable();
    ids.sort_unstable();
    assert_eq!(answered, ids, "each in-flight UDP query got its own answer");
    let frame = tokio::time::timeout(Duration::from_secs(3), read_frame(&mut stream))
        .await
        .expect("the TCP query is answered")
        .expect("a whole frame");
    assert_eq!(Message::from_vec(&frame).unwrap().id, tcp_query.id);

    // And the process exits 0, once the in-flight queries are answered: had it waited for
    // the grace to run out, it would have said so.
    let mut polls = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        polls += 1;
        assert!(polls < 1000, "meshdns still runs long after its grace time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit code after SIGTERM: {stderr}");
    // MESHDNS_LOG=warn: the grace running out would be the one line here.
    assert_eq!(
        stderr, "",
        "meshdns exits once the in-flight queries are answered, not at the end of the grace"
    );
}

/// Shutdown is one signal at the root of meshdns's tasks: once `run` returns — with a UDP query
/// in flight to a slow upstream when it was told to stop, and its admin server and reload
/// watcher running — none of the tasks it started is still alive on the runtime.
#[tokio::test]
async fn after_run_returns_no_task_it_started_is_still_alive() {
    // The fake runs on a runtime of its own: the test's counts meshdns's tasks alone.
    let fakes = tokio::runtime::Runtime::new().unwrap();
    let upstream = fakes
        .spawn(
            FakeDns::builder()
                .otherwise(Behaviour::Delay(
                    Duration::from_millis(300),
                    Answer::rcode(ResponseCode::NoError),
                ))
                .start(),
        )
        .await
        .unwrap();
    let runtime = tokio::runtime::Handle::current().metrics();
    assert_eq!(runtime.num_alive_tasks(), 0);
    let vars = [
        ("MESHDNS_UPSTREAMS", upstream.addr.to_string()),
        ("MESHDNS_CACHE_SIZE", "0".to_string()),
    ];
    let config = meshdns::Config::from_vars(vars.map(|(k, v)| (k.to_string(), v)))
        .expect("a valid test config");
    let mut listeners =
        meshdns::bind_spread(&["127.0.0.1:0".parse().unwrap()], config.threads).unwrap();
    listeners.admin = Some(meshdns::bind_admin("127.0.0.1:0".parse().unwrap()).unwrap());
    let addr = listeners.local_addrs()[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = meshdns::run(config, listeners, async {
        let _ = stopped.await;
    });
    let asking = async {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let slow = query("slow.example.com.", RecordType::A).to_vec().unwrap();
        socket.send_to(&slow, addr).await.unwrap();
        while upstream.names().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(runtime.num_alive_tasks() > 0, "meshdns runs tasks");
        stop.send(()).unwrap();
        std::future::pending::<()>().await;
    };
    tokio::select! {
        ended = running => ended.expect("run ends cleanly"),
        () = asking => unreachable!("asking never ends"),
    }
    assert_eq!(
        runtime.num_alive_tasks(),
        0,
        "every task meshdns started has ended when run returns"
    );
    drop(upstream);
    fakes.shutdown_background();
}

/// Where the instance of the tests below listens, each on a port of its own on 127.0.0.1.
#[derive(Clone, Copy)]
struct Addrs {
    tcp: SocketAddr,
    dot: SocketAddr,
    admin: SocketAddr,
}

/// An instance's configuration (asking `upstream`, the DoT certificate in `secret`, `vars`
/// beside) and its listeners: UDP and TCP, DNS over TLS, the admin server.
fn instance(
    upstream: SocketAddr,
    secret: &ConfigMapDir,
    vars: &[(&str, &str)],
) -> (meshdns::Config, meshdns::Listeners, Addrs) {
    let file = |name: &str| secret.path.join(name).display().to_string();
    let (upstream, cert, key) = (upstream.to_string(), file("tls.crt"), file("tls.key"));
    let all = [
        ("MESHDNS_UPSTREAMS", upstream.as_str()),
        ("MESHDNS_CACHE_SIZE", "0"),
        ("MESHDNS_DOT_LISTEN", "127.0.0.1:0"),
        ("MESHDNS_DOT_CERT_FILE", cert.as_str()),
        ("MESHDNS_DOT_KEY_FILE", key.as_str()),
    ];
    let vars = (all.iter().chain(vars)).map(|(k, v)| (k.to_string(), v.to_string()));
    let config = meshdns::Config::from_vars(vars).expect("a valid test config");
    let loopback = "127.0.0.1:0".parse().unwrap();
    let mut listeners = meshdns::bind(&[loopback]).unwrap();
    listeners.admin = Some(meshdns::bind_admin(loopback).unwrap());
    let dot_listen = &config.dot.as_ref().expect("a DoT listener").listen;
    listeners.dot = meshdns::bind_dot(dot_listen).unwrap();
    let local = |listener: &std::net::TcpListener| listener.local_addr().unwrap();
    let addrs = Addrs {
        tcp: listeners.local_addrs()[0],
        dot: local(&listeners.dot[0]),
        admin: local(listeners.admin.as_ref().unwrap()),
    };
    (config, listeners, addrs)
}

/// A Secret with a certificate for [`SERVER_NAME`] from a CA of its own, the client's files,
/// and a client configuration that trusts that CA.
fn dot_certificate(test: &str) -> (ConfigMapDir, ClientFiles, Arc<ClientConfig>) {
    let pki = Pki::new();
    let server = pki.issue(&[SERVER_NAME]);
    let files = [
        ("tls.crt", server.cert_pem.as_str()),
        ("tls.key", server.key_pem.as_str()),
    ];
    let secret = ConfigMapDir::new(test, &files);
    let client_files = ClientFiles::new(test);
    let client = client_files.config(&pki, None);
    (secret, client_files, client)
}

/// Connections open while `run` stops, each accepted and served by meshdns: an idle TCP
/// connection, one with a query asked (`asked`), a DNS-over-TLS session and a kept-alive admin
/// connection.
struct Open {
    idle: TcpStream,
    asking: TcpStream,
    asked: Message,
    dot: TlsStream<TcpStream>,
    admin: TcpStream,
}

impl Open {
    /// Opens them (the idle TCP connection has had [`FAST`] answered, the admin connection
    /// `/livez`), then asks `asked`.
    async fn connect(addrs: Addrs, client: Arc<ClientConfig>, asked: &str) -> Open {
        let mut idle = TcpStream::connect(addrs.tcp).await.unwrap();
        let fast = frame_of(&query(FAST, RecordType::A).to_vec().unwrap());
        idle.write_all(&fast).await.unwrap();
        read_frame(&mut idle).await.expect("an answer over TCP");
        let tcp = TcpStream::connect(addrs.dot).await.unwrap();
        let dot = TlsConnector::from(client)
            .connect(ServerName::try_from(SERVER_NAME).unwrap(), tcp)
            .await
            .expect("a TLS handshake");
        let mut admin = TcpStream::connect(addrs.admin).await.unwrap();
        let livez = b"GET /livez HTTP/1.1\r\nHost: meshdns\r\n\r\n";
        admin.write_all(livez).await.unwrap();
        let mut head = [0u8; 512];
        let read = admin.read(&mut head).await.unwrap();
        assert!(head[..read].starts_with(b"HTTP/1.1 200"), "/livez answered");
        let asked = query(asked, RecordType::A);
        let mut asking = TcpStream::connect(addrs.tcp).await.unwrap();
        let frame = frame_of(&asked.to_vec().unwrap());
        asking.write_all(&frame).await.unwrap();
        Open {
            idle,
            asking,
            asked,
            dot,
            admin,
        }
    }

    /// Asserts that meshdns has closed the idle ones.
    async fn assert_idle_ones_closed(&mut self) {
        let mut rest = [0u8; 1];
        let soon = Duration::from_secs(1);
        let closed = |read: Result<std::io::Result<usize>, _>| matches!(read, Ok(Ok(0) | Err(_)));
        let idle = tokio::time::timeout(soon, self.idle.read(&mut rest)).await;
        assert!(closed(idle), "the idle TCP connection is closed");
        let dot = tokio::time::timeout(soon, self.dot.read(&mut rest)).await;
        assert!(closed(dot), "the DNS-over-TLS session is closed");
        let admin = tokio::time::timeout(soon, self.admin.read(&mut rest)).await;
        assert!(closed(admin), "the admin connection is closed");
    }
}

/// Runs meshdns on the test's runtime, asking an upstream that answers [`FAST`] at once and
/// everything else as `otherwise` (`vars` beside), and, with the connections of [`Open`] held,
/// tells it to stop once the upstream has been asked `asked` (the TCP query of [`Open`]).
/// Asserts that once `run` has returned none of the tasks it started is still alive; returns
/// the connections, and how long `run` took to return.
async fn stop_with_connections_open(
    test: &str,
    otherwise: Behaviour,
    vars: &[(&str, &str)],
    asked: &str,
) -> (Open, Duration) {
    // The fake runs on a runtime of its own: the test's counts meshdns's tasks alone.
    let fakes = tokio::runtime::Runtime::new().unwrap();
    let fast = Answer::records([rr::a(FAST, [192, 0, 2, 1])]);
    let upstream = FakeDns::builder()
        .answer(FAST, RecordType::A, fast)
        .otherwise(otherwise);
    let upstream = fakes.spawn(upstream.start()).await.unwrap();
    let (secret, _files, client) = dot_certificate(test);
    let runtime = tokio::runtime::Handle::current().metrics();
    assert_eq!(runtime.num_alive_tasks(), 0);
    let (config, listeners, addrs) = instance(upstream.addr, &secret, vars);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = meshdns::run(config, listeners, async {
        let _ = stopped.await;
    });
    tokio::pin!(running);
    let asking = async {
        let open = Open::connect(addrs, client, asked).await;
        let mut polls = 0;
        while !upstream.names().iter().any(|name| name == asked) {
            polls += 1;
            assert!(polls < 500, "the TCP query did not reach the upstream");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        open
    };
    let open = tokio::select! {
        ended = &mut running => panic!("run ended before it was told to: {ended:?}"),
        open = asking => open,
    };
    stop.send(()).unwrap();
    let stopping = std::time::Instant::now();
    running.await.expect("run ends cleanly");
    let took = stopping.elapsed();
    assert_eq!(
        runtime.num_alive_tasks(),
        0,
        "every task meshdns started has ended when run returns"
    );
    drop(upstream);
    fakes.shutdown_background();
    (open, took)
}

/// Connections are tasks of meshdns's tree too: with an idle TCP connection, one whose query is
/// still being answered, a DNS-over-TLS session and a kept-alive admin connection open when
/// `run` is told to stop, the query is answered and its reply written, the idle connections are
/// closed, and once `run` returns none of the tasks it started is still alive.
#[tokio::test]
async fn connections_open_at_shutdown_end_with_it_and_no_task_outlives_run() {
    const SLOW: &str = "slow-tcp.example.com.";
    let slow = Behaviour::Delay(
        Duration::from_millis(300),
        Answer::rcode(ResponseCode::NoError),
    );
    let (mut open, _) = stop_with_connections_open("shutdown-open", slow, &[], SLOW).await;
    let reply = tokio::time::timeout(Duration::from_secs(1), read_frame(&mut open.asking))
        .await
        .expect("the reply was written before run returned")
        .expect("a whole frame");
    assert_eq!(Message::from_vec(&reply).unwrap().id, open.asked.id);
    open.assert_idle_ones_closed().await;
}

/// The grace time bounds shutdown, and what it cuts ends too: a TCP query that no upstream
/// answers is still being answered when the grace time runs out; `run` returns then, and none
/// of the tasks it started — that connection's, its query's — is still alive.
#[tokio::test]
async fn a_query_cut_at_the_end_of_the_grace_time_leaves_no_task_alive() {
    const STUCK: &str = "stuck.example.com.";
    // Longer than the grace time: the query is still being answered when it runs out.
    let timeouts = [
        ("MESHDNS_TIMEOUT", "30s"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "30s"),
    ];
    let (mut open, took) =
        stop_with_connections_open("shutdown-grace", Behaviour::Drop, &timeouts, STUCK).await;
    assert!(
        took >= meshdns::SHUTDOWN_GRACE && took < meshdns::SHUTDOWN_GRACE * 2,
        "run returned {took:?} after it was told to stop, at the end of its grace time"
    );
    let cut = tokio::time::timeout(Duration::from_secs(1), read_frame(&mut open.asking)).await;
    assert_eq!(
        cut,
        Ok(None),
        "the cut query's connection is closed without a reply"
    );
    open.assert_idle_ones_closed().await;
}

/// A DNS listener ends only with the process: when a TCP listening socket breaks (here shut
/// down under meshdns, so that accepting on it fails with EINVAL), `run` returns that error at
/// once, without being told to stop — the binary then exits 1 — and none of the tasks it
/// started is still alive.
#[tokio::test]
async fn a_broken_listener_ends_run_with_its_error_and_no_task_outlives_it() {
    let fakes = tokio::runtime::Runtime::new().unwrap();
    let upstream = fakes.spawn(FakeDns::builder().start()).await.unwrap();
    let runtime = tokio::runtime::Handle::current().metrics();
    assert_eq!(runtime.num_alive_tasks(), 0);
    let vars = [("MESHDNS_UPSTREAMS", upstream.addr.to_string())];
    let config = meshdns::Config::from_vars(vars.map(|(k, v)| (k.to_string(), v)))
        .expect("a valid test config");
    let mut listeners = meshdns::bind(&["127.0.0.1:0".parse().unwrap()]).unwrap();
    listeners.admin = Some(meshdns::bind_admin("127.0.0.1:0".parse().unwrap()).unwrap());
    let tcp = listeners.tcp[0].try_clone().unwrap();
    let running = meshdns::run(config, listeners, std::future::pending());
    tokio::pin!(running);
    let served = tokio::time::timeout(Duration::from_millis(300), &mut running).await;
    assert!(served.is_err(), "run serves until a listener breaks");
    socket2::SockRef::from(&tcp)
        .shutdown(std::net::Shutdown::Read)
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("run returns once a listener breaks");
    let error = ended.expect_err("a broken listener is an error");
    assert_eq!(
        error.raw_os_error(),
        Some(22),
        "EINVAL from accept: {error}"
    );
    assert_eq!(
        runtime.num_alive_tasks(),
        0,
        "every task meshdns started has ended when run returns"
    );
    drop(upstream);
    fakes.shutdown_background();
}
