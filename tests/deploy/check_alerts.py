#!/usr/bin/env python3
"""The alerting rules and the scrape of the monitoring component, against what meshdns exports.

    check_alerts.py RENDERED_WITH_MONITORING RENDERED_RESOLVER README.md PROMTOOL
    (MESHDNS_BIN: a built meshdns binary)

- the PrometheusRule's groups pass `promtool check rules` (every expression parsed, every
  template and duration valid), and `promtool test rules` with fixtures/alerts.test.yaml;
- every alert is tested firing and clearing: an evaluation with the alert quiet, a later one
  with it firing, and a later one quiet again (alerts stay while their cause stays, and go
  with it);
- every alert has a `runbook_url` into docs/troubleshooting.md whose anchor is a heading there;
- every alert groups by `cluster` (the source cluster, as Thanos, Mimir and federation label
  series) and keeps neither `pod` nor `endpoint` in its outer grouping, and an alert on a
  family labelled `peer` keeps `peer`: one alert per source cluster and peer;
- no metric family has a label `cluster` (it would collide with that source-cluster label);
- every metric an expression names is a family the binary exports: the `# TYPE` lines of a
  meshdns started in a network namespace of its own (loopback only), or, for the families that
  only have series once a peer or certificate exists, a row of the README's metrics table,
  which src/metrics.rs's unit tests hold equal to the binary's `metrics::FAMILIES`;
- every label an expression groups or filters by is one of that family's labels in the README's
  metrics table (src/metrics.rs's unit tests keep it equal to the code) or a target label
  (namespace, pod, cluster), and every label value it matches is one the README names;
- the rules cover: loops seen, an endpoint unhealthy for minutes, a peer unreachable, the
  SERVFAIL ratio by route, a rejected configuration (the gauge), a restart-only change pending
  (the gauge), queries dropped, log lines dropped, a peer's, our client and a served
  certificate expiring;
- a PodMonitor selects the resolver pods of RENDERED_RESOLVER and scrapes a named port of its
  meshdns container that is the admin port (9153).
Prints PASS/FAIL lines.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from checks import Checks

import yaml

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "alerts.test.yaml")
# Labels of the target or of the source cluster (Thanos, Mimir and federation add `cluster`).
TARGET_LABELS = {"namespace", "pod", "job", "instance", "container", "cluster"}
TROUBLESHOOTING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "troubleshooting.md")
RUNBOOK_BASE = "https://github.com/meshdns/meshdns/blob/main/docs/troubleshooting.md#"
WANTED = {
    "loops seen": lambda e: "meshdns_loops_total" in e,
    "an endpoint unhealthy for minutes": lambda e: "meshdns_upstream_healthy" in e and "== 0" in e,
    "a peer unreachable": lambda e: "max by (cluster, peer) (meshdns_upstream_healthy) == 0" in e,
    "the SERVFAIL ratio by route": lambda e: 'rcode="SERVFAIL"' in e and "route" in e,
    "a rejected configuration": lambda e: "meshdns_config_last_reload_successful == 0" in e,
    "a restart-only change pending (the gauge)": lambda e: "meshdns_config_restart_pending == 1" in e,
    "queries dropped": lambda e: "meshdns_dropped_total" in e,
    "log lines dropped": lambda e: "meshdns_log_lines_dropped_total" in e,
    "a peer's certificate expiring": lambda e: "meshdns_peer_certificate_expiry_timestamp_seconds" in e,
    "our client certificate expiring": lambda e: "meshdns_client_certificate_expiry_timestamp_seconds" in e,
    "a served certificate expiring": lambda e: "meshdns_server_certificate_expiry_timestamp_seconds" in e,
}

CHECKS = Checks("alerts")


def exported_families(binary):
    """`# TYPE` families of a meshdns started on loopback in a network namespace of its own."""
    run = subprocess.run(["unshare", "-n", sys.executable, os.path.abspath(__file__), "--scrape", binary],
                         capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", run.stdout, re.M)), run.stderr


def scrape(binary):
    """In the new network namespace: loopback up, meshdns started, /metrics printed, meshdns stopped."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    env = {"MESHDNS_LISTEN": "127.0.0.1:5353", "MESHDNS_UPSTREAMS": "127.0.0.1:5300",
           "MESHDNS_ADMIN_LISTEN": "127.0.0.1:9153"}
    proc = subprocess.Popen([binary], env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                print(urllib.request.urlopen("http://127.0.0.1:9153/metrics", timeout=1).read().decode())
                return 0
            except OSError:
                time.sleep(0.1)
        return 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def readme_labels(path):
    """{family: labels} and the Metrics section's text (the closed label values)."""
    text = open(path).read()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0] if "\n## Metrics\n" in text else ""
    labels = {}
    for line in section.splitlines():
        if line.startswith("| `meshdns_"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            labels[cells[0].strip("`")] = set(re.findall(r"`(\w+)`", cells[2]))
    return labels, section


def github_anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for line in open(path).read().splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def fires_and_clears(tests_path):
    """{alert: [(eval minutes, fired)]} of every alert_rule_test of the promtool tests, sorted."""
    def minutes(text):
        value, unit = re.fullmatch(r"(\d+)([smh])", str(text)).groups()
        return int(value) * {"s": 1 / 60, "m": 1, "h": 60}[unit]
    evals = {}
    for test in yaml.safe_load(open(tests_path))["tests"]:
        for case in test.get("alert_rule_test", []):
            evals.setdefault(case["alertname"], []).append((minutes(case["eval_time"]), bool(case.get("exp_alerts"))))
    return {name: sorted(e) for name, e in evals.items()}


def quiet_firing_quiet(evals):
    """Whether the evaluations show the alert quiet, then firing, then quiet again."""
    states = [fired for _, fired in evals]
    try:
        first = states.index(True)
        return not states[0] and False in states[first:]
    except ValueError:
        return False


def outer_grouping(expr):
    """The labels of the first `by (...)` of an expression (its outermost aggregation here)."""
    m = re.search(r"\bby\s*\(([^)]*)\)", expr)
    return {x.strip() for x in m.group(1).split(",")} if m else set()


def check_alert_shape(alerts, labels):
    """Runbooks, grouping by source cluster and peer, no family labelled `cluster`."""
    anchors = github_anchors(TROUBLESHOOTING)
    no_runbook = [name for name, r in alerts.items()
                  if not str(r.get("annotations", {}).get("runbook_url", "")).startswith(RUNBOOK_BASE)
                  or r["annotations"]["runbook_url"][len(RUNBOOK_BASE):] not in anchors]
    CHECKS.check("every alert's runbook_url links a section of docs/troubleshooting.md", not no_runbook,
                 f"{no_runbook} (anchors there: {sorted(a for a in anchors if a.startswith('meshdns'))})")
    wrong = []
    for name, r in alerts.items():
        outer = outer_grouping(str(r["expr"]))
        peer_family = any("peer" in labels.get(m, set()) for m in re.findall(r"\bmeshdns_[a-z_]+", str(r["expr"])))
        if "cluster" not in outer or outer & {"pod", "endpoint"} or (peer_family and "peer" not in outer):
            wrong.append(f"{name}: by ({', '.join(sorted(outer))})")
    CHECKS.check("every alert is one per source cluster (and peer): by (cluster[, peer]), without pod or endpoint",
                 not wrong, "; ".join(wrong))
    clashing = sorted(m for m, ls in labels.items() if "cluster" in ls)
    CHECKS.check("no metric family has a label `cluster` (the source cluster's label in multi-cluster monitoring)",
                 not clashing, f"{clashing}")


def main():
    if sys.argv[1:2] == ["--scrape"]:
        return scrape(sys.argv[2])
    rendered, resolver, readme, promtool = sys.argv[1:5]
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    CHECKS.check("the monitoring component renders a PrometheusRule", bool(rules), "none")
    if not rules:
        return 1
    groups = [g for r in rules for g in r["spec"]["groups"]]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "all.yaml"), "w") as f:
            yaml.safe_dump({"groups": groups}, f)
        run = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
        CHECKS.check(f"promtool check rules: {sum(len(g['rules']) for g in groups)} rules parse", run.returncode == 0,
                     (run.stdout + run.stderr).strip())
        bare = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in groups]
        with open(os.path.join(d, "rules.yaml"), "w") as f:
            yaml.safe_dump({"groups": bare}, f)
        shutil.copy(TESTS, os.path.join(d, "alerts.test.yaml"))
        run = subprocess.run([promtool, "test", "rules", "alerts.test.yaml"], cwd=d, capture_output=True, text=True)
        CHECKS.check(f"promtool test rules ({os.path.relpath(TESTS)})", run.returncode == 0,
                     (run.stdout + run.stderr).strip()[-1500:])
    evals = fires_and_clears(TESTS)
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    untested = sorted(name for name in alerts if not quiet_firing_quiet(evals.get(name, [])))
    CHECKS.check(f"every one of the {len(alerts)} alerts is tested quiet, firing while its cause holds, and quiet "
                 "once it goes", not untested, f"{untested}: {[(n, evals.get(n)) for n in untested]}")
    exprs = {r.get("alert") or r.get("record"): str(r["expr"]) for g in groups for r in g["rules"]}

    binary = os.environ.get("MESHDNS_BIN")
    families, err = exported_families(binary) if binary else ({}, "no MESHDNS_BIN")
    CHECKS.check(f"a running meshdns exports {len(families)} metric families (scraped in a network namespace)",
                 len(families) >= 10, err.strip())
    labels, section = readme_labels(readme)
    check_alert_shape(alerts, labels)
    foreign, bad_labels, bad_values = [], [], []
    for name, e in exprs.items():
        for m in set(re.findall(r"\bmeshdns_[a-z_]+", e)):
            if m not in families and m not in labels:
                foreign.append(f"{name}: {m}")
                continue
            allowed = labels.get(m, set()) | TARGET_LABELS
            for sel in re.findall(re.escape(m) + r"\{([^}]*)\}", e):
                for key, value in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', sel):
                    if key not in allowed:
                        bad_labels.append(f"{name}: {m}{{{key}}}")
                    elif f"`{value}`" not in section:
                        bad_values.append(f"{name}: {key}={value!r}")
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", e):
            used = {x.strip() for x in group.split(",") if x.strip()}
            known = set().union(*(labels.get(m, set()) for m in re.findall(r"\bmeshdns_[a-z_]+", e))) | TARGET_LABELS
            bad_labels += [f"{name}: by {x}" for x in used - known]
    CHECKS.check("every metric the rules name is exported by the binary (scraped, or a row of the README table "
                 "that src/metrics.rs's unit tests hold to metrics::FAMILIES)", not foreign, "; ".join(foreign))
    CHECKS.check("every label the rules use is one of the README's for that metric (or a target label)",
                 not bad_labels, "; ".join(bad_labels))
    CHECKS.check("every label value the rules match is one the README names", not bad_values, "; ".join(bad_values))
    missing = [w for w, test in WANTED.items() if not any(test(e) for e in exprs.values())]
    CHECKS.check(f"the rules cover {', '.join(WANTED)}", not missing, f"missing {missing}")

    rdocs = [d for d in yaml.safe_load_all(open(resolver)) if d]
    dep = next((d for d in rdocs if d["kind"] == "Deployment" and d["metadata"]["name"] == "meshdns"), None)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"] if dep else {}
    ports = {p.get("name"): p["containerPort"] for c in (dep["spec"]["template"]["spec"]["containers"] if dep else [])
             if c["name"] == "meshdns" for p in c.get("ports", [])}
    pms = [p for p in rdocs + docs if p["kind"] == "PodMonitor"
           and p["spec"]["selector"].get("matchLabels", {}).items() <= pod_labels.items()]
    scraped = [e["port"] for p in pms for e in p["spec"].get("podMetricsEndpoints", []) if ports.get(e.get("port")) == 9153]
    CHECKS.check("a PodMonitor selects the resolver pods and scrapes their admin port 9153", bool(dep) and bool(scraped),
                 f"{len(pms)} PodMonitors select {pod_labels}; ports {ports}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
