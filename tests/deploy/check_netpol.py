#!/usr/bin/env python3
"""The NetworkPolicy of the cluster-level resolver, as rendered: what it admits, by selectors.

    check_netpol.py RENDERED_RESOLVER LABEL

Every NetworkPolicy selecting the resolver's pods is read as the API server would apply it
(peers within one `from`/`to` entry are ANDed, entries ORed), and must admit exactly:
- in, DNS (UDP and TCP 53): the CoreDNS pods -- namespaceSelector kubernetes.io/metadata.name=
  kube-system AND podSelector k8s-app=kube-dns in ONE entry -- and nothing else; never an
  ipBlock (Cilium and other engines do not match pod addresses with ipBlock: CoreDNS would be
  cut off);
- in, metrics (TCP 9153): the monitoring namespace only;
- out: DNS to the kube-dns pods (by the same selectors), and the peers' exposed DNS: every
  endpoint of MESHDNS_CLUSTERS other than the local cluster's, by an ipBlock holding its address
  with its port (UDP and TCP; TCP alone for transport=tls), and no ipBlock that holds none.
Prints what is admitted, then PASS/FAIL lines.
"""
import ipaddress
import sys

from checks import Checks

import yaml

COREDNS = ({"kubernetes.io/metadata.name": "kube-system"}, {"k8s-app": "kube-dns"})
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def peer(entry):
    """A printable, comparable form of one from/to entry."""
    if "ipBlock" in entry:
        return ("ipBlock", entry["ipBlock"]["cidr"], tuple(entry["ipBlock"].get("except", [])))
    ns = entry.get("namespaceSelector")
    pod = entry.get("podSelector")
    return ("selector", None if ns is None else ns.get("matchLabels", {}) or "all namespaces",
            None if pod is None else pod.get("matchLabels", {}) or "all pods",
            bool((ns or {}).get("matchExpressions") or (pod or {}).get("matchExpressions")))


def ports(rule):
    got = set()
    for p in rule.get("ports") or [{"port": "any", "protocol": "any"}]:
        got.add((p.get("protocol", "TCP"), p.get("port", "any")))
    return got


def endpoints(clusters, local):
    """(cluster, ip, port, protocols) of every peer endpoint given by address."""
    out = []
    for entry in clusters.split(";"):
        name, _, rest = entry.strip().partition("=")
        fields = rest.split()
        if not name or name.strip() == local or not fields or "=" in fields[0]:
            continue
        options = dict(o.partition("=")[::2] for o in fields[1:])
        tls = options.get("transport") == "tls"
        for ep in fields[0].split(","):
            host, _, port = ep.rpartition(":") if ep.count(":") == 1 else (ep, "", "")
            try:
                ip = ipaddress.ip_address(host.strip("[]"))
            except ValueError:
                continue    # a host name: no ipBlock can name it
            port = int(port or (853 if tls else 53))
            out.append((name.strip(), ip, port, {"TCP"} if tls else {"UDP", "TCP"}))
    return out


def main():
    path, label = sys.argv[1], sys.argv[2]
    checks = Checks(f"netpol {label}")
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    dep = next((d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "meshdns"), None)
    if dep is None:
        checks.check("the render has the resolver Deployment meshdns", False, path)
        return 1
    labels = dep["spec"]["template"]["metadata"]["labels"]
    cms = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    pols = [d for d in docs if d["kind"] == "NetworkPolicy"
            and d["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()]
    checks.check("a NetworkPolicy selects the resolver pods, for ingress and egress",
                 pols and all({"Ingress", "Egress"} <= set(p["spec"].get("policyTypes", [])) for p in pols),
                 f"{[(p['metadata']['name'], p['spec'].get('policyTypes')) for p in pols]}")
    ingress = [r for p in pols for r in p["spec"].get("ingress", [])]
    egress = [r for p in pols for r in p["spec"].get("egress", [])]
    dns = {("UDP", 53), ("TCP", 53)}
    coredns = ("selector", COREDNS[0], COREDNS[1], False)
    admitted = []
    for r in ingress:
        for e in r.get("from") or [{}]:
            admitted.append(("in", peer(e) if e else ("anyone",), sorted(ports(r), key=str)))
    for r in egress:
        for e in r.get("to") or [{}]:
            admitted.append(("out", peer(e) if e else ("anywhere",), sorted(ports(r), key=str)))
    for way, who, what in admitted:
        print(f"    {way}: {who} on {what}")

    ip_in = [a for a in admitted if a[0] == "in" and a[1][0] == "ipBlock"]
    checks.check("no ipBlock admits clients (pod addresses: not matched by Cilium and other engines)", not ip_in,
                 f"{ip_in}")
    dns_in = [a[1] for a in admitted if a[0] == "in" and ports_cover(a[2], dns)]
    checks.check("DNS in from the CoreDNS pods only (kube-system AND k8s-app=kube-dns, one entry)",
                 dns_in == [coredns], f"DNS admitted from {dns_in}")
    metrics_in = [a[1] for a in admitted if a[0] == "in" and ("TCP", 9153) in a[2]]
    checks.check("metrics (9153) in from the monitoring namespace only",
                 metrics_in == [("selector", MONITORING, None, False)], f"9153 admitted from {metrics_in}")
    others_in = [a for a in admitted if a[0] == "in" and not ports_cover(a[2], dns) and ("TCP", 9153) not in a[2]]
    checks.check("nothing else in", not others_in, f"{others_in}")

    out_sel = [a for a in admitted if a[0] == "out" and a[1][0] != "ipBlock"]
    checks.check("DNS out to the kube-dns pods by selectors, no other selector",
                 [a[1] for a in out_sel] == [coredns] and ports_cover(out_sel[0][2], dns), f"{out_sel}")
    clusters = cms.get("meshdns-clusters", {}).get("MESHDNS_CLUSTERS", "")
    local = cms.get("meshdns-local", {}).get("MESHDNS_LOCAL_CLUSTER")
    eps = endpoints(clusters, local)
    blocks = [(ipaddress.ip_network(a[1][1]), a[2]) for a in admitted if a[0] == "out" and a[1][0] == "ipBlock"]
    missing = [f"{c} {ip}:{port}/{'+'.join(sorted(protos))}" for c, ip, port, protos in eps
               if not any(ip in net and all((p, port) in what for p in protos) for net, what in blocks)]
    checks.check(f"out to every peer endpoint of MESHDNS_CLUSTERS ({len(eps)}: its address and port)",
                 eps and not missing, f"not admitted: {missing}" if eps else "no peer endpoint given by address")
    useless = [str(net) for net, _ in blocks if not any(ip in net for _, ip, _, _ in eps)]
    checks.check("no egress ipBlock holds no peer endpoint", not useless, f"{useless}")
    anything = [a for a in admitted if a[1] in (("anyone",), ("anywhere",))]
    checks.check("no rule admits anyone or anywhere", not anything, f"{anything}")
    return checks.exit_code()


def ports_cover(have, want):
    return want <= set(have) or ("any", "any") in set(have)


if __name__ == "__main__":
    sys.exit(main())
