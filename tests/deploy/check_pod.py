#!/usr/bin/env python3
"""Checks a rendered kustomization (multi-document YAML) against docs/design.md "Deployment".

Usage: check_pod.py RENDERED.yaml NAMESPACE LABEL [--podmonitor] [--tls] [--example]
                    [--keeps NAME,...]
  --podmonitor  a PodMonitor must select the sidecar pods (the monitoring component is applied)
  --tls         the sidecar must carry a client certificate and the MESHDNS_TLS_* files
                (the tls component is applied)
  --example     the example workload: a StatefulSet whose headless Service has the port mongodb
  --keeps       init containers, containers or volumes of the workload that must survive the
                component's patch (a foreign workload's own)

The sidecar's configuration is what the pod would see: its environment plus one file per key of
the ConfigMaps mounted at MESHDNS_CONFIG_DIR (a file overrides the variable of the same name).
check_start.py runs the real binary on it, as the pod would. The restart-only variables, which
must not be in the live directory, are those `$MESHDNS_BIN --help` marks [restart].

Prints one `PASS <label>: <check>` or `FAIL <label>: <check> -- <why>` line per check;
exits 1 if any check failed. validate.sh counts the lines.
"""
import argparse
import ipaddress
import os
import re
import subprocess
import sys

from checks import Checks

import yaml

ADMIN_PORT = 9153
PORT_NAME = "meshdns-metrics"
UID = 65532
INJECT_LABEL = ("meshdns/inject", "true")
POD_LABEL = ("meshdns/sidecar", "true")
CONFIG_MAPS = ["meshdns-clusters", "meshdns-local"]   # the sidecar component's volume sources
ENV_REQUIRED = ("MESHDNS_CLUSTERS", "MESHDNS_LOCAL_CLUSTER", "MESHDNS_UPSTREAMS")
# The pod's identity from the downward API (docs/design.md, "The pod's own names").
POD_FIELDS = {"MESHDNS_POD_IP": "status.podIP", "MESHDNS_POD_IPS": "status.podIPs",
              "MESHDNS_POD_NAMESPACE": "metadata.namespace"}
TLS_VARS = ("MESHDNS_TLS_CA_FILE", "MESHDNS_TLS_CERT_FILE", "MESHDNS_TLS_KEY_FILE")
LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
HOST_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$", re.I)
OPTIONS = {"domain", "prefix", "transport", "tls_name", "cidr", "namespaces"}   # src/config/clusters.rs
TRANSPORTS = {"udp", "tcp", "tls"}

CHECKS = Checks()


def endpoint_ok(token, names=True):
    """IP[:PORT], [IPv6]:PORT or (names=True) HOST[:PORT], as docs/design.md 'Configuration' allows."""
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
        if not (names and HOST_RE.match(host) and not host.replace(".", "").isdigit()):
            return False
    return port is None or (port.isdigit() and 0 < int(port) < 65536)


def parse_clusters(value):
    """NAME=ENDPOINT[,ENDPOINT...] [opt=val ...] entries separated by ';' -> {name: (endpoints, options)}."""
    clusters = {}
    for entry in value.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        name, _, rest = entry.partition("=")
        fields = rest.split()
        if not LABEL_RE.match(name.strip()):
            raise ValueError(f"bad cluster name in {entry!r}")
        endpoints = fields[0].split(",") if fields and "=" not in fields[0] else []
        options = fields[1:] if endpoints else fields
        if not all(endpoint_ok(e) for e in endpoints if e):
            raise ValueError(f"bad endpoint in {entry!r}")
        opts = {}
        for opt in options:
            key, _, val = opt.partition("=")
            if key not in OPTIONS or not val:
                raise ValueError(f"bad option {opt!r}")
            opts[key] = val
        if opts.get("transport", "udp") not in TRANSPORTS:
            raise ValueError(f"bad transport in {entry!r}")
        clusters[name.strip()] = ([e for e in endpoints if e], opts)
    return clusters


def probe_on_metrics(container, probe, path):
    p = container.get(probe) or {}
    get = p.get("httpGet") or {}
    ports = {pt.get("name"): pt.get("containerPort") for pt in container.get("ports", [])}
    port = get.get("port")
    port_ok = port == ADMIN_PORT or (port == PORT_NAME and ports.get(PORT_NAME) == ADMIN_PORT)
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


def mounted_dir(container, volumes, path):
    """The (volumeMount, volume) that holds the file or directory PATH, or (None, None)."""
    best = None
    for vm in container.get("volumeMounts", []):
        mp = vm["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = vm
    if best is None:
        return None, None
    return best, volumes.get(best["name"])


def volume_sources(volume, kind):
    """Names of the ConfigMaps (kind='configMap') or Secrets (kind='secret') a volume shows."""
    if volume is None:
        return []
    if kind in volume:
        return [volume[kind].get("name" if kind == "configMap" else "secretName")]
    return [s[kind]["name"] for s in (volume.get("projected") or {}).get("sources", []) if kind in s]


def restart_only():
    """The settings that need a restart (docs/design.md, "Live configuration"), which belong in the
    environment only: the variables `meshdns --help` marks [restart] (MESHDNS_BIN, a built binary,
    as validate.sh finds it), so that this list is the binary's own. Raises ValueError without one."""
    binary = os.environ.get("MESHDNS_BIN")
    if not binary:
        raise ValueError("no built meshdns binary (MESHDNS_BIN) to read them from")
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    names = re.findall(r"^  (MESHDNS_[A-Z_]+) .* \[restart\]$", text, re.M)
    if not names:
        raise ValueError(f"{binary} --help marks no variable [restart]")
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rendered")
    ap.add_argument("namespace")
    ap.add_argument("label")
    ap.add_argument("--podmonitor", action="store_true")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--example", action="store_true")
    ap.add_argument("--keeps", default="")
    args = ap.parse_args()
    ns, label = args.namespace, args.label
    with open(args.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    wrong_ns = [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                if d["metadata"].get("namespace") != ns]
    CHECKS.labelled(label, f"every object is in namespace {ns}", not wrong_ns, f"{wrong_ns}")
    CHECKS.labelled(label, "no Namespace object (the install creates or relabels no namespace)",
          "Namespace" not in by_kind, f"{[n['metadata']['name'] for n in by_kind.get('Namespace', [])]}")

    workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment", "DaemonSet")]
    selected = [w for w in workloads if (w["metadata"].get("labels") or {}).get(INJECT_LABEL[0]) == INJECT_LABEL[1]]
    CHECKS.labelled(label, f"a workload is labelled {INJECT_LABEL[0]}={INJECT_LABEL[1]}", bool(selected), "none")
    untouched = [w for w in workloads if w not in selected]
    touched = [f"{w['kind']}/{w['metadata']['name']}" for w in untouched
               if any(c["name"] == "meshdns" for c in w["spec"]["template"]["spec"].get("initContainers", []))
               or w["spec"]["template"]["spec"].get("dnsPolicy") == "None"]
    CHECKS.labelled(label, "workloads without the label are left alone", not touched, f"{touched}")
    try:
        restart_keys_known = restart_only()
        CHECKS.labelled(label, "the restart-only settings are read from meshdns --help", True, "")
    except (ValueError, OSError, subprocess.CalledProcessError) as e:
        restart_keys_known = []
        CHECKS.labelled(label, "the restart-only settings are read from meshdns --help", False, str(e))
    configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in by_kind.get("ConfigMap", [])}
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}

    for w in selected:
        wl = f"{label} {w['kind']}/{w['metadata']['name']}"
        spec = w["spec"]["template"]["spec"]
        inits = spec.get("initContainers", [])
        names = [c["name"] for c in inits]
        CHECKS.labelled(wl, "meshdns is in initContainers", "meshdns" in names, f"initContainers={names}")
        if "meshdns" not in names:
            continue
        m = inits[names.index("meshdns")]
        CHECKS.labelled(wl, "meshdns is the first initContainer", names[0] == "meshdns", f"order={names}")
        CHECKS.labelled(wl, "meshdns has restartPolicy Always (native sidecar)",
              m.get("restartPolicy") == "Always", f"restartPolicy={m.get('restartPolicy')}")
        apps = [c["name"] for c in spec.get("containers", [])]
        CHECKS.labelled(wl, "an app container exists (and meshdns is not one)",
              bool(apps) and "meshdns" not in apps, f"containers={apps}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if args.keeps:
            have = set(names) | set(apps) | set(volumes)
            lost = [k for k in args.keeps.split(",") if k not in have]
            CHECKS.labelled(wl, f"the workload's own {args.keeps} survive the patch", not lost, f"lost {lost}")
        pod_labels = w["spec"]["template"]["metadata"].get("labels", {})
        CHECKS.labelled(wl, f"pod label {POD_LABEL[0]}={POD_LABEL[1]}", pod_labels.get(POD_LABEL[0]) == POD_LABEL[1],
              f"labels={pod_labels}")

        CHECKS.labelled(wl, "dnsPolicy None", spec.get("dnsPolicy") == "None", f"dnsPolicy={spec.get('dnsPolicy')}")
        dc = spec.get("dnsConfig") or {}
        CHECKS.labelled(wl, "dnsConfig.nameservers == ['127.0.0.1']", dc.get("nameservers") == ["127.0.0.1"],
              f"nameservers={dc.get('nameservers')}")
        want = [f"{ns}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        CHECKS.labelled(wl, f"search list is {want}", dc.get("searches") == want, f"searches={dc.get('searches')}")
        ndots = [o.get("value") for o in dc.get("options", []) if o.get("name") == "ndots"]
        CHECKS.labelled(wl, "ndots option set", len(ndots) == 1 and str(ndots[0]).isdigit(), f"ndots={ndots}")

        ports = {p.get("name"): p for p in m.get("ports", [])}
        mp = ports.get(PORT_NAME) or {}
        CHECKS.labelled(wl, f"named port {PORT_NAME} = {ADMIN_PORT}/TCP",
              mp.get("containerPort") == ADMIN_PORT and mp.get("protocol", "TCP") == "TCP", f"ports={m.get('ports')}")
        pod_port_names = [p.get("name") for c in inits + spec.get("containers", []) for p in c.get("ports", [])
                          if p.get("name")]
        CHECKS.labelled(wl, "port names unique in the pod", len(pod_port_names) == len(set(pod_port_names)), f"{pod_port_names}")
        ok, why = probe_on_metrics(m, "startupProbe", "/readyz")
        CHECKS.labelled(wl, "startupProbe GET /readyz on meshdns-metrics", ok, why)
        ok, why = probe_on_metrics(m, "livenessProbe", "/livez")
        CHECKS.labelled(wl, "livenessProbe GET /livez on meshdns-metrics", ok, why)
        if "readinessProbe" in m:
            ok, why = probe_on_metrics(m, "readinessProbe", "/readyz")
            CHECKS.labelled(wl, "readinessProbe (if any) GET /readyz on meshdns-metrics", ok, why)

        psc = spec.get("securityContext") or {}
        sysctls = {s["name"]: s["value"] for s in psc.get("sysctls", [])}
        v = sysctls.get("net.ipv4.ip_unprivileged_port_start")
        CHECKS.labelled(wl, "pod sysctl net.ipv4.ip_unprivileged_port_start <= 53",
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
        CHECKS.labelled(wl, "meshdns securityContext restricted (65532, ro root, no escalation, drop ALL, "
              "RuntimeDefault)", not problems, "; ".join(problems))
        if args.example:
            bad = []
            for c in inits + spec.get("containers", []):
                ok, why = restricted(psc, c.get("securityContext") or {})
                if not ok:
                    bad.append(f"{c['name']}: {why}")
            CHECKS.labelled(wl, "every container meets the restricted Pod Security Standard", not bad, "; ".join(bad))

        res = m.get("resources") or {}
        CHECKS.labelled(wl, "meshdns has cpu/memory requests and a memory limit",
              {"cpu", "memory"} <= set((res.get("requests") or {})) and "memory" in (res.get("limits") or {}),
              f"resources={res}")

        # ---- configuration: environment + the live configuration directory
        env = {}
        from_cm = []
        for src in m.get("envFrom", []):
            ref = (src.get("configMapRef") or {}).get("name")
            if ref is not None:
                from_cm.append(f"envFrom {ref}")
                env.update(configmaps.get(ref, {}))
        for e in m.get("env", []):
            if (e.get("valueFrom") or {}).get("configMapKeyRef"):
                from_cm.append(f"env {e['name']}")
            env[e["name"]] = e.get("value")
        CHECKS.labelled(wl, "no environment variable comes from a ConfigMap (a change there would restart the pod)",
              not from_cm, f"{from_cm}")
        fields = {e["name"]: ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                  for e in m.get("env", []) if e["name"] in POD_FIELDS}
        CHECKS.labelled(wl, "the pod's identity comes from the downward API (MESHDNS_POD_IP, _IPS, _NAMESPACE)",
              fields == POD_FIELDS, f"{fields}")
        conf_dir = env.get("MESHDNS_CONFIG_DIR")
        CHECKS.labelled(wl, "MESHDNS_CONFIG_DIR is set", bool(conf_dir), f"env keys={sorted(env)}")
        vm, vol = mounted_dir(m, volumes, conf_dir or "/nonexistent")
        ok = vm is not None and vm["mountPath"].rstrip("/") == (conf_dir or "").rstrip("/") \
            and not vm.get("subPath") and vm.get("readOnly") is True
        CHECKS.labelled(wl, "MESHDNS_CONFIG_DIR is a read-only volume mount of its own, no subPath (updates arrive)",
              ok, f"volumeMount={vm}")
        sources = volume_sources(vol, "configMap")
        CHECKS.labelled(wl, f"the configuration volume shows the ConfigMaps {CONFIG_MAPS}", sources == CONFIG_MAPS,
              f"sources={sources}")
        missing = [s for s in sources if s not in configmaps]
        CHECKS.labelled(wl, "those ConfigMaps exist in the rendered output under exactly those names "
              "(no content-hash suffix: a change rolls no pod)", sources and not missing, f"missing={missing}")
        files = {}
        for s in sources:
            files.update(configmaps.get(s, {}))
        bad_keys = [k for k in files if not re.fullmatch(r"MESHDNS_[A-Z_]+", k)]
        CHECKS.labelled(wl, "every key of the configuration directory is a MESHDNS_* variable", not bad_keys, f"{bad_keys}")
        restart_keys = [k for k in files if k in restart_keys_known]
        CHECKS.labelled(wl, "no restart-only setting (marked [restart] by meshdns --help) is in the live directory",
              not restart_keys, f"{restart_keys}")
        effective = dict(env)
        effective.update(files)

        CHECKS.labelled(wl, f"configuration defines {', '.join(ENV_REQUIRED)}",
              all(effective.get(k) for k in ENV_REQUIRED), f"keys={sorted(effective)}")
        try:
            clusters = parse_clusters(effective.get("MESHDNS_CLUSTERS", ""))
            CHECKS.labelled(wl, "MESHDNS_CLUSTERS parses (NAME=ENDPOINT,... [options]; ...)", len(clusters) >= 2,
                  f"only {list(clusters)}")
        except ValueError as e:
            clusters = {}
            CHECKS.labelled(wl, "MESHDNS_CLUSTERS parses (NAME=ENDPOINT,... [options]; ...)", False, str(e))
        local = effective.get("MESHDNS_LOCAL_CLUSTER")
        CHECKS.labelled(wl, "MESHDNS_LOCAL_CLUSTER is one of MESHDNS_CLUSTERS", local in clusters,
              f"{local!r} not in {list(clusters)}")
        ups = (effective.get("MESHDNS_UPSTREAMS") or "").split(",")
        CHECKS.labelled(wl, "MESHDNS_UPSTREAMS is an IP[:PORT] list, no loopback",
              all(endpoint_ok(u, names=False) and not u.startswith("127.") for u in ups), f"{ups}")
        admin = effective.get("MESHDNS_ADMIN_LISTEN", "0.0.0.0:9153")
        CHECKS.labelled(wl, "MESHDNS_ADMIN_LISTEN serves the probes on the pod IP, port 9153",
              admin in ("0.0.0.0:9153", "[::]:9153"), f"{admin!r}")

        # ---- DNS over TLS to the peers
        uses_tls = [n for n, (_, o) in clusters.items() if o.get("transport") == "tls" and n != local]
        tls_set = [k for k in TLS_VARS if effective.get(k)]
        if args.tls or uses_tls or tls_set:
            CHECKS.labelled(wl, "MESHDNS_TLS_CA_FILE, MESHDNS_TLS_CERT_FILE and MESHDNS_TLS_KEY_FILE are set",
                  len(tls_set) == 3, f"set: {tls_set}")
            bad = []
            for k in tls_set:
                vm, vol = mounted_dir(m, volumes, effective[k])
                if vm is None or vm.get("subPath") or not volume_sources(vol, "secret"):
                    bad.append(f"{k}={effective[k]} ({vm})")
            CHECKS.labelled(wl, "the TLS files come from a Secret mounted as a directory (no subPath: renewals arrive)",
                  not bad, "; ".join(bad))
            secrets = {s for k in tls_set for s in volume_sources(mounted_dir(m, volumes, effective[k])[1], "secret")}
            certs = {c["spec"].get("secretName") for c in by_kind.get("Certificate", [])}
            CHECKS.labelled(wl, "a Certificate (cert-manager) issues that Secret", bool(secrets) and secrets <= certs,
                  f"secrets={secrets}, certificates issue {certs}")

        if w["kind"] == "StatefulSet":
            svc = services.get(w["spec"].get("serviceName", ""))
            CHECKS.labelled(wl, "serviceName is a headless Service", svc is not None and svc["spec"].get("clusterIP") == "None",
                  f"serviceName={w['spec'].get('serviceName')}")
            if args.example:
                names = [p.get("name") for p in (svc or {}).get("spec", {}).get("ports", [])]
                CHECKS.labelled(wl, "headless Service has the named port mongodb (_mongodb._tcp SRV)", "mongodb" in names,
                      f"ports={names}")

        pms = [p for p in by_kind.get("PodMonitor", [])
               if all(pod_labels.get(k) == v for k, v in p["spec"]["selector"].get("matchLabels", {}).items())]
        if args.podmonitor:
            CHECKS.labelled(wl, f"a PodMonitor selects the pod and scrapes port {PORT_NAME} /metrics",
                  any(e.get("port") == PORT_NAME and e.get("path", "/metrics") == "/metrics"
                      for p in pms for e in p["spec"].get("podMetricsEndpoints", [])), f"{len(pms)} matching")

    if not (args.podmonitor or args.tls):
        CHECKS.labelled(label, "no custom resource in the default install (no CRD needed)",
              all("." not in d["apiVersion"].split("/")[0] or d["apiVersion"].split("/")[0].endswith(".k8s.io")
                  for d in docs if "/" in d["apiVersion"]),
              f"{sorted({d['apiVersion'] + '/' + d['kind'] for d in docs if '.' in d['apiVersion'].split('/')[0]})}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
