#!/usr/bin/env bash
# What a miss flood leaves behind (issue 35): flood (b) of bench/run.sh's overload group —
# 40,000 misses at 4,000/s with the upstream black-holed — against one meshdns, then its RSS
# after 10 s of quiet next to what its allocator says is still in use. Not part of CI.
#
#   bench/floodheap.sh BINARY [VAR=VALUE...]
#
# Prints RSS (VmRSS) before, at the peak (sampled every 100 ms) and 10 s after the flood. For a
# glibc binary it then asks the allocator itself through gdb: malloc_stats() (bytes in use vs
# bytes the heap holds from the system, main arena and all), then malloc_trim(0) and RSS again
# — what returning the free memory would give. A static musl binary gets the RSS rows only.
# Runs as root in a network namespace of its own (unshare -n, loopback only). Needs gcc and gdb.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/measure.sh
. "$ROOT/tests/lib/measure.sh"
measure_args floodheap "$@"
measure_needs floodheap gcc
netns_private "$ROOT/bench/floodheap.sh" "$@"
BIN=$(realpath "$1")
shift
measure_scratch floodheap
for c in flood blackhole; do gcc -O2 -o "$D/$c" "$ROOT/bench/$c.c" || exit 1; done
"$D/blackhole" 127.0.0.17 53 "$D/hole.log" >"$D/hole.out" 2>&1 &
PIDS+=($!)
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" MESHDNS_LISTEN=127.0.0.16:53 MESHDNS_ADMIN_LISTEN= \
	MESHDNS_UPSTREAMS=127.0.0.17 "$BIN" >"$D/meshdns.log" 2>&1 &
M=$!
PIDS+=("$M")
rss() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$M/status"; }
for _ in $(seq 1 50); do
	ss -Hlnu | grep -q '127.0.0.16:53 ' && break
	sleep 0.1
done
sleep 1
before=$(rss)
glibc=
ldd "$BIN" 2>/dev/null | grep -q 'libc\.so\.6' && command -v gdb >/dev/null && glibc=1
in_use() { # glibc: malloc_stats() through gdb, its "in use" and "system" totals (MiB), from the log
	: >"$D/meshdns.log"
	gdb -p "$M" -batch -ex 'call (void) malloc_stats()' >/dev/null 2>&1
	awk '/^Total \(incl. mmap\):/ {t = 1} t && /system bytes/ {s = $NF} t && /in use bytes/ {u = $NF}
		END {printf "%.1f %.1f\n", u / 1048576, s / 1048576}' "$D/meshdns.log"
}
[[ -n $glibc ]] && read -r used0 held0 < <(in_use)
"$D/flood" names 127.0.0.16:53 40000 4000 fx flood.test >"$D/flood.out" 2>&1 &
F=$!
PIDS+=("$F")
peak=0
while kill -0 "$F" 2>/dev/null; do
	peak=$(awk -v a="$peak" -v b="$(rss)" 'BEGIN {print (b > a ? b : a)}')
	sleep 0.1
done
for _ in $(seq 1 100); do
	peak=$(awk -v a="$peak" -v b="$(rss)" 'BEGIN {print (b > a ? b : a)}')
	sleep 0.1
done
after=$(rss)
printf '| %s | RSS MiB |\n|---|--:|\n| before the flood | %s |\n| peak | %s |\n| 10 s after | %s |\n' \
	"$(basename "$BIN")" "$before" "$peak" "$after"
if [[ -n $glibc ]]; then
	read -r used1 held1 < <(in_use)
	printf '| malloc_stats: in use, before / 10 s after | %s / %s |\n' "$used0" "$used1"
	printf '| malloc_stats: held from the system, before / 10 s after | %s / %s |\n' "$held0" "$held1"
	gdb -p "$M" -batch -ex 'call (int) malloc_trim(0)' >/dev/null 2>&1
	printf '| after malloc_trim(0) | %s |\n' "$(rss)"
fi
