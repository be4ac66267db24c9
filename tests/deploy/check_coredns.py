#!/usr/bin/env python3
"""The CoreDNS change of the cluster-level mode, for one cluster: additive, exactly meshdns's zones,
to the one Service IP, inside the platform's service range.

    check_coredns.py CLUSTER_DIR RENDERED_RESOLVER STOCK_COREFILE [RENDERED_IMPORT]
    (MESHDNS_BIN: a built meshdns binary)

CLUSTER_DIR is k8s/clusters/<name>: its CoreDNS change is either coredns-forward/meshdns.server
(blocks appended to the Corefile: kubeadm, EKS, GKE) or coredns-forward-import (the ConfigMap
coredns-custom, RENDERED_IMPORT: AKS, k3s, RKE2), as the platform of the resolver's Service says
(platforms.py). Checks:
- the Service IP: the clusterIP of the Service `meshdns` lies in the named platform's service
  range and is not the kube-dns address (MESHDNS_UPSTREAMS);
- the blocks file is what k8s/coredns-forward/blocks.py writes from the files its header names
  and that Service IP (so it cannot drift from the configuration);
- the blocks name exactly the zones `meshdns --check` routes (cluster, distributed and
  clusterset rows) for the resolver's own configuration (its ConfigMaps and environment), each
  in a block of its own that forwards to the Service IP and nowhere else;
- additive: merged as docs/walkthrough.md says (the stock Corefile, an empty line, the blocks)
  into STOCK_COREFILE (kubeadm 1.33's), every line of the stock Corefile survives in order and
  its server blocks are unchanged; the import variant is a `*.server` key of coredns-custom in
  kube-system and replaces nothing.
Prints PASS/FAIL lines.
"""
import ipaddress
import os
import re
import subprocess
import sys
import tempfile

from checks import Checks
from platforms import CIDR_ANNOTATION, PLATFORM_ANNOTATION, PLATFORMS

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
MESHDNS_ROUTES = re.compile(r"^\s+(\S+)\s+(cluster \S+|distributed|clusterset)\s", re.M)


def parse(corefile):
    """[(zones, [directive lines])] of the server blocks; nested blocks kept as lines. Raises ValueError."""
    blocks, depth, head, body = [], 0, None, []
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if depth == 0:
            if not line.endswith("{") or "}" in line:
                raise ValueError(f"not a server block opening: {raw!r}")
            head, body = line[:-1].split(), []
            depth = 1
            continue
        depth += line.count("{") - line.count("}")
        if depth < 0:
            raise ValueError(f"unbalanced braces at {raw!r}")
        if depth == 0:
            if line != "}":
                raise ValueError(f"a block closes mid-line: {raw!r}")
            blocks.append((head, body))
        else:
            body.append(line)
    if depth:
        raise ValueError("unbalanced braces at the end")
    return blocks


def zone_of(key):
    return key.split("://", 1)[-1].rsplit(":", 1)[0].lower().rstrip(".")


def meshdns_zones(resolver_docs, binary):
    """The zones meshdns routes to clusters, as `meshdns --check` prints them for the resolver."""
    dep = next(d for d in resolver_docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "meshdns")
    pod = dep["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "meshdns"]
    cms = {d["metadata"]["name"]: d.get("data", {}) for d in resolver_docs if d["kind"] == "ConfigMap"}
    volume = next(v for v in pod["volumes"] if v["name"] == "meshdns-config")
    with tempfile.TemporaryDirectory() as d:
        for s in volume["projected"]["sources"]:
            for k, v in cms[s["configMap"]["name"]].items():
                with open(os.path.join(d, k), "w") as f:
                    f.write(v)
        env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e and not e["name"].startswith("MESHDNS_TLS_")}
        env["MESHDNS_CONFIG_DIR"] = d
        run = subprocess.run(["unshare", "-n", binary, "--check"], env=env, capture_output=True, text=True, timeout=30)
    if run.returncode:
        raise RuntimeError(f"meshdns --check exit {run.returncode}: {run.stderr.strip()[:300]}")
    return [z.lower().rstrip(".") for z, _ in MESHDNS_ROUTES.findall(run.stdout)], cms


def main():
    cluster_dir, resolver_path, stock_path = sys.argv[1:4]
    import_path = sys.argv[4] if len(sys.argv) > 4 else None
    name = os.path.basename(cluster_dir.rstrip("/"))
    checks = Checks(f"coredns {name}")
    binary = os.environ.get("MESHDNS_BIN")
    if not binary:
        checks.check("a meshdns binary (MESHDNS_BIN) to read meshdns's zones with", False, "none built")
        return 1
    docs = [d for d in yaml.safe_load_all(open(resolver_path)) if d]
    svc = next((d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "meshdns"), None)
    if svc is None:
        checks.check("the resolver renders the Service meshdns", False, resolver_path)
        return 1
    ip = svc["spec"].get("clusterIP")
    notes = svc["metadata"].get("annotations") or {}
    platform = notes.get(PLATFORM_ANNOTATION)
    known = PLATFORMS.get(platform)
    checks.check(f"the Service meshdns names its platform ({PLATFORM_ANNOTATION}: one of {sorted(PLATFORMS)})",
                 known is not None, f"annotations {notes}")
    if known is None:
        return 1
    ranges = known["ranges"] or ([notes[CIDR_ANNOTATION]] if notes.get(CIDR_ANNOTATION) else [])
    try:
        inside = [r for r in ranges if ipaddress.ip_address(ip) in ipaddress.ip_network(r)]
    except ValueError as e:
        inside = []
        ranges.append(f"({e})")
    checks.check(f"the Service IP {ip} lies in {platform}'s service range {' or '.join(ranges) or '(set ' + CIDR_ANNOTATION + ')'}",
                 bool(inside), f"clusterIP {ip!r} outside {ranges}")

    zones, cms = meshdns_zones(docs, binary)
    upstreams = [u.split(":")[0] for u in cms.get("meshdns-local", {}).get("MESHDNS_UPSTREAMS", "").split(",")]
    checks.check("the Service IP is not kube-dns's (MESHDNS_UPSTREAMS)", ip not in upstreams, f"{ip} in {upstreams}")

    if known["style"] == "merge":
        path = os.path.join(cluster_dir, "coredns-forward", "meshdns.server")
        text = open(path).read() if os.path.exists(path) else ""
        checks.check(f"{platform}: the blocks to append to the Corefile are {path}", bool(text), "missing")
    else:
        path = f"{os.path.join(cluster_dir, 'coredns-forward-import')} (rendered)"
        cms_import = [d for d in yaml.safe_load_all(open(import_path or "/dev/null")) if d] if import_path else []
        ok = (len(cms_import) == 1 and cms_import[0]["kind"] == "ConfigMap"
              and cms_import[0]["metadata"]["name"] == "coredns-custom"
              and cms_import[0]["metadata"].get("namespace") == "kube-system"
              and list(cms_import[0].get("data", {})) == ["meshdns.server"])
        checks.check(f"{platform}: one ConfigMap kube-system/coredns-custom with the one key meshdns.server "
                     "(imported by /etc/coredns/custom/*.server; nothing else replaced)", ok,
                     f"{[(d['kind'], d['metadata'].get('namespace'), d['metadata']['name'], list(d.get('data', {}))) for d in cms_import]}")
        text = cms_import[0]["data"]["meshdns.server"] if ok else ""

    sources = re.findall(r"^#   (\S+)$", text, re.M)
    generator = [sys.executable, os.path.join(ROOT, "k8s/coredns-forward/blocks.py"), "--service-ip", str(ip)]
    regen = subprocess.run(generator + sources, cwd=ROOT, capture_output=True, text=True)
    checks.check(f"{path} is blocks.py's output for {', '.join(sources) or '(no sources named)'} and {ip}",
                 bool(sources) and regen.returncode == 0 and regen.stdout == text,
                 f"regenerate it: python3 k8s/coredns-forward/blocks.py --service-ip {ip} {' '.join(sources)}"
                 f"{' --configmap coredns-custom' if known['style'] == 'import' else ''} ({regen.stderr.strip()[:200]})")

    try:
        added = parse(text)
    except ValueError as e:
        checks.check("the blocks are well-formed server blocks", False, str(e))
        return 1
    named = [zone_of(k) for head, _ in added for k in head]
    checks.check(f"the blocks name exactly meshdns's zones {zones} (meshdns --check), one block each",
                 sorted(named) == sorted(zones) and all(len(h) == 1 for h, _ in added), f"blocks name {named}")
    bad = [f"{h[0]}: {[l for l in b if l.startswith('forward')]}" for h, b in added
           if [l for l in b if l.startswith("forward")] != [f"forward . {ip}"]]
    checks.check(f"every block forwards to the Service IP {ip} only", not bad, "; ".join(bad))

    stock = open(stock_path).read()
    merged = stock + "\n" + text if known["style"] == "merge" else stock
    stock_lines = stock.splitlines()
    merged_lines = merged.splitlines()
    if known["style"] == "merge":
        checks.check(f"merged into {os.path.basename(stock_path)}: every stock line survives, in order, unchanged",
                     merged_lines[:len(stock_lines)] == stock_lines, "the stock Corefile was changed")
    try:
        before, after = parse(stock), parse(merged)
        clash = sorted({zone_of(k) for h, _ in parse(stock) for k in h} & set(named))
        ok = after[:len(before)] == before and not clash
        why = f"zones already served by the stock Corefile: {clash}" if clash else "stock blocks changed"
    except ValueError as e:
        ok, why = False, str(e)
    checks.check("the merged Corefile parses; the stock server blocks are unchanged and no added zone is already served",
                 ok, why)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
