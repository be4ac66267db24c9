#!/usr/bin/env bash
# What a DoT miss costs beyond a TCP miss to the same server, and on which side (issue 35's row
# "DoT miss ÷ TCP miss to the same server"): CPU time per miss of meshdns and of the server,
# and meshdns's system calls per miss, over DoT and over plain TCP to one unbound that
# terminates TLS itself (the bench's `k` and `q` clusters). Counts and CPU time, not latency,
# so the split holds on a loaded machine. Not part of CI.
#
#   bench/dotcost.sh BINARY [VAR=VALUE...]      prints a table, per miss, medians of the rounds
#   DOTCOST_KEEP=DIR bench/dotcost.sh ...       also keeps callgrind's two dumps there (dot.out,
#                                               tcp.out: for callgrind_annotate)
#
# Runs as root in a network namespace of its own (unshare -n, loopback only): unbound on
# 127.0.0.19 (DoT on :853, TCP on :53, 10,000 names as its own data), BINARY on 127.0.0.2 with
# the cache off (every query a miss) and the two clusters. DOTCOST_ROUNDS rounds (default 5),
# each 10,000 misses over DoT then 10,000 over TCP at 1,000 a second (dnsperf, one socket,
# paced: one miss at a time, as a pod asks); then one more of each under `strace -c -f`; then
# the user-space instructions per miss of a second BINARY under callgrind (2,000 misses each
# way, the counters zeroed between): CPU time on a 2-core VM moves with how deeply the core
# slept between misses, the instruction count does not.
# Needs unbound, openssl, dnsperf, dig, strace and valgrind.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/measure.sh
. "$ROOT/tests/lib/measure.sh"
# shellcheck source=tests/lib/dot.sh
. "$ROOT/tests/lib/dot.sh"
measure_args dotcost "$@"
measure_needs dotcost unbound openssl dnsperf dig strace valgrind callgrind_control
netns_private "$ROOT/bench/dotcost.sh" "$@"
BIN=$(realpath "$1")
shift
ROUNDS=${DOTCOST_ROUNDS:-5}
SERVER=127.0.0.19
TLS_NAME=cluster-k.bench.test
measure_scratch dotcost

dot_certs "$D" "$TLS_NAME" || {
	cat "$D/openssl.log" >&2
	exit 1
}
unbound_dot_conf "$D" "$SERVER" "$D" >"$D/unbound.conf"
unbound -d -c "$D/unbound.conf" >"$D/unbound.out" 2>&1 &
SERVED=$!
PIDS+=("$SERVED")
meshdns() { # ADDR LOG [COMMAND...]: BINARY on ADDR:53 (under COMMAND), its output in LOG
	local addr=$1 log=$2
	shift 2
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${EXTRA[@]}" MESHDNS_LISTEN="$addr:53" MESHDNS_ADMIN_LISTEN= \
		MESHDNS_UPSTREAMS=$SERVER MESHDNS_CACHE_SIZE=0 MESHDNS_LOCAL_CLUSTER=here MESHDNS_TLS_CA_FILE="$D/ca.pem" \
		MESHDNS_CLUSTERS="here=; k=$SERVER:853 transport=tls tls_name=$TLS_NAME; q=$SERVER:53 transport=tcp" \
		"$@" "$BIN" >"$log" 2>&1 &
}
EXTRA=("$@")
meshdns 127.0.0.2 "$D/meshdns.log"
MESH=$!
PIDS+=("$MESH")
meshdns 127.0.0.3 "$D/meshdns-callgrind.log" valgrind --tool=callgrind --callgrind-out-file="$D/cg.out"
COUNTED=$!
PIDS+=("$COUNTED")
for c in k q; do # both connections open before anything is counted
	awk -v c="$c" 'BEGIN { for (i = 0; i < 10000; i++) printf "h%d.mongo.db.cluster.%s A\n", i, c }' >"$D/names-$c.txt"
	for a in 127.0.0.2 127.0.0.3; do
		for _ in $(seq 1 150); do
			dig @$a "h1.mongo.db.cluster.$c" A +short +tries=1 +time=1 2>/dev/null | grep -q . && break
			sleep 0.2
		done
	done
done

ask() { # CLUSTER OUT: the number of replies
	dnsperf -s 127.0.0.2 -d "$D/names-$1.txt" -n 1 -Q 1000 -c 1 -q 10 -t 2 >"$2" 2>&1
	awk '/Queries completed/ {print $3}' "$2"
}
per() { awk -v q="$1" -v a="$2" -v b="$3" -v unit="$4" 'BEGIN {printf "%.2f", (b - a) / q / unit}'; } # QUERIES BEFORE AFTER UNIT
median() { sort -n | awk '{v[NR] = $1} END {printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
declare -A MESH_CPU SERVER_CPU MESH_CTX SERVER_CTX CALLS
for r in $(seq 1 "$ROUNDS"); do
	for c in k q; do
		m0=$(measure_cpu "$MESH") s0=$(measure_cpu "$SERVED")
		mc0=$(measure_switches "$MESH") sc0=$(measure_switches "$SERVED")
		q=$(ask "$c" "$D/r$r-$c.out")
		m1=$(measure_cpu "$MESH") s1=$(measure_cpu "$SERVED")
		mc1=$(measure_switches "$MESH") sc1=$(measure_switches "$SERVED")
		MESH_CTX[$c]+="$(per "$q" "$mc0" "$mc1" 1) "
		SERVER_CTX[$c]+="$(per "$q" "$sc0" "$sc1" 1) "
		MESH_CPU[$c]+="$(per "$q" "$m0" "$m1" 1000) " # ns → µs
		SERVER_CPU[$c]+="$(per "$q" "$s0" "$s1" 1000) "
	done
done
for c in k q; do
	q=$(measure_straced "$MESH" "$D/$c.strace" ask "$c" "$D/strace-$c.out")
	CALLS[$c]=$(awk -v q="$q" '$NF == "total" {printf "%.2f", $4 / q}' "$D/$c.strace")
done
declare -A INSTRUCTIONS
dump=0
for c in k q; do
	head -2000 "$D/names-$c.txt" >"$D/counted-$c.txt"
	# The connection open again first: the server closes it after 30 s idle, and a handshake
	# is not a miss's cost.
	dig @127.0.0.3 "h1.mongo.db.cluster.$c" A +short +tries=1 +time=5 >/dev/null 2>&1
	callgrind_control -z "$COUNTED" >/dev/null 2>&1
	dnsperf -s 127.0.0.3 -d "$D/counted-$c.txt" -n 1 -c 1 -q 1 -t 5 >"$D/counted-$c.out" 2>&1
	callgrind_control -d "$COUNTED" >/dev/null 2>&1
	dump=$((dump + 1))
	q=$(awk '/Queries completed/ {print $3}' "$D/counted-$c.out")
	ir=$(awk '/^summary:/ {print $2}' "$D/cg.out.$dump") # what ran since the zeroing
	[[ -z ${DOTCOST_KEEP:-} ]] || cp "$D/cg.out.$dump" "$DOTCOST_KEEP/$([[ $c == k ]] && echo dot || echo tcp).out"
	INSTRUCTIONS[$c]=$((ir / q))
done
row() { # LABEL ARRAY-NAME
	local -n of=$2
	local k q
	k=$(tr ' ' '\n' <<<"${of[k]}" | grep . | median)
	q=$(tr ' ' '\n' <<<"${of[q]}" | grep . | median)
	printf '| %s | %s | %s | %s |\n' "$1" "$k" "$q" "$(awk -v a="$k" -v b="$q" 'BEGIN {printf "%+.2f", a - b}')"
}
printf '| per miss (median of %s rounds) | DoT | TCP | DoT − TCP |\n|---|--:|--:|--:|\n' "$ROUNDS"
row "meshdns CPU time, µs (schedstat, every thread)" MESH_CPU
row "unbound CPU time, µs" SERVER_CPU
row "meshdns context switches (every thread)" MESH_CTX
row "unbound context switches" SERVER_CTX
printf '| meshdns instructions, user space (callgrind) | %s | %s | %+d |\n' "${INSTRUCTIONS[k]}" "${INSTRUCTIONS[q]}" \
	$((INSTRUCTIONS[k] - INSTRUCTIONS[q]))
printf '| meshdns system calls (strace -c -f) | %s | %s | %s |\n' "${CALLS[k]}" "${CALLS[q]}" \
	"$(awk -v a="${CALLS[k]}" -v b="${CALLS[q]}" 'BEGIN {printf "%+.2f", a - b}')"
printf '\nrounds, meshdns DoT: %s; TCP: %s\nrounds, unbound DoT: %s; TCP: %s\n' \
	"${MESH_CPU[k]% }" "${MESH_CPU[q]% }" "${SERVER_CPU[k]% }" "${SERVER_CPU[q]% }"
