#!/usr/bin/env python3
"""The CoreDNS change of the cluster-level mode, for one cluster: additive, exactly meshdns's zones,
to the one Service IP, inside the platform's service range.

    check_coredns.py CLUSTER_DIR RENDERED_RESOLVER [RENDERED_IMPORT]
    (MESHDNS_BIN: a built meshdns binary)

CLUSTER_DIR is k8s/clusters/<name>: its CoreDNS change is either coredns-forward/Corefile (the
platform's stock Corefile with meshdns's blocks merged in: kubeadm) or coredns-forward-import (the
ConfigMap coredns-custom, RENDERED_IMPORT: AKS, k3s), as the platform of the resolver's Service
says (platforms.py). The platform's stock Corefile is tests/platforms/<platform>/Corefile. Checks:
- the Service IP: the clusterIP of the Service `meshdns` lies in the named platform's service
  range and is not the kube-dns address (MESHDNS_UPSTREAMS);
- the committed change is what `meshdns dns-change` writes for that platform from the env files
  the resolver's ConfigMaps are generated from, the stock Corefile and that Service IP (so it
  cannot drift from the configuration);
- the blocks name exactly the zones `meshdns --check` routes (cluster, distributed and
  clusterset rows) for the resolver's own configuration (its ConfigMaps and environment), each
  in a block of its own that forwards to the Service IP and nowhere else;
- additive: every line of the stock Corefile survives in order and its server blocks are
  unchanged; the import variant is a `*.server` key of coredns-custom in kube-system and replaces
  nothing. (tests/platforms/check.py runs every platform's change through the real CoreDNS.)
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
    """[(zones, [directive lines])] of the server blocks (top-level imports skipped); nested blocks kept
    as lines. Raises ValueError."""
    blocks, depth, head, body = [], 0, None, []
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if depth == 0 and line.startswith("import "):
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
    cluster_dir, resolver_path = sys.argv[1:3]
    import_path = sys.argv[3] if len(sys.argv) > 3 else None
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

    # What `meshdns dns-change` writes for this platform from the resolver's configuration files
    # (the env files its ConfigMaps are generated from) and the Service IP.
    if known["style"] not in ("merge", "import"):
        checks.check(f"{platform}: an example cluster on a platform with a Corefile (tests/platforms checks {platform})",
                     False, known["style"])
        return checks.exit_code()
    stock_path = os.path.join("tests", "platforms", platform, "Corefile")
    stock = open(os.path.join(ROOT, stock_path)).read()
    cluster_dir = os.path.relpath(os.path.abspath(cluster_dir), ROOT)
    binary = os.path.abspath(binary)
    sources = [os.path.join("k8s", "base", "clusters.env"), os.path.join(cluster_dir, "local.env"),
               os.path.join("k8s", "resolver", name, "resolver.env")]
    generator = [binary, "dns-change", "--platform", platform, "--resolver", str(ip), "--current", stock_path]
    for source in sources:
        generator += ["--env-file", source]
    regen = subprocess.run(generator, cwd=ROOT, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    if known["style"] == "merge":
        path = os.path.join(cluster_dir, "coredns-forward", "Corefile")
        text = open(os.path.join(ROOT, path)).read() if os.path.exists(os.path.join(ROOT, path)) else ""
        checks.check(f"{platform}: the merged Corefile is {path}", bool(text), "missing")
        committed = text
    else:
        path = os.path.join(cluster_dir, "coredns-forward-import", "coredns-custom.yaml")
        committed = open(os.path.join(ROOT, path)).read() if os.path.exists(os.path.join(ROOT, path)) else ""
        cms_import = [d for d in yaml.safe_load_all(open(import_path or "/dev/null")) if d] if import_path else []
        ok = (len(cms_import) == 1 and cms_import[0]["kind"] == "ConfigMap"
              and cms_import[0]["metadata"]["name"] == "coredns-custom"
              and cms_import[0]["metadata"].get("namespace") == "kube-system"
              and list(cms_import[0].get("data", {})) == ["meshdns.server"])
        checks.check(f"{platform}: one ConfigMap kube-system/coredns-custom with the one key meshdns.server "
                     "(imported by /etc/coredns/custom/*.server; nothing else replaced)", ok,
                     f"{[(d['kind'], d['metadata'].get('namespace'), d['metadata']['name'], list(d.get('data', {}))) for d in cms_import]}")
        text = cms_import[0]["data"]["meshdns.server"] if ok else ""
    shown = " ".join(generator[1:])
    checks.check(f"{path} is what `meshdns {shown}` writes",
                 regen.returncode == 0 and regen.stdout == committed,
                 f"regenerate it: meshdns {shown} > {path} ({regen.stderr.strip()[:300]})")

    try:
        added = parse(text)
    except ValueError as e:
        checks.check("the blocks are well-formed server blocks", False, str(e))
        return 1
    if known["style"] == "merge":
        added = added[len(parse(stock)):]
    named = [zone_of(k) for head, _ in added for k in head]
    checks.check(f"the blocks name exactly meshdns's zones {zones} (meshdns --check), one block each",
                 sorted(named) == sorted(zones) and all(len(h) == 1 for h, _ in added), f"blocks name {named}")
    bad = [f"{h[0]}: {[l for l in b if l.startswith('forward')]}" for h, b in added
           if [l for l in b if l.startswith("forward")] != [f"forward . {ip}"]]
    checks.check(f"every block forwards to the Service IP {ip} only", not bad, "; ".join(bad))

    merged = text if known["style"] == "merge" else stock
    if known["style"] == "merge":
        checks.check(f"merged into {os.path.basename(stock_path)}: every stock line survives, in order, unchanged",
                     merged.startswith(stock), "the stock Corefile was changed")
    try:
        before, after = parse(stock), parse(merged)
        clash = sorted({zone_of(k) for h, _ in before for k in h} & set(named))
        ok = after[:len(before)] == before and not clash
        why = f"zones already served by the stock Corefile: {clash}" if clash else "stock blocks changed"
    except ValueError as e:
        ok, why = False, str(e)
    checks.check("the merged Corefile parses; the stock server blocks are unchanged and no added zone is already served",
                 ok, why)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
