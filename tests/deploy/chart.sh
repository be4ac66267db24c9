#!/usr/bin/env bash
# The real Helm for the chart checks (tests/deploy/validate.sh, check_chart.py).
#
#   bash tests/deploy/chart.sh install   # prints the path of a helm binary of HELM_VERSION
#
# Builds it from the Go module proxy when missing (GOBIN=/opt/gotools go install
# helm.sh/helm/v4/cmd/helm@v4.3.2): the proxy is one of the registries CI reaches. Needs a Go
# toolchain (the go of PATH, or /usr/local/go/bin/go); Debian 12's golang-go (1.19) is too old
# to build Helm 4.
set -euo pipefail

HELM_VERSION=v4.3.2
GOBIN_DIR=${GOBIN_DIR:-/opt/gotools}

install_helm() {
    local helm="$GOBIN_DIR/helm" go
    go=$(command -v go || true)
    [ -n "$go" ] || go=/usr/local/go/bin/go
    # A binary built by `go install` says only "v4.3" itself; its module version is in its build
    # information.
    if [ -x "$helm" ] && [ -x "$go" ] &&
        "$go" version -m "$helm" 2>/dev/null | grep -Eq "^\s+mod\s+helm\.sh/helm/v4\s+$HELM_VERSION\s"; then
        echo "$helm"
        return
    fi
    if [ ! -x "$go" ]; then
        echo "no Go toolchain (go in PATH or /usr/local/go/bin/go) to build helm $HELM_VERSION with" >&2
        return 1
    fi
    echo "building helm $HELM_VERSION (go install from the Go module proxy)" >&2
    mkdir -p "$GOBIN_DIR"
    GOBIN=$GOBIN_DIR "$go" install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
    echo "$helm"
}

case ${1:-} in
    install) install_helm ;;
    *)
        echo "usage: $0 install" >&2
        exit 2
        ;;
esac
