#!/usr/bin/env bash
# Which allocator meshdns should ship with (issues 13 and 19): the same commit built with
# glibc's malloc, mimalloc, jemalloc and musl's malloc (the static image's), measured with the
# benchmark's cache-hit and overload rows. Not part of CI. Prints a table (also written to
# ALLOC_WORK/results/table.md) for bench/results/allocators.md, where the recommendation goes.
#
#   bench/allocators.sh                      every variant
#   ALLOC_VARIANTS="glibc musl" bench/...    some of them
#   ALLOC_ROUNDS=2 ALLOC_SECONDS=4           rounds and timed-run length of each run.sh (defaults)
#   ALLOC_WORK=/tmp/meshdns-alloc            where the scratch copies are built
#   ALLOC_BUILD_ONLY=1                       build the variants, measure nothing
#   ALLOC_TABLE_ONLY=1                       only the table, from the runs already there
#
# The variants:
#   glibc          cargo build --release, as shipped in CI
#   glibc-tuned    the same binary with GLIBC_TUNABLES=glibc.malloc.arena_max=1:
#                  glibc.malloc.trim_threshold=0:glibc.malloc.mmap_threshold=65536
#   mimalloc       #[global_allocator] from the mimalloc crate
#   jemalloc       #[global_allocator] from the tikv-jemallocator crate
#   musl           --target x86_64-unknown-linux-musl: musl's malloc, the image's binary
#   musl-mimalloc  musl with mimalloc
#   musl-jemalloc  musl with jemalloc
# Each variant other than glibc is a copy of the committed tree (git archive HEAD) under
# ALLOC_WORK with the allocator added there (cargo add, two lines in src/main.rs); nothing of it
# is committed. A variant whose binary is already there is not built again. Then bench/run.sh
# runs with BENCH_GROUPS=hits,overload for each, results under ALLOC_WORK/results/VARIANT, and
# bench/hitcost.sh counts its instructions per cache hit (callgrind: free of the machine's
# noise, user space only). The table compares them (ratios against unbound are taken within each run, so runs at
# different moments of a noisy machine compare).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VARIANTS=${ALLOC_VARIANTS:-glibc glibc-tuned mimalloc jemalloc musl musl-mimalloc musl-jemalloc}
ROUNDS=${ALLOC_ROUNDS:-2}
SECONDS_PER_RUN=${ALLOC_SECONDS:-4}
WORK=${ALLOC_WORK:-/tmp/meshdns-alloc}
TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=0:glibc.malloc.mmap_threshold=65536
MUSL=x86_64-unknown-linux-musl
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)

log() { printf '[allocators] %s\n' "$*" >&2; }
[[ $(id -u) == 0 ]] || {
	log "run as root (bench/run.sh needs it)"
	exit 1
}
mkdir -p "$WORK/results"

binary() { # VARIANT: the path of its binary (built or not)
	case $1 in
	glibc | glibc-tuned) echo "$WORK/glibc/target/release/meshdns" ;;
	musl*) echo "$WORK/$1/target/$MUSL/release/meshdns" ;;
	*) echo "$WORK/$1/target/release/meshdns" ;;
	esac
}

build() { # VARIANT
	local v=$1 dir crate='' target=()
	case $v in
	glibc-tuned) v=glibc ;;
	esac
	dir=$WORK/$v
	[[ -x $(binary "$v") ]] && return 0
	rm -rf "$dir" && mkdir -p "$dir" && git -C "$ROOT" archive HEAD | tar -x -C "$dir" || return 1
	case $v in
	mimalloc | musl-mimalloc) crate="mimalloc mimalloc::MiMalloc" ;;
	jemalloc | musl-jemalloc) crate="tikv-jemallocator tikv_jemallocator::Jemalloc" ;;
	esac
	case $v in
	musl*)
		target=(--target "$MUSL")
		rustup target list --installed | grep -qx "$MUSL" || rustup target add "$MUSL" || return 1
		;;
	esac
	if [[ -n $crate ]]; then
		read -r name path <<<"$crate"
		(cd "$dir" && cargo add -q "$name") || return 1
		printf '\n// Allocator experiment (bench/allocators.sh), never committed.\n#[global_allocator]\nstatic GLOBAL: %s = %s;\n' "$path" "$path" >>"$dir/src/main.rs"
	fi
	log "building $v (cargo build --release ${target[*]})"
	(cd "$dir" && cargo build --release "${target[@]}") >"$dir/build.log" 2>&1 || {
		tail -20 "$dir/build.log" >&2
		return 1
	}
}

for v in $VARIANTS; do
	[[ -n ${ALLOC_TABLE_ONLY:-} ]] && break
	build "$v" || {
		log "$v did not build; left out"
		continue
	}
	[[ -n ${ALLOC_BUILD_ONLY:-} ]] && continue
	env=()
	[[ $v == glibc-tuned ]] && env=(BENCH_MESHDNS_ENV="GLIBC_TUNABLES=$TUNABLES")
	log "measuring $v"
	env "${env[@]}" MESHDNS_BIN="$(binary "$v")" BENCH_GROUPS=hits,overload BENCH_ROUNDS="$ROUNDS" \
		BENCH_SECONDS="$SECONDS_PER_RUN" BENCH_RESULTS="$WORK/results/$v" "$ROOT/bench/run.sh" \
		>"$WORK/results/$v.log" 2>&1 || log "bench/run.sh failed for $v (see $WORK/results/$v.log)"
	tunables=()
	[[ $v == glibc-tuned ]] && tunables=("GLIBC_TUNABLES=$TUNABLES")
	"$ROOT/bench/hitcost.sh" "$(binary "$v")" "${tunables[@]}" >"$WORK/results/$v.hitcost" 2>&1 ||
		log "bench/hitcost.sh failed for $v"
done

[[ -n ${ALLOC_BUILD_ONLY:-} ]] && exit 0
# shellcheck disable=SC2086 # one argument per variant
python3 - "$WORK/results" "$WORK/results/table.md" "$COMMIT" "$TUNABLES" $VARIANTS <<'EOF'
import json, os, statistics, sys
res, out, commit, tunables, variants = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]

def f(x, d=1):
    return "—" if x is None else f"{x:,.{d}f}"

rows = []
for v in variants:
    try:
        with open(os.path.join(res, v, "latest.json"), encoding="utf-8") as fh:
            j = json.load(fh)
    except (OSError, ValueError):
        continue
    M, R = j["medians"], j["rounds"]
    def m(k, s="meshdns"):
        return M.get(k, {}).get(s)
    def ratio(k, a="meshdns", b="unbound"):
        xs = sorted(R[k][a][r] / R[k][b][r] for r in R.get(k, {}).get(a, {})
                    if R[k][b].get(r) and R[k][a][r] is not None)
        return statistics.median(xs) if xs else None
    try:
        with open(os.path.join(res, f"{v}.hitcost"), encoding="utf-8") as fh:
            ins = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        ins = None
    ovl = " | ".join(f"{f(m(f'ovl_{c}_peak'))} / {f(m(f'ovl_{c}_after'))}" for c in "abc")
    rows.append(f"| {v} | {int(j['meta'].get('binary_bytes', 0)):,} | {f(m('rss_idle_kb'))} | {f(m('rss_10k_kb'))} | {ovl} | "
                f"{f(m('cpu_us'))} ({f(ratio('cpu_us'), 2)}×) | {f(ins, 0)} | {f(m('qps'), 0)} ({f(ratio('qps'), 2)}×) |")
    date = j["meta"].get("date", "?")
text = f"""Commit {commit}, measured with `bench/allocators.sh` (bench/run.sh, groups hits and overload, one run per
variant, medians of its rounds; the last run ended {date if rows else '?'}). RSS in MiB; each flood cell is
"peak / 10 s after" (targets: ≤ 24 / ≤ 12). CPU is utime+stime per cache hit at 20,000 qps; the ratios are
against unbound (1 thread) within the same run, which is what compares across runs on a noisy machine;
instructions per cache hit are callgrind's count (bench/hitcost.sh, user space only), the same whatever the
machine is doing.
glibc-tuned: the glibc binary with `GLIBC_TUNABLES={tunables}`.

| variant | binary (bytes) | RSS idle | RSS 10k entries | (a) mangled | (b) black-holed misses | (c) TCP not reading | CPU µs/query at 20k (÷ unbound) | instructions per hit | cache-hit QPS (÷ unbound) |
|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|
""" + "\n".join(rows) + "\n"
with open(out, "w", encoding="utf-8") as fh:
    fh.write(text)
print(text)
EOF
