//! The TLS client configuration shared by every DNS-over-TLS endpoint (`upstream::stream`): the
//! CA bundle that signs the peers' certificates and, for mutual TLS, our own certificate and
//! key, all read from PEM files. The configuration's loader reads the files ([`PemFile::read`])
//! and its parse builds the configuration from their bytes ([`build`], no file touched) to
//! validate `MESHDNS_TLS_*` (exit 64, or a rejected reload, naming the file); the snapshot hands
//! it to the endpoints.
//!
//! It promises a root store of exactly the given bundle (no web PKI roots: a public CA must not
//! be able to vouch for a peer cluster), rustls with the `ring` provider, TLS 1.3 preferred and
//! TLS 1.2 allowed, and one-line errors that name the file and the reason. It keeps no global
//! state: loading again (after a certificate rotation) builds a new configuration, and the
//! caller decides when endpoints switch to it.
//!
//! The server side, a certificate that renews itself for the TLS endpoints meshdns serves, is
//! [`server`]; it reads its files with the same PEM reader.
//!
//! It owns the PEM reader and the client configuration built from it; it opens no connection
//! (the stream endpoints do) and decides no moment to read again (a reload does).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

pub(crate) mod server;

/// The largest PEM file read. A CA bundle of a few hundred certificates is well below it; a
/// variable pointing at the wrong (huge) file fails with a clear error instead of filling memory.
pub(crate) const MAX_PEM_FILE: u64 = 1024 * 1024;

/// Why the TLS files could not be turned into a client configuration. Each message names the file
/// first, so one log line (or the `--check` output) says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_PEM_FILE} bytes; is this the right file?", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}: not valid PEM: {reason}", path.display())]
    BadPem { path: PathBuf, reason: String },
    #[error("{}: no certificate in it (expected PEM \"BEGIN CERTIFICATE\" sections)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: certificate rejected: {reason}", path.display())]
    BadCertificate { path: PathBuf, reason: String },
    #[error(
        "{}: no private key in it (expected PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\")",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error(
        "{}: the private key is encrypted, and encrypted keys are not supported (store it unencrypted in a Secret, e.g. openssl pkey -in KEY -out KEY.plain)",
        path.display()
    )]
    EncryptedKey { path: PathBuf },
    #[error("{}: key rejected for certificate {}: {reason}", key.display(), cert.display())]
    BadKey {
        key: PathBuf,
        cert: PathBuf,
        reason: String,
    },
    #[error("{name:?} is not a valid TLS server name (a DNS name or an IP address)")]
    BadServerName { name: String },
}

impl TlsConfigError {
    /// Whether the private key is at fault (missing, encrypted, or not the certificate's):
    /// then the key file is, even when it is also the certificate file.
    pub(crate) fn is_about_the_key(&self) -> bool {
        matches!(
            self,
            TlsConfigError::NoKey { .. }
                | TlsConfigError::EncryptedKey { .. }
                | TlsConfigError::BadKey { .. }
        )
    }

    /// The file at fault (for a server name, none).
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            TlsConfigError::Read { path, .. }
            | TlsConfigError::TooLarge { path }
            | TlsConfigError::BadPem { path, .. }
            | TlsConfigError::NoCertificate { path }
            | TlsConfigError::BadCertificate { path, .. }
            | TlsConfigError::NoKey { path }
            | TlsConfigError::EncryptedKey { path } => Some(path),
            TlsConfigError::BadKey { key, .. } => Some(key),
            TlsConfigError::BadServerName { .. } => None,
        }
    }
}

#[cfg(any(test, feature = "testing"))]
/// Where our client certificate chain and its private key come from (mutual TLS). Both or
/// neither: a certificate without its key is a configuration error the types rule out.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub cert_file: &'a Path,
    pub key_file: &'a Path,
}

/// A loaded client configuration, and a fingerprint of each file it was read from: equal
/// fingerprints mean the files did not change (a reload keeps the connections), different
/// ones a rotation (new connections, with the new certificates).
#[derive(Clone)]
pub struct ClientTls {
    pub config: Arc<ClientConfig>,
    /// One fingerprint per file, in the order CA bundle, certificate, key: also which file a
    /// rotation changed, for the log.
    pub(crate) files: Vec<u64>,
    /// When our client certificate expires (seconds since the Unix epoch), when there is one.
    pub(crate) not_after: Option<i64>,
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        self.files == other.files
    }
}

impl Eq for ClientTls {}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &format_args!("{:016x?}", self.files))
            .finish_non_exhaustive()
    }
}

/// The client configuration an endpoint's next TLS connection is opened with: the one its group
/// was made with, until a rotation retires the group and hands it the new one
/// ([`CurrentTls::replace`]). A retired group lives on while queries that started before the
/// rotation finish on it; a connection they open then presents the rotated certificate, never
/// the one the rotation retired. Connections already open keep theirs until they close.
#[derive(Clone)]
pub struct CurrentTls(Arc<ArcSwap<ClientConfig>>);

impl CurrentTls {
    pub(crate) fn new(config: Arc<ClientConfig>) -> Self {
        Self(Arc::new(ArcSwap::new(config)))
    }

    /// The configuration to open a connection with now.
    pub(crate) fn load(&self) -> Arc<ClientConfig> {
        self.0.load_full()
    }

    /// From now on, connections are opened with `config` (by every endpoint sharing this).
    pub(crate) fn replace(&self, config: Arc<ClientConfig>) {
        self.0.store(config);
    }
}

impl From<Arc<ClientConfig>> for CurrentTls {
    fn from(config: Arc<ClientConfig>) -> Self {
        Self::new(config)
    }
}

impl std::fmt::Debug for CurrentTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentTls").finish_non_exhaustive()
    }
}

/// A PEM file as read from disk (at most [`MAX_PEM_FILE`]), before anything parses it: its
/// path, and its bytes or why they could not be read.
#[derive(Debug)]
pub(crate) struct PemFile {
    pub(crate) path: PathBuf,
    bytes: Result<Vec<u8>, TlsConfigError>,
}

impl PemFile {
    /// Reads `path`: blocking, so call it where configuration is loaded, not on the query path.
    pub(crate) fn read(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            bytes: read(path),
        }
    }
}

#[cfg(any(test, feature = "testing"))]
/// Reads the CA bundle (and the client identity, when given) and builds the configuration from
/// them ([`build`]). Blocking file reads: call it where configuration is loaded, not on the
/// query path.
pub fn load(
    ca_file: &Path,
    identity: Option<ClientIdentity<'_>>,
) -> Result<ClientTls, TlsConfigError> {
    let identity = identity.map(|i| (PemFile::read(i.cert_file), PemFile::read(i.key_file)));
    build(PemFile::read(ca_file), identity)
}

/// The configuration every DNS-over-TLS endpoint of this generation shares, from the CA bundle
/// and the client certificate and key (already read: this touches no file), with the
/// fingerprints of the files (each fingerprint is of what was parsed).
pub(crate) fn build(
    ca_file: PemFile,
    identity: Option<(PemFile, PemFile)>,
) -> Result<ClientTls, TlsConfigError> {
    let mut files = Vec::new();
    let ca_path = ca_file.path.clone();
    let roots = roots(ca_file, &mut files)?;
    // The versions cannot be refused by the ring provider (it supports both); the error says
    // where it would come from anyway.
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| bad_certificate(&ca_path, &e))?
        .with_root_certificates(roots);
    let mut not_after = None;
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert_file, key_file)) => {
            let (cert_path, key_path) = (cert_file.path.clone(), key_file.path.clone());
            let chain = certificates(cert_file, &mut files)?;
            let key = private_key(key_file, &mut files)?;
            not_after = chain.first().and_then(|leaf| self::not_after(leaf));
            // rustls parses the key and compares its public half with the certificate's, so a
            // key from another pair fails here rather than in every handshake.
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad_key(&key_path, &cert_path, &e))?
        }
    };
    Ok(ClientTls {
        config: Arc::new(config),
        files,
        not_after,
    })
}

/// The crypto provider of every TLS configuration, client and server.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.3 preferred, TLS 1.2 allowed, on both sides.
const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A root store of exactly the certificates in the PEM bundle `ca_file` (its fingerprint added
/// to `files`): the CAs a peer's certificate must chain to, server or client.
fn roots(ca_file: PemFile, files: &mut Vec<u64>) -> Result<RootCertStore, TlsConfigError> {
    let path = ca_file.path.clone();
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca_file, files)? {
        roots.add(cert).map_err(|e| bad_certificate(&path, &e))?;
    }
    Ok(roots)
}

fn bad_certificate(path: &Path, error: &impl std::fmt::Display) -> TlsConfigError {
    TlsConfigError::BadCertificate {
        path: path.to_path_buf(),
        reason: error.to_string(),
    }
}

/// The key at `key` is not the certificate's at `cert` (or rustls refuses the pair).
fn bad_key(key: &Path, cert: &Path, error: &rustls::Error) -> TlsConfigError {
    TlsConfigError::BadKey {
        key: key.to_path_buf(),
        cert: cert.to_path_buf(),
        reason: error.to_string(),
    }
}

/// When `cert` (DER) expires: its notAfter, in seconds since the Unix epoch, for the expiry
/// metrics. `None` when the bytes are not laid out as RFC 5280 says (a handshake accepted them,
/// so in practice never); the reader only walks lengths it has checked, whatever the bytes.
pub fn not_after(cert: &[u8]) -> Option<i64> {
    let (certificate, _) = der(cert, SEQUENCE)?;
    let (mut tbs, _) = der(certificate, SEQUENCE)?;
    // An explicit [0] version comes first when the certificate is not v1.
    if tbs.first() == Some(&0xa0) {
        tbs = der_skip(tbs)?;
    }
    // serialNumber, signature, issuer, then validity.
    for _ in 0..3 {
        tbs = der_skip(tbs)?;
    }
    let (validity, _) = der(tbs, SEQUENCE)?;
    let after = der_skip(validity)?;
    let tag = *after.first()?;
    let (time, _) = der(after, tag)?;
    asn1_time(tag, time)
}

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The content of the DER element at the start of `input`, which must have `tag`, and what
/// follows it.
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *input.first()? != tag {
        return None;
    }
    let first = *input.get(1)?;
    let (length, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let octets = usize::from(first & 0x7f);
        if !(1..=4).contains(&octets) {
            return None;
        }
        let length = input
            .get(2..2 + octets)?
            .iter()
            .fold(0usize, |n, b| (n << 8) | usize::from(*b));
        (length, 2 + octets)
    };
    let end = header.checked_add(length)?;
    Some((input.get(header..end)?, input.get(end..)?))
}

/// What follows the DER element at the start of `input`, whatever its tag.
fn der_skip(input: &[u8]) -> Option<&[u8]> {
    der(input, *input.first()?).map(|(_, rest)| rest)
}

/// A UTCTime (`YYMMDDHHMMSSZ`, years 1950 to 2049 as RFC 5280 reads them) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`) in seconds since the Unix epoch.
fn asn1_time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = std::str::from_utf8(text.get(range)?).ok()?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, rest) = match tag {
        UTC_TIME if text.len() == 13 => {
            let yy = digits(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        GENERALIZED_TIME if text.len() == 15 => (digits(0..4)?, 4),
        _ => return None,
    };
    if text.last() != Some(&b'Z') {
        return None;
    }
    let field = |i: usize| digits(rest + 2 * i..rest + 2 * i + 2);
    let (month, day) = (field(0)?, field(1)?);
    let (hour, minute, second) = (field(2)?, field(3)?, field(4)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_since_epoch(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar (Howard
/// Hinnant's `days_from_civil`).
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The name a peer's certificate must carry (DNS names and IP addresses; an IP needs an IP SAN
/// in the certificate). An upstream group checks it once, when the group is made.
pub(crate) fn server_name(name: &str) -> Result<ServerName<'static>, TlsConfigError> {
    ServerName::try_from(name.to_string()).map_err(|_| TlsConfigError::BadServerName {
        name: name.to_string(),
    })
}

/// Every certificate in a PEM file (its fingerprint added to `files`); at least one.
fn certificates(
    file: PemFile,
    files: &mut Vec<u64>,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let (path, text) = (&file.path, fingerprinted(file.bytes, files)?);
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_pem(path, &e))?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file (its fingerprint added to `files`): PKCS#8, PKCS#1 (RSA)
/// or SEC1 (EC).
fn private_key(
    file: PemFile,
    files: &mut Vec<u64>,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let (path, text) = (&file.path, fingerprinted(file.bytes, files)?);
    // PKCS#8 "ENCRYPTED PRIVATE KEY", or OpenSSL's legacy "Proc-Type: 4,ENCRYPTED" header:
    // without this, both would read as "no private key in it".
    let encrypted = [
        &b"ENCRYPTED PRIVATE KEY-----"[..],
        b"Proc-Type: 4,ENCRYPTED",
    ];
    if encrypted
        .iter()
        .any(|marker| text.windows(marker.len()).any(|w| w == *marker))
    {
        return Err(TlsConfigError::EncryptedKey {
            path: path.to_path_buf(),
        });
    }
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsConfigError::NoKey {
            path: path.to_path_buf(),
        },
        other => bad_pem(path, &other),
    })
}

/// The bytes of `path` (at most [`MAX_PEM_FILE`]).
fn read(path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    let read_error = |source| TlsConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut text = Vec::new();
    file.take(MAX_PEM_FILE + 1)
        .read_to_end(&mut text)
        .map_err(read_error)?;
    if u64::try_from(text.len()).unwrap_or(u64::MAX) > MAX_PEM_FILE {
        return Err(TlsConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

/// The bytes read, their fingerprint added to `files`.
fn fingerprinted(
    bytes: Result<Vec<u8>, TlsConfigError>,
    files: &mut Vec<u64>,
) -> Result<Vec<u8>, TlsConfigError> {
    let text = bytes?;
    let mut fingerprint = DefaultHasher::new();
    text.hash(&mut fingerprint);
    files.push(fingerprint.finish());
    Ok(text)
}

/// pki-types' own messages print byte strings as lists of numbers; these say it in words.
fn bad_pem(path: &Path, error: &pem::Error) -> TlsConfigError {
    let reason = match error {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".to_string(),
        pem::Error::Base64Decode(e) => format!("bad base64: {e}"),
        pem::Error::SectionTooLarge => "a section is too large".to_string(),
        other => other.to_string(),
    };
    TlsConfigError::BadPem {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    /// A directory of its own per test, removed on drop (the configuration's tests use it too).
    pub(crate) struct Scratch(pub(crate) PathBuf);

    impl Scratch {
        pub(crate) fn new(test: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("meshdns-tls-config-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create a scratch directory");
            Scratch(dir)
        }

        pub(crate) fn file(&self, name: &str, content: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, content).expect("write a scratch file");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A self-signed CA: its certificate, and the issuer that signs with it.
    pub(crate) fn ca() -> (rcgen::Certificate, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA certificate");
        (cert, Issuer::new(params, key))
    }

    /// A client certificate (PEM) `issuer` signed, and its key.
    pub(crate) fn client(issuer: &Issuer<'_, KeyPair>) -> (String, KeyPair) {
        let key = KeyPair::generate().expect("client key");
        let cert = CertificateParams::new(vec!["client.test".to_string()])
            .expect("client params")
            .signed_by(&key, issuer)
            .expect("client certificate");
        (cert.pem(), key)
    }

    /// A CA certificate (PEM) and a client certificate it signed, with the client's key.
    fn ca_and_client() -> (String, String, KeyPair) {
        let (ca, issuer) = ca();
        let (cert, key) = client(&issuer);
        (ca.pem(), cert, key)
    }

    /// The SEC1 form ("EC PRIVATE KEY") of a P-256 key that rcgen gives as PKCS#8: the PKCS#8
    /// wrapper of such a key is a fixed 29-byte prefix around the SEC1 structure.
    fn sec1_pem(key: &KeyPair) -> String {
        let pkcs8 = key.serialize_der();
        assert_eq!(pkcs8.len(), 138, "a P-256 PKCS#8 key of the usual layout");
        assert_eq!(
            &pkcs8[27..29],
            &[0x04, 0x6d],
            "the OCTET STRING around SEC1"
        );
        let body = base64(&pkcs8[29..]);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
            .collect();
        format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Loads a CA bundle and a client certificate it signed, with the key file `key` writes
    /// (given the certificate's PEM and its own key): the result, and the certificate's and the
    /// key's paths.
    fn load_client(
        test: &str,
        key: impl FnOnce(&str, &KeyPair) -> String,
    ) -> (Result<ClientTls, TlsConfigError>, PathBuf, PathBuf) {
        let scratch = Scratch::new(test);
        let (ca, cert, client_key) = ca_and_client();
        let ca = scratch.file("ca.pem", &ca);
        let key = scratch.file("client.key", &key(&cert, &client_key));
        let cert = scratch.file("client.pem", &cert);
        let identity = ClientIdentity {
            cert_file: &cert,
            key_file: &key,
        };
        (load(&ca, Some(identity)), cert, key)
    }

    /// The message of `error`, which must begin with the file `path` it is about.
    #[track_caller]
    fn message_naming(error: &TlsConfigError, path: &Path) -> String {
        let message = error.to_string();
        assert!(
            message.starts_with(&*path.display().to_string()),
            "{message}"
        );
        message
    }

    #[test]
    fn a_ca_bundle_alone_gives_a_config_without_client_auth() {
        let scratch = Scratch::new("ca-only");
        let bundle = scratch.file("ca.pem", &format!("{}{}", ca().0.pem(), ca().0.pem()));
        let loaded = load(&bundle, None).expect("a valid bundle loads");
        assert!(!loaded.config.client_auth_cert_resolver.has_certs());
    }

    #[test]
    fn a_client_certificate_with_its_pkcs8_key_is_loaded() {
        let (config, _, _) = load_client("pkcs8", |_, key| key.serialize_pem());
        let loaded = config.expect("a matching certificate and key load");
        assert!(loaded.config.client_auth_cert_resolver.has_certs());
    }

    #[test]
    fn a_sec1_ec_key_is_loaded() {
        let (config, _, _) = load_client("sec1", |_, key| sec1_pem(key));
        config.expect("an EC PRIVATE KEY loads");
    }

    #[test]
    fn a_missing_ca_file_is_named_in_the_error() {
        let scratch = Scratch::new("missing");
        let path = scratch.0.join("absent.pem");
        let error = load(&path, None).expect_err("no file, no config");
        assert!(matches!(error, TlsConfigError::Read { .. }), "{error:?}");
        let message = message_naming(&error, &path);
        assert!(message.contains("cannot read"), "{message}");
    }

    #[test]
    fn an_empty_ca_bundle_is_an_error_naming_the_file() {
        let scratch = Scratch::new("empty");
        let path = scratch.file("ca.pem", "# nothing here\n");
        let error = load(&path, None).expect_err("no certificate, no config");
        assert!(
            matches!(error, TlsConfigError::NoCertificate { .. }),
            "{error:?}"
        );
        message_naming(&error, &path);
    }

    #[test]
    fn a_truncated_pem_section_is_an_error_naming_the_file() {
        let scratch = Scratch::new("truncated");
        let ca = ca().0.pem();
        let cut = &ca[..ca.len() / 2];
        let path = scratch.file("ca.pem", cut);
        let error = load(&path, None).expect_err("half a certificate");
        assert!(matches!(error, TlsConfigError::BadPem { .. }), "{error:?}");
        let message = message_naming(&error, &path);
        assert!(message.contains("no END line"), "{message}");
    }

    #[test]
    fn a_key_file_without_a_key_is_an_error_naming_the_file() {
        // A common slip: the certificate given twice.
        let (result, _, key) = load_client("no-key", |cert, _| cert.to_string());
        let error = result.expect_err("no key, no config");
        assert!(matches!(error, TlsConfigError::NoKey { .. }), "{error:?}");
        message_naming(&error, &key);
    }

    #[test]
    fn an_encrypted_key_is_refused_saying_encrypted_keys_are_not_supported() {
        // What `openssl pkcs8 -topk8 -v2 aes-256-cbc` and `openssl genrsa -aes256` write.
        let pkcs8 = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,0123456789ABCDEF0123456789ABCDEF\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        for (test, pem) in [("encrypted-pkcs8", pkcs8), ("encrypted-legacy", legacy)] {
            let (result, _, key) = load_client(test, |_, _| pem.to_string());
            let error = result.expect_err("an encrypted key");
            assert!(
                matches!(error, TlsConfigError::EncryptedKey { .. }),
                "{error:?}"
            );
            let message = message_naming(&error, &key);
            assert!(
                message.contains("encrypted keys are not supported"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_key_of_another_pair_is_rejected_naming_both_files() {
        let other = || KeyPair::generate().expect("another key").serialize_pem();
        let (result, cert, key) = load_client("mismatch", |_, _| other());
        let error = result.expect_err("a key that does not match");
        assert!(matches!(error, TlsConfigError::BadKey { .. }), "{error:?}");
        let message = message_naming(&error, &key);
        assert!(message.contains(&*cert.display().to_string()), "{message}");
        assert!(message.contains("KeyMismatch"), "{message}");
    }

    #[test]
    fn a_garbled_key_is_rejected_naming_the_file() {
        let garbled = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let (result, _, key) = load_client("garbled", |_, _| garbled.to_string());
        let error = result.expect_err("four zero bytes are no key");
        assert!(matches!(error, TlsConfigError::BadKey { .. }), "{error:?}");
        message_naming(&error, &key);
    }

    #[test]
    fn not_after_reads_utc_and_generalized_times() {
        let (_, issuer) = ca();
        // RFC 5280: UTCTime through 2049, GeneralizedTime from 2050 on.
        for (year, epoch) in [
            (2049, 2_493_072_000),
            (2051, 2_556_144_000),
            (1999, 915_148_800),
        ] {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(vec!["a.test".to_string()]).expect("params");
            params.not_after = rcgen::date_time_ymd(year, 1, 1);
            let cert = params.signed_by(&key, &issuer).expect("certificate");
            assert_eq!(not_after(cert.der()), Some(epoch), "{year}");
        }
    }

    #[test]
    fn not_after_of_cut_or_garbled_bytes_is_none() {
        let der = ca().0.der().to_vec();
        for len in 0..der.len() {
            assert_eq!(not_after(&der[..len]), None, "cut at {len}");
        }
        assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(asn1_time(UTC_TIME, b"491301000000Z"), None, "month 13");
        assert_eq!(
            asn1_time(UTC_TIME, b"4901010000+0Z"),
            None,
            "a sign in a digit"
        );
    }

    #[test]
    fn server_names_accept_dns_names_and_ips_and_reject_garbage() {
        assert!(server_name("dns.cluster-b.example").is_ok());
        assert!(server_name("127.0.0.1").is_ok());
        let error = server_name("not a name").expect_err("spaces are no DNS name");
        assert!(error.to_string().contains("\"not a name\""), "{error}");
    }
}
