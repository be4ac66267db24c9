//! What each variable decides in a [`Config`], for its descriptor in [`super::variables`]: the
//! value in force as an operator would write it ([`Variable::shown`]: what `--check` prints
//! and what a reload compares to tell a real change from a rewording), and, for a restart-only
//! one, how a reload keeps the running value ([`Applies::Restart`]). It reads nothing and
//! parses nothing; it knows a variable only through the descriptor that points here.
//!
//! [`Variable::shown`]: super::variables::Variable::shown
//! [`Applies::Restart`]: super::variables::Applies::Restart

use hickory_proto::rr::Name;

use super::{Config, PodIdentity, UpstreamSource, show_duration, value};

/// Items as a comma list; none (an empty list, an unset value) is `-`.
pub(crate) fn join<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    join_with(items, ",")
}

/// Items separated by `separator`; none is `-`.
pub(crate) fn join_with<T: ToString>(
    items: impl IntoIterator<Item = T>,
    separator: &str,
) -> String {
    let items: Vec<String> = items.into_iter().map(|item| item.to_string()).collect();
    or_dash(items.join(separator))
}

/// `text`, or `-` when it is empty.
pub(crate) fn or_dash(text: String) -> String {
    if text.is_empty() { "-".into() } else { text }
}

/// The value of `variable` as set (or its default): for what shows its effect elsewhere
/// (`MESHDNS_CLUSTER_DOMAIN`, `MESHDNS_CLUSTER_ZONE`: in the routing table) or is not the
/// DNS server's (the webhook's variables).
pub(crate) fn as_set(config: &Config, variable: &str) -> String {
    value(&config.settings, variable).to_string()
}

pub(crate) fn listen(config: &Config, _: &str) -> String {
    format!("{} (udp and tcp)", join(&config.listen))
}

pub(crate) fn allow_from(config: &Config, _: &str) -> String {
    join(&config.allow_from)
}

pub(crate) fn upstreams(config: &Config, _: &str) -> String {
    match &config.upstream_source {
        UpstreamSource::Environment => join(&config.upstreams),
        UpstreamSource::ResolvConf(path) => {
            format!("{} (from {})", join(&config.upstreams), path.display())
        }
    }
}

pub(crate) fn resolv_conf(config: &Config, variable: &str) -> String {
    let path = value(&config.settings, variable);
    match (&config.upstream_source, &config.search) {
        (UpstreamSource::ResolvConf(_), _) => format!("{path} (nameservers and search list)"),
        (UpstreamSource::Environment, Ok(_)) => {
            format!("{path} (search list only: MESHDNS_UPSTREAMS is set)")
        }
        (UpstreamSource::Environment, Err(_)) => {
            format!("{path} (cannot be read: search-list answers off)")
        }
    }
}

pub(crate) fn local_cluster(config: &Config, _: &str) -> String {
    join(config.local_cluster().map(|c| &c.name))
}

pub(crate) fn clusters(config: &Config, _: &str) -> String {
    join_with(config.clusters.iter().map(|c| &c.name), ", ")
}

pub(crate) fn distributed_zones(config: &Config, _: &str) -> String {
    join(config.distributed_zones.iter().map(Name::to_ascii))
}

pub(crate) fn clusterset_zone(config: &Config, _: &str) -> String {
    join(config.clusterset_zone.as_ref().map(Name::to_ascii))
}

pub(crate) fn timeout(config: &Config, _: &str) -> String {
    show_duration(config.timeout)
}

pub(crate) fn attempt_timeout(config: &Config, _: &str) -> String {
    show_duration(config.attempt_timeout)
}

pub(crate) fn cache_size(config: &Config, _: &str) -> String {
    match config.cache.size {
        0 => "0 (cache disabled)".into(),
        size => format!("{size} entries"),
    }
}

pub(crate) fn cache_max_ttl(config: &Config, _: &str) -> String {
    show_duration(config.cache.max_ttl)
}

pub(crate) fn cache_negative_ttl(config: &Config, _: &str) -> String {
    show_duration(config.cache.negative_ttl)
}

pub(crate) fn serve_stale(config: &Config, _: &str) -> String {
    show_duration(config.cache.serve_stale)
}

pub(crate) fn max_inflight(config: &Config, _: &str) -> String {
    config.max_inflight.to_string()
}

pub(crate) fn admin_listen(config: &Config, _: &str) -> String {
    config
        .admin_listen
        .map_or("disabled".into(), |a| a.to_string())
}

pub(crate) fn log(config: &Config, _: &str) -> String {
    config.log.clone()
}

pub(crate) fn log_format(config: &Config, _: &str) -> String {
    config.log_format.name().to_string()
}

pub(crate) fn threads(config: &Config, _: &str) -> String {
    config.threads.to_string()
}

pub(crate) fn config_dir(config: &Config, _: &str) -> String {
    join(config.config_dir.as_ref().map(|d| d.display()))
}

pub(crate) fn tls_ca_file(config: &Config, _: &str) -> String {
    join(config.tls.as_ref().map(|t| t.ca.display()))
}

pub(crate) fn tls_cert_file(config: &Config, _: &str) -> String {
    let client = config.tls.as_ref().and_then(|t| t.client.as_ref());
    join(client.map(|(cert, _)| cert.display()))
}

pub(crate) fn tls_key_file(config: &Config, _: &str) -> String {
    let client = config.tls.as_ref().and_then(|t| t.client.as_ref());
    join(client.map(|(_, key)| key.display()))
}

pub(crate) fn dot_listen(config: &Config, _: &str) -> String {
    config.dot.as_ref().map_or("-".into(), |dot| {
        let access = if dot.requires_client_certificate() {
            "a client certificate required"
        } else {
            "MESHDNS_ALLOW_FROM applies"
        };
        format!("{} (dns over tls; {access})", join(&dot.listen))
    })
}

pub(crate) fn dot_cert_file(config: &Config, _: &str) -> String {
    join(
        config
            .dot
            .as_ref()
            .map(|dot| dot.tls.files().cert.display()),
    )
}

pub(crate) fn dot_key_file(config: &Config, _: &str) -> String {
    join(config.dot.as_ref().map(|dot| dot.tls.files().key.display()))
}

pub(crate) fn dot_client_ca_file(config: &Config, _: &str) -> String {
    let files = config.dot.as_ref().map(|dot| dot.tls.files());
    join(files.and_then(|files| files.client_ca.as_ref().map(|ca| ca.display())))
}

pub(crate) fn pod_hostname(config: &Config, variable: &str) -> String {
    pod_label(config, variable, |pod| &pod.hostname)
}

pub(crate) fn pod_subdomain(config: &Config, variable: &str) -> String {
    pod_label(config, variable, |pod| &pod.subdomain)
}

pub(crate) fn pod_namespace(config: &Config, variable: &str) -> String {
    pod_label(config, variable, |pod| &pod.namespace)
}

/// A label of the pod's identity (`label` of it), with the hosts file when it came from there.
fn pod_label(config: &Config, variable: &str, label: fn(&super::Pod) -> &String) -> String {
    match &config.pod {
        PodIdentity::On(pod) => match (&pod.hosts_file, config.settings.get(variable)) {
            (Some(file), None) => format!("{} (from {})", label(pod), file.display()),
            _ => label(pod).clone(),
        },
        PodIdentity::Off { .. } => or_dash(value(&config.settings, variable).into()),
    }
}

/// How a reload keeps what a restart-only variable decides: the running configuration's
/// value goes back into the one applied.
pub(crate) mod keep {
    use super::Config;

    pub(crate) fn listen(applied: &mut Config, running: &Config) {
        applied.listen.clone_from(&running.listen);
    }

    pub(crate) fn admin_listen(applied: &mut Config, running: &Config) {
        applied.admin_listen = running.admin_listen;
    }

    pub(crate) fn threads(applied: &mut Config, running: &Config) {
        applied.threads = running.threads;
    }

    pub(crate) fn max_inflight(applied: &mut Config, running: &Config) {
        applied.max_inflight = running.max_inflight;
    }

    pub(crate) fn log_format(applied: &mut Config, running: &Config) {
        applied.log_format = running.log_format;
    }

    /// The listener and its certificate (renewed by itself) are the ones made at startup.
    pub(crate) fn dot(applied: &mut Config, running: &Config) {
        applied.dot.clone_from(&running.dot);
    }

    /// The pod's identity is fixed for its life: the one read at startup stays.
    pub(crate) fn pod(applied: &mut Config, running: &Config) {
        applied.pod.clone_from(&running.pod);
    }
}
