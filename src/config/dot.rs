//! `MESHDNS_DOT_*`: DNS over TLS served to the peer clusters (RFC 7858) — where it listens and
//! the certificate it serves, loaded by the configuration's loader (`Sources::load`) and
//! checked here so that a bad file is refused like any bad value (exit 64, `--check`), then
//! renewed from its files while meshdns runs ([`ServerTls`]). It owns [`DotConfig`] and the
//! rule that the certificate's variables go together; it only parses, touching no file (the
//! certificate arrives built by the loader), and serves nothing: the listener is
//! `server::serve_dot`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::certificates::TlsConfigError;
use crate::certificates::server::{CHECK_EVERY, ServerTls};

use super::variables::{DOT_CERT_FILE, DOT_CLIENT_CA_FILE, DOT_KEY_FILE, DOT_LISTEN};
use super::{ConfigError, Settings, file_error, set};

/// The DNS over TLS listener, when `MESHDNS_DOT_LISTEN` is set.
#[derive(Debug, Clone)]
pub struct DotConfig {
    pub listen: Vec<SocketAddr>,
    /// The certificate served (and, with `MESHDNS_DOT_CLIENT_CA_FILE`, the CAs whose client
    /// certificates are required), shared by every DoT listener.
    pub(crate) tls: Arc<ServerTls>,
    /// How often the certificate files are looked at ([`CHECK_EVERY`]; tests shorten it).
    pub check_every: Duration,
}

/// Two configurations are the same when they listen on the same addresses and read the same
/// files: the files' content is the certificate's business, renewed without a reload.
impl PartialEq for DotConfig {
    fn eq(&self, other: &Self) -> bool {
        self.listen == other.listen
            && self.tls.files() == other.tls.files()
            && self.check_every == other.check_every
    }
}

impl Eq for DotConfig {}

impl DotConfig {
    /// Whether clients must present a certificate the client CA signed: then the certificate
    /// is the access control, and `MESHDNS_ALLOW_FROM` does not apply to DoT clients.
    pub(crate) fn requires_client_certificate(&self) -> bool {
        self.tls.files().client_ca.is_some()
    }
}

/// Checks `MESHDNS_DOT_*`: nothing when none is set; the listen addresses (`listen`, parsed)
/// with the certificate the loader loaded from the files (`loaded`), or an error naming the
/// variable at fault.
pub(super) fn parse(
    settings: &Settings,
    listen: Vec<SocketAddr>,
    loaded: Option<Result<ServerTls, TlsConfigError>>,
) -> Result<Option<DotConfig>, ConfigError> {
    let file = |variable| set(settings, variable).map(PathBuf::from);
    let (cert, key, client_ca) = (
        file(DOT_CERT_FILE),
        file(DOT_KEY_FILE),
        file(DOT_CLIENT_CA_FILE),
    );
    if listen.is_empty() {
        let stray = [
            (DOT_CERT_FILE, &cert),
            (DOT_KEY_FILE, &key),
            (DOT_CLIENT_CA_FILE, &client_ca),
        ]
        .into_iter()
        .find_map(|(variable, file)| file.as_ref().map(|_| variable));
        return match stray {
            Some(variable) => Err(ConfigError::new(
                DOT_LISTEN,
                "",
                format!("is needed with {variable}: without it nothing serves DNS over TLS"),
            )),
            None => Ok(None),
        };
    }
    let required = |variable: &str| {
        ConfigError::new(
            variable,
            "",
            format!("is required with {DOT_LISTEN} (the PEM file of the certificate served)"),
        )
    };
    let (cert, key) = (
        cert.ok_or_else(|| required(DOT_CERT_FILE))?,
        key.ok_or_else(|| required(DOT_KEY_FILE))?,
    );
    let at_fault = [
        (DOT_CERT_FILE, Some(cert)),
        (DOT_KEY_FILE, Some(key)),
        (DOT_CLIENT_CA_FILE, client_ca),
    ];
    // The loader loads the certificate whenever the listener, the certificate and the key are
    // set, as they are here.
    let tls = loaded
        .ok_or_else(|| required(DOT_CERT_FILE))?
        .map_err(|error| file_error(&error, &at_fault, DOT_KEY_FILE))?;
    Ok(Some(DotConfig {
        listen,
        tls: Arc::new(tls),
        check_every: CHECK_EVERY,
    }))
}
