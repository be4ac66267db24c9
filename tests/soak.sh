#!/usr/bin/env bash
# Soak run (issue 9; not part of CI): meshdns under a steady mixed load for a few minutes, its
# resident memory sampled every 10 s. Flat RSS after warm-up is the pass criterion: the cache,
# the in-flight queries and the connection tables are all bounded.
#
#   tests/soak.sh [SECONDS] [QPS]        defaults: 240 s, 5000 queries/s
#
# Needs root (port 53 on loopback addresses, unshare -n), nsd, dnsperf and curl. After the
# build, the script runs itself again in a network namespace of its own (tests/lib/netns.sh:
# `unshare -n`, loopback only), so its addresses collide with nothing on the machine and no
# packet leaves. Everything listens on 127.0.30.1-3 there: meshdns (.1), the local cluster's DNS
# (.2, also serving example.test), cluster b's DNS (.3). The load is a mix of pass-through hits,
# pass-through random names (NXDOMAIN, a random-subdomain flood against a 1000-entry cache),
# cluster-zone names and distributed SRV/A gathers. Only processes this script started are
# stopped, by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib/nsd.sh
. tests/lib/nsd.sh
# shellcheck source=tests/lib/netns.sh
. tests/lib/netns.sh

SECONDS_TOTAL=${1:-240}
QPS=${2:-5000}
MESHDNS_BIN=${MESHDNS_BIN:-target/release/meshdns}
for tool in nsd dnsperf curl; do
	command -v "$tool" >/dev/null || { echo "soak: $tool is not installed" >&2; exit 1; }
done
# The build may need crates.io: before the private namespace.
[[ -x $MESHDNS_BIN ]] || cargo build --release
export MESHDNS_BIN
netns_private "$PWD/tests/soak.sh" "$@"

WORK=$(mktemp -d /tmp/meshdns-soak.XXXXXX)
PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

zone_cluster() { # N
	cat <<EOF
\$TTL 30
@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5
@ IN NS ns.dns.cluster.local.
ns.dns IN A 127.0.30.$(($1 + 1))
_mongodb._tcp.mongo.db.svc IN SRV 0 50 27017 mongo-0.mongo.db.svc.cluster.local.
_mongodb._tcp.mongo.db.svc IN SRV 0 50 27017 mongo-1.mongo.db.svc.cluster.local.
mongo.db.svc IN A 10.$1.1.0
mongo.db.svc IN A 10.$1.1.1
mongo-0.mongo.db.svc IN A 10.$1.1.0
mongo-1.mongo.db.svc IN A 10.$1.1.1
EOF
}

start_nsd() { # N ADDR [with example.test]
	local d=$WORK/nsd-$1
	mkdir -p "$d"
	zone_cluster "$1" >"$d/cluster.local.zone"
	{
		nsd_conf "$d" "$2" 'verbosity: 0'
		nsd_zone cluster.local "$d/cluster.local.zone"
	} >"$d/nsd.conf"
	if [[ ${3:-} == example ]]; then
		printf '$TTL 300\n@ IN SOA ns hostmaster 1 7200 1800 86400 5\n@ IN NS ns\nns IN A 127.0.30.2\nwww IN A 192.0.2.80\n' >"$d/example.test.zone"
		nsd_zone example.test "$d/example.test.zone" >>"$d/nsd.conf"
	fi
	nsd -d -c "$d/nsd.conf" >>"$d/nsd.log" 2>&1 &
	PIDS+=($!)
}

start_nsd 1 127.0.30.2 example
start_nsd 2 127.0.30.3
sleep 1

env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	MESHDNS_LISTEN=127.0.30.1:53 MESHDNS_ADMIN_LISTEN=127.0.30.1:9153 \
	MESHDNS_UPSTREAMS=127.0.30.2:53 MESHDNS_LOCAL_CLUSTER=a \
	MESHDNS_CLUSTERS="a=; b=127.0.30.3:53" MESHDNS_CACHE_SIZE=1000 MESHDNS_LOG=warn \
	"$MESHDNS_BIN" >"$WORK/meshdns.log" 2>&1 &
MESHDNS_PID=$!
PIDS+=("$MESHDNS_PID")
sleep 1
kill -0 "$MESHDNS_PID" || { cat "$WORK/meshdns.log" >&2; exit 1; }

# The query mix: every fourth query a random name never seen before.
python3 - "$WORK/queries" <<'EOF'
import random, sys
random.seed(9)
fixed = [
    "www.example.test A",
    "mongo-0.mongo.db.cluster.b A",
    "_mongodb._tcp.mongo.db.cluster.b SRV",
    "_mongodb._tcp.mongo.db.svc.distributed.local SRV",
    "mongo.db.svc.distributed.local A",
    "b-mongo-1.mongo.db.svc.distributed.local A",
]
with open(sys.argv[1], "w") as out:
    for i in range(400_000):
        if i % 4 == 3:
            out.write("r%x.example.test A\n" % random.getrandbits(48))
        else:
            out.write(fixed[i % len(fixed)] + "\n")
EOF

rss() { awk '/^VmRSS/ {print $2}' "/proc/$MESHDNS_PID/status"; }
echo "soak: ${SECONDS_TOTAL}s at ${QPS} q/s; meshdns pid $MESHDNS_PID; work dir $WORK"
dnsperf -s 127.0.30.1 -p 53 -d "$WORK/queries" -l "$SECONDS_TOTAL" -Q "$QPS" -c 8 -t 2 \
	>"$WORK/dnsperf.log" 2>&1 &
PERF_PID=$!
PIDS+=("$PERF_PID")
printf '%8s %10s %10s\n' seconds rss_kib cache_entries
elapsed=0
while kill -0 "$PERF_PID" 2>/dev/null; do
	entries=$(curl -s http://127.0.30.1:9153/metrics | awk '/^meshdns_cache_entries / {print $2}')
	printf '%8d %10s %10s\n' "$elapsed" "$(rss)" "${entries:-?}"
	sleep 10
	elapsed=$((elapsed + 10))
done
wait "$PERF_PID" || true
printf '%8s %10s\n' end "$(rss)"
grep -E "Queries (sent|completed|lost)|Response codes|Queries per second|Average Latency" "$WORK/dnsperf.log" || cat "$WORK/dnsperf.log"
curl -s http://127.0.30.1:9153/metrics | grep -E '^meshdns_(dropped_total|cache_entries|cache_evictions_total|inflight) '
