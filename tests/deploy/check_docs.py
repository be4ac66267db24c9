#!/usr/bin/env python3
"""Checks docs/ (and the comments of k8s/) against the contract.

Usage: check_docs.py REPO_ROOT
- the four documents exist; flow.md holds a mermaid flowchart of the query path;
- the walkthrough carries the seed scenario's commands; troubleshooting the exit codes;
- every MESHDNS_* variable and meshdns_* metric named in docs/ and k8s/ is one of DESIGN.md's;
- relative links in docs/ point at files that exist.
Prints one PASS/FAIL line per check, exits 1 on any failure.
"""
import pathlib
import re
import sys

VARIABLES = {
    "MESHDNS_LISTEN", "MESHDNS_ALLOW_FROM", "MESHDNS_UPSTREAMS", "MESHDNS_RESOLV_CONF",
    "MESHDNS_CLUSTER_DOMAIN", "MESHDNS_LOCAL_CLUSTER", "MESHDNS_CLUSTERS", "MESHDNS_CLUSTER_ZONE",
    "MESHDNS_DISTRIBUTED_ZONES", "MESHDNS_CLUSTERSET_ZONE", "MESHDNS_TIMEOUT",
    "MESHDNS_ATTEMPT_TIMEOUT", "MESHDNS_CACHE_SIZE", "MESHDNS_CACHE_MAX_TTL",
    "MESHDNS_CACHE_NEGATIVE_TTL", "MESHDNS_SERVE_STALE", "MESHDNS_ADMIN_LISTEN", "MESHDNS_LOG",
    "MESHDNS_LOG_FORMAT",
}
METRICS = {
    "meshdns_requests_total", "meshdns_request_duration_seconds", "meshdns_cache_hits_total",
    "meshdns_cache_misses_total", "meshdns_cache_stale_served_total", "meshdns_cache_entries",
    "meshdns_cache_evictions_total", "meshdns_upstream_requests_total",
    "meshdns_upstream_duration_seconds", "meshdns_upstream_healthy", "meshdns_gather_partial_total",
    "meshdns_inflight", "meshdns_dropped_total", "meshdns_build_info",
}
METRICS |= {m + s for m in ("meshdns_request_duration_seconds", "meshdns_upstream_duration_seconds")
            for s in ("_bucket",)}

REQUIRED = {
    "docs/walkthrough.md": ["dig mongo-1.mongo.db.cluster.b", "dig SRV _mongodb._tcp.mongo.db.svc.distributed.local",
                            "mongodb+srv://mongo.db.svc.distributed.local", "coredns-nodeport.yaml",
                            "MESHDNS_CLUSTERS", "MESHDNS_LOCAL_CLUSTER", "MESHDNS_UPSTREAMS"],
    "docs/migration.md": ["rewrite name substring", "gathersrv", "forward", "cache", "MESHDNS_CLUSTERS"],
    "docs/troubleshooting.md": ["meshdns --check", "64", "71", "dig", "meshdns_upstream_healthy"],
    "docs/flow.md": ["```mermaid"],
}

failures = 0


def check(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS docs: {name}")
    else:
        failures += 1
        print(f"FAIL docs: {name} -- {why}")


def main():
    root = pathlib.Path(sys.argv[1])
    for rel, needles in REQUIRED.items():
        p = root / rel
        text = p.read_text() if p.exists() else ""
        missing = [n for n in needles if n not in text]
        check(f"{rel} exists and mentions {len(needles)} required items", p.exists() and not missing,
              f"missing {missing}" if p.exists() else "no such file")

    flow = (root / "docs/flow.md").read_text() if (root / "docs/flow.md").exists() else ""
    blocks = re.findall(r"```mermaid\n(.*?)```", flow, re.S)
    body = blocks[0] if blocks else ""
    check("flow.md: one mermaid flowchart", len(blocks) == 1 and re.match(r"\s*(flowchart|graph)\s+(TD|TB|LR)", body),
          f"{len(blocks)} mermaid blocks")
    want = ["kube-dns", "cache", "merge", "fan", "cluster"]
    check("flow.md: diagram shows route, cache, kube-dns, one cluster, fan-out and merge",
          all(w in body.lower() for w in want), f"missing {[w for w in want if w not in body.lower()]}")
    ids = re.findall(r"^\s*([A-Za-z][\w]*)\s*[\[\(\{]", body, re.M)
    arrows = re.findall(r"(-->|-\.->|==>)", body)
    check("flow.md: diagram has nodes and edges", len(ids) >= 5 and len(arrows) >= 6, f"{len(ids)} nodes, {len(arrows)} edges")

    texts = {p: p.read_text() for p in list((root / "docs").glob("**/*.md")) + list((root / "k8s").rglob("*"))
             if p.is_file() and p.suffix in (".md", ".yaml", ".env", ".json")}
    texts[root / "Dockerfile"] = (root / "Dockerfile").read_text()
    bad_vars, bad_metrics = set(), set()
    for p, t in texts.items():
        bad_vars |= {f"{p.relative_to(root)}: {v}" for v in re.findall(r"\bMESHDNS_[A-Z_]+", t) if v not in VARIABLES}
        bad_metrics |= {f"{p.relative_to(root)}: {m}" for m in re.findall(r"\bmeshdns_[a-z_]+", t)
                        if m not in METRICS}
    check("every MESHDNS_* variable named is one of DESIGN.md's", not bad_vars, f"{sorted(bad_vars)}")
    check("every meshdns_* metric named is one of DESIGN.md's", not bad_metrics, f"{sorted(bad_metrics)}")

    broken = []
    for p in (root / "docs").glob("**/*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (p.parent / target).exists():
                broken.append(f"{p.relative_to(root)} -> {target}")
    check("relative links in docs/ resolve", not broken, f"{broken}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
