"""The default service ranges of the platforms the cluster-level resolver is documented for.

The Service `meshdns` gets a fixed clusterIP (CoreDNS's `forward` takes an IP), which must lie
in the cluster's service range; k8s/resolver/<name> names the platform in the annotation
`meshdns/platform`. `style` is how the cluster's DNS gets meshdns's zones there (what
`meshdns dns-change --platform` writes; docs/platforms.md): `import` (the Corefile imports
/etc/coredns/custom/*.server from the ConfigMap coredns-custom), `merge` (the blocks are merged
into the Corefile: kubeadm; EKS through the add-on's configurationValues) or `stub-domains` (GKE's
kube-dns). GKE's range is chosen per
cluster: the overlay names it in the annotation `meshdns/service-cidr`. docs/walkthrough.md
(step 10) carries the same table; check_docs.py holds the two equal.
"""
PLATFORMS = {
    "kubeadm": {"ranges": ["10.96.0.0/12"], "style": "merge"},
    "eks": {"ranges": ["10.100.0.0/16", "172.20.0.0/16"], "style": "merge"},
    "gke": {"ranges": [], "style": "stub-domains"},
    "aks": {"ranges": ["10.0.0.0/16"], "style": "import"},
    "k3s": {"ranges": ["10.43.0.0/16"], "style": "import"},
    "rke2": {"ranges": ["10.43.0.0/16"], "style": "import"},
}
PLATFORM_ANNOTATION = "meshdns/platform"
CIDR_ANNOTATION = "meshdns/service-cidr"
