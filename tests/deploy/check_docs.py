#!/usr/bin/env python3
"""Checks docs/ (and the comments of k8s/) against the contract.

Usage: check_docs.py REPO_ROOT
- the four documents exist; flow.md holds a mermaid flowchart of the query path;
- the walkthrough carries the seed scenario's commands; troubleshooting the exit codes;
- docs/design.md, the project's design document, has its sections and the module-map placeholder;
- every MESHDNS_* variable named in docs/, k8s/ and the Dockerfile is one of the README's
  configuration table (which a Rust test keeps equal to the variable table the parser and
  --help use), and every meshdns_* metric one of docs/design.md's observability list;
- relative links in docs/ point at files that exist;
- no pre-check feeds meshdns --check through `env $(...)` word splitting;
- every YAML block of docs/databases (the operators' custom resources) parses, and each resource
  has its apiVersion and kind;
- walkthrough step 10's table of platform service ranges is platforms.py's; README's "Run it"
  names the toolchain (Cargo.toml's rust-version, rustup, root).
Prints one PASS/FAIL line per check, exits 1 on any failure.
"""
import pathlib
import re
import sys

import yaml

from checks import Checks
from platforms import PLATFORMS

DESIGN = "docs/design.md"
DESIGN_SECTIONS = ["## Routing", "### Cluster zones", "### Distributed zones", "### Clusterset zone",
                   "### Pass-through", "## Truncation", "## Cache", "## Memory and overload",
                   "## Live configuration", "## DNS over TLS", "## Limits and bad input",
                   "## Observability", "## Deployment", "## Module map"]
MODULE_MAP_PLACEHOLDER = "<!-- module map: filled in by the lead -->"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def readme_variables(text):
    """The variables of the README's configuration table."""
    config = text.split("## Configuration", 1)[1].split("\n## ", 1)[0] if "## Configuration" in text else ""
    variables = set()
    for line in config.splitlines():
        if line.startswith("| `MESHDNS_"):
            variables |= set(re.findall(r"MESHDNS_[A-Z_]+", line.split("|")[1]))
    return variables


def design_metrics(text):
    """The metric families the design's observability section names."""
    obs = text.split("## Observability", 1)[1].split("\n## ", 1)[0] if "## Observability" in text else ""
    metrics = set(re.findall(r"\bmeshdns_[a-z_]+", obs))
    metrics |= {m + s for m in metrics if m.endswith("_seconds") and "duration" in m for s in HISTOGRAM_SUFFIXES}
    return metrics


# The merge of meshdns's blocks into a cluster's Corefile that check_coredns.py reproduces.
MERGE = "meshdns dns-change --platform kubeadm --resolver 10.96.0.53 --current Corefile"
REQUIRED = {
    "docs/walkthrough.md": ["dig mongo-1.mongo.db.cluster.b", "dig SRV _mongodb._tcp.mongo.db.svc.distributed.local",
                            "mongodb+srv://mongo.db.svc.distributed.local", "k8s/coredns/service.yaml",
                            "loadBalancerSourceRanges", "expose-nodeport", "externalTrafficPolicy: Cluster",
                            "coredns-networkpolicy", "One owner per object",
                            "MESHDNS_CLUSTERS", "MESHDNS_LOCAL_CLUSTER", "MESHDNS_UPSTREAMS",
                            "k8s/components/sidecar", "MESHDNS_CONFIG_DIR", "Add a third cluster",
                            "Lock down the exposed DNS", "MESHDNS_DOT_LISTEN",
                            "meshdns_config_reloads_total", "k8s/components/tls-mounts", "tls-mounts",
                            "docs/platforms.md", "Calico", "Cilium", "Cluster Mesh",
                            MERGE, "meshdns/platform", "k8s/components/image"],
    "docs/migration.md": ["rewrite name substring", "gathersrv", "forward", "cache", "MESHDNS_CLUSTERS"],
    "docs/troubleshooting.md": ["meshdns --check", "64", "71", "dig", "meshdns_upstream_healthy",
                                "A reload was rejected", "not valid for name", "CertificateRequired",
                                "UnknownCA", "tls_error", "## The cluster-level resolver", "MESHDNS_ALLOW_FROM",
                                "forwarding loop", "NetworkPolicy", "coredns-custom", "MeshdnsForwardingLoop",
                                "## Alerts", "meshdns_config_last_reload_successful"],
    "docs/flow.md": ["```mermaid"],
    "docs/design.md": ["MESHDNS_CONFIG_DIR", "transport=tls", "stragglers", "outcome"],
}

CHECKS = Checks("docs")


def main():
    root = pathlib.Path(sys.argv[1])
    for rel, needles in REQUIRED.items():
        p = root / rel
        text = p.read_text() if p.exists() else ""
        missing = [n for n in needles if n not in text]
        CHECKS.check(f"{rel} exists and mentions {len(needles)} required items", p.exists() and not missing,
              f"missing {missing}" if p.exists() else "no such file")

    flow = (root / "docs/flow.md").read_text() if (root / "docs/flow.md").exists() else ""
    blocks = re.findall(r"```mermaid\n(.*?)```", flow, re.S)
    body = blocks[0] if blocks else ""
    CHECKS.check("flow.md: one mermaid flowchart", len(blocks) == 1 and re.match(r"\s*(flowchart|graph)\s+(TD|TB|LR)", body),
          f"{len(blocks)} mermaid blocks")
    want = ["kube-dns", "cache", "merge", "fan", "cluster"]
    CHECKS.check("flow.md: diagram shows route, cache, kube-dns, one cluster, fan-out and merge",
          all(w in body.lower() for w in want), f"missing {[w for w in want if w not in body.lower()]}")
    ids = re.findall(r"^\s*([A-Za-z][\w]*)\s*[\[\(\{]", body, re.M)
    arrows = re.findall(r"(-->|-\.->|==>)", body)
    CHECKS.check("flow.md: diagram has nodes and edges", len(ids) >= 5 and len(arrows) >= 6, f"{len(ids)} nodes, {len(arrows)} edges")

    design = (root / DESIGN).read_text() if (root / DESIGN).exists() else ""
    missing = [h for h in DESIGN_SECTIONS if not re.search(rf"^{re.escape(h)}\b", design, re.M)]
    CHECKS.check(f"{DESIGN} has its sections", design and not missing, f"missing {missing}")
    CHECKS.check(f"{DESIGN} keeps the module-map placeholder (or the map)",
          MODULE_MAP_PLACEHOLDER in design or "src/" in design.split("## Module map", 1)[-1], "neither")
    readme = (root / "README.md").read_text() if (root / "README.md").exists() else ""
    VARIABLES, METRICS = readme_variables(readme), design_metrics(design)
    CHECKS.check(f"README.md lists the variables and {DESIGN} the metric families",
          len(VARIABLES) >= 20 and len(METRICS) >= 14, f"{len(VARIABLES)} variables, {len(METRICS)} metrics")

    texts = {p: p.read_text() for p in list((root / "docs").glob("**/*.md")) + list((root / "k8s").rglob("*"))
             if p.is_file() and p.suffix in (".md", ".yaml", ".env", ".json")}
    texts[root / "Dockerfile"] = (root / "Dockerfile").read_text()
    texts.pop(root / DESIGN, None)
    bad_vars, bad_metrics = set(), set()
    for p, t in texts.items():
        bad_vars |= {f"{p.relative_to(root)}: {v}" for v in re.findall(r"\bMESHDNS_[A-Z_]+", t) if v not in VARIABLES}
        bad_metrics |= {f"{p.relative_to(root)}: {m}" for m in re.findall(r"\bmeshdns_[a-z_]+", t)
                        if m not in METRICS}
    CHECKS.check(f"every MESHDNS_* variable named is one of {DESIGN}'s", not bad_vars, f"{sorted(bad_vars)}")
    CHECKS.check(f"every meshdns_* metric named is one of {DESIGN}'s", not bad_metrics, f"{sorted(bad_metrics)}")

    # A pre-check fed by word splitting (`env $(grep … | tr '\n' ' ') meshdns --check`) cuts
    # MESHDNS_CLUSTERS at its first space and passes what it never saw; --env-file reads it whole.
    split = [f"{p.relative_to(root)}" for p in list((root / "docs").glob("**/*.md")) + [root / "README.md"]
             if re.search(r"^\s*env \$\(", p.read_text(), re.M)]
    CHECKS.check("no pre-check builds the environment by word splitting (env $(...)); use --env-file", not split,
          f"{split}")

    # The platform table of walkthrough step 10 is the deploy checks' (platforms.py).
    walk = (root / "docs/walkthrough.md").read_text()
    wrong = []
    for name, spec in PLATFORMS.items():
        row = re.search(rf"^\s*\| {name} \| ([^|]*)\|", walk, re.M)
        cidrs = sorted(re.findall(r"\d+\.\d+\.\d+\.\d+/\d+", row.group(1))) if row else None
        if row is None or cidrs != sorted(spec["ranges"]) or (not spec["ranges"] and "per cluster" not in row.group(1)):
            wrong.append(f"{name}: {row.group(1).strip() if row else 'no row'} (checks: {spec['ranges'] or 'per cluster'})")
    CHECKS.check("walkthrough step 10's table of service ranges is the deploy checks' (platforms.py)", not wrong,
                 "; ".join(wrong))
    # The README states the toolchain: the Rust version Cargo.toml requires, rustup, root.
    cargo = (root / "Cargo.toml").read_text()
    rust = re.search(r'^rust-version = "([\d.]+)"', cargo, re.M)
    run_it = readme.split("## Run it", 1)[-1].split("\n## ", 1)[0]
    CHECKS.check("README's \"Run it\" states the toolchain: Rust >= Cargo.toml's rust-version via rustup, root for .ci/run",
                 bool(rust) and f"**{rust.group(1)} or" in run_it and "rustup" in run_it and "root" in run_it
                 and "fresh Debian" in run_it, f"rust-version {rust.group(1) if rust else None}")

    bad_yaml, resources = [], 0
    for p in sorted((root / "docs/databases").glob("*.md")):
        for block in re.findall(r"^```yaml\n(.*?)^```", p.read_text(), re.S | re.M):
            try:
                docs = [d for d in yaml.safe_load_all(block) if isinstance(d, dict) and "apiVersion" in d]
            except yaml.YAMLError as err:
                bad_yaml.append(f"{p.relative_to(root)}: {err}")
                continue
            resources += len(docs)
            bad_yaml += [f"{p.relative_to(root)}: {d['apiVersion']} without kind" for d in docs if "kind" not in d]
    CHECKS.check(f"docs/databases: every YAML block parses ({resources} resources, each with its kind)",
                 not bad_yaml and resources >= 10, f"{bad_yaml}")

    broken = []
    for p in (root / "docs").glob("**/*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (p.parent / target).exists():
                broken.append(f"{p.relative_to(root)} -> {target}")
    CHECKS.check("relative links in docs/ resolve", not broken, f"{broken}")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
