//! The binary's contract with its operator (docs/design.md, "Configuration"): exit 64 naming the bad
//! variable, exit 71 with a hint when the address cannot be bound, `--check`, `--version` and
//! `dns-change`.
//!
//! Each run starts from an empty environment with `MESHDNS_UPSTREAMS` pointing at a closed
//! loopback port, so nothing reads the machine's resolv.conf or sends a packet off the host.

use crate::support;

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::scratch::Scratch;

/// Longer than any of these runs should take; a run still going then has hung.
const RUN_LIMIT: Duration = Duration::from_secs(10);

/// Runs the meshdns binary with `args` and only `vars` (plus a harmless upstream and no admin
/// listener unless `vars` says otherwise).
fn meshdns(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_meshdns"))
        .args(args)
        .env_clear()
        .env("MESHDNS_UPSTREAMS", "127.0.0.1:1")
        .env("MESHDNS_ADMIN_LISTEN", "")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the meshdns binary starts");
    let pid = child.id();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("the binary's output"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("meshdns {args:?} with {vars:?} still running after {RUN_LIMIT:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_bad_variable_exits_64_naming_it() {
    let cases = [
        ("MESHDNS_TIMEOUT", "2"),
        ("MESHDNS_LISTEN", "127.0.0.1:99999"),
        ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1 colour=red"),
        ("MESHDNS_UPSTREAMS", "kube-dns"),
        ("MESHDNS_POD_IP", "10.8.1"),
        ("MESHDNS_POD_NAMESPACE", "Prod_DB"),
        // meshdns itself (the default listen address): a loop, refused before anything binds.
        ("MESHDNS_CLUSTERS", "a=; b=127.0.0.1:53"),
    ];
    for (variable, value) in cases {
        let output = meshdns(&[], &[(variable, value), ("MESHDNS_LOCAL_CLUSTER", "a")]);
        let stderr = text(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(64),
            "{variable}={value}: {stderr}"
        );
        assert!(stderr.contains(variable), "{variable}={value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

/// A typo in a variable name must not be silent, and the message must name the typo.
#[test]
fn an_unknown_variable_exits_64_naming_it() {
    let output = meshdns(&[], &[("MESHDNS_TYPO", "1")]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_TYPO"), "{stderr}");
}

#[test]
fn a_missing_resolv_conf_exits_64_naming_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_meshdns"))
        .env_clear()
        .env("MESHDNS_RESOLV_CONF", "/nonexistent/resolv.conf")
        .env("MESHDNS_ADMIN_LISTEN", "")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_RESOLV_CONF"), "{stderr}");
    assert!(
        stderr.contains("MESHDNS_UPSTREAMS"),
        "says what to set instead: {stderr}"
    );
}

#[test]
fn check_exits_0_and_prints_the_routing_table() {
    let output = meshdns(
        &["--check"],
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", "a=; b=127.0.0.2:30053 transport=tcp"),
        ],
    );
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    for expected in [
        "routing",
        "cluster.a.",
        "cluster.b.",
        "127.0.0.2:30053 (tcp)",
        "distributed.local.",
        "passthrough",
        "127.0.0.1:1",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing from:\n{stdout}"
        );
    }
}

#[test]
fn check_with_a_bad_variable_exits_64() {
    let output = meshdns(&["--check"], &[("MESHDNS_CACHE_SIZE", "many")]);
    assert_eq!(output.status.code(), Some(64));
    assert!(text(&output.stderr).contains("MESHDNS_CACHE_SIZE"));
}

#[test]
fn check_with_two_bad_variables_names_both_and_exits_64() {
    let output = meshdns(
        &["--check"],
        &[("MESHDNS_TIMEOUT", "2"), ("MESHDNS_LOG_FORMAT", "xml")],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per bad variable: {stderr}");
    assert!(lines[0].starts_with("meshdns: bad configuration: MESHDNS_TIMEOUT: \"2\""));
    assert!(lines[1].starts_with("meshdns: bad configuration: MESHDNS_LOG_FORMAT: \"xml\""));
}

#[test]
fn version_prints_the_version() {
    let output = meshdns(&["--version"], &[]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout).trim(),
        format!("meshdns {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_argument_exits_64_with_the_usage() {
    let output = meshdns(&["--frobnicate"], &[]);
    assert_eq!(output.status.code(), Some(64));
    assert!(text(&output.stderr).contains("usage"));
}

#[test]
fn an_address_in_use_exits_71_naming_the_address_and_what_to_do() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = meshdns(&[], &[("MESHDNS_LISTEN", &addr)]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains(&addr), "names the address: {stderr}");
    assert!(
        stderr.contains("another process") && stderr.contains("MESHDNS_LISTEN"),
        "says what to do: {stderr}"
    );
}

/// A port below `net.ipv4.ip_unprivileged_port_start` that is free on 127.0.0.1 for UDP and
/// TCP: 53 unless a local DNS server holds it. Fails when the machine has no privileged port.
fn free_privileged_port() -> u16 {
    let sysctl = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
    let start: u16 = std::fs::read_to_string(sysctl)
        .unwrap_or_else(|e| panic!("{sysctl}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{sysctl}: {e}"));
    assert!(
        start > 1,
        "{sysctl} is {start}: no port needs a privilege here, so the hint cannot be seen"
    );
    std::iter::once(53)
        .chain((1..start).rev())
        .filter(|&port| port < start)
        .find(|&port| {
            std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        })
        .expect("a free privileged port on 127.0.0.1")
}

/// Binding a privileged port without the privilege gets the port-53 hint. The tests run as
/// root, so the child gives up root with setpriv (util-linux, which `.ci/run` installs); a
/// machine without setpriv fails this test rather than skip it.
#[test]
fn a_privileged_port_without_privilege_exits_71_with_the_port_53_hint() {
    let setpriv = Command::new("setpriv").arg("--version").output();
    assert!(
        setpriv.as_ref().is_ok_and(|o| o.status.success()),
        "setpriv is needed to run meshdns unprivileged (Debian: apt-get install util-linux): \
         {setpriv:?}"
    );
    let listen = format!("127.0.0.1:{}", free_privileged_port());
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_meshdns"))
        .env_clear()
        .env("MESHDNS_LISTEN", &listen)
        .env("MESHDNS_UPSTREAMS", "127.0.0.1:1")
        .env("MESHDNS_ADMIN_LISTEN", "")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(71), "{stderr}");
    assert!(stderr.contains(&listen), "names the address: {stderr}");
    assert!(
        stderr.contains("CAP_NET_BIND_SERVICE") && stderr.contains("ip_unprivileged_port_start"),
        "hints at port 53: {stderr}"
    );
}

#[test]
fn an_empty_file_in_the_configuration_directory_exits_64_naming_the_variable() {
    let dir = Scratch::new("binary-empty");
    dir.file("MESHDNS_CLUSTERS", "\n");
    let shown = dir.0.display().to_string();
    let output = meshdns(&[], &[("MESHDNS_CONFIG_DIR", &shown)]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_CLUSTERS"), "{stderr}");
    assert!(stderr.contains("delete its file"), "{stderr}");
}

/// The walkthrough's pre-check: each env file's values are taken whole (a `MESHDNS_CLUSTERS`
/// with spaces is not cut at the first one, as `env $(grep … | tr …)` did), so a bad cluster
/// after the first is caught.
#[test]
fn check_with_env_files_reads_each_value_whole_and_catches_a_bad_cluster() {
    let dir = Scratch::new("binary-env-file");
    let local = dir.file(
        "local.env",
        "MESHDNS_LOCAL_CLUSTER=a\nMESHDNS_UPSTREAMS=127.0.0.1:1\n",
    );
    let good = dir.file(
        "clusters.env",
        "# the same in every cluster\nMESHDNS_CLUSTERS=a=127.0.0.2:30053; b=127.0.0.3:30053 transport=tcp\n",
    );
    let output = meshdns(&["--check", "--env-file", &good, "--env-file", &local], &[]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(stdout.contains("127.0.0.3:30053 (tcp)"), "{stdout}");
    // Cluster b over TLS without a CA bundle: refused, though cluster a alone would pass.
    let bad = dir.file(
        "bad.env",
        "MESHDNS_CLUSTERS=a=127.0.0.2:30053; b=127.0.0.3:30853 transport=tls tls_name=dns.b.example\n",
    );
    let output = meshdns(&["--check", "--env-file", &bad, "--env-file", &local], &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_TLS_CA_FILE"), "{stderr}");
    // The same files as a configuration directory: the same verdict.
    let conf = Scratch::new("binary-env-dir");
    conf.file(
        "MESHDNS_CLUSTERS",
        "a=127.0.0.2:30053; b=127.0.0.3:30853 transport=tls tls_name=dns.b.example",
    );
    conf.file("MESHDNS_LOCAL_CLUSTER", "a");
    let shown = conf.0.display().to_string();
    let output = meshdns(&["--check"], &[("MESHDNS_CONFIG_DIR", &shown)]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_TLS_CA_FILE"), "{stderr}");
    // An env file that is not one is named.
    let output = meshdns(&["--check", "--env-file", "/nonexistent/x.env"], &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("/nonexistent/x.env"), "{stderr}");
}

/// The arguments of `meshdns dns-change` for `platform`, merging into the file `current`.
fn dns_change<'a>(platform: &'a str, current: &'a str) -> [&'a str; 7] {
    let resolver = "10.96.0.53";
    [
        "dns-change",
        "--platform",
        platform,
        "--resolver",
        resolver,
        "--current",
        current,
    ]
}

/// docs/platforms.md: the change on stdout (exit 0); run again over its own output, the same
/// output (blocks.py appended a second copy, and CoreDNS refuses a zone defined twice); a
/// Corefile that already serves one of meshdns's zones is refused, exit 64, its line named and
/// nothing on stdout.
#[test]
fn dns_change_merges_once_and_refuses_a_zone_the_corefile_already_serves() {
    let dir = Scratch::new("binary-dns-change");
    let vars = [
        ("MESHDNS_CLUSTERS", "a=127.0.0.2; b=127.0.0.3"),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
    ];
    let stock = ".:53 {\n    forward . /etc/resolv.conf\n}\n";
    let current = dir.file("Corefile", stock);
    let once = meshdns(&dns_change("kubeadm", &current), &vars);
    let merged = text(&once.stdout);
    assert_eq!(once.status.code(), Some(0), "{}", text(&once.stderr));
    assert!(merged.starts_with(stock), "{merged}");
    assert_eq!(merged.matches("cluster.b:53 {").count(), 1, "{merged}");
    let applied = dir.file("Corefile.meshdns", &merged);
    let twice = meshdns(&dns_change("kubeadm", &applied), &vars);
    assert_eq!(text(&twice.stdout), merged);
    let theirs = format!("{stock}cluster.b:53 {{\n    forward . 10.9.0.1\n}}\n");
    let theirs = dir.file("Corefile.theirs", &theirs);
    let refused = meshdns(&dns_change("kubeadm", &theirs), &vars);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert!(refused.stdout.is_empty());
    assert!(
        stderr.contains("line 4: \"cluster.b:53 {\" serves cluster.b"),
        "{stderr}"
    );
}

#[test]
fn dns_change_without_its_arguments_or_with_an_unknown_platform_exits_64() {
    let output = meshdns(&["dns-change", "--resolver", "10.96.0.53"], &[]);
    assert_eq!(output.status.code(), Some(64));
    assert!(text(&output.stderr).contains("dns-change --platform"));
    let output = meshdns(&dns_change("minikube", "/dev/null"), &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("unknown platform \"minikube\""), "{stderr}");
    let output = meshdns(&dns_change("kubeadm", "/nonexistent/Corefile"), &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--current"), "{stderr}");
}

#[test]
fn an_oversized_file_exits_64_without_being_read_whole() {
    let dir = Scratch::new("binary-oversized");
    std::os::unix::fs::symlink("/dev/zero", dir.0.join("MESHDNS_CLUSTERS")).unwrap();
    let shown = dir.0.display().to_string();
    let output = meshdns(&["--check"], &[("MESHDNS_CONFIG_DIR", &shown)]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("MESHDNS_CLUSTERS") && stderr.contains("64 KiB"),
        "{stderr}"
    );
}

/// docs/design.md, "A configuration that cannot be meant is refused": each refusal exits 64
/// before anything is bound, on one line naming the variable, the token and the way out.
#[test]
fn a_configuration_that_cannot_be_meant_exits_64_naming_the_variable_and_the_way_out() {
    type Pairs = &'static [(&'static str, &'static str)];
    const LOCAL: (&str, &str) = ("MESHDNS_LOCAL_CLUSTER", "a");
    let cases: &[(Pairs, &str, &str)] = &[
        // 1. Prefixes that nest.
        (
            &[
                LOCAL,
                ("MESHDNS_CLUSTERS", "a=; prod=10.9.0.1; prod-db=10.10.0.1"),
            ],
            "MESHDNS_CLUSTERS: \"prefix=prod-db-\"",
            "prefix=",
        ),
        // 2. A zone above the cluster domain, and zones that nest.
        (
            &[LOCAL, ("MESHDNS_DISTRIBUTED_ZONES", "local")],
            "MESHDNS_DISTRIBUTED_ZONES: \"local.\"",
            "contains the cluster domain cluster.local.",
        ),
        (
            &[LOCAL, ("MESHDNS_CLUSTERSET_ZONE", "local")],
            "MESHDNS_CLUSTERSET_ZONE: \"local.\"",
            "kube-dns",
        ),
        (
            &[
                ("MESHDNS_LOCAL_CLUSTER", "local"),
                ("MESHDNS_CLUSTERS", "local=; b=10.9.0.1"),
                ("MESHDNS_CLUSTER_ZONE", "{name}"),
            ],
            "MESHDNS_CLUSTER_ZONE: \"local.\"",
            "the zone of cluster local",
        ),
        (
            &[
                LOCAL,
                ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1"),
                ("MESHDNS_DISTRIBUTED_ZONES", "deep.cluster.b"),
            ],
            "MESHDNS_DISTRIBUTED_ZONES: \"deep.cluster.b.\"",
            "lies in the zone of cluster b",
        ),
        // 3. The local cluster missing or misspelt.
        (
            &[("MESHDNS_CLUSTERS", "a=10.8.0.1; b=10.9.0.1")],
            "MESHDNS_LOCAL_CLUSTER",
            "must be set when MESHDNS_CLUSTERS lists clusters (a, b)",
        ),
        (
            &[
                ("MESHDNS_LOCAL_CLUSTER", "cluster-a"),
                ("MESHDNS_CLUSTERS", "a=10.8.0.1; b=10.9.0.1"),
            ],
            "MESHDNS_LOCAL_CLUSTER: \"cluster-a\"",
            "did you mean a?",
        ),
        // 4. A peer claiming the pod's namespace or address.
        (
            &[
                LOCAL,
                ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1 namespaces=db"),
                ("MESHDNS_POD_IP", "10.1.1.10"),
                ("MESHDNS_POD_NAMESPACE", "db"),
            ],
            "MESHDNS_CLUSTERS: \"namespaces=db\"",
            "this pod's own namespace",
        ),
        (
            &[
                LOCAL,
                ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1 cidr=10.1.1.0/24"),
                ("MESHDNS_POD_IP", "10.1.1.10"),
            ],
            "MESHDNS_CLUSTERS: \"cidr=10.1.1.0/24\"",
            "this pod's own address 10.1.1.10",
        ),
        // 5. meshdns's own address in another spelling.
        (
            &[LOCAL, ("MESHDNS_CLUSTERS", "a=; b=[::ffff:127.0.0.1]:53")],
            "MESHDNS_CLUSTERS: \"b=[::ffff:127.0.0.1]:53\"",
            "meshdns would ask itself",
        ),
        (
            &[("MESHDNS_UPSTREAMS", "[::ffff:127.0.0.1]:53")],
            "MESHDNS_UPSTREAMS: \"[::ffff:127.0.0.1]:53\"",
            "meshdns would ask itself",
        ),
        (
            &[
                LOCAL,
                ("MESHDNS_LISTEN", "0.0.0.0:53"),
                ("MESHDNS_POD_IP", "10.1.1.10"),
                ("MESHDNS_CLUSTERS", "a=; b=10.1.1.10:53"),
            ],
            "MESHDNS_CLUSTERS: \"b=10.1.1.10:53\"",
            "meshdns would ask itself",
        ),
        // 9. The common slips.
        (
            &[LOCAL, ("MESHDNS_CLUSTERS", "a=10.8.0.1,b=10.9.0.1")],
            "MESHDNS_CLUSTERS: \"10.8.0.1,b=10.9.0.1\"",
            "separate clusters with ';' (a=10.8.0.1; b=10.9.0.1)",
        ),
        (
            &[("MESHDNS_ALLOW_FROM", "10.0.0.0/8 192.168.0.0/16")],
            "MESHDNS_ALLOW_FROM",
            "separate them with ','",
        ),
        (
            &[LOCAL, ("MESHDNS_CLUSTERS", "\"a=; b=10.9.0.1\"")],
            "MESHDNS_CLUSTERS",
            "quotes were copied",
        ),
        (
            &[LOCAL, ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1 prefx=west-")],
            "MESHDNS_CLUSTERS: \"prefx=west-\"",
            "no option of cluster b: did you mean prefix=west-?",
        ),
        (
            &[LOCAL, ("MESHDNS_CLUSTERS", "a=; b=10.9.0.1:")],
            "MESHDNS_CLUSTERS: \"10.9.0.1:\"",
            "names no port",
        ),
        (
            &[("MESHDNS_TLS_CA_FILE", "/etc/meshdns/tls/ca.crt")],
            "MESHDNS_TLS_CA_FILE: \"/etc/meshdns/tls/ca.crt\"",
            "Secret",
        ),
    ];
    for (vars, named, way_out) in cases {
        let output = meshdns(&[], vars);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{vars:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(named), "{vars:?} names {named}: {stderr}");
        assert!(
            stderr.contains(way_out),
            "{vars:?} says {way_out}: {stderr}"
        );
    }
    // A missing file's path is shown once.
    let output = meshdns(&[], &[("MESHDNS_TLS_CA_FILE", "/etc/meshdns/tls/ca.crt")]);
    assert_eq!(text(&output.stderr).matches("ca.crt").count(), 1);
}

/// `--check` sends nothing (host names are resolved at run time); `--check --resolve` asks the
/// configured upstreams, shows the addresses, and warns at the end for a name that does not
/// resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_sends_nothing_and_check_resolve_asks_the_upstreams() {
    use hickory_proto::rr::RecordType;
    use support::{Answer, FakeDns, rr};
    const NAME: &str = "dns-b.example.test.";
    let kube = FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [127, 0, 0, 2])]),
        )
        .start()
        .await;
    let upstreams = kube.addr.to_string();
    let run = |args: &'static [&'static str]| {
        let upstreams = upstreams.clone();
        tokio::task::spawn_blocking(move || {
            let output = meshdns(
                args,
                &[
                    ("MESHDNS_UPSTREAMS", &upstreams),
                    ("MESHDNS_LOCAL_CLUSTER", "a"),
                    (
                        "MESHDNS_CLUSTERS",
                        "a=; b=dns-b.example.test:30053; c=nowhere.example.test:30053",
                    ),
                ],
            );
            assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
            text(&output.stdout)
        })
    };
    let stdout = run(&["--check"]).await.unwrap();
    assert!(kube.seen().is_empty(), "--check asked {:?}", kube.names());
    assert!(
        stdout.contains("dns-b.example.test:30053 [resolved at run time]"),
        "{stdout}"
    );
    assert!(!stdout.contains("warning"), "{stdout}");
    let stdout = run(&["--check", "--resolve"]).await.unwrap();
    assert!(
        kube.names().iter().any(|n| n == NAME),
        "--check --resolve asked the upstream: {:?}",
        kube.names()
    );
    assert!(
        stdout.contains("dns-b.example.test:30053 [127.0.0.2:30053]"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("warning: nowhere.example.test:30053 does not resolve"),
        "{stdout}"
    );
}
