#!/usr/bin/env python3
"""The Helm chart charts/meshdns, rendered by the real Helm engine (HELM: its binary).

    check_chart.py REPO_ROOT CHART_DEFAULT CHART_FULL CHART_EXTRA [--dot RENDER] KUSTOMIZE_RENDER...

CHART_DEFAULT, CHART_FULL and CHART_EXTRA are `helm template` of the default values, of
fixtures/chart-values-full.yaml, and of that with webhook.enabled and resolver.dot.enabled
(validate.sh renders them and validates them with kubernetes-validate, and starts the meshdns
containers of the first two: check_start.py); the KUSTOMIZE_RENDERs
are what the chart stands for in k8s/: k8s/clusters/a (its ConfigMaps; the example workload is
not compared), k8s/resolver/a and k8s/clusters/a/coredns; --dot: k8s/resolver/a with
k8s/clusters/a/dot (DNS over TLS served by the resolver), when the tree has it. Checks:
- the chart's version and appVersion are the crate's (Cargo.toml); `helm lint` and
  `helm lint --strict` find nothing, with the default and with the full values; `helm package`
  keeps the files the chart reads through links (it renders the same);
- values.schema.json: every object of it refuses keys it does not name (additionalProperties
  false), but the maps it says are free; a misspelt key at each level, and a wrong enum value,
  fail `helm template`; the full values file sets every key the schema has;
- every MESHDNS_ variable of src/config/variables.rs that the cluster side needs has a value:
  it appears in the full render (a ConfigMap key or the resolver's environment); the others are
  listed below with the reason; restart-only ones never in a ConfigMap;
- every workload: the restricted Pod Security Standard, httpGet readiness and liveness probes
  (and a startup probe for the DNS server, whose first answer matters), cpu and memory requests
  and a memory limit, the image the release reference of k8s/components/image;
- the blast radius rule: in no render (each platform's too) does a NetworkPolicy select the
  CoreDNS pods, nor is kube-system/coredns or a Namespace created;
- the peers' way in, per platform: the internal load balancer's annotations for EKS, GKE, AKS
  and MetalLB, source ranges limited to the peers, UDP and TCP 53 to the CoreDNS pods;
  NodePort with externalTrafficPolicy Cluster where there is no load balancer;
- one owner per object: with config.create and tls.createCertificate false the chart and the
  sidecars' kustomization (monitoring and tls components) create no object twice;
- the alerting rules are those of k8s/components/monitoring; NOTES.txt prints the peer
  endpoint's command and `meshdns --check`;
- the same objects as kustomize for the same inputs: values made from the overlays' inputs (the
  env files, the Service IP, the peer network, the exposed Service) render the objects of those
  renders, compared field by field; the differences meant are MEANT below, each
  with its reason, and one that no longer occurs fails too (the list stays true); the same for
  DNS over TLS served by the resolver (--dot) and for the webhook and k8s/webhook, when the
  tree has them.
Prints PASS/FAIL lines.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from check_pod import parse_clusters, restricted
from checks import Checks

import yaml

CHECKS = Checks("chart")
CHART = "charts/meshdns"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
COREDNS_SELECTOR = {"k8s-app": "kube-dns"}
# Variables of src/config/variables.rs the chart gives no value, and why.
NOT_NEEDED = {
    "MESHDNS_RESOLV_CONF": "the resolver names kube-dns in MESHDNS_UPSTREAMS; its pod's resolv.conf is the node's",
    "MESHDNS_POD_IP": "the pod's own names are the sidecar's (k8s/components/sidecar); the resolver has none",
    "MESHDNS_POD_IPS": "as MESHDNS_POD_IP",
    "MESHDNS_POD_HOSTNAME": "as MESHDNS_POD_IP",
    "MESHDNS_POD_SUBDOMAIN": "as MESHDNS_POD_IP",
    "MESHDNS_POD_NAMESPACE": "as MESHDNS_POD_IP",
    "MESHDNS_HOSTS_FILE": "as MESHDNS_POD_IP",
}
# Maps whose keys are the user's (labels, annotations, selectors, resource names): free.
FREE_MAPS = {"global", "annotations", "labels", "selector", "nodeSelector", "requests", "limits"}
# Per platform: (helm --set options, the annotations the peer Service must carry).
PLATFORMS = {
    "eks": (["peerExposure.provider=eks"],
            {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
             "service.beta.kubernetes.io/aws-load-balancer-type": "external",
             "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"}),
    "gke": (["peerExposure.provider=gke"], {"networking.gke.io/load-balancer-type": "Internal"}),
    "aks": (["peerExposure.provider=aks"], {"service.beta.kubernetes.io/azure-load-balancer-internal": "true"}),
    "metallb": (["peerExposure.provider=metallb", "peerExposure.metallb.loadBalancerIPs=10.8.255.53",
                 "peerExposure.metallb.addressPool=mesh-internal"],
                {"metallb.io/loadBalancerIPs": "10.8.255.53", "metallb.io/address-pool": "mesh-internal"}),
}
# The differences between the chart and kustomize for the same inputs that are meant:
# (kind, name, path) -> why. A path ending in "*" covers everything under it.
MEANT = {
    (("ConfigMap", "Certificate", "Issuer", "MutatingWebhookConfiguration"), "*", "metadata.labels.app.kubernetes.io/name"):
        "the chart names itself on every object it makes; the kustomizations leave these unlabelled "
        "(the ConfigMaps come from env files; their app.kubernetes.io/part-of is the example's: mongo-mesh)",
    ("Namespace", "meshdns-webhook", "kustomize only"):
        "a chart creates no Namespace (Helm's own namespace handling, and one that exists must not "
        "be relabelled); the values say to create it first, labelled restricted",
}
SEEN = set()    # the MEANT entries that occurred
# Labels compared: the ones selectors use and the component. The chart adds Helm's own
# (app.kubernetes.io/instance, managed-by, version, helm.sh/chart, part-of).
COMPARED_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/component", "k8s-app"}


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def helm(*args):
    return subprocess.run([os.environ["HELM"], *args], capture_output=True, text=True)


def template(*args):
    """helm template of the chart with ARGS: (objects, error text)."""
    run = helm("template", "meshdns", CHART, "--namespace", "db", *args)
    if run.returncode:
        return None, run.stderr.strip()
    return [d for d in yaml.safe_load_all(run.stdout) if d], ""


def check_versions(root):
    cargo = re.search(r'^version = "([^"]+)"', (root / "Cargo.toml").read_text(), re.M).group(1)
    chart = yaml.safe_load((root / CHART / "Chart.yaml").read_text())
    CHECKS.check(f"Chart.yaml version and appVersion are the crate's ({cargo})",
                 chart.get("version") == cargo and str(chart.get("appVersion")) == cargo,
                 f"version {chart.get('version')}, appVersion {chart.get('appVersion')}")


def check_lint(full_values):
    for what, extra in (("default values", []), ("the full values", ["-f", full_values]),
                        ("the full values, the webhook and DNS over TLS", ["-f", full_values, "--set", "webhook.enabled=true",
                                                                           "--set", "resolver.dot.enabled=true"])):
        for strict in ([], ["--strict"]):
            run = helm("lint", CHART, *strict, *extra)
            out = run.stdout + run.stderr
            problems = [l for l in out.splitlines() if re.match(r"\s*\[(ERROR|WARNING)\]", l)]
            CHECKS.check(f"helm lint {' '.join(strict)} with {what}: 0 errors, 0 warnings".replace("  ", " "),
                         run.returncode == 0 and not problems, "\n".join(problems) or out.strip()[-800:])


def check_package(full_values):
    """`helm package` stores the files the chart reads through links (files/): it renders the same."""
    with tempfile.TemporaryDirectory() as out:
        run = helm("package", CHART, "-d", out)
        packages = list(pathlib.Path(out).glob("*.tgz"))
        if run.returncode or len(packages) != 1:
            CHECKS.check("helm package", False, run.stderr.strip()[-400:])
            return
        packaged = helm("template", "meshdns", str(packages[0]), "--namespace", "db", "-f", full_values)
    directory = helm("template", "meshdns", CHART, "--namespace", "db", "-f", full_values)
    CHECKS.check("the packaged chart renders what the directory renders (the linked files inside it)",
                 packaged.returncode == 0 and packaged.stdout == directory.stdout,
                 packaged.stderr.strip()[-400:] or "the renders differ")


def schema_objects(schema, path=""):
    """(path, object schema) of every object with `properties`, depth first."""
    if schema.get("type") == "object" and "properties" in schema:
        yield path, schema
        for key, sub in schema["properties"].items():
            yield from schema_objects(sub, f"{path}.{key}" if path else key)
    elif schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        yield from schema_objects(schema["items"], f"{path}[]")


def check_schema(root, full_values):
    schema = json.loads((root / CHART / "values.schema.json").read_text())
    objects = list(schema_objects(schema))
    open_objects = [p or "(top)" for p, o in objects if o.get("additionalProperties") is not False]
    free = [p for p, o in _all_maps(schema) if p.rsplit(".", 1)[-1] not in FREE_MAPS]
    CHECKS.check(f"values.schema.json: all {len(objects)} objects refuse unknown keys (additionalProperties false), "
                 f"free maps only for {sorted(FREE_MAPS)}", not open_objects and not free,
                 f"open: {open_objects}; free maps: {free}")
    full = yaml.safe_load(open(full_values))
    unset = [p for p, o in objects for k in o["properties"] if not _has(full, f"{p}.{k}" if p else k)]
    CHECKS.check(f"{os.path.basename(full_values)} sets every key of the schema", not unset, f"not set: {unset}")
    defaults = yaml.safe_load((root / CHART / "values.yaml").read_text())
    accepted = []
    for path, _ in objects:
        if "[]" in path:
            continue
        values = _with_typo(defaults, path)
        objs, err = _template_values(values)
        if objs is not None or "additional" not in err.lower():
            accepted.append(f"{path or '(top)'}: {err[-200:] or 'rendered'}")
    CHECKS.check(f"a misspelt key at each of the {len([p for p, _ in objects if '[]' not in p])} levels of the values "
                 "fails helm template, naming it", not accepted, "; ".join(accepted))
    misspelt = json.loads(json.dumps(defaults))
    misspelt["config"]["mesh"]["clusters"][-1]["options"] = {"tls-name": "dns.b.mesh.example"}
    objs, err = _template_values(misspelt)
    CHECKS.check("a misspelt cluster option (tls-name for tls_name) fails helm template", objs is None
                 and "tls-name" in err, err[-200:] or "rendered")
    objs, err = template("--set", "peerExposure.provider=ekss")
    CHECKS.check("a value outside its enum (peerExposure.provider=ekss) fails helm template", objs is None,
                 "rendered")
    objs, err = template("--set", "resolver.replicas=1")
    CHECKS.check("one resolver replica is refused (two or more, spread)", objs is None, "rendered")


def _all_maps(schema, path=""):
    """(path, schema) of every object whose additionalProperties admits keys of the user's."""
    if schema.get("type") == "object":
        extra = schema.get("additionalProperties", True)
        if extra is not False and "properties" not in schema:
            yield path, schema
        for key, sub in (schema.get("properties") or {}).items():
            yield from _all_maps(sub, f"{path}.{key}" if path else key)
    elif schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        if schema["items"].get("type") == "object" and "properties" not in schema["items"]:
            return      # a list of Kubernetes objects (tolerations): their own API validates them
        yield from _all_maps(schema["items"], f"{path}[]")


def _has(values, path):
    node = values
    for part in path.split("."):
        if part.endswith("[]"):
            node = (node or {}).get(part[:-2]) or [{}]
            node = node[-1]
            continue
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _with_typo(values, path):
    """A deep copy of VALUES with a misspelt key added in the object at PATH."""
    copy = json.loads(json.dumps(values))
    node = copy
    for part in [p for p in path.split(".") if p]:
        node = node.setdefault(part, {})
    node["replcias" if "replicas" in node else "enabeld"] = True
    return copy


def _template_values(values):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        return template("-f", f.name)


def check_variables(root, full, extra):
    text = (root / "src/config/variables.rs").read_text()
    consts = dict(re.findall(r'^pub(?:\(crate\))? const (\w+): &str = "(MESHDNS_\w+)";', text, re.M))
    # The table's rows (`var(NAME, ...)`), not every string constant (a prefix is none).
    table = re.search(r"pub(?:\(crate\))? const VARIABLES: &\[Variable\] = &\[(.*?)\n\];", text, re.S).group(1)
    names = [consts[c] for c in re.findall(r"\bvar\(\s*(\w+),", table)]
    # A row's `Applies::` is when a change applies (`Applies::Restart`: restart-only).
    restart = {consts[c] for c, applies in re.findall(r"\bvar\(\s*(\w+),.*?Applies::(\w+)", table, re.S)
               if applies == "Restart"}
    keys = {k for d in full + extra if d["kind"] == "ConfigMap" for k in (d.get("data") or {})}
    env = {e["name"] for d in full + extra if d["kind"] in WORKLOADS
           for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    missing = [n for n in names if n not in keys | env and n not in NOT_NEEDED]
    CHECKS.check(f"every MESHDNS_ variable of src/config/variables.rs the cluster side needs has a value "
                 f"({len(names) - len(NOT_NEEDED)} of {len(names)}; the others: NOT_NEEDED)", names and not missing,
                 f"no value for {missing}")
    stale = [n for n in NOT_NEEDED if n not in names or n in keys | env]
    CHECKS.check("NOT_NEEDED names only variables that exist and that the chart does not set", not stale, f"{stale}")
    own = {k for d in full if d["kind"] == "ConfigMap" for k in (d.get("data") or {})} | {
        e["name"] for d in full if d["kind"] in WORKLOADS for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", []) if e["name"].startswith("MESHDNS_")}
    CHECKS.check("every MESHDNS_ variable the full values set is one of the table (no misspelt name in the chart)",
                 own and own <= set(names), f"not in the table: {sorted(own - set(names))}")
    live_restart = sorted(keys & restart)
    CHECKS.check("restart-only variables are the resolver's environment, never a ConfigMap key", not live_restart,
                 f"{live_restart}")


def release_image(root):
    kust = yaml.safe_load((root / "k8s/components/image/kustomization.yaml").read_text())
    (image,) = [i for i in kust["images"] if i["name"] == "meshdns"]
    return f"{image['newName']}:{image['newTag']}"


def check_workloads(label, docs, image):
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    CHECKS.check(f"{label}: renders a workload", bool(workloads), "none")
    for w in workloads:
        spec = w["spec"]["template"]["spec"]
        psc = spec.get("securityContext") or {}
        for c in spec.get("initContainers", []) + spec["containers"]:
            where = f"{label} {w['kind']}/{w['metadata']['name']} {c['name']}"
            ok, why = restricted(psc, c.get("securityContext") or {})
            CHECKS.check(f"{where}: the restricted Pod Security Standard", ok, why)
            dns_server = c["name"] == "meshdns"
            kinds = ("readinessProbe", "livenessProbe") + (("startupProbe",) if dns_server else ())
            probes = {p: (c.get(p) or {}).get("httpGet", {}).get("path") for p in kinds}
            CHECKS.check(f"{where}: httpGet {', '.join(probes)}", all(probes.values()), f"{probes}")
            res = c.get("resources") or {}
            CHECKS.check(f"{where}: cpu and memory requests, a memory limit",
                         {"cpu", "memory"} <= set(res.get("requests") or {}) and "memory" in (res.get("limits") or {}),
                         f"{res}")
            if not c.get("image", "").startswith(image.rsplit(":", 1)[0] + ":"):
                CHECKS.check(f"{where}: the image is fully qualified and pinned",
                             re.fullmatch(r"[\w.-]+\.[\w.-]+/[\w./-]+(:[\w.-]+|@sha256:[0-9a-f]{64})", c.get("image", "")),
                             f"{c.get('image')}")
                continue    # not meshdns (the DNS over TLS endpoint's CoreDNS)
            CHECKS.check(f"{where}: the image is the release reference {image}", c.get("image") == image,
                         f"{c.get('image')}")
            if not dns_server:
                continue    # the webhook reads no DNS configuration
            cms = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
            clusters = cms.get("meshdns-clusters", {}).get("MESHDNS_CLUSTERS", "")
            try:
                parsed = parse_clusters(clusters)
            except ValueError as e:
                parsed = {}
                clusters = f"{clusters} ({e})"
            CHECKS.check(f"{where}: MESHDNS_CLUSTERS parses, with MESHDNS_LOCAL_CLUSTER in it",
                         cms.get("meshdns-local", {}).get("MESHDNS_LOCAL_CLUSTER") in parsed, clusters)


def check_blast_radius(label, docs):
    selecting = [d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"
                 and COREDNS_SELECTOR.items() <= (d["spec"]["podSelector"].get("matchLabels") or {}).items()]
    CHECKS.check(f"{label}: no NetworkPolicy selects the CoreDNS pods", not selecting, f"{selecting}")
    touched = [f"{d['kind']}/{d['metadata']['name']}" for d in docs if d["kind"] == "Namespace"
               or (d["kind"] == "ConfigMap" and d["metadata"]["name"] in ("coredns", "coredns-custom", "kube-dns"))]
    CHECKS.check(f"{label}: creates no Namespace and no CoreDNS or kube-dns ConfigMap", not touched, f"{touched}")


def peer_service(docs):
    found = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "kube-dns-mesh"]
    return found[0] if len(found) == 1 else None


def check_peer_service(label, svc, kind):
    if svc is None:
        CHECKS.check(f"{label}: one peer Service kube-dns-mesh", False, "none")
        return
    spec = svc["spec"]
    ports = sorted((p["protocol"], p["port"]) for p in spec["ports"])
    ok = (svc["metadata"]["namespace"] == "kube-system" and spec["selector"] == COREDNS_SELECTOR
          and ports == [("TCP", 53), ("UDP", 53)] and spec["type"] == kind
          and spec.get("externalTrafficPolicy") == "Cluster")
    if kind == "LoadBalancer":
        ok = ok and bool(spec.get("loadBalancerSourceRanges")) and not any(p.get("nodePort") for p in spec["ports"])
    else:
        ok = ok and all(p.get("nodePort") for p in spec["ports"]) and "loadBalancerSourceRanges" not in spec
    CHECKS.check(f"{label}: {kind} in kube-system, UDP and TCP 53 to k8s-app=kube-dns, externalTrafficPolicy Cluster"
                 + (", sources limited to the peers" if kind == "LoadBalancer" else ", a fixed nodePort"), ok, f"{spec}")


def check_platforms(default):
    check_peer_service("default values", peer_service(default), "LoadBalancer")
    for name, (sets, want) in PLATFORMS.items():
        docs, err = template(*[a for s in sets for a in ("--set", s)])
        if docs is None:
            CHECKS.check(f"platform {name}: renders", False, err)
            continue
        svc = peer_service(docs)
        check_peer_service(f"platform {name}", svc, "LoadBalancer")
        have = (svc or {}).get("metadata", {}).get("annotations") or {}
        CHECKS.check(f"platform {name}: the internal load balancer's annotations {want}",
                     want.items() <= have.items(), f"{have}")
        check_blast_radius(f"platform {name}", docs)
    docs, err = template("--set", "peerExposure.type=NodePort")
    check_peer_service("no load balancer", peer_service(docs or []), "NodePort")
    left = ((peer_service(docs or []) or {}).get("metadata") or {}).get("annotations")
    CHECKS.check("no load balancer: the platform's load balancer annotations are left out", not left, f"{left}")
    if docs is not None:
        check_blast_radius("no load balancer", docs)


def check_one_owner(root):
    chart, err = template("--set", "config.create=false", "--set", "tls.enabled=true",
                          "--set", "tls.createCertificate=false")
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["cp", "-r", str(root / "k8s"), work], check=True)
        kust = pathlib.Path(work, "k8s/clusters/a/kustomization.yaml")
        kust.write_text(kust.read_text() + "components:\n  - ../../components/monitoring\n  - ../../components/tls\n")
        run = subprocess.run(["kubectl", "kustomize", str(kust.parent)], capture_output=True, text=True)
    if chart is None or run.returncode:
        CHECKS.check("one owner: the chart with config.create and tls.createCertificate false, next to "
                     "k8s/clusters/a with monitoring and tls", False, err or run.stderr)
        return
    sidecars = [d for d in yaml.safe_load_all(run.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])  # noqa: E731
    twice = sorted(set(map(key, chart)) & set(map(key, sidecars)))
    CHECKS.check("one owner: the chart (config.create, tls.createCertificate false) and the sidecars' "
                 "k8s/clusters/a (monitoring, tls) create no object twice", not twice, f"{twice}")
    names = {d["metadata"]["name"] for d in sidecars if d["kind"] in ("ConfigMap", "Certificate")}
    dep = next((d for d in chart if d["kind"] == "Deployment"), None)
    vols = json.dumps((dep or {}).get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []))
    used = {"meshdns-clusters", "meshdns-local"} | ({"meshdns-client-tls"} if "meshdns-client-tls" in vols else set())
    CHECKS.check("one owner: the resolver mounts the sidecars' ConfigMaps and client certificate, which "
                 "k8s/clusters/a owns", dep is not None and {"meshdns-clusters", "meshdns-local"} <= names
                 and "meshdns-client-tls" in vols, f"k8s/clusters/a owns {sorted(names)}, the resolver mounts {sorted(used)}")


def check_rules_and_notes(root, full):
    ours = next((d for d in full if d["kind"] == "PrometheusRule"), None)
    theirs = yaml.safe_load((root / "k8s/components/monitoring/prometheusrule.yaml").read_text())
    CHECKS.check("the PrometheusRule's rules are k8s/components/monitoring's",
                 ours is not None and ours["spec"] == theirs["spec"], "they differ" if ours else "none rendered")
    cases = (("MetalLB's fixed address", [], ['endpoints: ["10.8.255.53:53"]']),
             ("a cloud's load balancer", ["--set", "peerExposure.provider=eks"],
              ["get service kube-dns-mesh", "loadBalancer.ingress", ':53"]']),
             ("NodePort", ["--set", "peerExposure.type=NodePort"], [':30053"']))
    for what, extra, endpoint in cases:
        run = helm("install", "meshdns", CHART, "--namespace", "db", "--dry-run=client", *extra)
        notes = run.stdout.split("NOTES:", 1)[-1] if "NOTES:" in run.stdout else ""
        want = ["kubectl -n db exec deploy/meshdns -- /meshdns --check", "- name: a"] + endpoint
        CHECKS.check(f"NOTES.txt ({what}): the peer endpoint to give the other clusters and meshdns --check",
                     run.returncode == 0 and all(w in notes for w in want),
                     run.stderr.strip()[-400:] or f"missing {[w for w in want if w not in notes]}")


def inputs_of_kustomize(kust):
    """Chart values that mean what the kustomize renders KUST say."""
    cms = {d["metadata"]["name"]: d.get("data") or {} for d in kust if d["kind"] == "ConfigMap"}
    clusters = []
    for name, (endpoints, options) in parse_clusters(cms["meshdns-clusters"]["MESHDNS_CLUSTERS"]).items():
        entry = {"name": name, "endpoints": endpoints}
        if options:
            entry["options"] = options
        clusters.append(entry)
    svc = next(d for d in kust if d["kind"] == "Service" and d["metadata"]["name"] == "meshdns")
    pol = next(d for d in kust if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "meshdns-resolver")
    peers = [b["ipBlock"]["cidr"] for r in pol["spec"]["egress"] for b in r.get("to", []) if "ipBlock" in b]
    ports = next((r.get("ports", []) for r in pol["spec"]["egress"] if any("ipBlock" in b for b in r.get("to", []))), [])
    local = cms["meshdns-local"]
    server = next((d for d in kust if d["kind"] == "Certificate" and d["metadata"]["name"] == "meshdns-dot-server"), None)
    dot_svc = next((d for d in kust if d["kind"] == "Service" and d["metadata"]["name"] == "meshdns-dot"), None)
    exposed = peer_service(kust) or {"spec": {"type": "LoadBalancer"}, "metadata": {}}
    exposure = {"type": exposed["spec"]["type"], "provider": "none",
                "annotations": exposed["metadata"].get("annotations") or {}}
    dot = {"enabled": False}
    if server is not None and dot_svc is not None:
        dot = {"enabled": True, "serverName": server["spec"]["dnsNames"][0],
               "loadBalancerSourceRanges": dot_svc["spec"].get("loadBalancerSourceRanges") or [],
               "annotations": dot_svc["metadata"].get("annotations") or {}}
    if exposure["type"] == "NodePort":
        exposure["nodePort"] = exposed["spec"]["ports"][0]["nodePort"]
    else:
        exposure["loadBalancerSourceRanges"] = exposed["spec"].get("loadBalancerSourceRanges") or []
    return {
        "peerExposure": exposure,
        "config": {"mesh": {"clusters": clusters},
                   "local": {"cluster": local["MESHDNS_LOCAL_CLUSTER"],
                             "upstreams": local["MESHDNS_UPSTREAMS"].split(",")}},
        "resolver": {"dot": dot, "allowFrom": cms["meshdns-resolver"]["MESHDNS_ALLOW_FROM"].split(","),
                     "service": {"clusterIP": svc["spec"]["clusterIP"],
                                 "platform": svc["metadata"]["annotations"]["meshdns/platform"]},
                     "networkPolicy": {"peerCIDRs": peers, "peerPorts": ports}},
    }


def normalize(d):
    """An object without what is not compared: labels outside COMPARED_LABELS."""
    d = json.loads(json.dumps(d))
    for meta in (d.get("metadata"), ((d.get("spec") or {}).get("template") or {}).get("metadata")):
        if meta is not None:
            meta["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k in COMPARED_LABELS}
    return d


def by_name(items):
    """A list of objects with distinct names (env, ports, volumes, mounts) as a dict, or None."""
    if not items or not all(isinstance(i, dict) and "name" in i for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def differences(a, b, path=""):
    """Paths where A and B differ (dicts by key, lists of named objects by name, other lists by
    position): kustomize's strategic merge puts a patch's entries first, Helm's template in place."""
    if isinstance(a, list) and isinstance(b, list) and by_name(a) is not None and by_name(b) is not None:
        a, b = by_name(a), by_name(b)
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def meant(kind, name, path):
    for (k, n, p), why in MEANT.items():
        if kind in (k if isinstance(k, tuple) else (k,)) and n in (name, "*") and (path == p or (p.endswith("*") and path.startswith(p[:-1]))):
            return (k, n, p)
    return None


def check_webhook(root, webhook):
    """The chart's webhook against k8s/webhook, rendered with kustomize, when the tree has it."""
    ours = [d for d in webhook if "webhook" in d["metadata"]["name"] or d["kind"] == "MutatingWebhookConfiguration"]
    CHECKS.check("webhook.enabled renders the webhook (Deployment, Service, PDB, certificates, "
                 "MutatingWebhookConfiguration)", {"Deployment", "Service", "PodDisruptionBudget", "Certificate",
                 "MutatingWebhookConfiguration"} <= {d["kind"] for d in ours}, f"{sorted({d['kind'] for d in ours})}")
    if not (root / "k8s/webhook/kustomization.yaml").exists():
        print("    k8s/webhook is not in this tree: the chart's webhook is compared with it once it is")
        return
    # The chart's PodMonitor (monitoring.podMonitor) is k8s/webhook/monitoring's.
    paths = ["k8s/webhook"] + (["k8s/webhook/monitoring"] if any(d["kind"] == "PodMonitor" for d in ours) else [])
    kustomize = []
    for path in paths:
        run = subprocess.run(["kubectl", "kustomize", str(root / path)], capture_output=True, text=True)
        if run.returncode:
            CHECKS.check(f"kubectl kustomize {path}", False, run.stderr.strip())
            return
        kustomize += [d for d in yaml.safe_load_all(run.stdout) if d]
    compare(" and ".join(paths), kustomize, ours)


def compare(what, kustomize, chart):
    """The objects of KUSTOMIZE and CHART by kind, namespace and name, field by field (MEANT aside)."""
    key = lambda d: (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])  # noqa: E731
    kust, ours = {key(d): d for d in kustomize}, {key(d): d for d in chart}
    unmeant = []
    for k in sorted(set(kust) | set(ours), key=str):
        kind, ns, name = k
        if k not in ours or k not in kust:
            side = "kustomize only" if k in kust else "chart only"
            m = meant(kind, name, side)
            (SEEN.add(m) if m else unmeant.append(f"{kind} {ns}/{name}: {side}"))
            continue
        for path in differences(normalize(kust[k]), normalize(ours[k])):
            m = meant(kind, name, path)
            (SEEN.add(m) if m else unmeant.append(f"{kind} {ns}/{name} {path}: kustomize "
                                                   f"{_at(kust[k], path)!r}, chart {_at(ours[k], path)!r}"))
    CHECKS.check(f"the same objects as {what} for the same inputs: {len(set(kust) & set(ours))} in both, compared "
                 "field by field, the differences meant aside", not unmeant, "\n      ".join([""] + unmeant))


def check_same_as_kustomize(default, renders, what, example=True):
    kust = {}
    for d in renders:
        if d["kind"] == "StatefulSet" or d["metadata"]["name"] == "mongo":
            continue    # the example workload of k8s/clusters/a: the sidecars' side, not the chart's
        kust[(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])] = d
    try:
        values = inputs_of_kustomize(list(kust.values()))
    except (KeyError, StopIteration) as missing:
        CHECKS.check("the overlays' renders hold the chart's inputs (ConfigMaps, Service meshdns, its NetworkPolicy)",
                     False, f"missing {missing}")
        return
    chart_docs, err = _template_values(values)
    if chart_docs is None:
        CHECKS.check("the chart renders with the inputs of k8s/resolver/a", False, err)
        return
    if example:
        by_key = lambda docs: {(d["kind"], d["metadata"]["name"]): normalize(d) for d in docs}  # noqa: E731
        ours, theirs = by_key(default), by_key(chart_docs)
        apart = [f"{k[0]}/{k[1]} {p}" for k in sorted(set(ours) | set(theirs))
                 for p in differences(ours.get(k), theirs.get(k))]
        CHECKS.check("values.yaml is the example of k8s/ (cluster a): its defaults render what the overlays' "
                     "inputs render", not apart, f"differ at {apart}")
    compare(what, list(kust.values()), chart_docs)


def _at(d, path):
    """The value at PATH (a path of differences(): keys may hold dots, as label keys do)."""
    node, parts = d, re.findall(r"[^.\[\]]+|\[\d+\]", path)
    while parts and node is not None:
        part = parts.pop(0)
        if part.startswith("["):
            i = int(part[1:-1])
            node = node[i] if isinstance(node, list) and i < len(node) else None
            continue
        if not isinstance(node, dict):
            return None
        while part not in node and parts and not parts[0].startswith("["):
            part += "." + parts.pop(0)
        node = node.get(part)
    return node


def main():
    root = pathlib.Path(sys.argv[1])
    args = sys.argv[5:]
    dot = None
    if args[:1] == ["--dot"]:
        dot, args = load(args[1]), args[2:]
    default, extra, full = load(sys.argv[2]), load(sys.argv[4]), load(sys.argv[3])
    renders = [d for p in args for d in load(p)]
    os.chdir(root)
    full_values = "tests/deploy/fixtures/chart-values-full.yaml"
    check_versions(root)
    check_lint(full_values)
    check_package(full_values)
    check_schema(root, full_values)
    check_variables(root, full, extra)
    image = release_image(root)
    custom = sorted({f"{d['apiVersion']}/{d['kind']}" for d in default if "/" in d["apiVersion"]
                     and "." in d["apiVersion"].split("/")[0] and not d["apiVersion"].split("/")[0].endswith(".k8s.io")})
    CHECKS.check("the default values need no CRD (no custom resource rendered)", not custom, f"{custom}")
    for label, docs in (("default values", default), ("full values", full),
                        ("with the webhook and DNS over TLS", extra)):
        check_workloads(label, docs, image)
        check_blast_radius(label, docs)
    check_platforms(default)
    check_one_owner(root)
    check_rules_and_notes(root, full)
    check_same_as_kustomize(default, renders, "k8s/clusters/a (its ConfigMaps), k8s/resolver/a and k8s/clusters/a/coredns")
    if dot is None:
        print("    k8s/clusters/<name>/dot is not in this tree: resolver.dot is compared with it once it is")
    else:
        # The objects of the DoT render take the place of k8s/resolver/a's (the later of a key wins).
        check_same_as_kustomize(default, renders + dot,
                                "k8s/resolver/a with k8s/clusters/a/dot (DNS over TLS served by the resolver)", example=False)
    check_webhook(root, extra)
    compared_webhook = (root / "k8s/webhook/kustomization.yaml").exists()
    stale = [f"{k} {n} {p}" for (k, n, p) in MEANT if (k, n, p) not in SEEN and (compared_webhook or "webhook" not in n)]
    CHECKS.check("every difference listed as meant still occurs", not stale, f"{stale}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
