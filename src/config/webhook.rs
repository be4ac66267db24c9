//! The configuration of `meshdns webhook`, the sidecar-injection admission webhook: its HTTPS
//! address and certificate files, the sidecar image it injects, and the cluster domain of the
//! search list it writes, with the admin and logging variables every mode shares. It reads
//! only the variables table (unknown `MESHDNS_*` names fail as they do for the DNS server) and
//! touches no file: the binary (`main.rs`) loads the certificate before it starts the webhook,
//! whose server then follows its files.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::kind::Values;
use super::variables::{
    ADMIN_LISTEN, CLUSTER_DOMAIN, LOG, LOG_FORMAT, Variable, WEBHOOK_CERT_FILE, WEBHOOK_IMAGE,
    WEBHOOK_KEY_FILE, WEBHOOK_LISTEN,
};
use super::{ConfigError, Errors, LogFormat, Settings};

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
    /// The webhook's configuration from `NAME=value` pairs (the environment), or every value
    /// that is wrong.
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> Result<Self, Errors> {
        let settings = Settings::from_vars(vars)?;
        let reads = Variable::is_read_by_the_webhook;
        let mut values = Values::read(&settings, reads, reads);
        let listen = values.address(WEBHOOK_LISTEN).and_then(|listen| {
            let empty = ConfigError::new(
                WEBHOOK_LISTEN,
                "",
                "is not an address (IP, IP:PORT or [IPv6]:PORT)",
            );
            values.check(listen.ok_or(empty))
        });
        let config = Self::build(&values, listen);
        values.finish(config)
    }

    /// The configuration from the values that parsed; `None` when one was refused.
    fn build(values: &Values, listen: Option<SocketAddr>) -> Option<Self> {
        let zone = values.zone(CLUSTER_DOMAIN)??;
        Some(Self {
            listen: listen?,
            cert_file: values.path(WEBHOOK_CERT_FILE)?.unwrap_or_default(),
            key_file: values.path(WEBHOOK_KEY_FILE)?.unwrap_or_default(),
            image: values.text(WEBHOOK_IMAGE)??,
            cluster_domain: zone.to_ascii().trim_end_matches('.').to_ascii_lowercase(),
            admin_listen: values.address(ADMIN_LISTEN)?,
            log: values.text(LOG)??,
            log_format: values.log_format(LOG_FORMAT)?,
        })
    }

    /// What `meshdns webhook --check` prints: every variable the webhook reads, as in force.
    pub fn render(&self) -> String {
        let admin = self
            .admin_listen
            .map_or("(disabled)".into(), |a| a.to_string());
        let mut out = String::from("meshdns webhook configuration\n");
        for (name, shown) in [
            (WEBHOOK_LISTEN, self.listen.to_string()),
            (WEBHOOK_CERT_FILE, self.cert_file.display().to_string()),
            (WEBHOOK_KEY_FILE, self.key_file.display().to_string()),
            (WEBHOOK_IMAGE, self.image.clone()),
            (CLUSTER_DOMAIN, self.cluster_domain.clone()),
            (ADMIN_LISTEN, admin),
            (LOG, self.log.clone()),
            (LOG_FORMAT, self.log_format.name().to_string()),
        ] {
            let _ = writeln!(out, "  {name:<26} {shown}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::tests::vars;
    use super::super::tests::one_error;
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
        let error = one_error(WebhookConfig::from_vars(vars(&[])));
        assert_eq!(error.variable, WEBHOOK_IMAGE);
    }

    #[test]
    fn a_bad_listen_address_or_domain_or_unknown_variable_is_refused() {
        let image = (WEBHOOK_IMAGE, "m:1");
        let bad_listen = WebhookConfig::from_vars(vars(&[image, (WEBHOOK_LISTEN, "port 8443")]));
        assert_eq!(one_error(bad_listen).variable, WEBHOOK_LISTEN);
        let bad_domain = WebhookConfig::from_vars(vars(&[image, (CLUSTER_DOMAIN, "a..b")]));
        assert_eq!(one_error(bad_domain).variable, CLUSTER_DOMAIN);
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
