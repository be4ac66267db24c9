#!/usr/bin/env bash
# Every platform's DNS change against its stock configuration, and the real CoreDNS loading the
# result (check.py says what is checked and what stands in for a cluster). Runs check.py in a
# network namespace of its own, so CoreDNS's fixed ports (53, 8080, 8181, 9153) and the fakes on
# 127.0.0.53/54 collide with nothing; every address is on loopback.
#   bash tests/platforms/run.sh            check (MESHDNS_BIN: default target/debug/meshdns, built)
#   bash tests/platforms/run.sh --write    regenerate the committed artifacts after a change
# Needs root (unshare -n), Go (to install CoreDNS v1.12.4 from the Go module proxy when missing)
# and PyYAML (Debian's python3-yaml, installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
COREDNS_VERSION=v1.12.4
export COREDNS="${COREDNS:-/opt/gotools/coredns}"
if [ -z "${MESHDNS_BIN:-}" ]; then
	cargo build --locked --quiet
	export MESHDNS_BIN=target/debug/meshdns
fi
MESHDNS_BIN="$(realpath "$MESHDNS_BIN")"
export MESHDNS_BIN
# PyYAML reads the YAML artifacts: Debian's package, never pip into the system Python.
if ! python3 -c 'import yaml' 2>/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-yaml >/dev/null
fi
if [ "${1:-}" = --write ]; then
	exec python3 tests/platforms/check.py --write
fi
if [ ! -x "$COREDNS" ]; then
	GOBIN="$(dirname "$COREDNS")" go install "github.com/coredns/coredns@$COREDNS_VERSION"
fi
"$COREDNS" -version | head -1
exec unshare -n sh -c 'ip link set lo up && exec python3 -u tests/platforms/check.py'
