//! What the DNS-over-TLS tests need around meshdns's client: a throwaway PKI made with rcgen at
//! test time ([`Pki`]), the client configuration loaded from its PEM files the way the binary
//! loads them ([`ClientFiles`]), and a small DNS-over-TLS server ([`DotServer`]) on 127.0.0.1:0
//! whose behaviour a test picks ([`Behaviour`]) — or the same server over plain TCP
//! ([`DotServer::plain`]), for the pipelined TCP connections.
//!
//! The server is a rustls server of its own (not meshdns code): it terminates TLS, reads
//! length-prefixed queries, and answers each with an A record, in the order and manner the
//! behaviour says. It can close connections after a number of queries, in good order or by a
//! reset, cut idle ones, and restart (every connection dropped at once, mid-traffic). Its tasks
//! end when it is dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, Metadata, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use meshdns::testing::certificates::{ClientIdentity, load};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::{frame_of, read_frame, rr};

/// The name the test servers' certificates carry, and the client expects.
pub const SERVER_NAME: &str = "dns.cluster-b.test";

/// The address every answer carries (data only: nothing is sent there).
pub const ANSWER: [u8; 4] = [127, 0, 0, 53];

/// A certificate authority made for one test.
pub struct Pki {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate chain and its key, for a server or a client.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new() -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: two CAs of one name would look like one CA whose signature is bad.
        params.distinguished_name.push(
            DnType::CommonName,
            format!("meshdns test CA {:016x}", rand::random::<u64>()),
        );
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            ca_pem: cert.pem(),
            ca_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// A leaf certificate for `names` (DNS names or IP addresses), signed by this CA.
    pub fn issue(&self, names: &[&str]) -> Identity {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.sign(CertificateParams::new(names).expect("leaf params"))
    }

    /// [`Pki::issue`] with a certificate that expires on January 1st of `year`: a renewal
    /// tells itself apart by its notAfter.
    pub fn issue_until(&self, names: &[&str], year: i32) -> Identity {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Identity {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Identity {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    pub fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca_der.clone())
            .expect("the CA is a valid root");
        Arc::new(roots)
    }
}

/// PEM files in a directory of their own, removed on drop.
pub struct ClientFiles {
    dir: PathBuf,
}

impl ClientFiles {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("meshdns-dot-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Self { dir }
    }

    /// Writes `ca`'s certificate as a PEM bundle here; its path.
    pub fn write_ca(&self, ca: &Pki) -> PathBuf {
        let ca_file = self.dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.ca_pem).expect("write the CA bundle");
        ca_file
    }

    /// The client configuration trusting `ca`, with `client` as our certificate when given,
    /// loaded through meshdns's loader from files as in production.
    pub fn config(&self, ca: &Pki, client: Option<&Identity>) -> Arc<ClientConfig> {
        let ca_file = self.write_ca(ca);
        let (cert_file, key_file) = (self.dir.join("client.pem"), self.dir.join("client.key"));
        let identity = client.map(|identity| {
            std::fs::write(&cert_file, &identity.cert_pem).expect("write the client cert");
            std::fs::write(&key_file, &identity.key_pem).expect("write the client key");
            ClientIdentity {
                cert_file: &cert_file,
                key_file: &key_file,
            }
        });
        load(&ca_file, identity).expect("the test PKI loads").config
    }
}

impl Drop for ClientFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the fake server treats the queries of a connection.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answer each query at once.
    Answer,
    /// Wait until `n` queries have come, then answer them last first.
    Reverse(usize),
    /// Answer each query after `delay`, several at once (counts the most unanswered at once).
    Delay(Duration),
    /// Never answer queries for this name (`q-drop.test.`); answer the others.
    DropName(String),
    /// On the first connection: read `n` queries, write half of the first reply's frame, close.
    /// Later connections answer normally.
    HalfFrameFirst(usize),
    /// Read queries, answer none, keep the connection open.
    Silent,
    /// Answer the first `n` queries of each connection one by one, then close it in good order
    /// (like CoreDNS's `maxtcpqueries`); with 0, close on the first query without answering.
    CloseAfter(usize),
    /// Before each reply, send a one-byte frame and a reply with an ID nobody asked for.
    NoiseFirst,
    /// Answer the first `n` queries of each connection, then reset it: no close_notify, and a
    /// TCP RST (SO_LINGER 0) that takes whatever the client sent since with it.
    ResetAfter(usize),
    /// Answer each query at once; close a connection in good order once it has been quiet for
    /// this long (a load balancer's idle cut, or a server's idle timeout shorter than ours).
    IdleCut(Duration),
    /// On the first connection: read queries and answer none, keeping it open (a peer that
    /// hangs). Later connections answer normally.
    SilentFirst,
}

/// What a connection task hands its writer.
enum Out {
    Frame(Vec<u8>),
    /// Stop writing and drop the connection without closing it in good order.
    Reset,
}

/// A DNS-over-TLS server on 127.0.0.1:0.
pub struct DotServer {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    /// One message per connection that ended, with how many queries it had read.
    closed: Mutex<mpsc::UnboundedReceiver<usize>>,
    /// Wakes the accept loop to drop every connection it serves ([`DotServer::restart`]).
    restart: Arc<Notify>,
    /// What a new accept loop needs ([`DotServer::restart_after`]).
    serving: (Option<TlsAcceptor>, Behaviour, mpsc::UnboundedSender<usize>),
    accept_loop: std::sync::Mutex<JoinHandle<()>>,
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Stats {
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// Handshakes that completed on the server side.
    pub handshakes_ok: AtomicU64,
    pub queries: AtomicU64,
    /// Queries read but not yet answered, now and at most.
    pub outstanding: AtomicUsize,
    pub most_outstanding: AtomicUsize,
    /// The certificate each client presented, in the order the handshakes completed (mutual
    /// TLS only).
    pub client_certificates: std::sync::Mutex<Vec<CertificateDer<'static>>>,
}

impl DotServer {
    /// A server presenting `identity`; with `client_ca`, it requires a client certificate
    /// signed by that CA.
    pub async fn start(identity: &Identity, client_ca: Option<&Pki>, behaviour: Behaviour) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions");
        let builder = match client_ca {
            Some(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(ca.roots(), provider)
                    .build()
                    .expect("a client verifier"),
            ),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(identity.chain.clone(), identity.key.clone_key())
            .expect("the server identity is valid");
        Self::listen(Some(TlsAcceptor::from(Arc::new(config))), behaviour).await
    }

    /// The same server over plain TCP (DNS over TCP, RFC 7766).
    pub async fn plain(behaviour: Behaviour) -> Self {
        Self::listen(None, behaviour).await
    }

    async fn listen(acceptor: Option<TlsAcceptor>, behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(Stats::default());
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let restart = Arc::new(Notify::new());
        let accept_loop = tokio::spawn(accept(
            listener,
            acceptor.clone(),
            behaviour.clone(),
            Arc::clone(&stats),
            closed_tx.clone(),
            Arc::clone(&restart),
        ));
        Self {
            addr,
            stats,
            closed: Mutex::new(closed),
            restart,
            serving: (acceptor, behaviour, closed_tx),
            accept_loop: std::sync::Mutex::new(accept_loop),
        }
    }

    /// Stops the server — its port closed, every connection dropped unannounced — and starts
    /// it again on the same port after `gap`, during which connections are refused: a server
    /// process restarted in place (stunnel, unbound).
    pub async fn restart_after(&self, gap: Duration) {
        let old = std::mem::replace(
            &mut *self.accept_loop.lock().expect("not poisoned"),
            tokio::spawn(async {}),
        );
        old.abort();
        let _ = old.await;
        tokio::time::sleep(gap).await;
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("the port is ours again");
        let (acceptor, behaviour, closed) = self.serving.clone();
        let new = tokio::spawn(accept(
            listener,
            acceptor,
            behaviour,
            Arc::clone(&self.stats),
            closed,
            Arc::clone(&self.restart),
        ));
        *self.accept_loop.lock().expect("not poisoned") = new;
    }

    /// Drops every open connection at once, unannounced (no close_notify), as a server behind
    /// a load balancer that is killed and replaced; queries in flight on them are lost. New
    /// connections are accepted as before.
    pub fn restart(&self) {
        self.restart.notify_one();
    }

    pub fn queries(&self) -> u64 {
        self.stats.queries.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// Waits (at most 10 s) until a connection has ended; returns how many queries it read.
    pub async fn connection_closed(&self) -> usize {
        tokio::time::timeout(Duration::from_secs(10), self.closed.lock().await.recv())
            .await
            .expect("a connection closed within 10 s")
            .expect("the server is running")
    }
}

impl Drop for DotServer {
    fn drop(&mut self) {
        self.accept_loop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .abort();
    }
}

async fn accept(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    behaviour: Behaviour,
    stats: Arc<Stats>,
    closed: mpsc::UnboundedSender<usize>,
    restart: Arc<Notify>,
) {
    // Connection tasks live in this set, so aborting the accept loop ends them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                // As CoreDNS's (Go sets TCP_NODELAY on every connection): each reply leaves at
                // once, so a reset right after it cannot take it back from the send queue.
                let _ = tcp.set_nodelay(true);
                if matches!(behaviour, Behaviour::ResetAfter(_)) {
                    // Dropping the socket then sends RST instead of FIN.
                    let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
                }
                let number = stats.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, behaviour, stats, closed) =
                    (acceptor.clone(), behaviour.clone(), Arc::clone(&stats), closed.clone());
                connections.spawn(async move {
                    let read = match acceptor {
                        None => serve(tcp, behaviour, number, &stats).await,
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(stream) => {
                                stats.handshakes_ok.fetch_add(1, Ordering::SeqCst);
                                if let Some(presented) = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()) {
                                    stats.client_certificates.lock().expect("not poisoned").push(presented.clone().into_owned());
                                }
                                serve(stream, behaviour, number, &stats).await
                            }
                            Err(_) => 0,
                        },
                    };
                    let _ = closed.send(read);
                });
            }
            () = restart.notified() => connections.abort_all(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves one connection; returns how many queries it read.
async fn serve<S>(stream: S, behaviour: Behaviour, number: u64, stats: &Arc<Stats>) -> usize
where
    S: AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let (out, mut outgoing) = mpsc::unbounded_channel::<Out>();
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        while let Some(next) = outgoing.recv().await {
            let Out::Frame(frame) = next else {
                // What is written goes out; then the connection is dropped with the task: no
                // close_notify, no shutdown.
                let _ = writer.flush().await;
                return;
            };
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let replies = Sender(out);
    let mut read = 0;
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let next = match &behaviour {
            Behaviour::IdleCut(quiet) => {
                match tokio::time::timeout(*quiet, read_frame(&mut reader)).await {
                    Ok(next) => next,
                    Err(_) => {
                        // Quiet for too long: close_notify and FIN after what is queued.
                        drop(replies);
                        let _ = tasks.join_next().await;
                        return read;
                    }
                }
            }
            _ => read_frame(&mut reader).await,
        };
        let Some(query) = next else { break };
        read += 1;
        stats.queries.fetch_add(1, Ordering::SeqCst);
        let now = stats.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
        stats.most_outstanding.fetch_max(now, Ordering::SeqCst);
        let Some(reply) = answer(&query) else {
            continue;
        };
        let done = |stats: &Stats| stats.outstanding.fetch_sub(1, Ordering::SeqCst);
        match &behaviour {
            Behaviour::Answer | Behaviour::IdleCut(_) => {
                done(stats);
                let _ = replies.send(frame_of(&reply));
            }
            Behaviour::Reverse(n) => {
                held.push(reply);
                if held.len() == *n {
                    for reply in held.drain(..).rev() {
                        done(stats);
                        let _ = replies.send(frame_of(&reply));
                    }
                }
            }
            Behaviour::Delay(delay) => {
                let (replies, stats, delay) = (replies.clone(), Arc::clone(stats), *delay);
                tasks.spawn(async move {
                    tokio::time::sleep(delay).await;
                    done(&stats);
                    let _ = replies.send(frame_of(&reply));
                });
            }
            Behaviour::DropName(name) => {
                if question_name(&query).as_deref() != Some(name.as_str()) {
                    done(stats);
                    let _ = replies.send(frame_of(&reply));
                }
            }
            Behaviour::HalfFrameFirst(n) => {
                if number > 0 {
                    done(stats);
                    let _ = replies.send(frame_of(&reply));
                } else if read == *n {
                    let frame = frame_of(&reply);
                    let _ = replies.send(frame[..frame.len() / 2].to_vec());
                    // Dropping the sender ends the writer, which closes the connection.
                    drop(replies);
                    let _ = tasks.join_next().await;
                    return read;
                }
            }
            Behaviour::Silent => {}
            Behaviour::CloseAfter(n) => {
                if read <= *n {
                    done(stats);
                    let _ = replies.send(frame_of(&reply));
                }
                if read >= *n {
                    // The writer sends what is queued, then close_notify, then closes.
                    drop(replies);
                    let _ = tasks.join_next().await;
                    return read;
                }
            }
            Behaviour::ResetAfter(n) => {
                if read <= *n {
                    done(stats);
                    let _ = replies.send(frame_of(&reply));
                }
                if read >= *n {
                    let _ = replies.0.send(Out::Reset);
                    let _ = tasks.join_next().await;
                    return read;
                }
            }
            Behaviour::SilentFirst => {
                if number > 0 {
                    done(stats);
                    let _ = replies.send(frame_of(&reply));
                }
            }
            Behaviour::NoiseFirst => {
                done(stats);
                let mut stray = reply.clone();
                let id = u16::from_be_bytes([stray[0], stray[1]]).wrapping_add(1);
                stray[..2].copy_from_slice(&id.to_be_bytes());
                let _ = replies.send(vec![0, 1, 0xff]);
                let _ = replies.send(frame_of(&stray));
                let _ = replies.send(frame_of(&reply));
            }
        }
    }
    read
}

/// The writer's queue, taking frames.
#[derive(Clone)]
struct Sender(mpsc::UnboundedSender<Out>);

impl Sender {
    fn send(&self, frame: Vec<u8>) -> Result<(), mpsc::error::SendError<Out>> {
        self.0.send(Out::Frame(frame))
    }
}

/// The reply to a query: its ID and question, RD copied, one A record.
fn answer(query: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    let mut reply = Message::new(
        request.metadata.id,
        hickory_proto::op::MessageType::Response,
        request.metadata.op_code,
    );
    reply.metadata = Metadata::response_from_request(&request.metadata);
    reply.metadata.recursion_available = true;
    for question in &request.queries {
        reply.add_query(question.clone());
        if question.query_type() == RecordType::A {
            reply.add_answer(Record::from_rdata(
                question.name().clone(),
                30,
                RData::A(A::from(std::net::Ipv4Addr::from(ANSWER))),
            ));
        }
    }
    reply.to_vec().ok()
}

fn question_name(query: &[u8]) -> Option<String> {
    let request = Message::from_vec(query).ok()?;
    Some(request.queries.first()?.name().to_ascii())
}

/// A query for `name` and `rtype`, with ID 0 (the client assigns its own).
pub fn query(name: &str, rtype: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(rr::name(name), rtype));
    message.to_vec().expect("encode a query")
}

/// The question name of a reply, and whether it carries the test answer.
pub fn parse_reply(reply: &[u8]) -> (String, bool) {
    let message = Message::from_vec(reply).expect("a well-formed reply");
    let name = message
        .queries
        .first()
        .map(|q| q.name().to_ascii())
        .unwrap_or_default();
    let answered = message
        .answers
        .iter()
        .any(|r| matches!(&r.data, RData::A(a) if a.0 == std::net::Ipv4Addr::from(ANSWER)));
    (name, answered)
}

/// What [`traffic_through_meshdns`] saw.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub asked: usize,
    /// Replies that were not NOERROR with the peer's answer for the name asked.
    pub failed: Vec<String>,
}

/// Asks meshdns `count` distinct names of cluster b (every one a miss), one every 10 ms over
/// UDP (100 q/s, as peer restarts were measured in production), and checks every reply
/// against the peer's answer.
pub async fn traffic_through_meshdns(meshdns: SocketAddr, count: usize) -> Outcome {
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    let mut asked = JoinSet::new();
    for i in 0..count {
        pace.tick().await;
        asked.spawn(async move {
            let name = format!("member-{i}.mongo.db.cluster.b.");
            let reply = super::udp(meshdns, &super::query(&name, RecordType::A)).await;
            let expected = [format!("{name} A {}", std::net::Ipv4Addr::from(ANSWER))];
            let right = reply.msg.response_code == hickory_proto::op::ResponseCode::NoError
                && reply.answer_lines() == expected;
            (!right).then(|| {
                format!(
                    "{name}: {:?} {:?}",
                    reply.msg.response_code,
                    reply.answer_lines()
                )
            })
        });
    }
    let mut failed = Vec::new();
    while let Some(done) = asked.join_next().await {
        failed.extend(done.expect("a query task finished"));
    }
    Outcome {
        asked: count,
        failed,
    }
}

/// Runs 300 misses through `meshdns`, whose cluster b is `server` alone, calling `disturb`
/// while they run: every query must be answered right, no attempt may fail (so the endpoint
/// is never marked down), and `meshdns_upstream_healthy` is 1 at the end.
pub async fn no_query_fails<F, Fut>(
    meshdns: &crate::support::Meshdns,
    server: &Arc<DotServer>,
    disturb: F,
) where
    F: FnOnce(Arc<DotServer>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    const QUERIES: usize = 300;
    let traffic = tokio::spawn(traffic_through_meshdns(meshdns.addr, QUERIES));
    disturb(Arc::clone(server)).await;
    let outcome = traffic.await.expect("the traffic ran");
    let mut attempts = Vec::new();
    for result in ["ok", "error", "timeout", "tls_error"] {
        attempts.push((result, meshdns.upstream_requests("b", result).await));
    }
    assert_eq!(
        outcome,
        Outcome {
            asked: QUERIES,
            failed: Vec::new()
        },
        "attempts: {attempts:?}, connections: {}",
        server.connections()
    );
    assert_eq!(
        attempts,
        [
            ("ok", QUERIES as f64),
            ("error", 0.0),
            ("timeout", 0.0),
            ("tls_error", 0.0)
        ],
        "no attempt failed"
    );
    let endpoint = server.addr.to_string();
    assert_eq!(
        meshdns
            .metric(
                "meshdns_upstream_healthy",
                &[("peer", "b"), ("endpoint", &endpoint)]
            )
            .await,
        1.0,
        "never marked down"
    );
}
