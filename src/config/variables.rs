//! The one table of meshdns's variables: one descriptor per variable (name, default, meaning,
//! when a change applies, whether an empty value is refused, what kind of value it holds, how
//! its value in force is shown). The source reads only the names here, the parser reads each
//! value by its kind ([`Variable::kind`]), `--help` prints the table, `--check` walks it and
//! shows each value through it ([`Variable::in_force`]), the reload takes its restart-only list
//! from it ([`restart_only`]) and keeps their running values as their descriptors say, and the
//! README's table is its rows (`Variable::readme_row`). Nothing else keeps a list of
//! variable names: a new variable is a descriptor here and its field of `Config`. It reads
//! nothing and parses no value.

use std::time::Duration;

use super::Config;
use super::clusters::DOT_PORT;
use super::in_force::{self, keep};
use super::kind::Kind;
use super::values::DNS_PORT;

/// One variable meshdns reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variable {
    pub(crate) name: &'static str,
    /// The default as the operator would write it; `None` when unset means "off" or "derived"
    /// (the meaning says which).
    pub(crate) default: Option<&'static str>,
    pub(crate) meaning: &'static str,
    pub(crate) applies: Applies,
    /// An empty (or whitespace-only) value would remove something (every peer, the local
    /// members, the zones), so it is refused, from a file or from the environment alike (a
    /// template whose variable was unset renders an empty value in both).
    pub(crate) refuses_empty: bool,
    /// What its value is: how the parser reads it.
    pub(crate) kind: Kind,
    /// Its value in force in a configuration, as an operator would write it (given the
    /// variable's name): what `--check` shows, and what a reload compares.
    pub(crate) shown: fn(&Config, &str) -> String,
    /// `meshdns webhook` reads it too (the cluster domain, the admin address, the logs).
    webhook_reads_too: bool,
}

/// When a change of a variable takes effect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Applies {
    /// At once, when it changes in `MESHDNS_CONFIG_DIR`.
    Live,
    /// Only after a restart (sockets, threads, the in-flight cap, the log format and the pod's
    /// identity are made once): a change in `MESHDNS_CONFIG_DIR` is logged with the value in
    /// force and the pending one, counted as `restart_required`, and applied at the next start;
    /// `keep` puts the running value back into the configuration a reload applies.
    Restart {
        keep: fn(applied: &mut Config, running: &Config),
    },
    /// Never from the directory: only the environment may set it (`MESHDNS_CONFIG_DIR`).
    EnvironmentOnly,
    /// Read only by `meshdns webhook`, once, when it starts (the DNS server never reads it, so
    /// it is not restart-only for it).
    WebhookStart,
}

impl Variable {
    /// When a change takes effect, as `--help` and the README say it.
    pub(crate) fn applies(&self) -> &'static str {
        match self.applies {
            Applies::Live => "live",
            Applies::Restart { .. } => "restart",
            Applies::EnvironmentOnly => "environment only",
            Applies::WebhookStart => "webhook, at start",
        }
    }

    /// Whether a change applies only after a restart.
    pub(crate) fn is_restart_only(&self) -> bool {
        matches!(self.applies, Applies::Restart { .. })
    }

    /// Whether only `meshdns webhook` reads it.
    pub(crate) fn is_the_webhooks(&self) -> bool {
        matches!(self.applies, Applies::WebhookStart)
    }

    /// Whether `meshdns webhook` reads it: its own variables and those it shares with the
    /// DNS server.
    pub(crate) fn is_read_by_the_webhook(&self) -> bool {
        self.is_the_webhooks() || self.webhook_reads_too
    }

    /// Its value in force in `config`, as an operator would write it.
    pub(crate) fn in_force(&self, config: &Config) -> String {
        (self.shown)(config, self.name)
    }

    /// The variable's row of the README's configuration table.
    #[cfg(test)]
    fn readme_row(&self) -> String {
        let default = self
            .default
            .map_or("unset".to_string(), |d| format!("`{d}`"));
        format!(
            "| `{}` | {default} | {} | {} |",
            self.name,
            self.meaning,
            self.applies()
        )
    }

    /// The variable's two lines of `--help` (name, meaning and when a change applies unless
    /// live; then its default), the name padded to `width`.
    pub(crate) fn help_lines(&self, width: usize) -> String {
        let default = self.default.unwrap_or("(unset)");
        let applies = match self.applies {
            Applies::Live => String::new(),
            _ => format!(" [{}]", self.applies()),
        };
        format!(
            "  {:<width$}  {}{applies}\n  {:<width$}  default: {default}\n",
            self.name, self.meaning, ""
        )
    }

    /// This variable, with an empty value refused.
    const fn refusing_empty(self) -> Self {
        Self {
            refuses_empty: true,
            ..self
        }
    }

    /// This variable, read by `meshdns webhook` as well as by the DNS server.
    const fn read_by_the_webhook_too(self) -> Self {
        Self {
            webhook_reads_too: true,
            ..self
        }
    }
}

const fn var(
    name: &'static str,
    default: Option<&'static str>,
    meaning: &'static str,
    applies: Applies,
    kind: Kind,
    shown: fn(&Config, &str) -> String,
) -> Variable {
    Variable {
        name,
        default,
        meaning,
        applies,
        refuses_empty: false,
        kind,
        shown,
        webhook_reads_too: false,
    }
}

/// More threads than this is never useful for a per-pod resolver.
const MAX_THREADS: usize = 64;

/// The longest a query (or one attempt) may be given: beyond a minute a client has long given
/// up, and no peer is that far away.
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a positive answer, or a stale one, may be kept (RFC 8767 §5 suggests 1–3 days
/// for stale data; a week bounds both).
const MAX_CACHE_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The longest a negative answer may be kept (RFC 2308 §5 suggests 1–3 hours at most).
const MAX_NEGATIVE_TTL: Duration = Duration::from_secs(3 * 3600);

/// The admin port when `MESHDNS_ADMIN_LISTEN` names none.
const ADMIN_PORT: u16 = 9153;

/// The HTTPS port of the webhook when `MESHDNS_WEBHOOK_LISTEN` names none.
const WEBHOOK_PORT: u16 = 8443;

pub(crate) const LISTEN: &str = "MESHDNS_LISTEN";
pub(crate) const ALLOW_FROM: &str = "MESHDNS_ALLOW_FROM";
pub(crate) const UPSTREAMS: &str = "MESHDNS_UPSTREAMS";
pub(crate) const RESOLV_CONF: &str = "MESHDNS_RESOLV_CONF";
pub(crate) const CLUSTER_DOMAIN: &str = "MESHDNS_CLUSTER_DOMAIN";
pub(crate) const LOCAL_CLUSTER: &str = "MESHDNS_LOCAL_CLUSTER";
pub(crate) const CLUSTERS: &str = "MESHDNS_CLUSTERS";
pub(crate) const CLUSTER_ZONE: &str = "MESHDNS_CLUSTER_ZONE";
pub(crate) const DISTRIBUTED_ZONES: &str = "MESHDNS_DISTRIBUTED_ZONES";
pub(crate) const CLUSTERSET_ZONE: &str = "MESHDNS_CLUSTERSET_ZONE";
pub(crate) const TIMEOUT: &str = "MESHDNS_TIMEOUT";
pub(crate) const ATTEMPT_TIMEOUT: &str = "MESHDNS_ATTEMPT_TIMEOUT";
pub(crate) const CACHE_SIZE: &str = "MESHDNS_CACHE_SIZE";
pub(crate) const CACHE_MAX_TTL: &str = "MESHDNS_CACHE_MAX_TTL";
pub(crate) const CACHE_NEGATIVE_TTL: &str = "MESHDNS_CACHE_NEGATIVE_TTL";
pub(crate) const SERVE_STALE: &str = "MESHDNS_SERVE_STALE";
pub(crate) const MAX_INFLIGHT: &str = "MESHDNS_MAX_INFLIGHT";
pub(crate) const ADMIN_LISTEN: &str = "MESHDNS_ADMIN_LISTEN";
pub(crate) const LOG: &str = "MESHDNS_LOG";
pub(crate) const LOG_FORMAT: &str = "MESHDNS_LOG_FORMAT";
pub(crate) const THREADS: &str = "MESHDNS_THREADS";
pub(crate) const CONFIG_DIR: &str = "MESHDNS_CONFIG_DIR";
pub(crate) const TLS_CA_FILE: &str = "MESHDNS_TLS_CA_FILE";
pub(crate) const TLS_CERT_FILE: &str = "MESHDNS_TLS_CERT_FILE";
pub(crate) const TLS_KEY_FILE: &str = "MESHDNS_TLS_KEY_FILE";
pub(crate) const DOT_LISTEN: &str = "MESHDNS_DOT_LISTEN";
pub(crate) const DOT_CERT_FILE: &str = "MESHDNS_DOT_CERT_FILE";
pub(crate) const DOT_KEY_FILE: &str = "MESHDNS_DOT_KEY_FILE";
pub(crate) const DOT_CLIENT_CA_FILE: &str = "MESHDNS_DOT_CLIENT_CA_FILE";
/// The pod's identity from the downward API (hostname, subdomain, namespace), in that order.
pub(crate) const POD_NAMES: [&str; 3] = [POD_HOSTNAME, POD_SUBDOMAIN, POD_NAMESPACE];
pub(crate) const POD_IP: &str = "MESHDNS_POD_IP";
pub(crate) const POD_IPS: &str = "MESHDNS_POD_IPS";
pub(crate) const POD_HOSTNAME: &str = "MESHDNS_POD_HOSTNAME";
pub(crate) const POD_SUBDOMAIN: &str = "MESHDNS_POD_SUBDOMAIN";
pub(crate) const POD_NAMESPACE: &str = "MESHDNS_POD_NAMESPACE";
pub(crate) const HOSTS_FILE: &str = "MESHDNS_HOSTS_FILE";
pub(crate) const WEBHOOK_LISTEN: &str = "MESHDNS_WEBHOOK_LISTEN";
pub(crate) const WEBHOOK_CERT_FILE: &str = "MESHDNS_WEBHOOK_CERT_FILE";
pub(crate) const WEBHOOK_KEY_FILE: &str = "MESHDNS_WEBHOOK_KEY_FILE";
pub(crate) const WEBHOOK_IMAGE: &str = "MESHDNS_WEBHOOK_IMAGE";

/// The files of DNS over TLS to peers, in the order the loader reads them and the client
/// configuration fingerprints them (`certificates::ClientTls::files`).
pub(crate) const CLIENT_TLS_FILES: [&str; 3] = [TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE];

/// Every variable, in the order `--help`, `--check` and the README show them.
pub(crate) const VARIABLES: &[Variable] = &[
    var(
        LISTEN,
        Some("127.0.0.1:53"),
        "comma list of addresses, each served over UDP and TCP",
        Applies::Restart {
            keep: keep::listen,
        },
        Kind::Addresses { port: DNS_PORT },
        in_force::listen,
    ),
    var(
        ALLOW_FROM,
        Some("127.0.0.0/8,::1/128"),
        "client networks served; others get REFUSED",
        Applies::Live,
        Kind::Networks,
        in_force::allow_from,
    ),
    var(
        UPSTREAMS,
        None,
        "the local cluster DNS (kube-dns), IP[:PORT] comma list; unset: the non-loopback nameservers of MESHDNS_RESOLV_CONF",
        Applies::Live,
        Kind::Addresses { port: DNS_PORT },
        in_force::upstreams,
    )
    .refusing_empty(),
    var(
        RESOLV_CONF,
        Some("/etc/resolv.conf"),
        "the pod's resolv.conf: its search list (search-list expansions answered at once; unreadable: that feature off), and its nameservers when MESHDNS_UPSTREAMS is unset",
        Applies::Live,
        Kind::Path,
        in_force::resolv_conf,
    ),
    var(
        CLUSTER_DOMAIN,
        Some("cluster.local"),
        "the Kubernetes cluster domain of every cluster (per-cluster domain= overrides)",
        Applies::Live,
        Kind::Zone,
        in_force::as_set,
    )
    .read_by_the_webhook_too(),
    var(
        LOCAL_CLUSTER,
        None,
        "name of the cluster this pod runs in; its names go to MESHDNS_UPSTREAMS",
        Applies::Live,
        Kind::ClusterName,
        in_force::local_cluster,
    )
    .refusing_empty(),
    var(
        CLUSTERS,
        None,
        "the clusters: NAME=ENDPOINT[,ENDPOINT...] [option=value...] entries separated by ';'",
        Applies::Live,
        Kind::Clusters,
        in_force::clusters,
    )
    .refusing_empty(),
    var(
        CLUSTER_ZONE,
        Some("cluster.{name}"),
        "template of each cluster's zone; {name} is the cluster name",
        Applies::Live,
        Kind::ZoneTemplate,
        in_force::as_set,
    )
    .refusing_empty(),
    var(
        DISTRIBUTED_ZONES,
        Some("distributed.local"),
        "comma list of zones gathered from all clusters (prefix naming)",
        Applies::Live,
        Kind::Zones,
        in_force::distributed_zones,
    )
    .refusing_empty(),
    var(
        CLUSTERSET_ZONE,
        None,
        "optional zone with Kubernetes MCS naming, e.g. clusterset.local",
        Applies::Live,
        Kind::Zone,
        in_force::clusterset_zone,
    )
    .refusing_empty(),
    var(
        TIMEOUT,
        Some("2s"),
        "deadline for one client query, all attempts included",
        Applies::Live,
        Kind::Duration { max: MAX_QUERY_TIMEOUT },
        in_force::timeout,
    ),
    var(
        ATTEMPT_TIMEOUT,
        Some("500ms"),
        "ceiling of one wait for a reply: a lost UDP datagram is sent again after the endpoint's retransmission timeout (from its round-trip time, at least 15 ms), and an attempt silent this long counts as failed and the next endpoint is asked",
        Applies::Live,
        Kind::Duration { max: MAX_QUERY_TIMEOUT },
        in_force::attempt_timeout,
    ),
    var(
        CACHE_SIZE,
        Some("10000"),
        "cache entries; 0 disables the cache",
        Applies::Live,
        Kind::Count {
            min: 0,
            max: usize::MAX,
            refusal: "is not a whole number of entries (0 disables the cache)",
        },
        in_force::cache_size,
    ),
    var(CACHE_MAX_TTL, Some("3600s"), "cap on positive TTLs",
        Applies::Live,
        Kind::Duration { max: MAX_CACHE_TTL },
        in_force::cache_max_ttl,
    ),
    var(
        CACHE_NEGATIVE_TTL,
        Some("5s"),
        "cap on NXDOMAIN/NODATA caching",
        Applies::Live,
        Kind::Duration { max: MAX_NEGATIVE_TTL },
        in_force::cache_negative_ttl,
    ),
    var(
        SERVE_STALE,
        Some("300s"),
        "how long an expired answer may still be served when its upstream fails",
        Applies::Live,
        Kind::Duration { max: MAX_CACHE_TTL },
        in_force::serve_stale,
    ),
    var(
        MAX_INFLIGHT,
        Some("1024"),
        "client queries being answered at once (TCP ones at most half); UDP queries beyond it are dropped",
        Applies::Restart {
            keep: keep::max_inflight,
        },
        Kind::Count {
            min: 1,
            max: 65_536,
            refusal: "is not a number of queries from 1 to 65536",
        },
        in_force::max_inflight,
    ),
    var(
        ADMIN_LISTEN,
        Some("0.0.0.0:9153"),
        "HTTP /metrics, /livez, /readyz; empty disables",
        Applies::Restart {
            keep: keep::admin_listen,
        },
        Kind::Address { port: ADMIN_PORT },
        in_force::admin_listen,
    )
    .read_by_the_webhook_too(),
    var(
        LOG,
        Some("info"),
        "log filter: a level (error, warn, info, debug, trace, off) or target=level directives",
        Applies::Live,
        Kind::LogFilter,
        in_force::log,
    )
    .read_by_the_webhook_too(),
    var(LOG_FORMAT, Some("text"), "text or json",
        Applies::Restart {
            keep: keep::log_format,
        },
        Kind::LogFormat,
        in_force::log_format,
    )
    .read_by_the_webhook_too(),
    var(
        THREADS,
        Some("1"),
        "runtime threads (one is cheapest under a sidecar's CPU limit)",
        Applies::Restart {
            keep: keep::threads,
        },
        Kind::Count {
            min: 1,
            max: MAX_THREADS,
            refusal: "is not a thread count from 1 to 64",
        },
        in_force::threads,
    ),
    var(
        CONFIG_DIR,
        None,
        "directory of files named after these variables (a mounted ConfigMap), watched and applied live; a file overrides the environment",
        Applies::EnvironmentOnly,
        Kind::Path,
        in_force::config_dir,
    ),
    var(
        TLS_CA_FILE,
        None,
        "PEM bundle of the CAs that sign peers' certificates (required when a cluster uses transport=tls); re-read when it changes",
        Applies::Live,
        Kind::Path,
        in_force::tls_ca_file,
    ),
    var(
        TLS_CERT_FILE,
        None,
        "PEM client certificate chain for mutual TLS to peers (with MESHDNS_TLS_KEY_FILE); re-read when it changes",
        Applies::Live,
        Kind::Path,
        in_force::tls_cert_file,
    ),
    var(
        TLS_KEY_FILE,
        None,
        "PEM private key of MESHDNS_TLS_CERT_FILE; re-read when it changes",
        Applies::Live,
        Kind::Path,
        in_force::tls_key_file,
    ),
    // The listener and the paths of its files are made once; the files' content is renewed
    // while running (looked at every 10 s), without a reload.
    var(
        DOT_LISTEN,
        None,
        "comma list of addresses (port 853 unless given) served over DNS over TLS, for the peer clusters; unset: off",
        Applies::Restart {
            keep: keep::dot,
        },
        Kind::Addresses { port: DOT_PORT },
        in_force::dot_listen,
    ),
    var(
        DOT_CERT_FILE,
        None,
        "PEM certificate chain served over DNS over TLS (required with MESHDNS_DOT_LISTEN); new connections get a renewed one within 10 s of the file changing",
        Applies::Restart {
            keep: keep::dot,
        },
        Kind::Path,
        in_force::dot_cert_file,
    ),
    var(
        DOT_KEY_FILE,
        None,
        "PEM private key of MESHDNS_DOT_CERT_FILE; renewed with it (a pair that does not match keeps the one in force)",
        Applies::Restart {
            keep: keep::dot,
        },
        Kind::Path,
        in_force::dot_key_file,
    ),
    var(
        DOT_CLIENT_CA_FILE,
        None,
        "PEM bundle of the CAs that sign the peers' client certificates: set, DNS over TLS clients must present one (and MESHDNS_ALLOW_FROM does not apply to them); unset, MESHDNS_ALLOW_FROM does",
        Applies::Restart {
            keep: keep::dot,
        },
        Kind::Path,
        in_force::dot_client_ca_file,
    ),
    // The pod's identity is fixed for its life (its IPs, hostname, subdomain and namespace
    // never change while it runs), so these are read once, at startup.
    var(
        POD_IP,
        None,
        "the pod's IP (downward API status.podIP); with it, meshdns answers the pod's own names itself",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::PodIp,
        in_force::as_set,
    ),
    var(
        POD_IPS,
        None,
        "the pod's IPs, comma list (downward API status.podIPs, dual stack)",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::PodIps,
        in_force::as_set,
    ),
    var(
        POD_HOSTNAME,
        None,
        "the pod's hostname; unset: from its line in MESHDNS_HOSTS_FILE",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::PodLabel,
        in_force::pod_hostname,
    ),
    var(
        POD_SUBDOMAIN,
        None,
        "the pod's subdomain (its headless Service); unset: from its line in MESHDNS_HOSTS_FILE",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::PodLabel,
        in_force::pod_subdomain,
    ),
    var(
        POD_NAMESPACE,
        None,
        "the pod's namespace (downward API metadata.namespace); unset: from its line in MESHDNS_HOSTS_FILE",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::PodLabel,
        in_force::pod_namespace,
    ),
    var(
        HOSTS_FILE,
        Some("/etc/hosts"),
        "where the kubelet wrote the pod's line (IP, FQDN, hostname); read at startup when a pod variable is missing",
        Applies::Restart {
            keep: keep::pod,
        },
        Kind::Path,
        in_force::as_set,
    ),
    // `meshdns webhook` (the injection webhook, docs/injection.md) reads these, with the
    // variables marked `read_by_the_webhook_too`; the DNS server ignores them. Read once, when the webhook starts (the certificate files' contents
    // are re-read when they change).
    var(
        WEBHOOK_LISTEN,
        Some("0.0.0.0:8443"),
        "webhook mode: the HTTPS address the API server sends AdmissionReviews to (POST /mutate)",
        Applies::WebhookStart,
        Kind::Address { port: WEBHOOK_PORT },
        in_force::as_set,
    ),
    var(
        WEBHOOK_CERT_FILE,
        Some("/etc/meshdns-webhook/tls.crt"),
        "webhook mode: PEM server certificate chain (cert-manager's tls.crt); re-read when it changes",
        Applies::WebhookStart,
        Kind::Path,
        in_force::as_set,
    ),
    var(
        WEBHOOK_KEY_FILE,
        Some("/etc/meshdns-webhook/tls.key"),
        "webhook mode: PEM private key of MESHDNS_WEBHOOK_CERT_FILE; re-read when it changes",
        Applies::WebhookStart,
        Kind::Path,
        in_force::as_set,
    ),
    var(
        WEBHOOK_IMAGE,
        None,
        "webhook mode, required: the image of the injected meshdns sidecar (the webhook's own image)",
        Applies::WebhookStart,
        Kind::Image,
        in_force::as_set,
    ),
];

/// The restart-only variables ([`Applies::Restart`]), in the table's order.
pub(crate) fn restart_only() -> impl Iterator<Item = &'static Variable> {
    VARIABLES.iter().filter(|v| v.is_restart_only())
}

/// The variables whose empty value is refused, in the table's order.
pub(crate) fn refusing_empty() -> impl Iterator<Item = &'static str> {
    VARIABLES.iter().filter(|v| v.refuses_empty).map(|v| v.name)
}

/// The variable called `name`.
pub(crate) fn find(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// The known variable `unknown` most likely stands for (a typo a few letters off).
pub(crate) fn suggestion(unknown: &str) -> Option<&'static str> {
    VARIABLES
        .iter()
        .map(|v| (super::hint::edit_distance(unknown, v.name), v.name))
        .filter(|(distance, _)| *distance <= 3)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// What `meshdns --help` prints.
pub fn help() -> String {
    let width = VARIABLES.iter().map(|v| v.name.len()).max().unwrap_or(0);
    let mut out = String::from(
        "meshdns: a DNS stub resolver for workloads stretched over several Kubernetes clusters\n\
         \n\
         usage: meshdns [webhook] [--check [--resolve] [--env-file FILE]... | --version | --help]\n\
         \x20      meshdns dns-change --platform PLATFORM --resolver IP [--current FILE] [--env-file FILE]...\n\
         \x20 (none)     serve DNS as configured\n\
         \x20 webhook    serve the sidecar-injection admission webhook (MESHDNS_WEBHOOK_*);\n\
         \x20            with --check: print its configuration, then exit\n\
         \x20 --check    print the effective configuration and routing table, then exit (0, or 64);\n\
         \x20            sends nothing: host-name endpoints are shown as resolved at run time\n\
         \x20 --resolve  with --check: resolve host-name endpoints through the configured\n\
         \x20            upstreams and show their addresses (a warning for a name that does not)\n\
         \x20 --env-file FILE\n\
         \x20            with --check or dns-change: KEY=VALUE lines (a ConfigMap's env file) laid over the\n\
         \x20            environment, each value taken whole, spaces included; repeatable\n\
         \x20 dns-change print the change that makes the cluster's DNS forward meshdns's zones (every\n\
         \x20            cluster zone, the distributed zones, the clusterset zone) to the cluster-level\n\
         \x20            resolver's Service IP (--resolver), for PLATFORM: kubeadm (merged Corefile),\n\
         \x20            k3s, aks (coredns-custom ConfigMap), rke2 (HelmChartConfig), eks (add-on\n\
         \x20            configurationValues), gke (kube-dns stubDomains), openshift (DNS operator\n\
         \x20            spec.servers), gke-autopilot (refused: sidecar only). --current FILE: what\n\
         \x20            the platform holds now (the Corefile; gke: stubDomains JSON; openshift:\n\
         \x20            spec.servers JSON), merged idempotently; a zone it already serves is refused\n\
         \x20            (exit 64). Guide: docs/platforms.md\n\
         \x20 --version  print the version\n\
         \x20 --help     print this text\n\
         \n\
         Configured by environment variables (and files in MESHDNS_CONFIG_DIR):\n",
    );
    for variable in VARIABLES {
        out.push_str(&variable.help_lines(width));
    }
    out.push_str(&format!(
        "\nDurations take ms, s, m or h (e.g. 500ms, 1.5s).\n\
         [restart]: {} — a change in MESHDNS_CONFIG_DIR is logged, counted as \
         restart_required, and applied at the next start.\n\
         Empty is not unset: {} set to an empty value is refused; delete its file (or leave \
         the variable out) to unset it.\n\
         Exit codes: 0 after a clean shutdown, 64 bad configuration (or a refused dns-change), 71 cannot bind.\n",
        restart_only().map(|v| v.name).collect::<Vec<_>>().join(", "),
        refusing_empty().collect::<Vec<_>>().join(", "),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));

    /// The rows (`| ` lines after the header) of the first table under `## <title>`.
    fn table_rows(title: &str) -> Vec<Vec<String>> {
        let section = README
            .split(&format!("\n## {title}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("README has a `## {title}` section"));
        let section = section.split("\n## ").next().unwrap_or(section);
        section
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                line.trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().to_string())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_readme_configuration_table_is_the_variable_table() {
        let documented = table_rows("Configuration");
        let expected: Vec<Vec<String>> = VARIABLES
            .iter()
            .map(|v| {
                v.readme_row()
                    .trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().to_string())
                    .collect()
            })
            .collect();
        assert_eq!(documented, expected);
    }

    #[test]
    fn typos_suggest_the_variable_meant() {
        assert_eq!(suggestion("MESHDNS_UPSTREAM"), Some(UPSTREAMS));
        assert_eq!(suggestion("MESHDNS_CLUSTRES"), Some(CLUSTERS));
        assert_eq!(suggestion("MESHDNS_TIMEOUTS"), Some(TIMEOUT));
        assert_eq!(suggestion("MESHDNS_SOMETHING_ELSE"), None);
    }

    #[test]
    fn help_names_the_restart_only_variables_and_marks_each() {
        let text = help();
        let listed: Vec<&str> = restart_only().map(|v| v.name).collect();
        assert_eq!(listed.len(), 15);
        assert!(text.contains(&listed.join(", ")), "{text}");
        assert_eq!(text.matches(" [restart]\n").count(), listed.len());
    }

    #[test]
    fn only_the_configuration_directory_is_environment_only() {
        let only: Vec<&str> = (VARIABLES.iter())
            .filter(|v| matches!(v.applies, Applies::EnvironmentOnly))
            .map(|v| v.name)
            .collect();
        assert_eq!(only, [CONFIG_DIR]);
    }

    #[test]
    fn help_lists_every_variable_with_its_default() {
        let text = help();
        for variable in VARIABLES {
            assert!(text.contains(variable.name), "{}", variable.name);
            if let Some(default) = variable.default {
                assert!(
                    text.contains(&format!("default: {default}")),
                    "{}",
                    variable.name
                );
            }
        }
    }
}
