//! A TLS server certificate that renews itself: the certificate chain and key (and, for mutual
//! TLS, the CA bundle that signs the clients' certificates) read from PEM files, and read again
//! when the files change, so that a listener serves a renewed certificate to its next
//! connections without a restart. Used by every TLS endpoint meshdns serves.
//!
//! It owns the files' identities and the configuration built from them; it does not accept
//! connections, count metrics or decide when to look (its owner passes the period: both owners pass
//! [`CHECK_EVERY`]). Its owner runs [`keep_fresh`] on a task it owns (the loop never ends by
//! itself: dropping or aborting the task stops it), and hands each new connection
//! [`ServerTls::config`].
//!
//! A look ([`ServerTls::check`]) stats each file through its symlinks (the kubelet renews a
//! mounted Secret by pointing its `..data` symlink at a new directory): while the device,
//! inode, modification time and size of every file stay the same, nothing is read. When one
//! differs the files are read and fingerprinted with the client side's loader (one PEM reader
//! for both); the same content again changes nothing, new content is loaded whole, and only a
//! pair that loads replaces the one in force. A broken pair (half-written, a key of another
//! certificate) keeps the old one and is reported once per change of the files, not at every
//! look; connections already open keep the certificate they were made with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use super::{
    PemFile, TlsConfigError, VERSIONS, bad_certificate, bad_key, certificates, not_after,
    private_key, provider, roots,
};

/// How often [`keep_fresh`] looks at the files unless told otherwise: a renewed certificate
/// reaches new connections at most this long after its files change (well within the minute
/// promised), and a look at unchanged files is three `stat` calls.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(10);

/// Where a server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1; not encrypted).
    pub key: PathBuf,
    /// With a bundle here, clients must present a certificate it signed (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl ServerTlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

/// What one look at the files found.
#[derive(Debug)]
pub(crate) enum Refresh {
    /// The files are as they were (or hold the same content again).
    Unchanged,
    /// New files were loaded: the next connections get them. The new certificate's notAfter.
    Renewed { not_after: Option<i64> },
    /// The files changed but do not load: the certificate in force stays.
    Rejected(TlsConfigError),
}

/// A server configuration that follows its files. Cheap to share (`Arc`); every method may be
/// called from any thread.
pub struct ServerTls {
    files: ServerTlsFiles,
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<Loaded>,
    /// The identities of the files at the last look, loaded or not: a rejected change is
    /// reported once, and looked at again only when the files change again.
    seen: Mutex<Vec<Option<Identity>>>,
}

/// A configuration and what it was made from.
struct Loaded {
    config: Arc<ServerConfig>,
    /// Fingerprints of the files' content, in the order of [`ServerTlsFiles::paths`].
    fingerprints: Vec<u64>,
    not_after: Option<i64>,
}

/// What `stat` says of a file, through its symlinks: a renewal changes at least one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
    modified: (i64, i64),
    size: u64,
}

impl ServerTls {
    /// Reads the files and builds the first configuration; `alpn` is offered in every
    /// configuration built (e.g. `[b"h2", b"http/1.1"]` for HTTPS; empty for DNS over TLS).
    /// Blocking file reads: call it where configuration is loaded. An error names the file.
    pub fn load(files: ServerTlsFiles, alpn: Vec<Vec<u8>>) -> Result<Self, TlsConfigError> {
        let seen = identities(&files);
        let loaded = build(&files, &alpn)?;
        Ok(Self {
            files,
            alpn,
            current: ArcSwap::from_pointee(loaded),
            seen: Mutex::new(seen),
        })
    }

    /// The configuration for the next connection (a `tokio_rustls::TlsAcceptor` per accept is
    /// cheap: it holds only this `Arc`).
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.load().config)
    }

    /// When the certificate in force expires (seconds since the Unix epoch).
    pub(crate) fn not_after(&self) -> Option<i64> {
        self.current.load().not_after
    }

    /// The files the certificate is read from (what a configuration compares).
    pub(crate) fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// Looks at the files once (see the module's documentation) and swaps in what changed.
    /// Blocking `stat` calls and, after a change, file reads: run it on the blocking pool
    /// ([`keep_fresh`] does).
    pub(crate) fn check(&self) -> Refresh {
        let now = identities(&self.files);
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == now {
                return Refresh::Unchanged;
            }
            *seen = now;
        }
        match build(&self.files, &self.alpn) {
            Ok(loaded) if loaded.fingerprints == self.current.load().fingerprints => {
                Refresh::Unchanged
            }
            Ok(loaded) => {
                let not_after = loaded.not_after;
                self.current.store(Arc::new(loaded));
                Refresh::Renewed { not_after }
            }
            Err(error) => Refresh::Rejected(error),
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .field("not_after", &self.not_after())
            .finish_non_exhaustive()
    }
}

/// Looks at `tls`'s files every `every` on the blocking pool, forever, logging what changed and
/// telling `observe` each renewal and rejection. It runs until its owner in the task tree ends
/// it (see `background`).
pub(crate) async fn keep_fresh(
    tls: Arc<ServerTls>,
    every: Duration,
    mut observe: impl FnMut(&Refresh),
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate, and the files were just read.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let looking = Arc::clone(&tls);
        let Ok(refresh) = tokio::task::spawn_blocking(move || looking.check()).await else {
            continue;
        };
        let cert = tls.files.cert.display();
        match &refresh {
            Refresh::Unchanged => continue,
            Refresh::Renewed { not_after } => {
                tracing::info!(%cert, not_after = ?not_after, "server certificate renewed: new connections get it");
            }
            Refresh::Rejected(error) => {
                tracing::warn!(%cert, %error, "server certificate files changed but do not load; the certificate in force stays");
            }
        }
        observe(&refresh);
    }
}

/// The identity of each file, `None` for one that cannot be stat'ed now.
fn identities(files: &ServerTlsFiles) -> Vec<Option<Identity>> {
    use std::os::unix::fs::MetadataExt;
    files
        .paths()
        .map(|path| {
            std::fs::metadata(path).ok().map(|m| Identity {
                device: m.dev(),
                inode: m.ino(),
                modified: (m.mtime(), m.mtime_nsec()),
                size: m.size(),
            })
        })
        .collect()
}

/// Reads every file and builds a configuration from them.
fn build(files: &ServerTlsFiles, alpn: &[Vec<u8>]) -> Result<Loaded, TlsConfigError> {
    let mut fingerprints = Vec::new();
    let chain = certificates(PemFile::read(&files.cert), &mut fingerprints)?;
    let key = private_key(PemFile::read(&files.key), &mut fingerprints)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| bad_certificate(&files.cert, &e))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = roots(PemFile::read(ca), &mut fingerprints)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| bad_certificate(ca, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let not_after = chain.first().and_then(|leaf| not_after(leaf));
    // rustls compares the key's public half with the leaf's, so a key of another pair (or a
    // renewal caught between its two files) fails here, not in every handshake.
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| bad_key(&files.key, &files.cert, &e))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(Loaded {
        config: Arc::new(config),
        fingerprints,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::symlink;

    use rcgen::{CertificateParams, Issuer, KeyPair};
    use rustls::pki_types::ServerName;
    use rustls::{ClientConnection, ServerConnection};

    use crate::certificates::tests::{Scratch, ca, client};
    use crate::certificates::{ClientIdentity, load};

    /// A server certificate for `dot.test` that `issuer` signed, expiring on January 1st of
    /// `year`: its PEM and its key's.
    fn leaf(issuer: &Issuer<'_, KeyPair>, year: i32) -> (String, String) {
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["dot.test".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let cert = params.signed_by(&key, issuer).expect("server certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// A Secret mounted the kubelet's way: `tls.crt` and `tls.key` are symlinks through the
    /// `..data` symlink into a directory of this version's files.
    struct MountedSecret {
        scratch: Scratch,
        version: u32,
    }

    impl MountedSecret {
        fn new(test: &str, cert: &str, key: &str) -> Self {
            let mut secret = MountedSecret {
                scratch: Scratch::new(test),
                version: 0,
            };
            secret.update(cert, key);
            for name in ["tls.crt", "tls.key"] {
                symlink(format!("..data/{name}"), secret.scratch.0.join(name)).expect("link");
            }
            secret
        }

        /// What the kubelet does on a Secret's update: a new directory, then `..data` renamed
        /// over to point at it.
        fn update(&mut self, cert: &str, key: &str) {
            self.version += 1;
            let version = format!("..v{}", self.version);
            let dir = self.scratch.0.join(&version);
            std::fs::create_dir(&dir).expect("version directory");
            std::fs::write(dir.join("tls.crt"), cert).expect("write tls.crt");
            std::fs::write(dir.join("tls.key"), key).expect("write tls.key");
            let staged = self.scratch.0.join("..data_tmp");
            symlink(&version, &staged).expect("stage ..data");
            std::fs::rename(&staged, self.scratch.0.join("..data")).expect("swap ..data");
        }

        fn files(&self, client_ca: Option<PathBuf>) -> ServerTlsFiles {
            ServerTlsFiles {
                cert: self.scratch.0.join("tls.crt"),
                key: self.scratch.0.join("tls.key"),
                client_ca,
            }
        }
    }

    /// Runs a handshake in memory between `server` and a client trusting `ca_file` (presenting
    /// `identity` when given): the notAfter of the certificate the server presented.
    fn handshake(
        server: Arc<ServerConfig>,
        ca_file: &Path,
        identity: Option<ClientIdentity<'_>>,
    ) -> Result<Option<i64>, rustls::Error> {
        let client_config = load(ca_file, identity)
            .expect("client configuration")
            .config;
        let name = ServerName::try_from("dot.test").expect("a DNS name");
        let mut client = ClientConnection::new(client_config, name)?;
        let mut server = ServerConnection::new(server)?;
        let mut bytes = Vec::new();
        while client.is_handshaking() || server.is_handshaking() {
            bytes.clear();
            client.write_tls(&mut bytes).expect("to memory");
            server.read_tls(&mut &bytes[..]).expect("from memory");
            server.process_new_packets()?;
            bytes.clear();
            server.write_tls(&mut bytes).expect("to memory");
            client.read_tls(&mut &bytes[..]).expect("from memory");
            client.process_new_packets()?;
        }
        Ok(client
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| not_after(leaf)))
    }

    /// 2049-01-01 and 2051-01-01 in seconds since the Unix epoch (`date -d ... +%s`).
    const Y2049: i64 = 2_493_072_000;
    const Y2051: i64 = 2_556_144_000;

    #[test]
    fn a_renewed_secret_is_served_to_the_next_handshake() {
        let (ca, issuer) = ca();
        let (cert, key) = leaf(&issuer, 2049);
        let mut secret = MountedSecret::new("server-renewed", &cert, &key);
        let ca_file = secret.scratch.file("ca.pem", &ca.pem());
        let tls = ServerTls::load(secret.files(None), Vec::new()).expect("loads");
        let before = tls.config();
        assert_eq!(handshake(tls.config(), &ca_file, None), Ok(Some(Y2049)));

        let (cert, key) = leaf(&issuer, 2051);
        secret.update(&cert, &key);
        assert!(matches!(
            tls.check(),
            Refresh::Renewed {
                not_after: Some(Y2051)
            }
        ));
        assert_eq!(tls.not_after(), Some(Y2051));
        assert_eq!(handshake(tls.config(), &ca_file, None), Ok(Some(Y2051)));
        // A connection made before keeps its configuration: the old one still works.
        assert_eq!(handshake(before, &ca_file, None), Ok(Some(Y2049)));
    }

    #[test]
    fn unchanged_or_rewritten_files_keep_the_configuration_in_force() {
        let (_, issuer) = ca();
        let (cert, key) = leaf(&issuer, 2049);
        let mut secret = MountedSecret::new("server-unchanged", &cert, &key);
        let tls = ServerTls::load(secret.files(None), Vec::new()).expect("loads");
        let before = tls.config();
        assert!(matches!(tls.check(), Refresh::Unchanged));
        // The kubelet writes the same content again (a resync): new files, same certificate.
        secret.update(&cert, &key);
        assert!(matches!(tls.check(), Refresh::Unchanged));
        assert!(Arc::ptr_eq(&before, &tls.config()));
    }

    #[test]
    fn a_broken_pair_keeps_the_certificate_in_force_and_is_reported_once() {
        let (ca, issuer) = ca();
        let (cert, key) = leaf(&issuer, 2049);
        let mut secret = MountedSecret::new("server-broken", &cert, &key);
        let ca_file = secret.scratch.file("ca.pem", &ca.pem());
        let tls = ServerTls::load(secret.files(None), Vec::new()).expect("loads");

        let (renewed, renewed_key) = leaf(&issuer, 2051);
        secret.update(&renewed, &key);
        let refresh = tls.check();
        assert!(
            matches!(refresh, Refresh::Rejected(TlsConfigError::BadKey { .. })),
            "{refresh:?}"
        );
        assert!(matches!(tls.check(), Refresh::Unchanged), "reported once");
        assert_eq!(handshake(tls.config(), &ca_file, None), Ok(Some(Y2049)));

        secret.update(&renewed, &renewed_key);
        assert!(matches!(tls.check(), Refresh::Renewed { .. }));
        assert_eq!(handshake(tls.config(), &ca_file, None), Ok(Some(Y2051)));
    }

    #[test]
    fn a_client_ca_requires_a_client_certificate_it_signed() {
        let (ca, issuer) = ca();
        let (cert, key) = leaf(&issuer, 2049);
        let secret = MountedSecret::new("server-mtls", &cert, &key);
        let ca_file = secret.scratch.file("ca.pem", &ca.pem());
        let (client_cert, client_key) = client(&issuer);
        let client_cert = secret.scratch.file("client.pem", &client_cert);
        let client_key = secret
            .scratch
            .file("client.key", &client_key.serialize_pem());
        let files = secret.files(Some(ca_file.clone()));
        let tls = ServerTls::load(files, Vec::new()).expect("loads");

        let anonymous = handshake(tls.config(), &ca_file, None);
        assert!(anonymous.is_err(), "{anonymous:?}");
        let identity = ClientIdentity {
            cert_file: &client_cert,
            key_file: &client_key,
        };
        assert_eq!(
            handshake(tls.config(), &ca_file, Some(identity)),
            Ok(Some(Y2049))
        );
    }

    #[tokio::test]
    async fn keep_fresh_tells_each_renewal_once() {
        let (_, issuer) = ca();
        let (cert, key) = leaf(&issuer, 2049);
        let mut secret = MountedSecret::new("server-keep-fresh", &cert, &key);
        let tls = Arc::new(ServerTls::load(secret.files(None), Vec::new()).expect("loads"));
        let (told, mut renewals) = tokio::sync::mpsc::unbounded_channel();
        let looking = tokio::spawn(keep_fresh(
            Arc::clone(&tls),
            Duration::from_millis(20),
            move |refresh| {
                let _ = told.send(matches!(refresh, Refresh::Renewed { .. }));
            },
        ));
        let (cert, key) = leaf(&issuer, 2051);
        secret.update(&cert, &key);
        let renewed = tokio::time::timeout(Duration::from_secs(10), renewals.recv()).await;
        assert_eq!(renewed, Ok(Some(true)));
        assert_eq!(tls.not_after(), Some(Y2051));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(renewals.try_recv().is_err(), "nothing more to tell");
        looking.abort();
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let scratch = Scratch::new("server-missing");
        let files = ServerTlsFiles {
            cert: scratch.0.join("tls.crt"),
            key: scratch.0.join("tls.key"),
            client_ca: None,
        };
        let error = ServerTls::load(files, Vec::new()).expect_err("no files");
        assert_eq!(error.path(), Some(scratch.0.join("tls.crt").as_path()));
    }
}
