#!/usr/bin/env bash
# The chaos soak (tests/chaos/chaos.py): meshdns under traffic of every route while peers are
# stopped, black-holed and restarted, members come and go, clusters are removed and re-added,
# endpoints move, transports switch, client certificates rotate, small floods arrive and peer
# links lose datagrams (nftables); every reply checked against a model of the world. CI runs it for 60 s; by hand, longer:
#
#   sudo tests/chaos/run.sh                    # 60 s at 400 q/s, seed 7
#   sudo CHAOS_SECONDS=600 CHAOS_SEED=11 tests/chaos/run.sh
#   sudo MESHDNS_BIN=target/release/meshdns tests/chaos/run.sh   # no build
#   sudo CHAOS_MESHDNS_LOG=warn,meshdns::testing::gather=debug,meshdns::testing::upstream=debug tests/chaos/run.sh
#                                              # meshdns's log level (default: the gatherer's debug)
#
# Needs root (port 53 on loopback addresses, unshare -n, nft). Installs what is missing
# (python3-venv, openssl, iproute2, nftables with apt-get; dnspython with pip into a venv of its own, CHAOS_VENV) and builds
# the release binary in the machine's namespace, then runs itself again in a network namespace
# of its own (tests/lib/netns.sh), where the world lives on 127.0.60.0/24 and 127.0.61.0/24 and
# meshdns on 127.0.70.1: no packet can leave. Ends with `N passed, M failed` (one check: the
# soak), exit 1 on any violation.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib/netns.sh
. tests/lib/netns.sh

CHAOS_SECONDS=${CHAOS_SECONDS:-60}
CHAOS_QPS=${CHAOS_QPS:-400}
CHAOS_SEED=${CHAOS_SEED:-7}
CHAOS_VENV=${CHAOS_VENV:-/opt/meshdns-chaos/venv}
MESHDNS_BIN=${MESHDNS_BIN:-target/release/meshdns}

if [[ -z ${TESTS_NETNS_PRIVATE:-} ]]; then
	pkgs=()
	command -v openssl >/dev/null || pkgs+=(openssl)
	command -v ip >/dev/null || pkgs+=(iproute2)
	command -v nft >/dev/null || pkgs+=(nftables)
	/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || pkgs+=(python3-venv)
	if ((${#pkgs[@]})); then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
	fi
	if ! "$CHAOS_VENV/bin/python" -c 'import dns' 2>/dev/null; then
		[[ -x $CHAOS_VENV/bin/python ]] || /usr/bin/python3 -m venv "$CHAOS_VENV"
		"$CHAOS_VENV/bin/pip" install -q --disable-pip-version-check dnspython
	fi
	[[ -x $MESHDNS_BIN ]] || cargo build --release --locked
	export MESHDNS_BIN CHAOS_VENV
fi
netns_private "$PWD/tests/chaos/run.sh" "$@"

WORK=$(mktemp -d /tmp/meshdns-chaos.XXXXXX)
echo "chaos: ${CHAOS_SECONDS} s at ${CHAOS_QPS} q/s, seed ${CHAOS_SEED}; work dir $WORK"
if "$CHAOS_VENV/bin/python" tests/chaos/chaos.py --meshdns "$(realpath "$MESHDNS_BIN")" --work "$WORK" \
	--seconds "$CHAOS_SECONDS" --qps "$CHAOS_QPS" --seed "$CHAOS_SEED"; then
	echo "chaos: 1 passed, 0 failed"
	rm -rf "$WORK"
else
	echo "chaos: meshdns log (last 30 lines):"
	tail -30 "$WORK/meshdns.log" || true
	echo "chaos: 0 passed, 1 failed"
	exit 1
fi
