//! The configuration's rules, one test per rule: defaults, sources, and an error naming the
//! variable and token for every way a value can be wrong.

use super::source::MAX_VALUE;
use super::*;

/// A CA certificate in a temporary PEM file, for the rules of `transport=tls`.
pub(crate) fn ca_file() -> String {
    temp_file("ca.pem", &certificates::tests::ca().0.pem())
}

/// A resolv.conf with `content` in a temporary file of its own; its path.
pub(crate) fn resolv_conf_file(content: &str) -> String {
    temp_file("resolv.conf", content)
}

/// A temporary file of its own, named after `what`, holding `content`; its path.
fn temp_file(what: &str, content: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "meshdns-test-{}-{}-{what}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}

/// A configuration from pairs, with `MESHDNS_UPSTREAMS` set so the resolv.conf is read for
/// its search list only.
pub(crate) fn config_from(pairs: &[(&str, &str)]) -> Result<Config, Errors> {
    let mut vars: Vec<(String, String)> =
        vec![("MESHDNS_UPSTREAMS".into(), "127.0.0.1:5300".into())];
    vars.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Config::from_vars(vars)
}

/// The name `text` spells (every test's name is valid).
pub(crate) fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

/// The settings of a property of `cases` generated cases whose failing seeds proptest saves
/// beside the source file that declares it (`<file>.proptest-regressions`) and replays first.
pub(crate) fn property(cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, FileFailurePersistence};
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// Variables as `(name, value)` pairs.
type Pairs = &'static [(&'static str, &'static str)];

/// The configuration `clusters` gives with `local` as the local cluster, plus `more` pairs.
pub(crate) fn with_local(
    local: &str,
    clusters: &str,
    more: &[(&str, &str)],
) -> Result<Config, Errors> {
    let mut pairs = vec![(LOCAL_CLUSTER, local), (CLUSTERS, clusters)];
    pairs.extend_from_slice(more);
    config_from(&pairs)
}

/// The configuration `clusters` gives with `a` (`a=`) as the local cluster, plus `more` pairs.
pub(crate) fn with_local_a(clusters: &str, more: &[(&str, &str)]) -> Result<Config, Errors> {
    with_local("a", &format!("a=; {clusters}"), more)
}

/// The one error of `result`, which must be refused: one mistake is named once.
#[track_caller]
pub(crate) fn one_error<T: std::fmt::Debug>(result: Result<T, Errors>) -> ConfigError {
    let errors = result.unwrap_err();
    assert_eq!(errors.len(), 1, "{errors}");
    errors
        .iter()
        .next()
        .cloned()
        .unwrap_or_else(|| unreachable!())
}

/// The error of `result`, which must be refused naming `variable` and `token`, with a reason
/// that says each of `says`.
#[track_caller]
pub(crate) fn refused(
    result: Result<Config, Errors>,
    (variable, token): (&str, &str),
    says: &[&str],
) -> ConfigError {
    let err = one_error(result);
    assert_eq!(
        (err.variable.as_str(), err.token.as_str()),
        (variable, token),
        "{err}"
    );
    for words in says {
        assert!(err.reason.contains(words), "{err}");
    }
    err
}

#[test]
fn defaults_are_the_documented_ones() {
    let config = config_from(&[]).unwrap();
    assert_eq!(config.listen, vec!["127.0.0.1:53".parse().unwrap()]);
    assert_eq!(config.allow_from.len(), 2);
    assert_eq!(config.timeout, Duration::from_secs(2));
    assert_eq!(config.attempt_timeout, Duration::from_millis(500));
    assert_eq!(config.cache.size, 10_000);
    assert_eq!(config.cache.negative_ttl, Duration::from_secs(5));
    assert_eq!(config.distributed_zones[0].to_ascii(), "distributed.local.");
    assert_eq!(config.admin_listen, Some("0.0.0.0:9153".parse().unwrap()));
    assert!(config.clusters.is_empty());
}

#[test]
fn the_local_cluster_comes_first_and_uses_the_upstreams() {
    let clusters = "a=10.8.0.1:30053; b=10.9.0.1 prefix=west- domain=b.example";
    let config = with_local("b", clusters, &[]).unwrap();
    let names: Vec<&str> = config.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(
        config.clusters[0].endpoints,
        vec![Endpoint::Addr("127.0.0.1:5300".parse().unwrap())]
    );
    assert_eq!(config.clusters[0].zone.to_ascii(), "cluster.b.");
    assert_eq!(config.clusters[0].domain.to_ascii(), "b.example.");
    assert_eq!(config.clusters[1].prefix, "a-");
}

#[test]
fn a_local_cluster_alone_needs_no_list() {
    let config = config_from(&[("MESHDNS_LOCAL_CLUSTER", "a")]).unwrap();
    assert_eq!(config.clusters.len(), 1);
    assert_eq!(config.clusters[0].name, "a");
    assert!(config.clusters[0].is_local);
}

#[test]
fn the_resolv_conf_skips_loopback_nameservers() {
    let path = resolv_conf_file(
        "search db.svc.cluster.local\nnameserver 127.0.0.1\nnameserver 10.96.0.10\n",
    );
    let config = Config::from_vars([("MESHDNS_RESOLV_CONF".to_string(), path.clone())]).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(config.upstreams, vec!["10.96.0.10:53".parse().unwrap()]);
}

#[test]
fn parse_touches_no_file_only_what_the_loader_read() {
    // Every path names nothing on disk: what parse knows of them is the bytes given here.
    let pairs = [
        ("MESHDNS_RESOLV_CONF", "/nonexistent/resolv.conf"),
        ("MESHDNS_POD_IP", "10.8.1.2"),
        ("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"),
    ];
    let settings = Settings::from_vars(pairs.map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
    let sources = Sources {
        environment: settings.clone(),
        settings,
        resolv_conf: (
            PathBuf::from("/nonexistent/resolv.conf"),
            Ok(b"nameserver 10.96.0.10\nsearch db.svc.cluster.local\n".to_vec()),
        ),
        hosts_file: Some(Ok(
            "10.8.1.2\tmongo-0.mongo.db.svc.cluster.local\tmongo-0\n".to_string(),
        )),
        tls: [None, None, None],
        dot_tls: None,
    };
    let config = parse(sources).unwrap();
    assert_eq!(config.upstreams, vec!["10.96.0.10:53".parse().unwrap()]);
    assert_eq!(config.search, Ok(vec![name("db.svc.cluster.local.")]));
    let PodIdentity::On(pod) = &config.pod else {
        panic!(
            "the pod's identity from the hosts line given: {:?}",
            config.pod
        );
    };
    assert_eq!(
        (
            pod.hostname.as_str(),
            pod.subdomain.as_str(),
            pod.namespace.as_str()
        ),
        ("mongo-0", "mongo", "db")
    );
}

#[test]
fn the_search_list_is_read_even_with_upstreams_set_and_missing_is_off_not_an_error() {
    let path = resolv_conf_file(
        "nameserver 127.0.0.1\nsearch db.svc.Cluster.Local svc.cluster.local. example.com\noptions ndots:5\n",
    );
    let config = config_from(&[("MESHDNS_RESOLV_CONF", &path)]).unwrap();
    std::fs::remove_file(&path).unwrap();
    let search: Vec<String> = config.search.unwrap().iter().map(Name::to_ascii).collect();
    assert_eq!(
        search,
        [
            "db.svc.cluster.local.",
            "svc.cluster.local.",
            "example.com."
        ]
    );
    let missing = config_from(&[("MESHDNS_RESOLV_CONF", "/nonexistent/resolv.conf")]).unwrap();
    let why = missing.search.unwrap_err();
    assert!(
        why.contains("MESHDNS_RESOLV_CONF /nonexistent/resolv.conf cannot be read"),
        "{why}"
    );
}

/// Every variable's error path: exit 64 in `main`, here the variable and token named.
#[test]
fn every_bad_variable_is_named_with_its_token() {
    let cases: &[(&str, &str, &str)] = &[
        ("MESHDNS_LISTEN", "127.0.0.1:99999", "127.0.0.1:99999"),
        ("MESHDNS_LISTEN", " , ", ""),
        ("MESHDNS_ALLOW_FROM", "10.0.0.0/40", "10.0.0.0/40"),
        ("MESHDNS_UPSTREAMS", "kube-dns", "kube-dns"),
        ("MESHDNS_UPSTREAMS", "", ""),
        ("MESHDNS_CLUSTER_DOMAIN", "a..b", "a..b"),
        ("MESHDNS_LOCAL_CLUSTER", "Bad", "Bad"),
        ("MESHDNS_CLUSTERS", "b=10.9.0.1 colour=red", "colour=red"),
        ("MESHDNS_CLUSTERS", "b=", "b"),
        ("MESHDNS_CLUSTERS", "b=10.9.0.1; b=10.9.0.2", "b"),
        (
            "MESHDNS_CLUSTERS",
            "b=10.9.0.1 prefix=x-; c=10.9.0.2 prefix=x-",
            "prefix=x-",
        ),
        ("MESHDNS_CLUSTER_ZONE", "cluster", "cluster"),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "ok.local,bad..zone",
            "bad..zone",
        ),
        ("MESHDNS_CLUSTERSET_ZONE", "a b", "a b"),
        ("MESHDNS_TIMEOUT", "2", "2"),
        ("MESHDNS_TIMEOUT", "0", "0"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "3s", "3s"),
        ("MESHDNS_CACHE_SIZE", "many", "many"),
        ("MESHDNS_CACHE_MAX_TTL", "1d", "1d"),
        ("MESHDNS_CACHE_NEGATIVE_TTL", "5", "5"),
        ("MESHDNS_SERVE_STALE", "forever", "forever"),
        ("MESHDNS_ADMIN_LISTEN", "localhost:9153", "localhost:9153"),
        ("MESHDNS_LOG", "info,[", "["),
        ("MESHDNS_LOG", "meshdns=loud", "meshdns=loud"),
        ("MESHDNS_LOG_FORMAT", "xml", "xml"),
        ("MESHDNS_THREADS", "0", "0"),
        ("MESHDNS_THREADS", "many", "many"),
        (
            "MESHDNS_RESOLV_CONF",
            "/nonexistent/resolv.conf",
            "/nonexistent/resolv.conf",
        ),
        ("MESHDNS_TYPO", "1", "MESHDNS_TYPO"),
        ("MESHDNS_TIMEOUT", "5124095576030431h", "5124095576030431h"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "2m", "2m"),
        ("MESHDNS_CACHE_MAX_TTL", "30d", "30d"),
        ("MESHDNS_CACHE_MAX_TTL", "200h", "200h"),
        ("MESHDNS_CACHE_NEGATIVE_TTL", "1d", "1d"),
        ("MESHDNS_CACHE_NEGATIVE_TTL", "4h", "4h"),
        ("MESHDNS_SERVE_STALE", "9999h", "9999h"),
        ("MESHDNS_MAX_INFLIGHT", "0", "0"),
        ("MESHDNS_MAX_INFLIGHT", "100000", "100000"),
        ("MESHDNS_LOG", "verbose", "verbose"),
        ("MESHDNS_LOG", "info,chatty", "chatty"),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "cluster.local",
            "cluster.local.",
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "gathered.cluster.local",
            "gathered.cluster.local.",
        ),
        (
            "MESHDNS_CLUSTERSET_ZONE",
            "svc.cluster.local",
            "svc.cluster.local.",
        ),
    ];
    for (variable, value, token) in cases {
        let mut vars = vec![(variable.to_string(), value.to_string())];
        // A list of clusters needs the local one in it.
        if *variable == CLUSTERS {
            vars[0].1 = format!("a=; {value}");
            vars.push((LOCAL_CLUSTER.into(), "a".into()));
        }
        if *variable != "MESHDNS_UPSTREAMS" && *variable != "MESHDNS_RESOLV_CONF" {
            vars.push(("MESHDNS_UPSTREAMS".into(), "127.0.0.1:5300".into()));
        }
        let err = one_error(Config::from_vars(vars));
        assert_eq!(&err.variable, variable, "{value}: {err}");
        assert_eq!(&err.token, token, "{value}: {err}");
    }
}

#[test]
fn kubernetes_service_link_variables_are_ignored() {
    let config = config_from(&[
        ("MESHDNS_SERVICE_HOST", "10.96.4.4"),
        ("MESHDNS_SERVICE_PORT", "53"),
        ("MESHDNS_PORT", "udp://10.96.4.4:53"),
        ("MESHDNS_PORT_53_UDP_PROTO", "udp"),
    ]);
    assert!(config.is_ok(), "{config:?}");
}

#[test]
fn a_typo_is_named_whatever_the_order_of_the_variables() {
    for order in [
        ["MESHDNS_UPSTREAMS", "MESHDNS_TYPO"],
        ["MESHDNS_TYPO", "MESHDNS_UPSTREAMS"],
    ] {
        let vars = order.map(|k| (k.to_string(), "127.0.0.1".to_string()));
        assert_eq!(one_error(Config::from_vars(vars)).variable, "MESHDNS_TYPO");
    }
}

#[test]
fn a_typo_suggests_the_variable_meant() {
    refused(
        config_from(&[("MESHDNS_UPSTREAM", "10.96.0.10")]),
        ("MESHDNS_UPSTREAM", "MESHDNS_UPSTREAM"),
        &["did you mean MESHDNS_UPSTREAMS?"],
    );
}

#[test]
fn log_filters_take_levels_and_targets() {
    for good in [
        "info",
        "DEBUG",
        "warn,meshdns=debug",
        "meshdns::upstream=trace",
        "off",
    ] {
        assert!(config_from(&[("MESHDNS_LOG", good)]).is_ok(), "{good}");
    }
}

#[test]
fn decimal_durations_are_accepted() {
    let config = config_from(&[
        ("MESHDNS_TIMEOUT", "1.5s"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "0.5s"),
    ])
    .unwrap();
    assert_eq!(config.timeout, Duration::from_millis(1500));
    assert_eq!(config.attempt_timeout, Duration::from_millis(500));
}

#[test]
fn a_cluster_zone_template_under_another_domain_than_the_cluster_domain_is_fine() {
    let config = with_local_a(
        "b=10.9.0.1",
        &[("MESHDNS_CLUSTER_ZONE", "{name}.clusters.example")],
    )
    .unwrap();
    assert_eq!(config.clusters[1].zone.to_ascii(), "b.clusters.example.");
}

#[test]
fn every_value_remembers_where_it_came_from() {
    let config = config_from(&[("MESHDNS_CACHE_SIZE", "7")]).unwrap();
    assert_eq!(
        config.settings.source("MESHDNS_CACHE_SIZE"),
        Source::Environment
    );
    assert_eq!(config.settings.source("MESHDNS_TIMEOUT"), Source::Default);
}

#[test]
fn a_cluster_zone_in_the_cluster_domain_is_refused() {
    refused(
        with_local_a(
            "b=10.9.0.1",
            &[("MESHDNS_CLUSTER_ZONE", "{name}.cluster.local")],
        ),
        ("MESHDNS_CLUSTER_ZONE", "a.cluster.local."),
        &[],
    );
}

#[test]
fn tls_clusters_need_a_ca_bundle_and_a_name_to_verify() {
    refused(
        with_local_a("b=dns-b.example.net transport=tls", &[]),
        ("MESHDNS_TLS_CA_FILE", ""),
        &["cluster b uses transport=tls"],
    );
    let ca = ca_file();
    let with_ca = |clusters: &str| with_local_a(clusters, &[("MESHDNS_TLS_CA_FILE", &ca)]);
    refused(
        with_ca("b=10.9.0.1 transport=tls"),
        ("MESHDNS_CLUSTERS", "b"),
        &["without tls_name="],
    );
    let config = with_ca("b=10.9.0.1 transport=tls tls_name=dns.b.example").unwrap();
    assert_eq!(config.clusters[1].endpoints[0].to_string(), "10.9.0.1:853");
    assert_eq!(
        config.clusters[1].tls_name.as_ref().unwrap().to_ascii(),
        "dns.b.example."
    );
    let config = with_ca("b=dns-b.example.net:8853 transport=tls").unwrap();
    assert_eq!(
        config.clusters[1].tls_name.as_ref().unwrap().to_ascii(),
        "dns-b.example.net."
    );
    refused(
        with_ca("b=10.9.0.1 tls_name=dns.b.example"),
        ("MESHDNS_CLUSTERS", "tls_name=dns.b.example"),
        &["is only for transport=tls"],
    );
}

#[test]
fn a_client_certificate_needs_its_key() {
    refused(
        config_from(&[
            ("MESHDNS_TLS_CA_FILE", &ca_file()),
            ("MESHDNS_TLS_CERT_FILE", "/tls.crt"),
        ]),
        ("MESHDNS_TLS_KEY_FILE", ""),
        &["is needed with MESHDNS_TLS_CERT_FILE (/tls.crt)"],
    );
}

#[test]
fn an_unreadable_or_empty_tls_file_is_named() {
    refused(
        config_from(&[("MESHDNS_TLS_CA_FILE", "/nonexistent/ca.crt")]),
        ("MESHDNS_TLS_CA_FILE", "/nonexistent/ca.crt"),
        &["does not exist"],
    );
    let empty = temp_file("empty.pem", "");
    let result = config_from(&[
        ("MESHDNS_TLS_CA_FILE", &ca_file()),
        ("MESHDNS_TLS_CERT_FILE", &empty),
        ("MESHDNS_TLS_KEY_FILE", &empty),
    ]);
    std::fs::remove_file(&empty).unwrap();
    refused(
        result,
        ("MESHDNS_TLS_CERT_FILE", &empty),
        &["no certificate"],
    );
}

use crate::certificates::tests::Scratch;

#[test]
fn an_empty_value_is_refused_for_every_variable_whose_emptiness_would_remove_something() {
    let dir = Scratch::new("config-empty");
    for variable in variables::refusing_empty() {
        for empty in ["", " \n\t", "\n"] {
            // From a file of the configuration directory …
            std::fs::write(dir.0.join(variable), empty).unwrap();
            let err = one_error(config_from(&[(
                "MESHDNS_CONFIG_DIR",
                &dir.0.display().to_string(),
            )]));
            std::fs::remove_file(dir.0.join(variable)).unwrap();
            assert_eq!(err.variable, variable, "{empty:?}: {err}");
            assert!(err.reason.contains("delete its file"), "{err}");
            // … and from the environment alike.
            let mut vars = vec![(variable.to_string(), empty.to_string())];
            if variable != UPSTREAMS {
                vars.push((UPSTREAMS.into(), "127.0.0.1:5300".into()));
            }
            let err = one_error(Config::from_vars(vars));
            assert_eq!(err.variable, variable, "{empty:?}: {err}");
        }
    }
    // Deleting the file (or leaving the variable out) is how to unset one.
    assert!(config_from(&[("MESHDNS_CONFIG_DIR", &dir.0.display().to_string())]).is_ok());
}

#[test]
fn a_file_over_64_kib_is_refused_without_being_read_past_the_limit() {
    let dir = Scratch::new("config-large");
    // An endless file: read whole, it would never end.
    std::os::unix::fs::symlink("/dev/zero", dir.0.join("MESHDNS_CLUSTERS")).unwrap();
    let err = one_error(config_from(&[(
        "MESHDNS_CONFIG_DIR",
        &dir.0.display().to_string(),
    )]));
    assert_eq!(err.variable, "MESHDNS_CLUSTERS");
    assert!(err.reason.contains("64 KiB"), "{err}");
    std::fs::remove_file(dir.0.join("MESHDNS_CLUSTERS")).unwrap();
    // One byte over the limit, as a file and in the environment.
    let large = format!("b=10.9.0.1 {}", "x".repeat(MAX_VALUE));
    std::fs::write(dir.0.join("MESHDNS_CLUSTERS"), &large).unwrap();
    let err = one_error(config_from(&[(
        "MESHDNS_CONFIG_DIR",
        &dir.0.display().to_string(),
    )]));
    assert_eq!(err.variable, "MESHDNS_CLUSTERS");
    let err = one_error(config_from(&[("MESHDNS_CLUSTERS", &large)]));
    assert_eq!(err.variable, "MESHDNS_CLUSTERS");
}

/// `c0=10.0.0.1:30053,10.0.1.1:30053; c1=…`: `n` clusters of two endpoints.
pub(crate) fn clusters(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "c{i}=10.{}.{}.1:30053,10.{}.{}.2:30053",
                i / 250,
                i % 250,
                i / 250,
                i % 250
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn cluster_257_is_refused_and_256_validate() {
    refused(
        with_local("c0", &clusters(257), &[]),
        ("MESHDNS_CLUSTERS", "c256"),
        &["at most 256"],
    );
    let config = with_local("c0", &clusters(256), &[]).unwrap();
    assert_eq!(config.clusters.len(), 256);
}

#[test]
fn an_env_file_keeps_each_value_whole_spaces_included() {
    let dir = Scratch::new("config-envfile");
    let file = dir.0.join("clusters.env");
    std::fs::write(
        &file,
        "# shared by every cluster\n\nMESHDNS_CLUSTERS=a=10.8.0.1:30053; b=10.9.0.1:30053 transport=tcp\n",
    )
    .unwrap();
    let pairs = read_env_file(&file).unwrap();
    assert_eq!(
        pairs,
        vec![(
            "MESHDNS_CLUSTERS".to_string(),
            "a=10.8.0.1:30053; b=10.9.0.1:30053 transport=tcp".to_string()
        )]
    );
    std::fs::write(&file, "MESHDNS_CLUSTERS\n").unwrap();
    let err = read_env_file(&file).unwrap_err();
    assert_eq!(err.variable, "--env-file");
    assert!(err.token.ends_with("clusters.env:1"), "{err}");
}

#[test]
fn a_rotation_names_the_variable_of_each_file_that_changed() {
    let dir = Scratch::new("config-rotated");
    let (ca, issuer) = certificates::tests::ca();
    let write_pair = || {
        let (cert, key) = certificates::tests::client(&issuer);
        dir.file("tls.crt", &cert);
        dir.file("tls.key", &key.serialize_pem());
    };
    dir.file("ca.crt", &ca.pem());
    write_pair();
    let file = |name: &str| dir.0.join(name).display().to_string();
    let load = || {
        config_from(&[
            ("MESHDNS_TLS_CA_FILE", &file("ca.crt")),
            ("MESHDNS_TLS_CERT_FILE", &file("tls.crt")),
            ("MESHDNS_TLS_KEY_FILE", &file("tls.key")),
        ])
        .unwrap()
        .tls
        .unwrap()
    };
    let before = load();
    assert!(before.rotated(&load()).is_empty());
    // cert-manager renews the client certificate: a new certificate and key, the same CA.
    write_pair();
    assert_eq!(
        (before.rotated(&load()).iter())
            .map(|v| v.name)
            .collect::<Vec<_>>(),
        ["MESHDNS_TLS_CERT_FILE", "MESHDNS_TLS_KEY_FILE"]
    );
}

/// One clusters file serves every cluster: the local cluster's own entry may say how the others
/// reach it over TLS (the walkthrough's step 9), and is asked through the upstreams anyway.
#[test]
fn the_local_cluster_may_carry_the_tls_options_the_others_use() {
    let clusters = "a=10.8.0.1:30853 transport=tls tls_name=dns.a.mesh.example; b=10.9.0.1:30853 transport=tls tls_name=dns.b.mesh.example";
    let config = with_local("a", clusters, &[("MESHDNS_TLS_CA_FILE", &ca_file())]).unwrap();
    let a = config.local_cluster().unwrap();
    assert_eq!((a.transport, a.tls_name.as_ref()), (Transport::Udp, None));
    assert_eq!(config.clusters[1].transport, Transport::Tls);
}

#[test]
fn nested_prefixes_are_refused_naming_both_clusters_and_suggesting_prefix() {
    for (clusters, token, named) in [
        (
            "prod=10.9.0.1; prod-db=10.10.0.1",
            "prefix=prod-db-",
            "of cluster prod-db starts with prefix=prod- of cluster prod",
        ),
        (
            "b=10.9.0.1; b-b=10.10.0.1",
            "prefix=b-b-",
            "of cluster b-b starts with prefix=b- of cluster b",
        ),
        (
            "b=10.9.0.1 prefix=west-; c=10.10.0.1 prefix=west-2-",
            "prefix=west-2-",
            "of cluster c starts with prefix=west- of cluster b",
        ),
    ] {
        refused(
            with_local_a(clusters, &[]),
            ("MESHDNS_CLUSTERS", token),
            &[named, "give one of them a prefix="],
        );
    }
    refused(
        with_local_a("prod=10.9.0.1; prod-db=10.10.0.1", &[]),
        ("MESHDNS_CLUSTERS", "prefix=prod-db-"),
        &["prod-db=… prefix=proddb-"],
    );
    // The way out the message names is accepted.
    let config = with_local_a("prod=10.9.0.1; prod-db=10.10.0.1 prefix=proddb-", &[]).unwrap();
    assert_eq!(config.clusters[2].prefix, "proddb-");
    // The local cluster's prefix counts too.
    refused(
        with_local_a("a-b=10.9.0.1", &[]),
        ("MESHDNS_CLUSTERS", "prefix=a-b-"),
        &[],
    );
}

#[test]
fn a_zone_equal_to_above_or_below_a_cluster_domain_is_refused() {
    let cases = [
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "local",
            "local.",
            "contains the cluster domain cluster.local. (MESHDNS_CLUSTER_DOMAIN)",
        ),
        (
            "MESHDNS_CLUSTERSET_ZONE",
            "local",
            "local.",
            "contains the cluster domain cluster.local.",
        ),
        (
            "MESHDNS_CLUSTER_ZONE",
            "{name}.local",
            "cluster.local.",
            "(the zone of cluster cluster) is the cluster domain cluster.local.",
        ),
        (
            "MESHDNS_CLUSTERSET_ZONE",
            "svc.cluster.local",
            "svc.cluster.local.",
            "lies in the cluster domain cluster.local.",
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "distributed.local,example",
            "example.",
            "contains the cluster domain b.example. (domain= of cluster b)",
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "mesh.svc.b.example",
            "mesh.svc.b.example.",
            "lies in the cluster domain b.example. (domain= of cluster b)",
        ),
    ];
    let clusters = "cluster=10.7.0.1; b=10.9.0.1 domain=b.example";
    for (variable, value, token, reason) in cases {
        refused(
            with_local_a(clusters, &[(variable, value)]),
            (variable, token),
            &[reason, "kube-dns"],
        );
    }
    // A cluster named after the last label of a domain, with the template {name}.
    refused(
        with_local(
            "local",
            "local=; b=10.9.0.1",
            &[("MESHDNS_CLUSTER_ZONE", "{name}")],
        ),
        ("MESHDNS_CLUSTER_ZONE", "local."),
        &["(the zone of cluster local)"],
    );
}

#[test]
fn nested_or_equal_meshdns_zones_are_refused_naming_both() {
    let cases = [
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "cluster.b",
            "cluster.b.",
            "is also the zone of cluster b",
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "distributed.local,deep.cluster.b",
            "deep.cluster.b.",
            "lies in the zone of cluster b (cluster.b.)",
        ),
        (
            "MESHDNS_CLUSTER_ZONE",
            "{name}.distributed.local",
            "a.distributed.local.",
            "lies in a distributed zone (MESHDNS_DISTRIBUTED_ZONES) (distributed.local.)",
        ),
        (
            "MESHDNS_CLUSTERSET_ZONE",
            "set.distributed.local",
            "set.distributed.local.",
            "lies in a distributed zone",
        ),
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "mesh.example,eu.mesh.example",
            "eu.mesh.example.",
            "lies in a distributed zone",
        ),
    ];
    for (variable, value, token, reason) in cases {
        refused(
            with_local_a("b=10.9.0.1", &[(variable, value)]),
            (variable, token),
            &[reason],
        );
    }
    // Side by side is fine.
    assert!(
        with_local_a(
            "b=10.9.0.1",
            &[
                (
                    "MESHDNS_DISTRIBUTED_ZONES",
                    "distributed.local,mesh.example"
                ),
                ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
                ("MESHDNS_CLUSTER_ZONE", "{name}.clusters.example"),
            ],
        )
        .is_ok()
    );
}

#[test]
fn a_cluster_list_without_the_local_cluster_is_refused() {
    refused(
        config_from(&[("MESHDNS_CLUSTERS", "a=10.8.0.1; b=10.9.0.1")]),
        ("MESHDNS_LOCAL_CLUSTER", ""),
        &["must be set when MESHDNS_CLUSTERS lists clusters (a, b)"],
    );
}

#[test]
fn a_local_cluster_missing_from_the_list_is_refused_with_the_closest_name() {
    for (local, meant) in [("cluster-a", "a"), ("eastt", "east"), ("east-1", "east")] {
        refused(
            with_local(local, "a=10.8.0.1; b=10.9.0.1; east=10.7.0.1", &[]),
            ("MESHDNS_LOCAL_CLUSTER", local),
            &[
                &format!("did you mean {meant}?"),
                "(a, b, east)",
                "gathered twice",
            ],
        );
    }
}

#[test]
fn a_peer_claiming_the_pods_own_namespace_or_address_is_refused() {
    let pod = [
        ("MESHDNS_POD_IP", "10.1.1.10"),
        ("MESHDNS_POD_NAMESPACE", "db"),
        ("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"),
    ];
    refused(
        with_local_a("b=10.9.0.1 namespaces=db", &pod),
        ("MESHDNS_CLUSTERS", "namespaces=db"),
        &["of cluster b is this pod's own namespace (MESHDNS_POD_NAMESPACE)"],
    );
    refused(
        with_local_a("b=10.9.0.1 cidr=10.1.1.0/24", &pod),
        ("MESHDNS_CLUSTERS", "cidr=10.1.1.0/24"),
        &["covers this pod's own address 10.1.1.10"],
    );
    // The local cluster's own claims mean "stays with kube-dns": accepted.
    let clusters = "a= namespaces=db cidr=10.1.0.0/16; b=10.9.0.1 namespaces=db-b cidr=10.9.0.0/16";
    let config = with_local("a", clusters, &pod);
    assert!(config.is_ok(), "{config:?}");
}

#[test]
fn an_own_address_in_any_spelling_is_refused() {
    let cases: &[(Pairs, &str, &str)] = &[
        (
            &[("MESHDNS_CLUSTERS", "a=; b=[::ffff:127.0.0.1]:53")],
            "MESHDNS_CLUSTERS",
            "b=[::ffff:127.0.0.1]:53",
        ),
        (
            &[("MESHDNS_UPSTREAMS", "[::ffff:127.0.0.1]:53")],
            "MESHDNS_UPSTREAMS",
            "[::ffff:127.0.0.1]:53",
        ),
        (
            &[
                ("MESHDNS_LISTEN", "0.0.0.0:53"),
                ("MESHDNS_POD_IP", "10.1.1.10"),
                ("MESHDNS_CLUSTERS", "a=; b=10.1.1.10"),
            ],
            "MESHDNS_CLUSTERS",
            "b=10.1.1.10:53",
        ),
        (
            &[
                ("MESHDNS_LISTEN", "0.0.0.0:53"),
                ("MESHDNS_POD_IP", "10.1.1.10"),
                ("MESHDNS_UPSTREAMS", "[::ffff:10.1.1.10]"),
            ],
            "MESHDNS_UPSTREAMS",
            "[::ffff:10.1.1.10]:53",
        ),
        (
            &[
                ("MESHDNS_LISTEN", "0.0.0.0:53"),
                ("MESHDNS_CLUSTERS", "a=; b=127.0.0.1"),
            ],
            "MESHDNS_CLUSTERS",
            "b=127.0.0.1:53",
        ),
    ];
    for (pairs, variable, token) in cases {
        let mut pairs = pairs.to_vec();
        pairs.push(("MESHDNS_LOCAL_CLUSTER", "a"));
        pairs.push(("MESHDNS_HOSTS_FILE", "/nonexistent/hosts"));
        refused(
            config_from(&pairs),
            (variable, token),
            &["meshdns would ask itself"],
        );
    }
    // Another port, or the pod's address without a wildcard listener, is someone else.
    assert!(with_local_a("b=[::ffff:127.0.0.1]:5353", &[]).is_ok());
    assert!(with_local_a("b=10.1.1.10", &[("MESHDNS_POD_IP", "10.1.1.10")]).is_ok());
}

#[test]
fn common_slips_name_the_variable_the_token_and_the_fix() {
    let upstream_without_port =
        Config::from_vars([(UPSTREAMS.to_string(), "10.96.0.10:".to_string())]);
    let cases = [
        // `,` instead of `;` between clusters.
        (
            with_local("a", "a=10.8.0.1, b=10.9.0.1", &[]),
            ("MESHDNS_CLUSTERS", "10.8.0.1,b=10.9.0.1"),
            "separate clusters with ';' (a=10.8.0.1; b=10.9.0.1)",
        ),
        // Spaces instead of commas in a list.
        (
            config_from(&[("MESHDNS_ALLOW_FROM", "10.0.0.0/8 192.168.0.0/16")]),
            ("MESHDNS_ALLOW_FROM", "10.0.0.0/8 192.168.0.0/16"),
            "separate them with ',' (10.0.0.0/8,192.168.0.0/16)",
        ),
        // Shell quotes copied into an env file or a ConfigMap.
        (
            config_from(&[("MESHDNS_CLUSTERS", "\"a=10.8.0.1; b=10.9.0.1\"")]),
            ("MESHDNS_CLUSTERS", "\"a=10.8.0.1; b=10.9.0.1\""),
            "quotes were copied",
        ),
        (
            config_from(&[("MESHDNS_LOCAL_CLUSTER", "'a'")]),
            ("MESHDNS_LOCAL_CLUSTER", "'a'"),
            "write a without them",
        ),
        // A cluster option's typo: the cluster named, the option suggested.
        (
            with_local_a("b=10.9.0.1 prefx=west-", &[]),
            ("MESHDNS_CLUSTERS", "prefx=west-"),
            "is no option of cluster b: did you mean prefix=west-?",
        ),
        // A port left out after the ':'.
        (
            with_local_a("b=10.9.0.1:", &[]),
            ("MESHDNS_CLUSTERS", "10.9.0.1:"),
            "names no port",
        ),
        (
            upstream_without_port,
            ("MESHDNS_UPSTREAMS", "10.96.0.10:"),
            "names no port",
        ),
    ];
    for (result, named, fix) in cases {
        refused(result, named, &[fix]);
    }
    // A TLS file that is not there: the path once, and the usual cause.
    let path = "/etc/meshdns/tls/ca.crt";
    let err = refused(
        config_from(&[("MESHDNS_TLS_CA_FILE", path)]),
        ("MESHDNS_TLS_CA_FILE", path),
        &["Secret"],
    );
    assert_eq!(err.to_string().matches(path).count(), 1, "{err}");
}

/// A server certificate and its key, in temporary PEM files: `(cert, key)`.
fn server_files() -> (String, String) {
    let (_, issuer) = certificates::tests::ca();
    let (cert, key) = certificates::tests::client(&issuer);
    (
        temp_file("dot.crt", &cert),
        temp_file("dot.key", &key.serialize_pem()),
    )
}

#[test]
fn dot_listens_on_port_853_unless_told_and_loads_its_certificate() {
    let (cert, key) = server_files();
    let config = config_from(&[
        ("MESHDNS_DOT_LISTEN", "0.0.0.0, 127.0.0.1:8853"),
        ("MESHDNS_DOT_CERT_FILE", &cert),
        ("MESHDNS_DOT_KEY_FILE", &key),
    ])
    .unwrap();
    let dot = config.dot.expect("DoT configured");
    let listen: Vec<String> = dot.listen.iter().map(ToString::to_string).collect();
    assert_eq!(listen, ["0.0.0.0:853", "127.0.0.1:8853"]);
    assert!(!dot.requires_client_certificate());
    assert!(dot.tls.not_after().is_some());
    assert_eq!(config_from(&[]).unwrap().dot, None, "off unless set");
}

#[test]
fn dot_listen_without_its_certificate_names_the_missing_variable() {
    let (cert, _) = server_files();
    refused(
        config_from(&[("MESHDNS_DOT_LISTEN", "127.0.0.1")]),
        ("MESHDNS_DOT_CERT_FILE", ""),
        &["is required with MESHDNS_DOT_LISTEN"],
    );
    refused(
        config_from(&[
            ("MESHDNS_DOT_LISTEN", "127.0.0.1"),
            ("MESHDNS_DOT_CERT_FILE", &cert),
        ]),
        ("MESHDNS_DOT_KEY_FILE", ""),
        &["is required with MESHDNS_DOT_LISTEN"],
    );
}

#[test]
fn a_dot_file_without_dot_listen_is_refused() {
    let (cert, _) = server_files();
    refused(
        config_from(&[("MESHDNS_DOT_CERT_FILE", &cert)]),
        ("MESHDNS_DOT_LISTEN", ""),
        &["is needed with MESHDNS_DOT_CERT_FILE"],
    );
}

/// A common slip: the certificate file given for the key too.
#[test]
fn a_certificate_given_as_its_own_key_names_the_key_variable() {
    let (cert, _) = server_files();
    refused(
        config_from(&[
            ("MESHDNS_DOT_LISTEN", "127.0.0.1"),
            ("MESHDNS_DOT_CERT_FILE", &cert),
            ("MESHDNS_DOT_KEY_FILE", &cert),
        ]),
        ("MESHDNS_DOT_KEY_FILE", &cert),
        &["no private key"],
    );
    refused(
        config_from(&[
            ("MESHDNS_TLS_CA_FILE", &ca_file()),
            ("MESHDNS_TLS_CERT_FILE", &cert),
            ("MESHDNS_TLS_KEY_FILE", &cert),
        ]),
        ("MESHDNS_TLS_KEY_FILE", &cert),
        &["no private key"],
    );
}

#[test]
fn a_dot_file_that_does_not_load_is_named_by_its_variable() {
    let (cert, key) = server_files();
    let (_, other_key) = server_files();
    let base = [
        ("MESHDNS_DOT_LISTEN", "127.0.0.1"),
        ("MESHDNS_DOT_CERT_FILE", cert.as_str()),
    ];
    refused(
        config_from(&[base[0], base[1], ("MESHDNS_DOT_KEY_FILE", &other_key)]),
        ("MESHDNS_DOT_KEY_FILE", &other_key),
        &["key rejected"],
    );
    refused(
        config_from(&[
            base[0],
            base[1],
            ("MESHDNS_DOT_KEY_FILE", &key),
            ("MESHDNS_DOT_CLIENT_CA_FILE", "/nonexistent/ca.crt"),
        ]),
        ("MESHDNS_DOT_CLIENT_CA_FILE", "/nonexistent/ca.crt"),
        &["does not exist"],
    );
}

#[test]
fn three_bad_variables_are_all_named_at_once() {
    let errors =
        config_from(&[(TIMEOUT, "2"), (CACHE_SIZE, "many"), (LOG_FORMAT, "xml")]).unwrap_err();
    let named: Vec<(&str, &str)> = (errors.iter())
        .map(|e| (e.variable.as_str(), e.token.as_str()))
        .collect();
    assert_eq!(
        named,
        [(TIMEOUT, "2"), (CACHE_SIZE, "many"), (LOG_FORMAT, "xml")],
        "in the table's order, one line each:\n{errors}"
    );
    assert_eq!(errors.to_string().lines().count(), 3, "{errors}");
}

#[test]
fn a_value_that_does_not_parse_is_not_cross_checked_as_well() {
    // A zone template without {name}: no cluster zone is made, so the zone table (which would
    // find the clusters' zones missing or colliding) is not checked either.
    refused(
        with_local_a("b=10.9.0.1", &[(CLUSTER_ZONE, "clusters.example")]),
        (CLUSTER_ZONE, "clusters.example"),
        &["must contain {name}"],
    );
    // A timeout that does not parse: the attempt timeout is not compared with it.
    refused(
        config_from(&[(TIMEOUT, "2"), (ATTEMPT_TIMEOUT, "3s")]),
        (TIMEOUT, "2"),
        &["needs a unit"],
    );
    // A pod address that does not parse: no identity, so nothing is checked against it.
    refused(
        with_local_a(
            "b=10.9.0.1 namespaces=db",
            &[(POD_IP, "10.8.1"), (POD_NAMESPACE, "db")],
        ),
        (POD_IP, "10.8.1"),
        &["is not an IP address"],
    );
}

#[test]
fn a_cross_check_still_runs_beside_an_unrelated_bad_value() {
    let errors = config_from(&[
        (TIMEOUT, "1s"),
        (ATTEMPT_TIMEOUT, "2s"),
        (CACHE_MAX_TTL, "1d"),
    ])
    .unwrap_err();
    let named: Vec<&str> = errors.iter().map(|e| e.variable.as_str()).collect();
    assert_eq!(named, [CACHE_MAX_TTL, ATTEMPT_TIMEOUT], "{errors}");
}

#[test]
fn every_unknown_variable_is_named_at_once() {
    let errors = config_from(&[
        ("MESHDNS_UPSTREAM", "10.96.0.10"),
        ("MESHDNS_TIMEOUTS", "2s"),
    ])
    .unwrap_err();
    let named: Vec<&str> = errors.iter().map(|e| e.variable.as_str()).collect();
    assert_eq!(named, ["MESHDNS_TIMEOUTS", "MESHDNS_UPSTREAM"], "{errors}");
}
