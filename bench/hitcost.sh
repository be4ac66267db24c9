#!/usr/bin/env bash
# Instructions per cache hit, counted by callgrind: the same figure for the same binary whatever
# else the machine is doing (user-space instructions only; the kernel's part of a query is not
# in it). For comparing builds — allocators (bench/allocators.sh), optimisation steps — where
# the CPU-time rows of bench/run.sh are within the machine's noise. Not part of CI.
#
#   bench/hitcost.sh BINARY [VAR=VALUE...]     prints "instructions_per_hit N (Q queries)"
#   HITCOST_KEEP=FILE bench/hitcost.sh ...     also keeps callgrind's output there (for
#                                              callgrind_annotate: where the instructions go)
#
# Runs as root in a network namespace of its own (unshare -n, loopback only): NSD on 127.0.0.9
# serving 1,000 names, BINARY under valgrind --tool=callgrind on 127.0.0.2 with the extra
# environment given, its cache filled with the 1,000 names, the counters zeroed, then 20,000
# queries for them (dnsperf, 4 sockets) and one dump. Needs valgrind, nsd, dnsperf and dig.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/nsd.sh
. "$ROOT/tests/lib/nsd.sh"
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/measure.sh
. "$ROOT/tests/lib/measure.sh"
measure_args hitcost "$@"
measure_needs hitcost valgrind callgrind_control nsd dnsperf dig
netns_private "$ROOT/bench/hitcost.sh" "$@"
BIN=$(realpath "$1")
shift
measure_scratch hitcost

nsd_bench_zone "$D/nsd" 127.0.0.9
nsd -d -c "$D/nsd/nsd.conf" >"$D/nsd/out.log" 2>&1 &
PIDS+=($!)

env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" MESHDNS_LISTEN=127.0.0.2:53 MESHDNS_ADMIN_LISTEN= \
	MESHDNS_UPSTREAMS=127.0.0.9 valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$BIN" >"$D/meshdns.log" 2>&1 &
M=$!
PIDS+=("$M")
for _ in $(seq 1 150); do
	dig @127.0.0.2 h1.bench.test A +short +tries=1 +time=1 2>/dev/null | grep -q . && break
	sleep 0.2
done
dnsperf -s 127.0.0.2 -d "$D/nsd/hot.txt" -n 2 -c 1 -q 10 -t 5 >"$D/fill.out" 2>&1
callgrind_control -z "$M" >/dev/null 2>&1
dnsperf -s 127.0.0.2 -d "$D/nsd/hot.txt" -n 20 -c 4 -q 40 -t 5 >"$D/run.out" 2>&1
callgrind_control -d "$M" >/dev/null 2>&1
Q=$(awk '/Queries completed/ {print $3}' "$D/run.out")
IR=$(cat "$D"/cg.out.* 2>/dev/null | awk '/^summary:/ {print $2}' | sort -n | tail -1)
[[ -n $Q && -n $IR && $Q -gt 0 ]] || {
	echo "hitcost: no count (see $D/meshdns.log)" >&2
	trap - EXIT
	exit 1
}
[[ -z ${HITCOST_KEEP:-} ]] || cp "$(grep -l "^summary: $IR\$" "$D"/cg.out.* | head -1)" "$HITCOST_KEEP"
echo "instructions_per_hit $((IR / Q)) ($Q queries)"
