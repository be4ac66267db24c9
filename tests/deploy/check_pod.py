#!/usr/bin/env python3
"""Checks a rendered kustomization (multi-document YAML) against DESIGN.md "Deployment".

Usage: check_pod.py RENDERED.yaml NAMESPACE LABEL
With MESHDNS_BIN set to a built meshdns binary, also runs `meshdns --check` (binds nothing,
sends nothing) with exactly the environment the sidecar gets, and expects exit 0.
Prints one `PASS <label>: <check>` or `FAIL <label>: <check> -- <why>` line per check;
exits 1 if any check failed. validate.sh counts the lines.
"""
import ipaddress
import os
import re
import subprocess
import sys

import yaml

ADMIN_PORT = 9153
UID = 65532
ENV_REQUIRED = ("MESHDNS_CLUSTERS", "MESHDNS_LOCAL_CLUSTER", "MESHDNS_UPSTREAMS")
LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

failures = 0


def check(label, name, ok, why=""):
    global failures
    if ok:
        print(f"PASS {label}: {name}")
    else:
        failures += 1
        print(f"FAIL {label}: {name} -- {why}")


def endpoint_ok(token):
    """IP[:PORT] or [IPv6]:PORT, as DESIGN.md 'Configuration' allows."""
    token = token.strip()
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\](?::(\d+))?", token)
    if m:
        host, port = m.group(1), m.group(2)
    elif token.count(":") == 1:
        host, port = token.split(":")
    else:
        host, port = token, None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return port is None or 0 < int(port) < 65536


def parse_clusters(value):
    """NAME=ENDPOINT[,ENDPOINT...] [opt=val ...] entries separated by ';' -> {name: endpoints}."""
    clusters = {}
    for entry in value.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        name, _, rest = entry.partition("=")
        fields = rest.split()
        if not LABEL_RE.match(name.strip()) or not fields:
            raise ValueError(f"bad entry {entry!r}")
        endpoints = fields[0].split(",")
        if not all(endpoint_ok(e) for e in endpoints):
            raise ValueError(f"bad endpoint in {entry!r}")
        for opt in fields[1:]:
            key, _, val = opt.partition("=")
            if key not in ("domain", "prefix", "transport") or not val:
                raise ValueError(f"bad option {opt!r}")
        clusters[name.strip()] = endpoints
    return clusters


def probe_on_metrics(container, probe, path):
    p = container.get(probe) or {}
    get = p.get("httpGet") or {}
    ports = {pt.get("name"): pt.get("containerPort") for pt in container.get("ports", [])}
    port = get.get("port")
    port_ok = port == ADMIN_PORT or (port == "metrics" and ports.get("metrics") == ADMIN_PORT)
    return get.get("path") == path and port_ok, f"{probe}={p!r}"


def restricted(pod_sc, sc):
    """The 'restricted' Pod Security Standard, for one container."""
    why = []
    eff = lambda k: sc.get(k, pod_sc.get(k))  # noqa: E731
    if eff("runAsNonRoot") is not True:
        why.append("runAsNonRoot")
    if eff("runAsUser") == 0:
        why.append("runAsUser 0")
    if sc.get("allowPrivilegeEscalation") is not False:
        why.append("allowPrivilegeEscalation")
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
        why.append("capabilities")
    if (eff("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        why.append("seccompProfile")
    if sc.get("privileged"):
        why.append("privileged")
    return not why, ", ".join(why)


def main():
    path, ns, label = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    cluster_scoped = {"Namespace"}
    wrong_ns = [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                if d["kind"] not in cluster_scoped and d["metadata"].get("namespace") != ns]
    check(label, f"every namespaced object is in namespace {ns}", not wrong_ns, f"{wrong_ns}")
    check(label, f"Namespace object is {ns}",
          [n["metadata"]["name"] for n in by_kind.get("Namespace", [])] == [ns],
          f"{[n['metadata']['name'] for n in by_kind.get('Namespace', [])]}")

    workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment", "DaemonSet")]
    with_sidecar = [w for w in workloads
                    if any(c["name"] == "meshdns"
                           for c in w["spec"]["template"]["spec"].get("initContainers", [])
                           + w["spec"]["template"]["spec"].get("containers", []))]
    check(label, "a workload runs the meshdns sidecar", bool(with_sidecar), "none found")
    configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in by_kind.get("ConfigMap", [])}
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}

    for w in with_sidecar:
        wl = f"{label} {w['kind']}/{w['metadata']['name']}"
        spec = w["spec"]["template"]["spec"]
        inits = spec.get("initContainers", [])
        names = [c["name"] for c in inits]
        check(wl, "meshdns is in initContainers", "meshdns" in names, f"initContainers={names}")
        if "meshdns" not in names:
            continue
        m = inits[names.index("meshdns")]
        check(wl, "meshdns is the first initContainer", names[0] == "meshdns", f"order={names}")
        check(wl, "meshdns has restartPolicy Always (native sidecar)",
              m.get("restartPolicy") == "Always", f"restartPolicy={m.get('restartPolicy')}")
        apps = [c["name"] for c in spec.get("containers", [])]
        check(wl, "an app container exists (and meshdns is not one)",
              bool(apps) and "meshdns" not in apps, f"containers={apps}")

        check(wl, "dnsPolicy None", spec.get("dnsPolicy") == "None", f"dnsPolicy={spec.get('dnsPolicy')}")
        dc = spec.get("dnsConfig") or {}
        check(wl, "dnsConfig.nameservers == ['127.0.0.1']", dc.get("nameservers") == ["127.0.0.1"],
              f"nameservers={dc.get('nameservers')}")
        want = [f"{ns}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        check(wl, f"search list is {want}", dc.get("searches") == want, f"searches={dc.get('searches')}")
        ndots = [o.get("value") for o in dc.get("options", []) if o.get("name") == "ndots"]
        check(wl, "ndots option set", len(ndots) == 1 and str(ndots[0]).isdigit(), f"ndots={ndots}")

        ports = {p.get("name"): p for p in m.get("ports", [])}
        mp = ports.get("metrics") or {}
        check(wl, f"named port metrics = {ADMIN_PORT}/TCP",
              mp.get("containerPort") == ADMIN_PORT and mp.get("protocol", "TCP") == "TCP", f"ports={m.get('ports')}")
        ok, why = probe_on_metrics(m, "startupProbe", "/readyz")
        check(wl, "startupProbe GET /readyz on metrics", ok, why)
        ok, why = probe_on_metrics(m, "livenessProbe", "/livez")
        check(wl, "livenessProbe GET /livez on metrics", ok, why)
        if "readinessProbe" in m:
            ok, why = probe_on_metrics(m, "readinessProbe", "/readyz")
            check(wl, "readinessProbe (if any) GET /readyz on metrics", ok, why)

        psc = spec.get("securityContext") or {}
        sysctls = {s["name"]: s["value"] for s in psc.get("sysctls", [])}
        v = sysctls.get("net.ipv4.ip_unprivileged_port_start")
        check(wl, "pod sysctl net.ipv4.ip_unprivileged_port_start <= 53",
              v is not None and str(v).isdigit() and int(v) <= 53, f"sysctls={sysctls}")

        sc = m.get("securityContext") or {}
        problems = []
        for key, want_v in (("runAsNonRoot", True), ("runAsUser", UID), ("runAsGroup", UID),
                            ("readOnlyRootFilesystem", True), ("allowPrivilegeEscalation", False)):
            if sc.get(key) != want_v:
                problems.append(f"{key}={sc.get(key)!r}")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or (sc.get("capabilities") or {}).get("add"):
            problems.append(f"capabilities={sc.get('capabilities')}")
        if (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problems.append("seccompProfile")
        check(wl, "meshdns securityContext restricted (65532, ro root, no escalation, drop ALL, "
              "RuntimeDefault)", not problems, "; ".join(problems))
        bad = []
        for c in inits + spec.get("containers", []):
            ok, why = restricted(psc, c.get("securityContext") or {})
            if not ok:
                bad.append(f"{c['name']}: {why}")
        check(wl, "every container meets the restricted Pod Security Standard", not bad, "; ".join(bad))

        res = m.get("resources") or {}
        check(wl, "meshdns has cpu/memory requests and a memory limit",
              {"cpu", "memory"} <= set((res.get("requests") or {})) and "memory" in (res.get("limits") or {}),
              f"resources={res}")

        env = {}
        missing_cm = []
        for src in m.get("envFrom", []):
            ref = (src.get("configMapRef") or {}).get("name")
            if ref is None:
                continue
            if ref not in configmaps:
                missing_cm.append(ref)
            env.update(configmaps.get(ref, {}))
        for e in m.get("env", []):
            env[e["name"]] = e.get("value")
        check(wl, "envFrom ConfigMaps exist in the rendered output", not missing_cm, f"missing={missing_cm}")
        check(wl, f"environment defines {', '.join(ENV_REQUIRED)}",
              all(env.get(k) for k in ENV_REQUIRED), f"env keys={sorted(env)}")
        try:
            clusters = parse_clusters(env.get("MESHDNS_CLUSTERS", ""))
            check(wl, "MESHDNS_CLUSTERS parses (NAME=IP:PORT,...; ...)", len(clusters) >= 2,
                  f"only {list(clusters)}")
        except ValueError as e:
            clusters = {}
            check(wl, "MESHDNS_CLUSTERS parses (NAME=IP:PORT,...; ...)", False, str(e))
        local = env.get("MESHDNS_LOCAL_CLUSTER")
        check(wl, "MESHDNS_LOCAL_CLUSTER is one of MESHDNS_CLUSTERS", local in clusters,
              f"{local!r} not in {list(clusters)}")
        ups = (env.get("MESHDNS_UPSTREAMS") or "").split(",")
        check(wl, "MESHDNS_UPSTREAMS is an IP[:PORT] list, no loopback",
              all(endpoint_ok(u) and not u.startswith("127.") for u in ups), f"{ups}")
        admin = env.get("MESHDNS_ADMIN_LISTEN", "0.0.0.0:9153")
        check(wl, "MESHDNS_ADMIN_LISTEN serves the probes on the pod IP, port 9153",
              admin in ("0.0.0.0:9153", "[::]:9153"), f"{admin!r}")

        binary = os.environ.get("MESHDNS_BIN")
        if binary:
            run = subprocess.run([binary, "--check"], env={k: v for k, v in env.items() if v is not None},
                                 capture_output=True, text=True, timeout=30)
            check(wl, f"meshdns --check accepts the sidecar's environment ({binary})", run.returncode == 0,
                  f"exit {run.returncode}: {(run.stderr or run.stdout).strip()[:500]}")

        svc = services.get(w["spec"].get("serviceName", ""))
        if w["kind"] == "StatefulSet":
            check(wl, "serviceName is a headless Service", svc is not None and svc["spec"].get("clusterIP") == "None",
                  f"serviceName={w['spec'].get('serviceName')}")
            names = [p.get("name") for p in (svc or {}).get("spec", {}).get("ports", [])]
            check(wl, "headless Service has the named port mongodb (_mongodb._tcp SRV)", "mongodb" in names,
                  f"ports={names}")

        pod_labels = w["spec"]["template"]["metadata"].get("labels", {})
        pms = [p for p in by_kind.get("PodMonitor", [])
               if all(pod_labels.get(k) == v for k, v in p["spec"]["selector"].get("matchLabels", {}).items())]
        check(wl, "a PodMonitor selects the pod and scrapes port metrics /metrics",
              any(e.get("port") == "metrics" and e.get("path", "/metrics") == "/metrics"
                  for p in pms for e in p["spec"].get("podMetricsEndpoints", [])), f"{len(pms)} matching")

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
