#!/usr/bin/env bash
# kube-apiserver for tests/webhook/check_apiserver.sh, built from the Go module proxy: a wrapper
# module requiring k8s.io/kubernetes at $K8S and pinning each k8s.io staging module it names to
# the matching v0.x release with replace lines (k8s.io/kubernetes's own go.mod points them at
# ./staging, which a module download does not have). etcd from Debian (etcd-server).
# Both are kept: /opt/gotools/kube-apiserver-$K8S, /usr/bin/etcd. Takes ~30 min of 2 cores the
# first time. The last line printed is "ready APISERVER ETCD" or "unavailable: WHY".
set -uo pipefail

K8S=${K8S_VERSION:-1.34.4}
STAGING=0.${K8S#1.}
OUT=${GOTOOLS:-/opt/gotools}/kube-apiserver-$K8S
LOG=${KUBE_APISERVER_BUILD_LOG:-/tmp/kube-apiserver-build.log}

unavailable() {
	echo "unavailable: $*"
	exit 0
}

if ! command -v etcd >/dev/null; then
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server; } >/dev/null 2>&1 ||
		unavailable "etcd: apt-get install etcd-server failed"
fi
if [[ ! -x $OUT ]]; then
	command -v go >/dev/null || unavailable "no go toolchain to build kube-apiserver $K8S"
	dir=$(mktemp -d /tmp/kube-apiserver-build.XXXXXX)
	{
		echo "module meshdns.test/kubeapiserver"
		echo "go 1.24"
		echo "require k8s.io/kubernetes v$K8S"
		echo "replace ("
		for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
			cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api \
			cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
			kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics \
			mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller; do
			echo "	k8s.io/$m => k8s.io/$m v$STAGING"
		done
		echo ")"
	} >"$dir/go.mod"
	echo "building kube-apiserver $K8S (log: $LOG)"
	if ! (cd "$dir" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S" &&
		GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$OUT" -ldflags="-s \
			-X k8s.io/component-base/version.gitVersion=v$K8S \
			-X k8s.io/component-base/version.gitMajor=${K8S%%.*} \
			-X k8s.io/component-base/version.gitMinor=$(echo "$K8S" | cut -d. -f2)" \
			k8s.io/kubernetes/cmd/kube-apiserver) >"$LOG" 2>&1; then
		unavailable "kube-apiserver $K8S did not build: $(grep -m2 -E 'error|cannot' "$LOG" | tr '\n' ' ')"
	fi
	rm -rf "$dir"
fi
echo "ready $OUT $(command -v etcd)"
