//! `meshdns --check`: the effective configuration and the routing table, as an operator reads
//! them when a name does not resolve. Every value shown is the one in force after defaults.

use std::fmt::Write;

use super::{Config, UpstreamSource};

/// The text `--check` prints: variables with their effective values, then one row per zone.
pub fn render_check(config: &Config) -> String {
    let mut out = String::new();
    let join = |items: Vec<String>| {
        if items.is_empty() {
            "-".to_string()
        } else {
            items.join(",")
        }
    };
    let upstream_origin = match &config.upstream_source {
        UpstreamSource::Environment => "from MESHDNS_UPSTREAMS".to_string(),
        UpstreamSource::ResolvConf(path) => format!("from {}", path.display()),
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "MESHDNS_LISTEN",
            format!(
                "{} (udp and tcp)",
                join(config.listen.iter().map(ToString::to_string).collect())
            ),
        ),
        (
            "MESHDNS_ALLOW_FROM",
            join(config.allow_from.iter().map(ToString::to_string).collect()),
        ),
        (
            "MESHDNS_UPSTREAMS",
            format!(
                "{} ({upstream_origin})",
                join(config.upstreams.iter().map(ToString::to_string).collect())
            ),
        ),
        (
            "MESHDNS_LOCAL_CLUSTER",
            config
                .clusters
                .iter()
                .find(|c| c.is_local)
                .map_or("-".into(), |c| c.name.clone()),
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            join(
                config
                    .distributed_zones
                    .iter()
                    .map(|z| z.to_ascii())
                    .collect(),
            ),
        ),
        (
            "MESHDNS_CLUSTERSET_ZONE",
            config
                .clusterset_zone
                .as_ref()
                .map_or("-".into(), |z| z.to_ascii()),
        ),
        ("MESHDNS_TIMEOUT", format!("{:?}", config.timeout)),
        (
            "MESHDNS_ATTEMPT_TIMEOUT",
            format!("{:?}", config.attempt_timeout),
        ),
        ("MESHDNS_CACHE_SIZE", config.cache.size.to_string()),
        (
            "MESHDNS_CACHE_MAX_TTL",
            format!("{:?}", config.cache.max_ttl),
        ),
        (
            "MESHDNS_CACHE_NEGATIVE_TTL",
            format!("{:?}", config.cache.negative_ttl),
        ),
        (
            "MESHDNS_SERVE_STALE",
            format!("{:?}", config.cache.serve_stale),
        ),
        (
            "MESHDNS_ADMIN_LISTEN",
            config
                .admin_listen
                .map_or("disabled".into(), |a| a.to_string()),
        ),
        ("MESHDNS_LOG", config.log.clone()),
        (
            "MESHDNS_LOG_FORMAT",
            format!("{:?}", config.log_format).to_lowercase(),
        ),
        ("MESHDNS_THREADS", config.threads.to_string()),
    ];
    let _ = writeln!(out, "meshdns {} configuration", env!("CARGO_PKG_VERSION"));
    for (name, value) in rows {
        let _ = writeln!(out, "  {name:<28}{value}");
    }

    let _ = writeln!(
        out,
        "\nrouting (zones match on label boundaries, case-insensitively; the longest wins)"
    );
    let _ = writeln!(
        out,
        "  {:<28} {:<13} {:<40} sent as",
        "zone", "route", "asks"
    );
    for cluster in &config.clusters {
        let asks = format!(
            "{} {} ({})",
            if cluster.is_local {
                "upstreams"
            } else {
                "cluster"
            },
            join(cluster.endpoints.iter().map(ToString::to_string).collect()),
            cluster.transport
        );
        let _ = writeln!(
            out,
            "  {:<28} {:<13} {:<40} NAME.{} -> NAME.svc.{}",
            cluster.zone.to_ascii(),
            format!("cluster {}", cluster.name),
            asks,
            cluster.zone.to_ascii(),
            cluster.domain.to_ascii()
        );
    }
    let legs = join(
        config
            .clusters
            .iter()
            .map(|c| format!("{} prefix {}", c.name, c.prefix))
            .collect(),
    );
    for zone in &config.distributed_zones {
        let _ = writeln!(
            out,
            "  {:<28} {:<13} {:<40} NAME.{} -> NAME.<domain of each>; PREFIX-host -> that cluster only",
            zone.to_ascii(),
            "distributed",
            format!("all clusters: {legs}"),
            zone.to_ascii()
        );
    }
    if let Some(zone) = &config.clusterset_zone {
        let _ = writeln!(
            out,
            "  {:<28} {:<13} {:<40} NAME.{} -> NAME.<domain>; host.CLUSTER.svc... -> that cluster only",
            zone.to_ascii(),
            "clusterset",
            "all clusters",
            zone.to_ascii()
        );
    }
    let _ = writeln!(
        out,
        "  {:<28} {:<13} {:<40} verbatim",
        ". (everything else)",
        "passthrough",
        join(config.upstreams.iter().map(ToString::to_string).collect())
    );
    if config.clusters.is_empty() {
        let _ = writeln!(
            out,
            "\nnote: MESHDNS_CLUSTERS is empty, so distributed zones are answered with NXDOMAIN."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::tests::config_from;

    use super::*;

    #[test]
    fn the_routing_table_names_every_zone_and_where_it_goes() {
        let config = config_from(&[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            (
                "MESHDNS_CLUSTERS",
                "a=; b=10.9.0.1:30053 prefix=west- transport=tcp",
            ),
            ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
        ])
        .unwrap();
        let text = render_check(&config);
        assert!(text.contains("cluster.a."), "{text}");
        assert!(text.contains("upstreams 127.0.0.1:5300 (udp)"), "{text}");
        assert!(text.contains("cluster 10.9.0.1:30053 (tcp)"), "{text}");
        assert!(
            text.contains("NAME.cluster.b. -> NAME.svc.cluster.local."),
            "{text}"
        );
        assert!(text.contains("b prefix west-"), "{text}");
        assert!(text.contains("clusterset.local."), "{text}");
        assert!(text.contains("passthrough"), "{text}");
    }
}
