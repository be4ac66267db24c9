//! `meshdns --check`: the effective configuration and the routing table, as an operator reads
//! them when a name does not resolve. Every variable is shown with the value in force after
//! defaults and where it came from (default, environment, configuration directory).
//!
//! A restart-only variable set by a file of the configuration directory to something else
//! than the environment gives is shown as pending, next to the environment's value: `--check`
//! cannot ask the running process, so it takes the value in force to be what the environment
//! (or the default) gives, as for a process started before the file said otherwise. The
//! running process logs each such change with both values and counts it as
//! `restart_required`.
//!
//! It only renders: it reads no file and asks no server (the host-name endpoints it shows are
//! resolved beforehand, by [`process`](crate::process)), and its routing table is the one
//! `route` builds for the server, made over the configured clusters instead of their groups.

use std::borrow::Cow;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;

use crate::config::variables::{VARIABLES, Variable};
use crate::config::{
    self, Cluster, Config, Endpoint, OwnData, PodIdentity, Source, Transport, join, join_with,
    show_duration,
};
use crate::own_names::OWN_TTL;
use crate::route::{Route, Router, Row};

/// What a host-name endpoint resolved to for `--check --resolve`: its addresses, or why none.
pub(crate) type Resolved = Vec<(Endpoint, Result<Vec<SocketAddr>, String>)>;

/// The text `--check` prints: every variable, then one row per zone of the routing table.
/// `resolved` is `None` for a plain `--check`, which sends nothing: host-name endpoints are
/// shown as resolved at run time. With `--check --resolve` they are shown with the addresses
/// found, and a name that did not resolve gets a warning line at the end.
pub fn render_check(config: &Config, resolved: Option<&Resolved>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "meshdns {} configuration", env!("CARGO_PKG_VERSION"));
    let rows: Vec<[String; 3]> = VARIABLES
        .iter()
        .map(|variable| {
            [
                variable.name.to_string(),
                shown(config, variable),
                config.settings.source(variable.name).to_string(),
            ]
        })
        .collect();
    out.push_str(&table(["variable", "value", "source"], &rows));

    let _ = writeln!(
        out,
        "\nrouting (zones match on label boundaries, case-insensitively; the longest wins)"
    );
    // The rows are the router's own, in order of precedence: what is shown is what routes.
    let router = Router::new(config, &config.clusters);
    let mut routes: Vec<[String; 4]> = router
        .rows()
        .map(|row| {
            let (matches, route) = match row {
                Row::Own(own) => (
                    own.name.to_ascii(),
                    Cow::Owned(Route::SelfName(Arc::clone(own))),
                ),
                Row::Zone(zone, route) => (zone.to_ascii(), Cow::Borrowed(route)),
                Row::Network(network, route) => (reverse_names(&network), Cow::Borrowed(route)),
            };
            let [kind, asks, sent_as] = described(config, &route, resolved);
            [matches, kind, asks, sent_as]
        })
        .collect();
    routes.push(match &config.search {
        Ok(suffixes) if !suffixes.is_empty() => [
            format!("ZONE.{{{}}}", join(suffixes)),
            "search".into(),
            "nobody".into(),
            "NXDOMAIN with the domain's SOA, for suffixes under a cluster domain and names Kubernetes cannot hold".into(),
        ],
        Ok(_) => ["ZONE.SEARCH-SUFFIX".into(), "search".into(), "off: no search line".into(), "-".into()],
        Err(why) => ["ZONE.SEARCH-SUFFIX".into(), "search".into(), format!("off: {why}"), "-".into()],
    });
    let [kind, asks, sent_as] = described(config, &Route::Passthrough, resolved);
    routes.push([". (everything else)".into(), kind, asks, sent_as]);
    out.push_str(&table(["zone", "route", "asks", "sent as"], &routes));
    if let PodIdentity::Off { why, .. } = &config.pod {
        let _ = writeln!(
            out,
            "\nnote: the pod's own names are not answered locally: {why}"
        );
    }
    if let Some(local) = config.local_cluster()
        && !(local.namespaces.is_empty() && local.networks.is_empty())
    {
        let claims: Vec<String> = (local.namespaces.iter().map(Name::to_ascii))
            .chain(local.networks.iter().map(reverse_names))
            .collect();
        let _ = writeln!(
            out,
            "\nnote: cluster {} is the local cluster: its claims ({}) are kube-dns's names and pass through.",
            local.name,
            claims.join(", ")
        );
    }
    if config.clusters.is_empty() {
        let _ = writeln!(
            out,
            "\nnote: MESHDNS_CLUSTERS is empty, so distributed zones are answered with NXDOMAIN."
        );
    }
    for (endpoint, why) in resolved.into_iter().flatten() {
        if let Err(why) = why {
            let _ = writeln!(
                out,
                "\nwarning: {endpoint} does not resolve ({why}): its cluster's legs fail until it does"
            );
        }
    }
    out
}

/// What a route does, as the routing table's last three columns show it: its kind (with the
/// cluster it goes to), what it asks, and how the question is sent.
fn described(config: &Config, route: &Route<Cluster>, resolved: Option<&Resolved>) -> [String; 3] {
    let verbatim = || "verbatim".to_string();
    // A name under the cluster's zone, and the same name as its own cluster's DNS holds it.
    let names = |cluster: &Cluster| {
        let zone = cluster.zone.to_ascii();
        (
            format!("NAME.{zone}"),
            format!("NAME.svc.{}", cluster.domain.to_ascii()),
        )
    };
    match route {
        Route::Passthrough => ["passthrough".into(), join(&config.upstreams), verbatim()],
        Route::Cluster(cluster) => {
            let (ours, theirs) = names(cluster);
            let asked = asks(config, cluster, resolved);
            [
                format!("cluster {}", cluster.name),
                asked,
                format!("{ours} -> {theirs}"),
            ]
        }
        Route::Namespace(cluster) => [
            format!("namespace (cluster {})", cluster.name),
            asks(config, cluster, resolved),
            verbatim(),
        ],
        Route::Reverse(cluster) => {
            let (ours, theirs) = names(cluster);
            let asked = asks(config, cluster, resolved);
            let mapped = format!("verbatim; names {theirs} in the reply -> {ours}");
            [format!("reverse (cluster {})", cluster.name), asked, mapped]
        }
        Route::Distributed(_) => {
            let legs =
                (config.clusters.iter()).map(|c| format!("{} (prefix {})", c.name, c.prefix));
            [
                "distributed".into(),
                format!("all clusters: {}", join_with(legs, ", ")),
                "NAME -> NAME.<domain of each>; PREFIX-NAME -> NAME at that cluster only (NXDOMAIN there: NAME gathered as it is)".into(),
            ]
        }
        Route::Clusterset(_) => [
            "clusterset".into(),
            "all clusters".into(),
            "NAME -> NAME.<domain>; host.CLUSTER.service.ns.svc -> that cluster only".into(),
        ],
        Route::SelfName(own) => {
            let ttl = show_duration(OWN_TTL);
            let records = match &own.data {
                OwnData::Addresses(ips) => format!("A/AAAA {}", join(ips)),
                OwnData::Pointer(target) => format!("PTR {}", target.to_ascii()),
            };
            [
                "self".into(),
                "answered locally".into(),
                format!("{records} (TTL {ttl})"),
            ]
        }
        Route::Search(domain) => [
            "search".into(),
            "nobody".into(),
            format!("NXDOMAIN with the SOA of {}", domain.to_ascii()),
        ],
    }
}

/// The routing table's name for the reverse names of a network's addresses.
fn reverse_names(network: &impl std::fmt::Display) -> String {
    format!("reverse names of {network}")
}

/// The endpoints a cluster's routes ask, with the transport (and what a host name resolved to
/// for `--check --resolve`); the local cluster asks the upstreams.
fn asks(config: &Config, cluster: &Cluster, resolved: Option<&Resolved>) -> String {
    if cluster.is_local {
        return format!("upstreams {} (udp)", join(&config.upstreams));
    }
    let endpoints: Vec<String> = (cluster.endpoints.iter())
        .map(|endpoint| match endpoint {
            Endpoint::Addr(_) => endpoint.to_string(),
            Endpoint::Name { .. } => {
                match resolved.and_then(|r| r.iter().find(|(e, _)| e == endpoint)) {
                    Some((_, Ok(addrs))) => format!("{endpoint} [{}]", join(addrs)),
                    Some((_, Err(why))) => format!("{endpoint} [unresolved: {why}]"),
                    None => format!("{endpoint} [resolved at run time]"),
                }
            }
        })
        .collect();
    let tls = match (&cluster.tls_name, cluster.transport) {
        (Some(name), Transport::Tls) => format!(", tls_name {}", name.to_ascii()),
        _ => String::new(),
    };
    format!("{} ({}{tls})", endpoints.join(","), cluster.transport)
}

/// The value in force ([`Variable::in_force`]), and for a restart-only variable that a file
/// changed, the value in force too.
fn shown(config: &Config, variable: &Variable) -> String {
    let value = variable.in_force(config);
    let name = variable.name;
    let from_file = matches!(config.settings.source(name), Source::ConfigDir(_));
    if !variable.is_restart_only() || !from_file {
        return value;
    }
    let in_force = config::value(&config.environment, name);
    if in_force == config::value(&config.settings, name) {
        return value;
    }
    let in_force = if in_force.is_empty() {
        "(empty)"
    } else {
        in_force
    };
    format!("{value} (pending a restart; in force: {in_force}, from the environment or default)")
}

/// The widest a cell may make its column: a longer one (the list of every cluster) overflows
/// its own row instead of padding every other row to its width, which would make the table
/// grow with the square of the number of clusters.
const MAX_COLUMN: usize = 48;

/// Rows under a header row, each column as wide as its widest cell (up to [`MAX_COLUMN`]) plus two
/// spaces, so that no two columns ever run together.
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let header = header.map(String::from);
    let mut widths = [0usize; N];
    for row in std::iter::once(&header).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count().min(MAX_COLUMN));
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::from(" ");
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push(' ');
                line.push_str(cell);
            } else {
                let _ = write!(line, " {cell:<width$} ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::tests::{ca_file, clusters, config_from, resolv_conf_file, with_local};

    use super::*;

    /// `--check`'s text for the configuration `pairs` give (sending nothing).
    fn check(pairs: &[(&str, &str)]) -> String {
        render_check(&config_from(pairs).unwrap(), None)
    }

    /// The line of `text` that starts with `start` (after the indent).
    pub(crate) fn line<'a>(text: &'a str, start: &str) -> &'a str {
        (text.lines())
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line {start}:\n{text}"))
    }

    #[test]
    fn the_routing_table_names_every_zone_and_where_it_goes() {
        let clusters = "a=; b=10.9.0.1:30053 prefix=west- transport=tcp";
        let zone = [("MESHDNS_CLUSTERSET_ZONE", "clusterset.local")];
        let text = render_check(&with_local("a", clusters, &zone).unwrap(), None);
        for shown in [
            "cluster.a.",
            "upstreams 127.0.0.1:5300 (udp)",
            "10.9.0.1:30053 (tcp)",
            "NAME.cluster.b. -> NAME.svc.cluster.local.",
            "b (prefix west-)",
            "clusterset.local.",
            "passthrough",
        ] {
            assert!(text.contains(shown), "{shown}: {text}");
        }
    }

    #[test]
    fn namespace_and_reverse_claims_are_rows_of_the_routing_table() {
        let clusters =
            "a= cidr=10.8.0.0/16; b=10.9.0.1:30053 cidr=10.9.0.0/16,fd00:9::/56 namespaces=crdb-eu";
        let text = render_check(&with_local("a", clusters, &[]).unwrap(), None);
        let row = |start| {
            line(&text, start)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            row("crdb-eu.svc.cluster.local."),
            "crdb-eu.svc.cluster.local. namespace (cluster b) 10.9.0.1:30053 (udp) verbatim"
        );
        assert_eq!(
            row("reverse names of 10.9.0.0/16"),
            "reverse names of 10.9.0.0/16 reverse (cluster b) 10.9.0.1:30053 (udp) verbatim; names NAME.svc.cluster.local. in the reply -> NAME.cluster.b."
        );
        assert!(row("reverse names of fd00:9::/56").contains("reverse (cluster b)"));
        // The local cluster's claims route nowhere new: no row, a note saying why.
        assert!(!text.contains("reverse names of 10.8.0.0/16 "), "{text}");
        assert!(
            text.contains("note: cluster a is the local cluster: its claims (reverse names of 10.8.0.0/16) are kube-dns's names and pass through."),
            "{text}"
        );
    }

    #[test]
    fn every_variable_is_shown_with_its_source() {
        let text = check(&[("MESHDNS_CACHE_SIZE", "0")]);
        for variable in VARIABLES {
            let line = line(&text, &format!("{} ", variable.name));
            assert!(
                line.ends_with("default") || line.ends_with("environment"),
                "{line}"
            );
        }
        assert!(text.contains("0 (cache disabled)"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.contains("MESHDNS_UPSTREAMS") && l.ends_with("environment")),
            "{text}"
        );
    }

    #[test]
    fn host_name_endpoints_are_shown_with_their_addresses_and_tls_with_its_name() {
        let clusters = "a=; b=dns-b.example.net:30053; c=dns-c.example.net transport=tls";
        let config = with_local("a", clusters, &[("MESHDNS_TLS_CA_FILE", &ca_file())]).unwrap();
        // A plain --check resolves nothing.
        let text = render_check(&config, None);
        assert!(
            text.contains("dns-b.example.net:30053 [resolved at run time] (udp)"),
            "{text}"
        );
        assert!(!text.contains("warning"), "{text}");
        let resolved: Resolved = vec![
            (
                config.clusters[1].endpoints[0].clone(),
                Ok(vec![
                    "10.9.0.1:30053".parse().unwrap(),
                    "10.9.0.2:30053".parse().unwrap(),
                ]),
            ),
            (
                config.clusters[2].endpoints[0].clone(),
                Err("the name has no A or AAAA record".into()),
            ),
        ];
        let text = render_check(&config, Some(&resolved));
        assert!(
            text.contains("dns-b.example.net:30053 [10.9.0.1:30053,10.9.0.2:30053] (udp)"),
            "{text}"
        );
        assert!(
            text.contains("dns-c.example.net:853 [unresolved: the name has no A or AAAA record] (tls, tls_name dns-c.example.net.)"),
            "{text}"
        );
        assert!(
            text.trim_end().ends_with(
                "warning: dns-c.example.net:853 does not resolve (the name has no A or AAAA record): its cluster's legs fail until it does"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_restart_only_value_from_a_file_is_shown_pending_next_to_the_one_in_force() {
        let dir = crate::certificates::tests::Scratch::new("check-restart");
        dir.file("MESHDNS_THREADS", "4");
        dir.file("MESHDNS_TIMEOUT", "3s");
        let config = config_from(&[
            ("MESHDNS_CONFIG_DIR", &dir.0.display().to_string()),
            ("MESHDNS_THREADS", "2"),
        ]);
        let text = render_check(&config.unwrap(), None);
        assert!(
            line(&text, "MESHDNS_THREADS ").contains("4 (pending a restart; in force: 2"),
            "{text}"
        );
        // A live variable is simply in force.
        assert!(
            !line(&text, "MESHDNS_TIMEOUT ").contains("pending"),
            "{text}"
        );
    }

    #[test]
    fn columns_never_run_together() {
        let clusters = "a=; a-very-long-cluster-name-indeed=10.9.0.1:30053,10.9.0.2:30053,10.9.0.3:30053 prefix=long-";
        let text = render_check(&with_local("a", clusters, &[]).unwrap(), None);
        let rows: Vec<&str> = (text.lines())
            .filter(|l| l.contains("cluster.a-very"))
            .collect();
        assert!(!rows.is_empty(), "the long cluster's row: {text}");
        for line in rows {
            assert!(line.contains("  cluster a-very-long"), "{line}");
        }
    }

    #[test]
    fn check_shows_the_resolv_conf_read_for_its_search_list() {
        let path = resolv_conf_file("search db.svc.cluster.local svc.cluster.local\n");
        let config = config_from(&[("MESHDNS_RESOLV_CONF", &path)]).unwrap();
        std::fs::remove_file(&path).unwrap();
        let text = render_check(&config, None);
        let line = line(&text, "MESHDNS_RESOLV_CONF ");
        assert!(
            line.contains(&format!(
                "{path} (search list only: MESHDNS_UPSTREAMS is set)"
            )),
            "{line}"
        );
        assert!(!text.contains("not read"), "{text}");
    }

    #[test]
    fn the_text_grows_linearly_with_the_clusters() {
        // Twice the clusters, about twice the output (a table padded to its longest cell grew
        // with the square).
        let size = |n| render_check(&with_local("c0", &clusters(n), &[]).unwrap(), None).len();
        let (half, full) = (size(128), size(256));
        assert!(
            full < half * 5 / 2,
            "128 clusters: {half} bytes, 256: {full} bytes"
        );
    }
}
