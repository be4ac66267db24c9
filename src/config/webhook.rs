//! The configuration of `meshdns webhook`, the sidecar-injection admission webhook: its HTTPS
//! address and certificate files, the sidecar image it injects, and the cluster domain of the
//! search list it writes, with the admin and logging variables every mode shares. It reads
//! only the variables table (unknown `MESHDNS_*` names fail as they do for the DNS server) and
//! touches no file: the certificate is loaded by the webhook's server.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::values::parse_zone;
use super::variables::{
    ADMIN_LISTEN, CLUSTER_DOMAIN, LOG, LOG_FORMAT, WEBHOOK_CERT_FILE, WEBHOOK_IMAGE,
    WEBHOOK_KEY_FILE, WEBHOOK_LISTEN,
};
use super::{ConfigError, LogFormat, Settings, process_settings, value};

/// The HTTPS port of the webhook when `MESHDNS_WEBHOOK_LISTEN` names none.
const WEBHOOK_PORT: u16 = 8443;

/// Everything `meshdns webhook` reads, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub listen: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The image of the injected sidecar container.
    pub(crate) image: String,
    /// The cluster domain of the search list written into injected pods, without a final dot.
    pub(crate) cluster_domain: String,
    pub admin_listen: Option<SocketAddr>,
    pub log: String,
    pub log_format: LogFormat,
}

impl WebhookConfig {
    /// The webhook's configuration from `NAME=value` pairs (the environment).
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
    ) -> Result<Self, ConfigError> {
        let settings = Settings::from_vars(vars)?;
        let listen = value(&settings, WEBHOOK_LISTEN);
        let listen = super::parse_socket_addr(listen, WEBHOOK_PORT)
            .map_err(|reason| ConfigError::new(WEBHOOK_LISTEN, listen, reason))?;
        let image = value(&settings, WEBHOOK_IMAGE);
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err(ConfigError::new(
                WEBHOOK_IMAGE,
                image,
                "must name the sidecar's image (e.g. registry.example.com/meshdns/meshdns:0.2.0)",
            ));
        }
        let domain = value(&settings, CLUSTER_DOMAIN);
        let zone = parse_zone(domain)
            .map_err(|reason| ConfigError::new(CLUSTER_DOMAIN, domain, reason))?;
        let (admin_listen, log, log_format) = process_settings(&settings)?;
        Ok(Self {
            listen,
            cert_file: PathBuf::from(value(&settings, WEBHOOK_CERT_FILE)),
            key_file: PathBuf::from(value(&settings, WEBHOOK_KEY_FILE)),
            image: image.to_string(),
            cluster_domain: zone.to_ascii().trim_end_matches('.').to_ascii_lowercase(),
            admin_listen,
            log,
            log_format,
        })
    }

    /// What `meshdns webhook --check` prints: every variable the webhook reads, as in force.
    pub fn render(&self) -> String {
        let admin = self
            .admin_listen
            .map_or("(disabled)".into(), |a| a.to_string());
        let format = match self.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        };
        let mut out = String::from("meshdns webhook configuration\n");
        for (name, shown) in [
            (WEBHOOK_LISTEN, self.listen.to_string()),
            (WEBHOOK_CERT_FILE, self.cert_file.display().to_string()),
            (WEBHOOK_KEY_FILE, self.key_file.display().to_string()),
            (WEBHOOK_IMAGE, self.image.clone()),
            (CLUSTER_DOMAIN, self.cluster_domain.clone()),
            (ADMIN_LISTEN, admin),
            (LOG, self.log.clone()),
            (LOG_FORMAT, format.to_string()),
        ] {
            let _ = writeln!(out, "  {name:<26} {shown}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::tests::vars;
    use super::*;

    #[test]
    fn the_webhook_needs_only_its_image() {
        let config =
            WebhookConfig::from_vars(vars(&[(WEBHOOK_IMAGE, "example/meshdns:1")])).unwrap();
        assert_eq!(config.listen, "0.0.0.0:8443".parse().unwrap());
        assert_eq!(config.cluster_domain, "cluster.local");
        assert_eq!(config.image, "example/meshdns:1");
        assert_eq!(
            config.cert_file,
            PathBuf::from("/etc/meshdns-webhook/tls.crt")
        );
        assert!(
            config
                .render()
                .contains("MESHDNS_WEBHOOK_IMAGE      example/meshdns:1")
        );
    }

    #[test]
    fn a_missing_image_names_the_variable() {
        let error = WebhookConfig::from_vars(vars(&[])).unwrap_err();
        assert_eq!(error.variable, WEBHOOK_IMAGE);
    }

    #[test]
    fn a_bad_listen_address_or_domain_or_unknown_variable_is_refused() {
        let image = (WEBHOOK_IMAGE, "m:1");
        let bad_listen = WebhookConfig::from_vars(vars(&[image, (WEBHOOK_LISTEN, "port 8443")]));
        assert_eq!(bad_listen.unwrap_err().variable, WEBHOOK_LISTEN);
        let bad_domain = WebhookConfig::from_vars(vars(&[image, (CLUSTER_DOMAIN, "a..b")]));
        assert_eq!(bad_domain.unwrap_err().variable, CLUSTER_DOMAIN);
        let typo = WebhookConfig::from_vars(vars(&[image, ("MESHDNS_WEBHOOK_IMAGES", "x")]));
        assert!(typo.is_err());
    }

    #[test]
    fn the_listen_port_defaults_to_8443_and_the_domain_loses_its_final_dot() {
        let config = WebhookConfig::from_vars(vars(&[
            (WEBHOOK_IMAGE, "m:1"),
            (WEBHOOK_LISTEN, "127.0.0.1"),
            (CLUSTER_DOMAIN, "Cluster.East."),
        ]))
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(config.cluster_domain, "cluster.east");
    }
}
