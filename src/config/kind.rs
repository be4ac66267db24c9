//! What each variable's value is ([`Kind`], a field of its descriptor in [`super::variables`])
//! and its parse: the one place a raw value becomes a typed one ([`Value`]). The parser reads
//! every variable through its kind ([`Values::read`]), so a value that is wrong is found
//! whatever else is, and every such error is kept; what depends on several values (the
//! clusters, the zone table, the pod's identity) is checked afterwards, on the values that
//! parsed, by the parent's parse and the `pod` and `zones` modules, not here. It reads nothing
//! and knows no variable by name: which kind a variable holds is its descriptor's.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use hickory_proto::rr::Name;

use super::clusters::{ClusterEntry, parse_clusters};
use super::values::{IpNet, check_cluster_name, is_dns_label, parse_duration, parse_socket_addr};
use super::variables::{VARIABLES, Variable};
use super::{ConfigError, Errors, LogFormat, Settings, hint, value};

/// What a variable's value is, with its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A comma list of `IP[:PORT]`, the port defaulting to `port`; empty items are skipped.
    Addresses { port: u16 },
    /// One `IP[:PORT]`, the port defaulting to `port`; empty: off.
    Address { port: u16 },
    /// A comma list of networks in CIDR notation.
    Networks,
    /// A duration (`500ms`, `1.5s`, `5m`), at most `max`.
    Duration { max: Duration },
    /// A whole number from `min` to `max`; `refusal` says so when it is not.
    Count {
        min: usize,
        max: usize,
        refusal: &'static str,
    },
    /// One zone name; unset: none.
    Zone,
    /// A comma list of zone names.
    Zones,
    /// The template of each cluster's zone: text with `{name}` in it.
    ZoneTemplate,
    /// A cluster name (a DNS label); unset: none.
    ClusterName,
    /// `MESHDNS_CLUSTERS`' entries (`super::clusters`).
    Clusters,
    /// A tracing filter whose every directive is a level or `target=level`.
    LogFilter,
    /// `text` or `json`.
    LogFormat,
    /// A file or directory; empty: none.
    Path,
    /// One IP address of the pod; empty: none.
    PodIp,
    /// A comma list of the pod's IP addresses.
    PodIps,
    /// One DNS label (a pod's hostname, subdomain or namespace); empty: none.
    PodLabel,
    /// An image reference (text without spaces).
    Image,
}

/// A value as its kind parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Addresses(Vec<SocketAddr>),
    Address(Option<SocketAddr>),
    Networks(Vec<IpNet>),
    Duration(Duration),
    Count(usize),
    Zone(Option<Name>),
    Zones(Vec<Name>),
    Text(Option<String>),
    Clusters(Vec<ClusterEntry>),
    LogFormat(LogFormat),
    Path(Option<PathBuf>),
    Ips(Vec<IpAddr>),
}

/// Levels `MESHDNS_LOG` may name on their own.
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// The placeholder of `MESHDNS_CLUSTER_ZONE` that stands for the cluster name.
pub(crate) const NAME_PLACEHOLDER: &str = "{name}";

impl Kind {
    /// `raw` (trimmed; "" when unset without a default) as this kind's value, or the error
    /// naming `variable` and the token at fault. `set` says whether the variable is set at all.
    pub(super) fn parse(self, variable: &str, raw: &str, set: bool) -> Result<Value, ConfigError> {
        let whole = |reason: String| ConfigError::new(variable, raw, reason);
        let text = || (!raw.is_empty()).then(|| raw.to_string());
        Ok(match self {
            Kind::Addresses { port } => {
                Value::Addresses(list(variable, raw, |t| parse_socket_addr(t, port))?)
            }
            Kind::Address { port } => Value::Address(match raw {
                "" => None,
                addr => Some(parse_socket_addr(addr, port).map_err(whole)?),
            }),
            Kind::Networks => Value::Networks(list(variable, raw, IpNet::parse)?),
            Kind::Duration { max } => Value::Duration(parse_duration(raw, max).map_err(whole)?),
            Kind::Count { min, max, refusal } => Value::Count(
                (raw.parse().ok())
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| whole(refusal.into()))?,
            ),
            Kind::Zone if !set && raw.is_empty() => Value::Zone(None),
            Kind::Zone => Value::Zone(Some(super::values::parse_zone(raw).map_err(whole)?)),
            Kind::Zones => Value::Zones(list(variable, raw, super::values::parse_zone)?),
            Kind::ZoneTemplate if !raw.contains(NAME_PLACEHOLDER) => {
                return Err(whole("must contain {name}, e.g. cluster.{name}".into()));
            }
            Kind::ClusterName if !raw.is_empty() => {
                check_cluster_name(raw).map_err(whole)?;
                Value::Text(text())
            }
            Kind::ZoneTemplate | Kind::ClusterName => Value::Text(text()),
            Kind::Clusters => Value::Clusters(parse_clusters(raw)?),
            Kind::LogFilter => {
                check_log_filter(variable, raw)?;
                Value::Text(Some(raw.to_string()))
            }
            Kind::LogFormat => Value::LogFormat(match raw {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err(whole("must be text or json".into())),
            }),
            Kind::Path => Value::Path(text().map(PathBuf::from)),
            Kind::PodIp => Value::Ips(match raw {
                "" => Vec::new(),
                ip => vec![pod_ip(ip).map_err(whole)?],
            }),
            Kind::PodIps => Value::Ips(list(variable, raw, pod_ip)?),
            Kind::PodLabel if !raw.is_empty() && !is_dns_label(raw) => {
                return Err(whole("is not a DNS label (a-z, 0-9 and '-', at most 63 characters, as Kubernetes requires of a pod's hostname, subdomain and namespace)".into()));
            }
            Kind::PodLabel => Value::Text(text()),
            Kind::Image if raw.is_empty() || raw.contains(char::is_whitespace) => {
                return Err(whole(
                    "must name the sidecar's image (e.g. registry.example.com/meshdns/meshdns:0.2.0)"
                        .into(),
                ));
            }
            Kind::Image => Value::Text(text()),
        })
    }
}

/// The comma list `raw` of `variable`, with whitespace around items ignored and empty items
/// skipped; an item that does not parse is the token of the error.
pub(super) fn list<T>(
    variable: &str,
    raw: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    raw.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let reason = |reason| hint::spaces_in_list(t).unwrap_or(reason);
            parse(t).map_err(|why| ConfigError::new(variable, t, reason(why)))
        })
        .collect()
}

/// An address of a pod: neither unspecified nor multicast.
fn pod_ip(token: &str) -> Result<IpAddr, String> {
    let ip: IpAddr = token.parse().map_err(|_| {
        "is not an IP address (the downward API gives status.podIP and status.podIPs, e.g. 10.8.1.2 or 10.8.1.2,fd00::2)".to_string()
    })?;
    if ip.is_unspecified() || ip.is_multicast() {
        return Err("is not a pod's address (unspecified or multicast)".into());
    }
    Ok(ip)
}

/// A tracing filter whose every directive says something: a level, or `target=level`. A bare
/// word is a target for tracing, so `MESHDNS_LOG=verbose` would quietly turn every log line
/// off (the startup line included).
fn check_log_filter(variable: &str, filter: &str) -> Result<(), ConfigError> {
    if let Err(error) = filter.parse::<tracing_subscriber::filter::Targets>() {
        return Err(ConfigError::new(
            variable,
            filter,
            format!("is not a log filter: {error}"),
        ));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let is_level = LOG_LEVELS.contains(&directive.to_ascii_lowercase().as_str());
        let is_target = directive.contains('=') || directive.starts_with("meshdns");
        if !is_level && !is_target {
            return Err(ConfigError::new(
                variable,
                directive,
                "is neither a level (off, error, warn, info, debug, trace) nor target=level",
            ));
        }
    }
    Ok(())
}

/// One accessor per [`Value`]: the value of a variable of that kind, `None` when it was
/// refused (its error is kept) or is of another kind.
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident: $variant:ident -> $type:ty;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&self, variable: &str) -> Option<$type> {
            match self.parsed.get(variable)? {
                Value::$variant(value) => Some(value.clone()),
                other => {
                    // A descriptor whose kind is not the one its field is read as: a bug that
                    // every test building a configuration meets first, with this message.
                    debug_assert!(false, "{variable} read as {} but parsed as {other:?}", stringify!($variant));
                    None
                }
            }
        }
    )*};
}

/// The values of the variables a mode reads, each parsed by its kind, and every error found:
/// first the values that are wrong on their own, then what the cross-checks find among the
/// values that parsed.
#[derive(Debug, Default)]
pub(crate) struct Values {
    parsed: BTreeMap<&'static str, Value>,
    errors: Errors,
}

impl Values {
    /// The variables of `settings` for which `reads` holds, each parsed by its kind. Before
    /// that, the raw value of each one `looks_at` holds is refused if it is in quotes, or empty
    /// where its descriptor refuses that (a refused value is not parsed).
    pub(crate) fn read(
        settings: &Settings,
        looks_at: impl Fn(&Variable) -> bool,
        reads: impl Fn(&Variable) -> bool,
    ) -> Self {
        let mut values = Values::default();
        for variable in VARIABLES.iter().filter(|v| looks_at(v)) {
            let raw = values.check(refuse_raw(settings, variable));
            if raw.is_none() || !reads(variable) {
                continue;
            }
            let set = settings.get(variable.name).is_some();
            let parsed = (variable.kind).parse(variable.name, value(settings, variable.name), set);
            if let Some(parsed) = values.check(parsed) {
                values.parsed.insert(variable.name, parsed);
            }
        }
        values
    }

    getters! {
        /// The addresses of `variable` ([`Kind::Addresses`]), when they parsed.
        addresses: Addresses -> Vec<SocketAddr>;
        /// The address of `variable` ([`Kind::Address`]; `None` inside: off), when it parsed.
        address: Address -> Option<SocketAddr>;
        networks: Networks -> Vec<IpNet>;
        duration: Duration -> Duration;
        count: Count -> usize;
        /// The zone of `variable` ([`Kind::Zone`]; `None` inside: unset), when it parsed.
        zone: Zone -> Option<Name>;
        zones: Zones -> Vec<Name>;
        /// The text of `variable` (`None` inside: empty or unset), when it parsed.
        text: Text -> Option<String>;
        clusters: Clusters -> Vec<ClusterEntry>;
        log_format: LogFormat -> LogFormat;
        path: Path -> Option<PathBuf>;
        ips: Ips -> Vec<IpAddr>;
    }

    /// Keeps the error of `result`, if any; its value otherwise.
    pub(crate) fn check<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|error| self.errors.push(error)).ok()
    }

    /// `built` when nothing was refused; every error otherwise.
    pub(crate) fn finish<T>(mut self, built: Option<T>) -> Result<T, Errors> {
        let Some(built) = built else {
            if self.errors.is_empty() {
                // Nothing refused, yet nothing built: a value read as the wrong kind (above).
                // Never exit 64 without a line that says why.
                self.errors.push(ConfigError::new(
                    "MESHDNS_*",
                    "",
                    "a value was read as another kind than its variable's (a bug in meshdns)",
                ));
            }
            return Err(self.errors);
        };
        self.errors.into_result(built)
    }
}

/// What the DNS server looks at: every variable (none may be in quotes, whoever reads it) ...
pub(crate) fn every(_: &Variable) -> bool {
    true
}

/// ... and reads: every one but those only the webhook reads.
pub(crate) fn read_by_the_server(variable: &Variable) -> bool {
    !variable.is_the_webhooks()
}

/// Refuses a value in quotes (no variable takes one, see [`hint::copied_quotes`]) and an empty
/// (or whitespace-only) value of a variable whose descriptor says so
/// ([`Variable::refuses_empty`]): unset one by deleting its file, or leaving it out of the
/// environment.
fn refuse_raw(settings: &Settings, variable: &Variable) -> Result<(), ConfigError> {
    let Some(raw) = settings.get(variable.name) else {
        return Ok(());
    };
    if variable.refuses_empty && raw.trim().is_empty() {
        return Err(ConfigError::new(
            variable.name,
            raw,
            "is set but empty; to unset it, delete its file in the configuration directory (or leave it out of the environment)",
        ));
    }
    match hint::copied_quotes(raw) {
        Some(reason) => Err(ConfigError::new(variable.name, raw, reason)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::source::tests::vars;

    #[test]
    fn nothing_built_and_nothing_refused_still_says_why() {
        let errors = Values::default().finish::<()>(None).unwrap_err();
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("a bug in meshdns"), "{lines:?}");
    }

    #[test]
    #[should_panic(expected = "read as Count but parsed as Addresses")]
    fn a_variable_read_as_another_kind_is_caught_by_the_first_test_that_builds() {
        let settings = Settings::from_vars(vars(&[])).unwrap();
        let values = Values::read(&settings, every, read_by_the_server);
        values.count(super::super::variables::LISTEN);
    }

    #[test]
    fn every_default_parses_as_its_variables_kind() {
        for variable in VARIABLES {
            if let Some(default) = variable.default {
                let parsed = variable.kind.parse(variable.name, default, false);
                assert!(parsed.is_ok(), "{}: {parsed:?}", variable.name);
            }
        }
    }

    #[test]
    fn every_variable_is_read_by_its_kind_and_every_refusal_kept() {
        let settings = Settings::from_vars(vars(&[
            ("MESHDNS_LISTEN", "127.0.0.1:5353, [::1]"),
            ("MESHDNS_TIMEOUT", "1.5s"),
            ("MESHDNS_THREADS", "0"),
            ("MESHDNS_ALLOW_FROM", "10.0.0.0/40"),
            ("MESHDNS_CLUSTERSET_ZONE", "'clusterset.local'"),
        ]))
        .unwrap();
        let values = Values::read(&settings, every, read_by_the_server);
        assert_eq!(
            values.addresses("MESHDNS_LISTEN"),
            Some(vec![
                "127.0.0.1:5353".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ])
        );
        assert_eq!(
            values.duration("MESHDNS_TIMEOUT"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            values
                .zone("MESHDNS_CLUSTER_DOMAIN")
                .flatten()
                .map(|z| z.to_ascii())
                .as_deref(),
            Some("cluster.local.")
        );
        assert_eq!(
            values.address("MESHDNS_ADMIN_LISTEN"),
            Some(Some("0.0.0.0:9153".parse().unwrap()))
        );
        let refused: Vec<&str> = (values.errors.iter())
            .map(|e| e.variable.as_str())
            .collect();
        assert_eq!(
            refused,
            [
                "MESHDNS_ALLOW_FROM",
                "MESHDNS_CLUSTERSET_ZONE",
                "MESHDNS_THREADS"
            ]
        );
        assert_eq!(
            values.count("MESHDNS_THREADS"),
            None,
            "a refused value is not there"
        );
    }

    #[test]
    fn the_server_does_not_read_the_webhooks_variables_but_refuses_one_in_quotes() {
        let settings = Settings::from_vars(vars(&[("MESHDNS_WEBHOOK_LISTEN", "nowhere")])).unwrap();
        let values = Values::read(&settings, every, read_by_the_server);
        assert!(values.errors.is_empty(), "{}", values.errors);
        assert_eq!(values.address("MESHDNS_WEBHOOK_LISTEN"), None);
        let quoted = Settings::from_vars(vars(&[("MESHDNS_WEBHOOK_IMAGE", "\"m:1\"")])).unwrap();
        let values = Values::read(&quoted, every, read_by_the_server);
        let refused: Vec<&str> = (values.errors.iter())
            .map(|e| e.variable.as_str())
            .collect();
        assert_eq!(refused, ["MESHDNS_WEBHOOK_IMAGE"]);
    }
}
