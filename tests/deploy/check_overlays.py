#!/usr/bin/env python3
"""The overlays of k8s/ as an operator uses them: one namespace line, comments whose paths render,
the resolver overlay deploying only the resolver, an autoscaler that owns the replica count.

    check_overlays.py REPO_ROOT RENDERED_RESOLVER RENDERED_RESOLVER_HPA RENDERED_RESOLVER_OTHER_NS NS

- every cluster's namespace is set in one line: of the kustomizations of k8s/clusters/<name> and
  k8s/resolver/<name>, only k8s/clusters/<name> says `namespace:`, and a copy with that line
  changed to NS renders every object of k8s/resolver/<name> in NS (RENDERED_RESOLVER_OTHER_NS);
- every component path a comment of a kustomization under k8s/ tells the reader to list
  (`- ../../components/X`, `components: [../../components/X]`) names an existing component,
  from the directory it is meant for (a component's comments: a cluster or resolver overlay,
  two levels under k8s/, or for `../../../components/X` a cluster's coredns directory; an
  overlay's: its own directory);
- k8s/resolver/<name> deploys the resolver and its configuration, no other workload (not the
  example StatefulSet of k8s/clusters/<name>);
- with k8s/components/resolver-hpa, the Deployment its HorizontalPodAutoscaler scales sets no
  `replicas` (an apply would reset the autoscaler's count), and minReplicas keeps two;
- the comment above a `dnsPolicy: Default` says what Default does (the node's resolv.conf), not
  that it keeps the node's resolver out.
Prints PASS/FAIL lines.
"""
import pathlib
import re
import sys

from checks import Checks

import yaml

COMPONENT_REF = re.compile(r"(?:^#\s*-\s*|\[\s*)((?:\.\./)+components/[\w-]+)")


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def main():
    root = pathlib.Path(sys.argv[1])
    resolver, hpa, other, ns = load(sys.argv[2]), load(sys.argv[3]), load(sys.argv[4]), sys.argv[5]
    checks = Checks("overlays")
    k8s = root / "k8s"

    lines = {}
    for kind in ("clusters", "resolver"):
        for d in sorted((k8s / kind).iterdir()):
            k = d / "kustomization.yaml"
            if k.exists():
                lines[f"k8s/{kind}/{d.name}"] = [l for l in k.read_text().splitlines() if l.startswith("namespace:")]
    extra = {p: l for p, l in lines.items() if l and not p.startswith("k8s/clusters/")}
    missing = [p for p, l in lines.items() if p.startswith("k8s/clusters/") and len(l) != 1]
    checks.check("each cluster's namespace is one line, in k8s/clusters/<name> only", not extra and not missing,
                 f"also set in {extra}; not set once in {missing}")
    stray = [f"{d['kind']}/{d['metadata']['name']}: {d['metadata'].get('namespace')}" for d in other
             if d["metadata"].get("namespace") != ns]
    checks.check(f"that line moves every object of k8s/resolver/<name> (changed to {ns})", not stray and bool(other),
                 f"{stray}")

    broken = []
    for k in sorted(k8s.rglob("kustomization.yaml")):
        comments = "\n".join(l.strip() for l in k.read_text().splitlines() if l.strip().startswith("#"))
        refs = COMPONENT_REF.findall(comments)
        for ref in refs:
            if k.parent.parent.name != "components":
                base = k.parent
            elif ref.startswith("../../../"):
                base = k8s / "clusters" / "a" / "coredns"  # the exposure components: kube-system
            else:
                base = k8s / "clusters" / "a"
            if not (base / ref / "kustomization.yaml").resolve().exists():
                broken.append(f"{k.relative_to(root)}: {ref} (from {base.relative_to(root)})")
    checks.check("every component path a kustomization's comments tell you to list exists", not broken, "; ".join(broken))

    workloads = [f"{d['kind']}/{d['metadata']['name']}" for d in resolver
                 if d["kind"] in ("StatefulSet", "Deployment", "DaemonSet", "Job", "CronJob")]
    checks.check("k8s/resolver/<name> deploys the resolver Deployment and no other workload",
                 workloads == ["Deployment/meshdns"], f"{workloads}")

    hpas = [d for d in hpa if d["kind"] == "HorizontalPodAutoscaler"]
    targets = {(h["spec"]["scaleTargetRef"]["kind"], h["spec"]["scaleTargetRef"]["name"]) for h in hpas}
    fighting = [f"{d['kind']}/{d['metadata']['name']} replicas={d['spec']['replicas']}" for d in hpa
                if (d["kind"], d["metadata"]["name"]) in targets and "replicas" in d["spec"]]
    checks.check("with resolver-hpa the scaled Deployment sets no replicas (the autoscaler owns the count)",
                 hpas and not fighting, f"{fighting}" if hpas else "no HorizontalPodAutoscaler rendered")
    checks.check("the autoscaler keeps at least two replicas", hpas and all(h["spec"].get("minReplicas", 1) >= 2 for h in hpas),
                 f"{[h['spec'].get('minReplicas') for h in hpas]}")

    wrong = []
    for y in sorted(k8s.rglob("*.yaml")):
        text = y.read_text().splitlines()
        for i, line in enumerate(text):
            if line.strip() == "dnsPolicy: Default":
                above = " ".join(l.strip() for l in text[max(0, i - 4):i] if l.strip().startswith("#"))
                if "resolver out" in above or "node's resolv.conf" not in above.replace("\n", " ").replace("#", ""):
                    wrong.append(f"{y.relative_to(root)}:{i + 1}")
    checks.check("a comment above `dnsPolicy: Default` says it gives the pod the node's resolv.conf", not wrong, f"{wrong}")
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
