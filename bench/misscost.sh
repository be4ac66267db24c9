#!/usr/bin/env bash
# System calls and wake-ups per cache miss, meshdns (the cache off: every query asked upstream)
# next to the floor relay (bench/floor.c relaying, no DNS work): counts, not times, so the
# figure holds on a loaded machine. For finding where a miss's time beyond the relay goes
# (bench/results/steps.md, round four). Not part of CI.
#
#   bench/misscost.sh BINARY [VAR=VALUE...]     prints a table, per miss, for both: CPU time,
#                                               context switches, system calls
#
# Runs as root in a network namespace of its own (unshare -n, loopback only): NSD on 127.0.0.9
# serving 1,000 names, BINARY on 127.0.0.2 (MESHDNS_CACHE_SIZE=0 and the extra environment),
# the relay on 127.0.0.3. For each: MISSCOST_QUERIES queries (default 5,000) at 1,000 a second
# (dnsperf, one socket, paced: one miss at a time, as a pod asks), once with the context
# switches of every thread counted (/proc), once under `strace -c -f` (the calls by name).
# Needs strace, nsd, dnsperf, dig and gcc.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/nsd.sh
. "$ROOT/tests/lib/nsd.sh"
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/measure.sh
. "$ROOT/tests/lib/measure.sh"
measure_args misscost "$@"
measure_needs misscost strace nsd dnsperf dig gcc
netns_private "$ROOT/bench/misscost.sh" "$@"
BIN=$(realpath "$1")
shift
N=${MISSCOST_QUERIES:-5000}
measure_scratch misscost

nsd_bench_zone "$D/nsd" 127.0.0.9
nsd -d -c "$D/nsd/nsd.conf" >"$D/nsd/out.log" 2>&1 &
PIDS+=($!)
gcc -O2 -o "$D/floor" "$ROOT/bench/floor.c" || exit 1

env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" MESHDNS_LISTEN=127.0.0.2:53 MESHDNS_ADMIN_LISTEN= \
	MESHDNS_UPSTREAMS=127.0.0.9 MESHDNS_CACHE_SIZE=0 "$BIN" >"$D/meshdns.log" 2>&1 &
MESH=$!
PIDS+=("$MESH")
"$D/floor" 127.0.0.3 53 127.0.0.9:53 >"$D/floor.log" 2>&1 &
RELAY=$!
PIDS+=("$RELAY")
for a in 127.0.0.2 127.0.0.3; do
	for _ in $(seq 1 100); do
		dig @$a h1.bench.test A +short +tries=1 +time=1 2>/dev/null | grep -q . && break
		sleep 0.1
	done
done

ask() { # ADDR OUT
	dnsperf -s "$1" -d "$D/nsd/hot.txt" -n $(((N + 999) / 1000)) -Q 1000 -c 1 -q 10 -t 2 >"$2" 2>&1
	awk '/Queries completed/ {print $3}' "$2"
}
printf '| per miss | %s | floor relay |\n|---|--:|--:|\n' "$(basename "$BIN")"
declare -A WAKE CALLS TOP CPU
for who in mesh relay; do
	if [[ $who == mesh ]]; then pid=$MESH addr=127.0.0.2; else pid=$RELAY addr=127.0.0.3; fi
	c0=$(measure_switches "$pid") n0=$(measure_cpu "$pid")
	q=$(ask "$addr" "$D/$who-ctx.out")
	c1=$(measure_switches "$pid") n1=$(measure_cpu "$pid")
	WAKE[$who]=$(awk -v a="$c0" -v b="$c1" -v q="$q" 'BEGIN {printf "%.2f", (b - a) / q}')
	CPU[$who]=$(awk -v a="$n0" -v b="$n1" -v q="$q" 'BEGIN {printf "%.1f", (b - a) / q / 1000}')
	q=$(measure_straced "$pid" "$D/$who.strace" ask "$addr" "$D/$who-strace.out")
	CALLS[$who]=$(awk -v q="$q" '$NF == "total" {printf "%.2f", $4 / q}' "$D/$who.strace")
	TOP[$who]=$(awk -v q="$q" '$1 ~ /^[0-9.]+$/ && $NF != "total" {printf "%s %.2f, ", $NF, $4 / q}' "$D/$who.strace")
done
printf '| CPU time, µs (schedstat, every thread) | %s | %s |\n' "${CPU[mesh]}" "${CPU[relay]}"
printf '| context switches (every thread) | %s | %s |\n' "${WAKE[mesh]}" "${WAKE[relay]}"
printf '| system calls (strace -c -f) | %s | %s |\n' "${CALLS[mesh]}" "${CALLS[relay]}"
printf '\nmeshdns: %s\nrelay: %s\n' "${TOP[mesh]%, }" "${TOP[relay]%, }"
