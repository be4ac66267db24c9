"""The cluster-level resolver as rendered for one cluster (k8s/resolver/<name>).

    check_resolver.py RENDERED

Checks what docs/design.md ("Deployment") promises: a Deployment `meshdns` of 2 replicas spread
over nodes (required) and zones, non-root with a read-only root and no capabilities, port 53
through the sysctl, probes on /readyz and /livez, MESHDNS_LISTEN and MESHDNS_THREADS set, the
sidecar's ConfigMaps plus meshdns-resolver as its configuration directory (all rendered); a
PodDisruptionBudget keeping one; the Service `meshdns` with UDP and TCP 53 and the metrics port,
selecting the pods; MESHDNS_ALLOW_FROM set (the NetworkPolicy: check_netpol.py). Prints
PASS/FAIL lines.
"""
import sys

import yaml


def main():
    path = sys.argv[1]
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    failures = []

    def want(ok, what):
        if not ok:
            failures.append(what)

    dep = by.get(("Deployment", "meshdns"))
    if dep is None:
        print(f"FAIL resolver {path}: no Deployment meshdns")
        return 1
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    want(spec.get("replicas") == 2, "2 replicas")
    spread = {c["topologyKey"]: c["whenUnsatisfiable"] for c in pod.get("topologySpreadConstraints", [])}
    want(spread.get("kubernetes.io/hostname") == "DoNotSchedule", "spread over nodes (required)")
    want("topology.kubernetes.io/zone" in spread, "spread over zones")
    psc = pod.get("securityContext", {})
    want(psc.get("runAsNonRoot") is True, "runAsNonRoot")
    want({"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"} in psc.get("sysctls", []),
         "port 53 through net.ipv4.ip_unprivileged_port_start=53")
    (container,) = pod["containers"]
    csc = container.get("securityContext", {})
    want(csc.get("readOnlyRootFilesystem") is True, "read-only root")
    want(csc.get("allowPrivilegeEscalation") is False, "no privilege escalation")
    want(csc.get("capabilities", {}).get("drop") == ["ALL"], "all capabilities dropped")
    probes = {k: container.get(k, {}).get("httpGet", {}).get("path") for k in ("startupProbe", "readinessProbe", "livenessProbe")}
    want(probes == {"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/livez"},
         f"probes on /readyz and /livez, got {probes}")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    want(env.get("MESHDNS_LISTEN", "").endswith(":53"), "MESHDNS_LISTEN on port 53 of the pod")
    want(env.get("MESHDNS_THREADS") == "2", "MESHDNS_THREADS=2")
    want(env.get("MESHDNS_CONFIG_DIR") == "/etc/meshdns", "MESHDNS_CONFIG_DIR")
    want("memory" in container.get("resources", {}).get("limits", {}), "a memory limit")
    sources = [s["configMap"]["name"] for v in pod.get("volumes", []) for s in v.get("projected", {}).get("sources", []) if "configMap" in s]
    want(sources == ["meshdns-clusters", "meshdns-local", "meshdns-resolver"],
         f"configuration = the sidecar's ConfigMaps + meshdns-resolver, got {sources}")
    for name in sources:
        want(("ConfigMap", name) in by, f"ConfigMap {name} rendered")
    pdb = by.get(("PodDisruptionBudget", "meshdns"))
    want(pdb is not None and pdb["spec"].get("minAvailable") == 1
         and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), "a PDB keeping one replica")
    svc = by.get(("Service", "meshdns"))
    ports = {(p["port"], p.get("protocol", "TCP")) for p in (svc or {}).get("spec", {}).get("ports", [])}
    want({(53, "UDP"), (53, "TCP"), (9153, "TCP")} <= ports, f"Service meshdns on UDP+TCP 53 and 9153, got {sorted(ports)}")
    want(svc is not None and svc["spec"].get("clusterIP") not in (None, "", "None"), "a fixed clusterIP for CoreDNS's forward")
    want(svc is not None and svc["spec"]["selector"].items() <= labels.items(), "the Service selects the pods")
    allow = by.get(("ConfigMap", "meshdns-resolver"), {}).get("data", {}).get("MESHDNS_ALLOW_FROM", "")
    want(bool(allow), "MESHDNS_ALLOW_FROM set in meshdns-resolver (the clients it answers)")
    if failures:
        print(f"FAIL resolver {path}: " + "; ".join(failures))
        return 1
    print(f"PASS resolver: 2 spread replicas, PDB, non-root read-only, sysctl port 53, probes, Service UDP/TCP 53 + metrics, MESHDNS_ALLOW_FROM {allow} (NetworkPolicy: check_netpol.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
