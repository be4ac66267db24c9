//! The DNS-over-TLS listener (`MESHDNS_DOT_LISTEN`) that peers ask: their questions answered
//! through the same routing as the other listeners, the client certificate as the access
//! control, and certificates that renew under a running meshdns — the one it serves and the
//! one it presents to its peers — with their expiry exported. Every server is on 127.0.0.1:0;
//! the certificate files live in directories the kubelet's way (a mounted Secret).

use crate::support::{self, dot};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use dot::{ClientFiles, Identity, Pki, SERVER_NAME};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use meshdns::testing::certificates::not_after;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use support::configmap::ConfigMapDir;
use support::{Answer, FakeDns, frame_of, read_frame, rr};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How often the test instances look at their certificate files (every 10 s in production).
const CHECK: Duration = Duration::from_millis(100);

/// The promise: a renewed certificate reaches new connections within a minute. Waited for
/// with [`support::eventually`], 100 ms apart.
const WITHIN_A_MINUTE: usize = 600;

/// 2049-01-01 and 2051-01-01 in seconds since the Unix epoch: the certificates' notAfter, by
/// which a renewal tells itself apart.
const Y2049: f64 = 2_493_072_000.0;
const Y2051: f64 = 2_556_144_000.0;

/// The name this cluster's kube-dns answers, and what it answers.
const POD: &str = "mongo-0.mongo.db.svc.cluster.local.";
const POD_IP: [u8; 4] = [10, 1, 0, 7];

async fn kube_dns() -> FakeDns {
    FakeDns::builder()
        .answer(POD, RecordType::A, Answer::records([rr::a(POD, POD_IP)]))
        .start()
        .await
}

/// meshdns with a DNS-over-TLS listener (and UDP/TCP, and the admin server), each on a port of
/// its own on 127.0.0.1, looking at its certificate files every [`CHECK`]. Stops when dropped.
struct Served {
    dns: SocketAddr,
    dot: Option<SocketAddr>,
    admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    running: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    async fn start(vars: &[(&str, &str)]) -> Served {
        let merged: HashMap<String, String> =
            [("MESHDNS_CACHE_SIZE", "0"), ("MESHDNS_ADMIN_LISTEN", "")]
                .iter()
                .chain(vars)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let mut config = meshdns::Config::from_vars(merged).expect("a valid test config");
        let dot_listen = config.dot.as_ref().map(|dot| dot.listen.clone());
        if let Some(dot) = config.dot.as_mut() {
            dot.check_every = CHECK;
        }
        let mut listeners = meshdns::bind(&["127.0.0.1:0".parse().unwrap()]).unwrap();
        let admin = meshdns::bind_admin("127.0.0.1:0".parse().unwrap()).unwrap();
        let admin_addr = admin.local_addr().unwrap();
        listeners.admin = Some(admin);
        listeners.dot = meshdns::bind_dot(&dot_listen.unwrap_or_default()).unwrap();
        let dot = listeners.dot.first().map(|l| l.local_addr().unwrap());
        let dns = listeners.local_addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let running = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            meshdns::run(config, listeners, shutdown)
                .await
                .expect("meshdns runs until shut down");
        });
        Served {
            dns,
            dot,
            admin: admin_addr,
            stop: Some(stop),
            running: Some(running),
        }
    }

    /// A DoT server in front of `kube` (as kube-dns), serving the certificate in `secret`
    /// (`tls.crt`, `tls.key`); with `client_ca`, requiring client certificates signed by the
    /// `ca.crt` there.
    async fn dot(
        kube: &FakeDns,
        secret: &ConfigMapDir,
        client_ca: bool,
        vars: &[(&str, &str)],
    ) -> Served {
        let file = |name: &str| secret.path.join(name).display().to_string();
        let (cert, key, ca) = (file("tls.crt"), file("tls.key"), file("ca.crt"));
        let upstream = kube.addr.to_string();
        let mut all = vec![
            ("MESHDNS_UPSTREAMS", upstream.as_str()),
            ("MESHDNS_DOT_LISTEN", "127.0.0.1:0"),
            ("MESHDNS_DOT_CERT_FILE", cert.as_str()),
            ("MESHDNS_DOT_KEY_FILE", key.as_str()),
        ];
        if client_ca {
            all.push(("MESHDNS_DOT_CLIENT_CA_FILE", ca.as_str()));
        }
        all.extend_from_slice(vars);
        Served::start(&all).await
    }

    fn dot_addr(&self) -> SocketAddr {
        self.dot.expect("a DoT listener")
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let response = support::admin::get(self.admin, "/metrics").await;
        assert_eq!(response.status, 200);
        support::admin::Scrape::parse(&response.body).value(name, labels)
    }

    async fn server_expiry(&self) -> f64 {
        self.metric(
            "meshdns_server_certificate_expiry_timestamp_seconds",
            &[("listener", "dot")],
        )
        .await
    }

    async fn server_reloads(&self, result: &str) -> f64 {
        self.metric(
            "meshdns_server_certificate_reloads_total",
            &[("listener", "dot"), ("result", result)],
        )
        .await
    }

    /// Signals shutdown; true when `run` returned within `limit`.
    async fn stop_within(mut self, limit: Duration) -> bool {
        let _ = self.stop.take().expect("running").send(());
        let running = self.running.take().expect("running");
        tokio::time::timeout(limit, running).await.is_ok()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A Secret with the CA, and a server certificate for [`SERVER_NAME`] until `year`.
fn server_secret(test: &str, pki: &Pki, year: i32) -> ConfigMapDir {
    let server = pki.issue_until(&[SERVER_NAME], year);
    ConfigMapDir::new(test, &secret_files(&pki.ca_pem(), &server))
}

/// What cert-manager puts in a certificate's Secret: the CA, the certificate and its key.
fn secret_files<'a>(ca: &'a str, identity: &'a Identity) -> [(&'static str, &'a str); 3] {
    [
        ("ca.crt", ca),
        ("tls.crt", identity.cert_pem.as_str()),
        ("tls.key", identity.key_pem.as_str()),
    ]
}

/// A DoT server of its own for one test: a mesh CA, kube-dns, the Secret (a server
/// certificate until 2049) and meshdns serving it; with `client_ca`, client certificates
/// required.
struct Setup {
    pki: Pki,
    kube: FakeDns,
    secret: ConfigMapDir,
    served: Served,
    files: ClientFiles,
}

impl Setup {
    async fn new(test: &str, client_ca: bool, vars: &[(&str, &str)]) -> Setup {
        let (pki, kube) = (Pki::new(), kube_dns().await);
        let secret = server_secret(test, &pki, 2049);
        let served = Served::dot(&kube, &secret, client_ca, vars).await;
        let files = ClientFiles::new(test);
        Setup {
            pki,
            kube,
            secret,
            served,
            files,
        }
    }

    /// A client configuration trusting the mesh CA, presenting a certificate it signed.
    fn client(&self) -> Arc<ClientConfig> {
        let client = self.pki.issue(&["meshdns.cluster-a.test"]);
        self.files.config(&self.pki, Some(&client))
    }

    /// A client configuration trusting the mesh CA, presenting no certificate.
    fn anonymous(&self) -> Arc<ClientConfig> {
        self.files.config(&self.pki, None)
    }
}

/// A TLS connection to `dot` with `config`, checking the server's certificate for
/// [`SERVER_NAME`].
async fn connect(dot: SocketAddr, config: Arc<ClientConfig>) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(dot).await.expect("connect");
    TlsConnector::from(config)
        .connect(ServerName::try_from(SERVER_NAME).unwrap(), tcp)
        .await
        .expect("a TLS handshake")
}

/// The notAfter of the certificate the server presented on `stream`.
fn presented(stream: &TlsStream<TcpStream>) -> f64 {
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .clone();
    not_after(&leaf).expect("a notAfter") as f64
}

/// Asks `name` A over `stream`; the reply, or `None` when the connection gives none.
async fn ask_over(stream: &mut TlsStream<TcpStream>, name: &str) -> Option<Message> {
    let query = support::query(name, RecordType::A).to_vec().unwrap();
    stream.write_all(&frame_of(&query)).await.ok()?;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_frame(stream))
        .await
        .ok()??;
    Message::from_vec(&reply).ok()
}

/// The answer's address lines, for comparing with what kube-dns answers.
fn answered(reply: &Message) -> Vec<String> {
    reply.answers.iter().map(support::record_line).collect()
}

#[tokio::test]
async fn a_peers_service_question_over_dot_is_passed_through_to_kube_dns() {
    let setup = Setup::new("dot-pass", true, &[]).await;
    let mut stream = connect(setup.served.dot_addr(), setup.client()).await;
    // Pipelined: several queries written before any reply is read.
    for _ in 0..5 {
        let query = support::query(POD, RecordType::A).to_vec().unwrap();
        stream.write_all(&frame_of(&query)).await.unwrap();
    }
    for _ in 0..5 {
        let reply = read_frame(&mut stream).await.expect("a reply");
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.response_code, ResponseCode::NoError);
        assert_eq!(
            answered(&reply),
            [support::record_line(&rr::a(POD, POD_IP))]
        );
    }
    assert!(
        setup.kube.count(support::Via::Udp) >= 1,
        "asked of kube-dns"
    );
    let labels = [
        ("proto", "tls"),
        ("route", "passthrough"),
        ("rcode", "NOERROR"),
    ];
    assert_eq!(
        setup.served.metric("meshdns_requests_total", &labels).await,
        5.0
    );
}

#[tokio::test]
async fn a_dot_client_without_a_required_certificate_gets_no_answer_and_is_counted() {
    let setup = Setup::new("dot-nocert", true, &[]).await;
    let tcp = TcpStream::connect(setup.served.dot_addr()).await.unwrap();
    // TLS 1.3: the client's side of the handshake ends before the server has checked it; the
    // refusal comes as an alert instead of the first reply.
    let refused = match TlsConnector::from(setup.anonymous())
        .connect(ServerName::try_from(SERVER_NAME).unwrap(), tcp)
        .await
    {
        Ok(mut stream) => ask_over(&mut stream, POD).await.is_none(),
        Err(_) => true,
    };
    assert!(refused, "answered a client without a certificate");
    assert!(
        support::eventually(50, || async {
            setup
                .served
                .metric("meshdns_dropped_total", &[("reason", "tls_handshake")])
                .await
                == 1.0
        })
        .await
    );
    assert!(setup.kube.seen().is_empty(), "nothing reached kube-dns");
}

#[tokio::test]
async fn with_a_client_ca_the_certificate_not_allow_from_admits_dot_clients() {
    // 127.0.0.1 is outside MESHDNS_ALLOW_FROM, as a peer's address is outside the cluster's
    // networks.
    let setup = Setup::new(
        "dot-allow-cert",
        true,
        &[("MESHDNS_ALLOW_FROM", "10.0.0.0/8")],
    )
    .await;
    let refused = support::tcp(setup.served.dns, &support::query(POD, RecordType::A)).await;
    assert_eq!(
        refused.msg.response_code,
        ResponseCode::Refused,
        "TCP asks MESHDNS_ALLOW_FROM"
    );
    let mut stream = connect(setup.served.dot_addr(), setup.client()).await;
    let reply = ask_over(&mut stream, POD).await.expect("a reply over DoT");
    assert_eq!(reply.response_code, ResponseCode::NoError);
}

#[tokio::test]
async fn without_a_client_ca_allow_from_applies_to_dot_clients() {
    let setup = Setup::new(
        "dot-allow-addr",
        false,
        &[("MESHDNS_ALLOW_FROM", "10.0.0.0/8")],
    )
    .await;
    let mut stream = connect(setup.served.dot_addr(), setup.anonymous()).await;
    let reply = ask_over(&mut stream, POD).await.expect("a reply over DoT");
    assert_eq!(reply.response_code, ResponseCode::Refused);
    assert!(setup.kube.seen().is_empty());
}

/// The day-90 problem, fixed: cert-manager renews the Secret, and new connections get the new
/// certificate without a restart while the ones open keep working; the expiry shown moves.
#[tokio::test]
async fn a_renewed_server_certificate_reaches_new_connections_and_open_ones_keep_working() {
    let mut setup = Setup::new("dot-renew", true, &[]).await;
    let (served, config) = (&setup.served, setup.client());
    let mut open = connect(served.dot_addr(), Arc::clone(&config)).await;
    assert_eq!(presented(&open), Y2049);
    assert!(ask_over(&mut open, POD).await.is_some());
    assert_eq!(served.server_expiry().await, Y2049);

    let renewed = setup.pki.issue_until(&[SERVER_NAME], 2051);
    setup
        .secret
        .update(&secret_files(&setup.pki.ca_pem(), &renewed));
    let served = &setup.served;
    let mut new_connections_renewed = false;
    for _ in 0..WITHIN_A_MINUTE {
        let fresh = connect(served.dot_addr(), Arc::clone(&config)).await;
        if presented(&fresh) == Y2051 {
            new_connections_renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        new_connections_renewed,
        "a new connection got the renewed certificate"
    );
    assert_eq!(served.server_expiry().await, Y2051);
    assert_eq!(served.server_reloads("applied").await, 1.0);
    // The connection opened before the renewal still answers, on its certificate.
    let reply = ask_over(&mut open, POD)
        .await
        .expect("the open connection answers");
    assert_eq!(reply.response_code, ResponseCode::NoError);
    assert_eq!(presented(&open), Y2049);
}

#[tokio::test]
async fn a_broken_renewal_keeps_the_certificate_in_force_and_is_counted_as_rejected() {
    let mut setup = Setup::new(
        "dot-broken",
        false,
        &[("MESHDNS_ALLOW_FROM", "127.0.0.0/8")],
    )
    .await;
    // A renewal caught between its two files: the new certificate with the old key.
    let old_key = std::fs::read_to_string(setup.secret.path.join("tls.key")).unwrap();
    let renewed = setup.pki.issue_until(&[SERVER_NAME], 2051);
    let half = Identity {
        key_pem: old_key,
        ..renewed
    };
    setup
        .secret
        .update(&secret_files(&setup.pki.ca_pem(), &half));
    let served = &setup.served;
    assert!(
        support::eventually(WITHIN_A_MINUTE, || async {
            served.server_reloads("rejected").await == 1.0
        })
        .await,
        "the rejection is counted"
    );
    let fresh = connect(served.dot_addr(), setup.anonymous()).await;
    assert_eq!(presented(&fresh), Y2049, "the certificate in force stays");
    assert_eq!(served.server_expiry().await, Y2049);
    // Looked at again only when the files change again: counted once.
    tokio::time::sleep(CHECK * 5).await;
    assert_eq!(served.server_reloads("rejected").await, 1.0);
}

/// The meshdns binary, in a process of its own (two instances in one test process would share
/// their loop marker and take each other's queries for loops); killed when dropped.
struct Binary {
    child: std::process::Child,
    dns: SocketAddr,
    admin: SocketAddr,
}

impl Binary {
    async fn start(vars: &[(&str, &str)]) -> Binary {
        let dns: SocketAddr = format!("127.0.0.1:{}", support::free_port())
            .parse()
            .unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", support::free_port())
            .parse()
            .unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_meshdns"))
            .env_clear()
            .env("MESHDNS_LISTEN", dns.to_string())
            .env("MESHDNS_ADMIN_LISTEN", admin.to_string())
            .env("MESHDNS_CACHE_SIZE", "0")
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the meshdns binary starts");
        let binary = Binary { child, dns, admin };
        // Listening first (the request helper takes a refused connection for a failure).
        let ready = support::eventually(100, || async {
            TcpStream::connect(admin).await.is_ok()
                && support::admin::get(admin, "/readyz").await.status == 200
        })
        .await;
        assert!(ready, "the binary serves");
        binary
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let response = support::admin::get(self.admin, "/metrics").await;
        support::admin::Scrape::parse(&response.body).value(name, labels)
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both ends of a peer link renew under running meshdns instances: cluster b's DoT listener
/// its server certificate, and cluster a's meshdns (the binary) its client certificate;
/// queries from a to b keep being answered, new connections carry the new certificates, and
/// every expiry series moves.
#[tokio::test]
async fn both_ends_of_a_peer_link_renew_their_certificates_without_a_restart() {
    let pki = Pki::new();
    let kube_b = kube_dns().await;
    let mut secret_b = server_secret("peer-b", &pki, 2049);
    let b = Served::dot(&kube_b, &secret_b, true, &[]).await;
    let client_a = pki.issue_until(&["meshdns.cluster-a.test"], 2049);
    let mut secret_a = ConfigMapDir::new("peer-a", &secret_files(&pki.ca_pem(), &client_a));
    let file = |name: &str| secret_a.path.join(name).display().to_string();
    let (ca, cert, key) = (file("ca.crt"), file("tls.crt"), file("tls.key"));
    let clusters = format!(
        "a=; b={} transport=tls tls_name={SERVER_NAME}",
        b.dot_addr()
    );
    let a = Binary::start(&[
        // kube-dns of cluster a is not asked here: a closed port.
        ("MESHDNS_UPSTREAMS", "127.0.0.1:1"),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
        ("MESHDNS_TLS_CA_FILE", ca.as_str()),
        ("MESHDNS_TLS_CERT_FILE", cert.as_str()),
        ("MESHDNS_TLS_KEY_FILE", key.as_str()),
    ])
    .await;
    let ask_a = || async {
        let asked = support::query("mongo-0.mongo.db.cluster.b.", RecordType::A);
        support::udp(a.dns, &asked).await.msg.response_code
    };
    let peer_expiry = || {
        a.metric(
            "meshdns_peer_certificate_expiry_timestamp_seconds",
            &[("peer", "b")],
        )
    };
    let client_expiry = || a.metric("meshdns_client_certificate_expiry_timestamp_seconds", &[]);
    assert_eq!(ask_a().await, ResponseCode::NoError);
    assert_eq!(peer_expiry().await, Y2049);
    assert_eq!(client_expiry().await, Y2049);
    assert_eq!(b.server_expiry().await, Y2049);

    // b renews first: a's connection, opened before, keeps answering.
    let renewed_b = pki.issue_until(&[SERVER_NAME], 2051);
    secret_b.update(&secret_files(&pki.ca_pem(), &renewed_b));
    assert!(
        support::eventually(WITHIN_A_MINUTE, || async {
            b.server_expiry().await == Y2051
        })
        .await
    );
    assert_eq!(ask_a().await, ResponseCode::NoError);
    assert_eq!(
        peer_expiry().await,
        Y2049,
        "a's connection is still the one opened before"
    );

    // Then a: its reload replaces its TLS settings, and its next connection to b presents the
    // new client certificate, which b's client CA verifies, and meets b's renewed one.
    let renewed_a = pki.issue_until(&["meshdns.cluster-a.test"], 2051);
    secret_a.update(&secret_files(&pki.ca_pem(), &renewed_a));
    assert!(
        support::eventually(WITHIN_A_MINUTE, || async { client_expiry().await == Y2051 }).await
    );
    assert!(
        support::eventually(WITHIN_A_MINUTE, || async {
            ask_a().await == ResponseCode::NoError && peer_expiry().await == Y2051
        })
        .await,
        "a's new connection to b met b's renewed certificate"
    );
    assert_eq!(
        b.metric("meshdns_dropped_total", &[("reason", "tls_handshake")])
            .await,
        0.0,
        "b refused no handshake of a"
    );
}

#[tokio::test]
async fn shutdown_ends_the_dot_listener_with_a_connection_open() {
    let setup = Setup::new("dot-shutdown", true, &[]).await;
    let mut open = connect(setup.served.dot_addr(), setup.client()).await;
    assert!(ask_over(&mut open, POD).await.is_some());
    let grace = meshdns::SHUTDOWN_GRACE + Duration::from_secs(5);
    assert!(setup.served.stop_within(grace).await, "run returned");
    assert!(
        ask_over(&mut open, POD).await.is_none(),
        "the connection was closed"
    );
}
