"""The CoreDNS forwarding blocks of the cluster-level mode against meshdns's configuration.

    check_coredns.py CLUSTERS_ENV CLUSTER RENDERED_RESOLVER RENDERED_COREFILE...

Each RENDERED_COREFILE is a rendered kustomization holding the `coredns` or `coredns-custom`
ConfigMap. Checks: every server block is well-formed (braces balanced, one zone per block,
only known plugins), the meshdns blocks name exactly meshdns's zones (each cluster's zone
from MESHDNS_CLUSTERS, the distributed zone; the default template and zones), and they
forward to the clusterIP of the Service `meshdns` rendered for the same cluster.
Prints PASS/FAIL lines.
"""
import re
import sys

import yaml

KNOWN = {"errors", "health", "ready", "kubernetes", "prometheus", "forward", "cache", "loop",
         "reload", "loadbalance", "log", "import", "hosts", "rewrite", "template"}


def blocks(corefile):
    """(zone, [plugin names]) per server block; raises ValueError when not well-formed."""
    out, depth, zone, plugins = [], 0, None, []
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        opens, closes = line.count("{"), line.count("}")
        if depth == 0:
            head = line.rstrip("{").split()
            if closes or opens != 1 or len(head) != 1:
                raise ValueError(f"not one zone opening a block: {raw!r}")
            zone, plugins = head[0], []
        elif depth == 1 and line != "}":
            plugins.append(line.split()[0])
        depth += opens - closes
        if depth < 0:
            raise ValueError(f"unbalanced braces at {raw!r}")
        if depth == 0 and closes:
            out.append((zone, plugins))
    if depth:
        raise ValueError("unbalanced braces at the end")
    return out


def meshdns_zones(env_path):
    clusters = ""
    for line in open(env_path):
        if line.startswith("MESHDNS_CLUSTERS="):
            clusters = line.split("=", 1)[1]
    names = [e.split("=", 1)[0].strip() for e in clusters.split(";") if e.strip()]
    return {f"cluster.{n}" for n in names} | {"distributed.local"}


def main():
    env, cluster, resolver, corefiles = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    ok = True
    service_ip = None
    for doc in yaml.safe_load_all(open(resolver)):
        if doc and doc.get("kind") == "Service" and doc["metadata"]["name"] == "meshdns":
            service_ip = doc["spec"].get("clusterIP")
    want = meshdns_zones(env)
    for path in corefiles:
        for doc in yaml.safe_load_all(open(path)):
            if not doc or doc.get("kind") != "ConfigMap":
                continue
            for key, text in doc.get("data", {}).items():
                name = f"{cluster} {doc['metadata']['name']}/{key}"
                try:
                    found = blocks(text)
                except ValueError as error:
                    print(f"FAIL {name}: {error}")
                    ok = False
                    continue
                unknown = sorted({p for _, ps in found for p in ps} - KNOWN)
                forwarded = {}
                for zone, _ in found:
                    block = re.search(re.escape(zone) + r"\s*\{(.*?)\n\s*\}", text, re.S)
                    target = re.search(r"forward \. (\S+)", block.group(1)) if block else None
                    if target and target.group(1) == service_ip:
                        forwarded[zone.removesuffix(":53").rstrip(".")] = target.group(1)
                problems = []
                if unknown:
                    problems.append(f"unknown plugins {unknown}")
                if set(forwarded) != want:
                    problems.append(f"zones forwarded to meshdns ({service_ip}) {sorted(forwarded)} != meshdns's {sorted(want)}")
                if problems:
                    print(f"FAIL {name}: " + "; ".join(problems))
                    ok = False
                else:
                    print(f"PASS {name}: {len(found)} well-formed blocks; {sorted(want)} forwarded to the Service meshdns ({service_ip})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
