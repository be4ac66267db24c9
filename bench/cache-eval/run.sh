#!/usr/bin/env bash
# Issue 18, point 4: builds the cache evaluation and runs every measurement; prints what
# bench/results/cache-evaluation.md quotes. RUNS (default 9) runs of PASSES × 100,000 hits
# (default 10) for the wall-clock figures; callgrind for instructions per hit.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --quiet
bin=target/release

echo "== machine"
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "meshdns at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ../../src || echo ' (src/ changed)')"
uptime

echo "== hits: ns per hit (wall clock)"
# Priority over other work on the machine where allowed (as bench/run.sh does).
nice -n -10 "$bin/hits" "${RUNS:-9}" "${PASSES:-10}"

echo "== hits: instructions per hit (callgrind; 1 run + warm-up at 1 and at 3 passes)"
instructions() {
	valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin/hits" 1 "$1" "$2" 2>&1 >/dev/null |
		sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for variant in meshdns qc qc-siphash qc-bytes patch; do
	one=$(instructions 1 "$variant")
	three=$(instructions 3 "$variant")
	# (3 - 1) passes × 100,000 hits × (warm-up + 1 run)
	awk -v v="$variant" -v a="$one" -v b="$three" 'BEGIN { printf "%-12s %8.1f instructions/hit\n", v, (b - a) / 400000 }'
done

echo "== memory per entry (10,000 typical entries)"
for table in meshdns qc qc-bytes; do "$bin/memory" "$table"; done
for table in qc qc-bytes; do "$bin/memory" "$table" 8; done

echo "== flood (1,000 entries; 500 popular, then 20,000 one-off names)"
"$bin/flood"

echo "== single-flight (50 clients, one name, upstream 20 ms)"
"$bin/flights"
