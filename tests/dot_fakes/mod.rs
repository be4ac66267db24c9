//! What the DNS-over-TLS tests need around meshdns's client: a throwaway PKI made with rcgen at
//! test time ([`Pki`]), the client configuration loaded from its PEM files the way the binary
//! loads them ([`ClientFiles`]), and a small DNS-over-TLS server ([`DotServer`]) on 127.0.0.1:0
//! whose behaviour a test picks ([`Behaviour`]).
//!
//! The server is a rustls server of its own (not meshdns code): it terminates TLS, reads
//! length-prefixed queries, and answers each with an A record, in the order and manner the
//! behaviour says. Its tasks end when it is dropped.

// Each test binary uses only part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, Metadata, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use meshdns::certificates::{ClientIdentity, load_client_config};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::support::{frame_of, read_frame, rr};

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
        let key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names)
            .expect("leaf params")
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
        load_client_config(&ca_file, identity).expect("the test PKI loads")
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
}

/// A DNS-over-TLS server on 127.0.0.1:0.
pub struct DotServer {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    /// One message per connection that ended, with how many queries it had read.
    closed: Mutex<mpsc::UnboundedReceiver<usize>>,
    accept_loop: JoinHandle<()>,
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
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(Stats::default());
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let accept_loop = tokio::spawn(accept(
            listener,
            acceptor,
            behaviour,
            Arc::clone(&stats),
            closed_tx,
        ));
        Self {
            addr,
            stats,
            closed: Mutex::new(closed),
            accept_loop,
        }
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
        self.accept_loop.abort();
    }
}

async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    behaviour: Behaviour,
    stats: Arc<Stats>,
    closed: mpsc::UnboundedSender<usize>,
) {
    // Connection tasks live in this set, so aborting the accept loop ends them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let number = stats.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, behaviour, stats, closed) =
                    (acceptor.clone(), behaviour.clone(), Arc::clone(&stats), closed.clone());
                connections.spawn(async move {
                    let read = match acceptor.accept(tcp).await {
                        Ok(stream) => {
                            stats.handshakes_ok.fetch_add(1, Ordering::SeqCst);
                            serve(stream, behaviour, number, &stats).await
                        }
                        Err(_) => 0,
                    };
                    let _ = closed.send(read);
                });
            }
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
    let (replies, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut read = 0;
    let mut held: Vec<Vec<u8>> = Vec::new();
    while let Some(query) = read_frame(&mut reader).await {
        read += 1;
        stats.queries.fetch_add(1, Ordering::SeqCst);
        let now = stats.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
        stats.most_outstanding.fetch_max(now, Ordering::SeqCst);
        let Some(reply) = answer(&query) else {
            continue;
        };
        let done = |stats: &Stats| stats.outstanding.fetch_sub(1, Ordering::SeqCst);
        match &behaviour {
            Behaviour::Answer => {
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
