//! SIGTERM during load (docs/design.md, "Limits and bad input"): the built binary, with queries
//! in flight to a slow upstream, gets SIGTERM; every query in flight — over UDP and over TCP —
//! is still answered, and the process exits 0 without running out its `SHUTDOWN_GRACE`.
//!
//! A real process on the real clock, so the test orders events instead of timing them: SIGTERM
//! goes once the upstream holds every query, and the grace not running out shows in the log
//! (meshdns warns when it does). Time limits here only keep a hung run from hanging the suite.

use crate::support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use support::{
    Answer, Behaviour, FakeDns, frame_of, free_port, query, read_frame, rr, udp_raw_within,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

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
