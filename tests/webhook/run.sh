#!/usr/bin/env bash
# The injection webhook's suite (docs/injection.md):
#   1. check_webhook.py: `meshdns webhook` through its real HTTPS endpoint with the pods the
#      database operators create; the patched pods validated, their sidecar started and asked
#      a peer member's name; exclusions, malformed requests, certificate renewal, SIGTERM;
#   2. check_apiserver.py: the same webhook behind a real kube-apiserver (and etcd), registered
#      with k8s/webhook/mutatingwebhook.yaml; skipped, saying why, when the API server cannot
#      be built here (tests/webhook/build_apiserver.sh).
#
#   bash tests/webhook/run.sh                    builds the release binary, runs both
#   MESHDNS_BIN=path bash tests/webhook/run.sh   that binary, no build
#   WEBHOOK_APISERVER=skip                       no kube-apiserver (its first build takes ~15 min
#                                                of 2 cores; later runs reuse it)
#
# Runs as root: packages, pip and the build in the machine's network namespace, then the checks
# in a network namespace of its own (tests/lib/netns.sh), where port 53 and 127.0.0.x are ours.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/webhook
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
VENV=${MESHDNS_WEBHOOK_VENV:-/opt/meshdns-webhook-tests/venv}

if [[ -z ${TESTS_NETNS_PRIVATE:-} ]]; then
	need=()
	command -v openssl >/dev/null || need+=(openssl)
	command -v ip >/dev/null || need+=(iproute2)
	/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
	if ((${#need[@]})); then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
	stamp=$VENV/.requirements.sha256
	want=$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)
	if [[ ! -x $VENV/bin/python || $(cat "$stamp" 2>/dev/null) != "$want" ]]; then
		echo "installing $HERE/requirements.txt into $VENV (pip)"
		rm -rf "$VENV"
		/usr/bin/python3 -m venv "$VENV"
		"$VENV/bin/pip" install -q --disable-pip-version-check -r "$HERE/requirements.txt"
		echo "$want" >"$stamp"
	fi
	if [[ -z ${MESHDNS_BIN:-} ]]; then
		(cd "$ROOT" && cargo build --release --locked)
		MESHDNS_BIN=$ROOT/target/release/meshdns
	fi
	# The API server and etcd, when they can be had (prints why not otherwise).
	if [[ ${WEBHOOK_APISERVER:-} == skip ]]; then
		APISERVER_STATUS="skipped (WEBHOOK_APISERVER=skip)"
	else
		APISERVER_STATUS=$(bash "$HERE/build_apiserver.sh" 2>&1 | tail -1) || true
	fi
	export MESHDNS_BIN APISERVER_STATUS
fi
netns_private "$HERE/run.sh" "$@"

status=0
"$VENV/bin/python" "$HERE/check_webhook.py" || status=1
case ${APISERVER_STATUS:-} in
	ready\ *)
		# shellcheck disable=SC2086 # two paths, split on purpose
		KUBECTL=$VENV/bin/kubectl "$VENV/bin/python" "$HERE/check_apiserver.py" ${APISERVER_STATUS#ready } || status=1
		;;
	*)
		echo "SKIP through a real API server: ${APISERVER_STATUS:-not attempted}"
		;;
esac
exit $status
