#!/usr/bin/env python3
"""Every `kubectl apply -k` path the README, docs/ and the kustomizations' comments name, rendered
as an operator would apply it, against the blast radius rule and one owner per object.

    check_apply_paths.py REPO_ROOT OPT_IN_POLICY_RENDER   (kubectl on PATH)

- every named path that exists renders (`kubectl kustomize`); paths with a placeholder
  (`<name>`) or of a cluster the examples do not have (`k8s/clusters/c`) are listed as skipped;
- no path selects the CoreDNS pods (`k8s-app: kube-dns`, kube-system) with a NetworkPolicy
  (a policy that selects them drops everything it does not list: host-network pods, kubelet
  probes, NodeLocal DNSCache, scrapers) -- a Kubernetes NetworkPolicy whose podSelector matches
  those labels (an empty selector matches every pod), or another engine's policy (Cilium,
  Calico) whose selector names kube-dns;
- no two paths create the same object: (cluster, kind, namespace, name), the cluster being the
  path's `--context` (or the <name> of k8s/clusters/<name>, k8s/resolver/<name>): deleting one
  path would delete what the other still needs;
- the detectors can fail: OPT_IN_POLICY_RENDER (k8s/clusters/a/coredns with the opt-in
  component coredns-networkpolicy) is reported as selecting CoreDNS, and k8s/clusters/a next to
  k8s/resolver/a/placement (which renders the ConfigMaps that k8s/resolver/a removes) as two
  owners.
Prints PASS/FAIL lines.
"""
import pathlib
import re
import subprocess
import sys

from checks import Checks

import yaml

APPLY = re.compile(r"(?:kubectl\s+(?:--context[= ](\S+)\s+)?)?apply\s+`?-k\s+`?([\w./<>-]+)")
COREDNS_LABELS = {"k8s-app": "kube-dns"}
CHECKS = Checks("apply paths")


def named_paths(root):
    """{path: context or None} of every `apply -k` in README.md, docs/**/*.md and k8s/**/kustomization.yaml."""
    files = [root / "README.md"] + sorted((root / "docs").rglob("*.md")) + sorted((root / "k8s").rglob("kustomization.yaml"))
    found = {}
    for f in files:
        for context, path in APPLY.findall(f.read_text()):
            path = path.rstrip(".,;:)`").rstrip("/")
            if path.startswith("k8s/"):
                found.setdefault(path, context or None)
    return found


def cluster_of(path, context):
    if context:
        return context
    m = re.match(r"k8s/(?:clusters|resolver)/([\w-]+)", path)
    return m.group(1) if m else "default"


def render(root, path):
    run = subprocess.run(["kubectl", "kustomize", str(root / path)], capture_output=True, text=True)
    if run.returncode != 0:
        return None, run.stderr.strip()
    return [d for d in yaml.safe_load_all(run.stdout) if d], ""


def selector_matches(selector, labels):
    """Whether a Kubernetes label selector (matchLabels, matchExpressions) matches `labels`."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selects_coredns(doc):
    """Whether `doc` is a network policy that selects the CoreDNS pods."""
    kind, ns = doc.get("kind", ""), (doc.get("metadata") or {}).get("namespace")
    if not kind.endswith("NetworkPolicy"):
        return False
    spec = doc.get("spec") or {}
    if kind == "NetworkPolicy" and doc.get("apiVersion") == "networking.k8s.io/v1":
        return ns in (None, "kube-system") and selector_matches(spec.get("podSelector", {}), COREDNS_LABELS)
    # Cilium (endpointSelector), Calico (selector as text), cluster-wide kinds: any mention.
    return "kube-dns" in yaml.safe_dump({k: v for k, v in spec.items() if "elector" in k})


def coredns_policies(docs):
    return [f"{d['kind']} {(d['metadata'] or {}).get('namespace')}/{d['metadata']['name']}" for d in docs if selects_coredns(d)]


def owners(rendered):
    """{(cluster, kind, namespace, name): [paths]} of every object rendered."""
    by = {}
    for (path, cluster), docs in rendered.items():
        for d in docs:
            meta = d.get("metadata") or {}
            by.setdefault((cluster, d["kind"], meta.get("namespace"), meta.get("name")), []).append(path)
    return by


def main():
    root = pathlib.Path(sys.argv[1])
    opt_in = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d] if len(sys.argv) > 2 else []
    paths = named_paths(root)
    rendered, skipped, broken = {}, [], []
    for path, context in sorted(paths.items()):
        if "<" in path or not (root / path / "kustomization.yaml").exists():
            skipped.append(path)
            continue
        docs, err = render(root, path)
        if docs is None:
            broken.append(f"{path}: {err}")
            continue
        rendered[(path, cluster_of(path, context))] = docs
    print(f"    rendered {len(rendered)} paths: {', '.join(p for p, _ in sorted(rendered))}")
    if skipped:
        print(f"    skipped (placeholder, or a cluster the examples do not have): {', '.join(skipped)}")
    CHECKS.check(f"every `apply -k` path the README and docs name renders ({len(rendered)})",
                 len(rendered) >= 6 and not broken, "; ".join(broken) or f"only {len(rendered)}")
    selecting = [f"{p}: {', '.join(coredns_policies(docs))}" for (p, _), docs in sorted(rendered.items())
                 if coredns_policies(docs)]
    CHECKS.check("no `apply -k` path selects the CoreDNS pods (k8s-app: kube-dns) with a NetworkPolicy",
                 not selecting, "; ".join(selecting))
    twice = {k: v for k, v in owners(rendered).items() if len(v) > 1}
    CHECKS.check("no two `apply -k` paths create the same object (cluster, kind, namespace, name)", not twice,
                 "; ".join(f"{k}: {v}" for k, v in sorted(twice.items(), key=str)))

    CHECKS.check("the policy detector sees the opt-in coredns-networkpolicy component select CoreDNS",
                 bool(coredns_policies(opt_in)), "the opt-in render has no policy selecting CoreDNS")
    placement, err = render(root, "k8s/resolver/a/placement")
    example, err2 = render(root, "k8s/clusters/a")
    clash = owners({("k8s/clusters/a", "a"): example or [], ("k8s/resolver/a/placement", "a"): placement or []})
    CHECKS.check("the owner detector sees two owners when a resolver renders the sidecars' ConfigMaps",
                 any(k[1] == "ConfigMap" and k[3] == "meshdns-clusters" and len(v) == 2 for k, v in clash.items()),
                 err or err2 or "no ConfigMap meshdns-clusters rendered twice")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
