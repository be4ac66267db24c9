#!/usr/bin/env bash
# meshdns benchmark (issue 7; targets from issues 13, 15, 16, 19, 24, 25 and 26). Not part of CI.
#
#   bench/run.sh                        build meshdns (cargo build --release --locked) and run
#   MESHDNS_BIN=path bench/run.sh       use that binary, no build
#   BENCH_SECONDS=10                    length of each timed run (default 10)
#   BENCH_ROUNDS=3                      interleaved rounds; the table quotes medians (default 3)
#   BENCH_GROUPS=hits,misses,...        the groups to run (default all of them):
#                                       hits misses lowrate gather reload tls threads search
#                                       outage overload loss sizing
#   BENCH_RATE=20000                    the fixed rate of the CPU and latency runs (qps)
#   BENCH_LOW_RATE=200                  the rate of the low-rate CPU run (qps, paced)
#   BENCH_LOW_SECONDS=60                length of the low-rate run, split over the rounds
#   BENCH_IDLE_SECONDS=60               the idle window of the live-configuration row
#   BENCH_LOSS_STEPS=500                queries per case of the loss group (each server)
#   BENCH_FLOOD_RATE=20000              datagrams a second of the mangled flood
#   BENCH_RELOAD_RATE=5000              query rate while the configuration is swapped
#   BENCH_SLICE=2                       timed runs are cut in slices this long, servers in turn
#   BENCH_NICE=-10                      niceness of every process the bench starts (root only)
#   BENCH_SIZING_RATE=2000              query rate of the sizing group's 1,000-source latency run
#   BENCH_NET=20                        use 127.0.N.x … 127.0.N+3.x (default 20)
#   BENCH_MESHDNS_ENV="VAR=V ..."       more environment for every meshdns (GLIBC_TUNABLES=...)
#   BENCH_RESULTS=dir                   where the results go (default bench/results)
#   BENCH_KEEP=1                        keep the work directory (configs, logs, raw dnsperf output)
#   BENCH_VENV=/opt/meshdns-bench/venv  where matplotlib is installed (pip, a venv)
#
# Compares meshdns with unbound (1 thread), dnsmasq and a floor (bench/floor.c: a UDP reflector
# that does no DNS work; for cache misses the same program as a relay with no DNS work), all in
# front of the same stand-in kube-dns (NSD). Measures, in one run and interleaved
# (each round starts every server afresh and takes them in a rotated order):
#   hits      cache-hit QPS, latency percentiles and CPU time per query at a fixed rate, RSS idle
#             and with 10,000 cached entries;
#   misses    the latency a cache miss adds over asking the upstream directly;
#   lowrate   CPU time and wake-ups per query at a pod's rate (200 qps, paced), vs unbound;
#   gather    a gathered SRV whose three cluster legs are delayed 20/40/80 ms, and one of
#             3 clusters x 60 targets (legs truncated over UDP, then TCP): CPU per answer and
#             latency over the slowest leg;
#   reload    an idle meshdns's CPU and wake-ups with and without MESHDNS_CONFIG_DIR, the time
#             from a kubelet-style `..data` swap to the new cluster answering, p99 during reloads;
#   tls       cache misses to a cluster over UDP, TCP (transport=tcp) and DNS over TLS (stunnel
#             in front of NSD, mutual TLS; and unbound terminating TLS itself, answering from its
#             own data: no second hop), TCP connects and TLS handshakes per 1,000 misses, RSS
#             with DoT configured;
#   threads   cache-hit QPS and latency at the fixed rate of meshdns with MESHDNS_THREADS=2 and
#             =1 and unbound with num-threads: 2, none of them pinned (the load generator shares
#             both cores with them);
#   search    upstream queries per glibc getaddrinfo (getent ahosts, AF_UNSPEC) of a cluster
#             name with the pod's search list and ndots:5, through a meshdns that answers the
#             search-list expansions itself and through one that does not (0.1.x);
#   outage    stale answers while the upstream is black-holed: latency, upstream queries per name;
#   overload  peak and after-flood RSS under 60,000 mangled datagrams, 40,000 misses with the
#             upstream black-holed, and 300 TCP connections that never read;
#   loss      peer links losing 1 % and 5 % of UDP packets each way (nftables `numgen random`
#             drops on the peers' addresses, inside the bench's namespace): cluster-route misses
#             through meshdns vs unbound forwarding the same zone over the same link, the same
#             with 20 ms of round trip added (bench/delayproxy.py), and a gathered SRV over two
#             lossy clusters (partial answers counted);
#   sizing    the cluster-level mode (one meshdns for a node's pods): QPS of one replica with
#             MESHDNS_THREADS=1 and 2, cache hits and misses (the cache off: every query asked
#             upstream, what a 5 s kube-dns TTL makes of a name asked less often), and latency
#             at BENCH_SIZING_RATE from 1,000 distinct source addresses (bench/sources.py),
#             none of them pinned; docs/design.md turns it into replicas for P pods at R qps.
#
# Writes bench/results/latest.md, bench/results/latest.png and bench/results/<date>-<commit>.md,
# and prints the table. Runs as root (port 53, apt-get, unshare -n). The packages (apt-get; pip
# into a venv, never the system Python) and the build come first, in the machine's network
# namespace; then the script runs itself again in a network namespace of its own
# (tests/lib/netns.sh: `unshare -n`, loopback only), so its addresses collide with nothing else
# on the machine. Traffic goes only to 127.0.0.0/8 there: every client is given an explicit
# server, unbound forwards "." to the stand-in only, dnsmasq runs with --no-resolv, and nothing
# reads /etc/resolv.conf for a server to ask.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/lib/nsd.sh
. "$ROOT/tests/lib/nsd.sh"
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/dot.sh
. "$ROOT/tests/lib/dot.sh"
BENCH=$ROOT/bench
BENCH_VENV=${BENCH_VENV:-/opt/meshdns-bench/venv}
PY=${PYTHON:-python3}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
RATE=${BENCH_RATE:-20000}
SLICE=${BENCH_SLICE:-2}
NICE=${BENCH_NICE:--10}
NET=${BENCH_NET:-20}
GROUPS_ALL=hits,misses,lowrate,gather,reload,tls,threads,search,outage,overload,loss,sizing
GROUPS_RUN=${BENCH_GROUPS:-$GROUPS_ALL}
LOW_RATE=${BENCH_LOW_RATE:-200}
LOW_SECONDS=${BENCH_LOW_SECONDS:-60}
IDLE_SECONDS=${BENCH_IDLE_SECONDS:-60}
FLOOD_RATE=${BENCH_FLOOD_RATE:-20000}
RELOAD_RATE=${BENCH_RELOAD_RATE:-5000}
SIZING_RATE=${BENCH_SIZING_RATE:-2000}
LOSS_STEPS=${BENCH_LOSS_STEPS:-500}
RESULTS=${BENCH_RESULTS:-$ROOT/bench/results}
read -ra MESHDNS_EXTRA_ENV <<<"${BENCH_MESHDNS_ENV:-}"
T0=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

log() { printf '[bench %4ds] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

[[ $(id -u) == 0 ]] || die "run as root (port 53, apt-get, nice)"
[[ $SECONDS_PER_RUN =~ ^[0-9]+$ && $SECONDS_PER_RUN -ge 1 ]] || die "BENCH_SECONDS must be a whole number ≥ 1"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "BENCH_ROUNDS must be a whole number ≥ 1"
[[ $NET =~ ^[0-9]+$ && $NET -ge 1 && $NET -le 250 ]] || die "BENCH_NET must be 1..250"
[[ $SLICE =~ ^[0-9]+$ && $SLICE -ge 1 ]] || die "BENCH_SLICE must be a whole number ≥ 1"
((SLICE > SECONDS_PER_RUN)) && SLICE=$SECONDS_PER_RUN
SLICES=$((SECONDS_PER_RUN / SLICE))
for n in LOW_RATE LOW_SECONDS IDLE_SECONDS FLOOD_RATE RELOAD_RATE LOSS_STEPS SIZING_RATE; do
	[[ ${!n} =~ ^[0-9]+$ && ${!n} -ge 1 ]] || die "BENCH_$n must be a whole number ≥ 1"
done
for g in ${GROUPS_RUN//,/ }; do
	[[ ,$GROUPS_ALL, == *,$g,* ]] || die "BENCH_GROUPS: unknown group '$g' (the groups: $GROUPS_ALL)"
done
for v in "${MESHDNS_EXTRA_ENV[@]}"; do
	[[ $v == [A-Za-z_]*=* ]] || die "BENCH_MESHDNS_ENV: '$v' is not VAR=VALUE"
done
has() { [[ ,$GROUPS_RUN, == *,$1,* ]]; } # GROUP: whether this run measures it
LOW_PER_ROUND=$(((LOW_SECONDS + ROUNDS - 1) / ROUNDS))

# Addresses (all loopback, all ours).
STANDIN=127.0.$NET.1  # stand-in kube-dns: NSD serving bench.test
MESH=127.0.$NET.2     # meshdns under test
UNBOUND=127.0.$NET.3  # unbound, 1 thread
DNSMASQ=127.0.$NET.4  # dnsmasq
FLOOR=127.0.$NET.5    # the floor reflector
GATHER=127.0.$NET.6   # meshdns for the gathered-SRV case (cache off, three clusters)
RELAY=127.0.$NET.7    # the floor for cache misses: floor.c relaying to the stand-in, no DNS work
GATHER_BIG=127.0.$NET.8 # meshdns for the 3 x 60 gathered SRV (cache off, legs not delayed)
OUTAGE=127.0.$NET.9   # meshdns whose upstream goes silent
OUTAGE_HOLE=127.0.$NET.10 # blackhole.c: relays to the stand-in, then drops everything
IDLE_PLAIN=127.0.$NET.11  # idle meshdns, environment only
IDLE_DIR=127.0.$NET.12    # idle meshdns with MESHDNS_CONFIG_DIR
IDLE_TLS=127.0.$NET.13    # idle meshdns with a DoT cluster configured
TLSMESH=127.0.$NET.14 # meshdns with one cluster over UDP, TCP and DoT each
STUNNEL=127.0.$NET.15 # stunnel: DoT on :853 in front of the first cluster's NSD (TCP)
OVERLOAD=127.0.$NET.16 # meshdns under the floods, default settings
FLOOD_HOLE=127.0.$NET.17 # blackhole.c dropping everything: the black-holed upstream of flood (b)
RELOADER=127.0.$NET.18 # meshdns whose MESHDNS_CONFIG_DIR is swapped
UNBOUND_DOT=127.0.$NET.19 # unbound terminating DoT on :853 itself, the first cluster's names as its own data
MESH_T2=127.0.$NET.20    # meshdns, MESHDNS_THREADS=2 (threads group, not pinned)
UNBOUND_T2=127.0.$NET.21 # unbound, num-threads: 2 (threads group, not pinned)
MESH_T1=127.0.$NET.22    # meshdns, MESHDNS_THREADS=1 (threads group, not pinned)
SEARCH_ON=127.0.$NET.23  # meshdns reading the pod's search list: expansions answered at once
SEARCH_OFF=127.0.$NET.24 # meshdns reading a resolv.conf without a search line (what 0.1.x did)
SEARCH_KUBE=127.0.$NET.25 # NSD: the search group's kube-dns (cluster.local of cluster 1), counted
SEARCH_B=127.0.$NET.26   # NSD: the search group's cluster b (cluster.local of cluster 2), counted
MESH_M1=127.0.$NET.27    # meshdns, MESHDNS_THREADS=1, cache off (sizing group, not pinned)
MESH_M2=127.0.$NET.28    # meshdns, MESHDNS_THREADS=2, cache off (sizing group, not pinned)
RELAY_FRESH=127.0.$NET.29 # floor.c relaying with a fresh socket per query (RFC 5452's random port)
SOURCES_BASE=127.$((NET + 4)).0 # the sizing group's 1,000 client addresses: 127.N+4.0.1 …
CLUSTER_NSD=(127.0.$((NET + 1)).1 127.0.$((NET + 1)).2 127.0.$((NET + 1)).3)
CLUSTER_PROXY=(127.0.$((NET + 2)).1 127.0.$((NET + 2)).2 127.0.$((NET + 2)).3)
LEG_MS=(20 40 80)
# The loss group: NSDs of clusters b and c behind lossy links, a proxy adding 20 ms of round trip
# in front of an unlossy copy of b (the link to the proxy loses), and the servers compared.
LOSSY_NSD=(127.0.$((NET + 3)).1 127.0.$((NET + 3)).2)
LOSSY_PROXY=127.0.$((NET + 3)).3
LOSS_MESH=127.0.$((NET + 3)).11     # meshdns, cache off: clusters a (not lossy), b, c
LOSS_MESH_RTT=127.0.$((NET + 3)).12 # meshdns, cache off: cluster b behind the 20 ms proxy
LOSS_UNBOUND=127.0.$((NET + 3)).13     # unbound forwarding cluster.local. to b's lossy NSD
LOSS_UNBOUND_RTT=127.0.$((NET + 3)).14 # unbound forwarding cluster.local. to the 20 ms proxy
LOSS_RTT_MS=20
LOSS_LEVELS=(1 5)

# Two cores or more: servers under test on CPU 0, the load generator on CPU 1.
if (($(nproc) >= 2)); then
	PIN_SERVER=(taskset -c 0)
	PIN_CLIENT=(taskset -c 1)
else
	PIN_SERVER=()
	PIN_CLIENT=()
fi
NSD_PIN=()
NICE_CMD=(nice -n "$NICE")

WORK=$(mktemp -d /tmp/meshdns-bench.XXXXXX)
PIDS=()
ours() { # PID: a live child of this script (a PID that was freed and reused is not)
	local st state ppid
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) } # after "(comm) ", which may hold spaces ("nsd: xfrd"): STATE PPID ...
	read -r state ppid _ <<<"$st"
	[[ $ppid == "$$" && $state != Z ]]
}
cleanup() {
	local p alive live=()
	for p in "${PIDS[@]}"; do ours "$p" && live+=("$p"); done
	for p in "${live[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 1 20); do
		alive=0
		for p in "${live[@]}"; do ours "$p" && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for p in "${live[@]}"; do ours "$p" && kill -KILL "$p" 2>/dev/null; done
	if [[ -n ${BENCH_KEEP:-} ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop_pid() { # PID: TERM, wait up to 2 s, KILL; only processes this script started
	local p=$1 q keep=()
	if ours "$p"; then
		kill -TERM "$p" 2>/dev/null
		for _ in $(seq 1 20); do
			ours "$p" || break
			sleep 0.1
		done
		ours "$p" && kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	fi
	for q in "${PIDS[@]}"; do [[ $q == "$p" ]] || keep+=("$q"); done
	PIDS=("${keep[@]}")
	return 0
}

listening() { # ADDR PORT u|t
	ss -Hln"$3" 2>/dev/null | awk '{print $4}' | grep -qxF "$1:$2"
}
comes_up() { # ADDR PORT: waits (5 s at most) for a TCP listener there
	local _
	for _ in $(seq 1 50); do
		listening "$1" "$2" t && return 0
		sleep 0.1
	done
	return 1
}
answers() { # ADDR NAME: one UDP query with an explicit server, no retries
	dig @"$1" "$2" A +tries=1 +time=1 +nosearch +noall +comments 2>/dev/null | grep -q 'status: NOERROR'
}
wait_answers() { # PID ADDR NAME SECONDS
	local n=$(($4 * 10))
	while ((n-- > 0)); do
		kill -0 "$1" 2>/dev/null || return 1
		answers "$2" "$3" && return 0
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------------------------------------------
# Prerequisites
# ---------------------------------------------------------------------------------------------
install_prereqs() {
	local pkgs=() made_policy=
	command -v dnsperf >/dev/null || pkgs+=(dnsperf)
	command -v unbound >/dev/null || pkgs+=(unbound)
	command -v dnsmasq >/dev/null || pkgs+=(dnsmasq-base) # the binary only: no system service
	command -v nsd >/dev/null || pkgs+=(nsd)
	command -v dig >/dev/null || pkgs+=(dnsutils)
	command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
	command -v ss >/dev/null || pkgs+=(iproute2)
	command -v curl >/dev/null || pkgs+=(curl)
	command -v taskset >/dev/null || pkgs+=(util-linux)
	command -v stunnel4 >/dev/null || pkgs+=(stunnel4) # the DoT terminator of the tls rows
	command -v openssl >/dev/null || pkgs+=(openssl)   # their certificates
	command -v nft >/dev/null || pkgs+=(nftables)      # the loss group's lossy links
	/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || pkgs+=(python3-venv)
	if ((${#pkgs[@]})); then
		log "installing ${pkgs[*]} (Debian)"
		# Packages with a service (unbound, nsd, stunnel4) must not start one: a system unbound would
		# fetch its trust anchor from the Internet. policy-rc.d refuses every start while we
		# install, if the machine does not already have one.
		if [[ ! -e /usr/sbin/policy-rc.d ]]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
		fi
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${pkgs[@]}"; } >"$WORK/apt.log" 2>&1
		local rc=$?
		[[ -n $made_policy ]] && rm -f /usr/sbin/policy-rc.d
		((rc == 0)) || {
			tail -20 "$WORK/apt.log" >&2
			return 1
		}
	fi
	if [[ -z ${PYTHON:-} ]] && ! "$BENCH_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
		# A venv of the bench's own: the system Python's packages stay untouched.
		log "installing matplotlib into $BENCH_VENV (pip, venv)"
		if ! { { [[ -x $BENCH_VENV/bin/python ]] || /usr/bin/python3 -m venv "$BENCH_VENV"; } &&
			"$BENCH_VENV/bin/pip" install -q --disable-pip-version-check matplotlib; } >"$WORK/pip.log" 2>&1; then
			log "warning: matplotlib did not install (see $WORK/pip.log); no chart this run"
		fi
	fi
}

# In the machine's network namespace: packages and the build, which need the registries. Then
# the rest runs in a private network namespace (this script again, under unshare -n).
if [[ -z ${TESTS_NETNS_PRIVATE:-} ]]; then
	install_prereqs || die "could not install the prerequisites"
	if [[ -z ${MESHDNS_BIN:-} ]]; then
		log "building meshdns (cargo build --release --locked)"
		(cd "$ROOT" && cargo build --release --locked) >"$WORK/build.log" 2>&1 || {
			tail -30 "$WORK/build.log" >&2
			die "cargo build failed"
		}
		MESHDNS_BIN=$ROOT/target/release/meshdns
		export BENCH_BUILT_HERE=1
	fi
	export MESHDNS_BIN
	cleanup # this phase's work dir; exec runs no EXIT trap
	trap - EXIT
	log "running in a network namespace of its own (unshare -n)"
fi
# The first time: re-executes this script under unshare -n (does not return). In there: lo up.
netns_private "$BENCH/run.sh" "$@"
# matplotlib's Python, when it installed (report.py draws the chart with it).
[[ -n ${PYTHON:-} || ! -x $BENCH_VENV/bin/python ]] || PY=$BENCH_VENV/bin/python

# ---------------------------------------------------------------------------------------------
# meshdns binary: copied into the work dir so a concurrent rebuild cannot swap it mid-run
# ---------------------------------------------------------------------------------------------
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -x $MESHDNS_BIN ]] || die "MESHDNS_BIN=$MESHDNS_BIN is not an executable"
cp "$MESHDNS_BIN" "$WORK/meshdns"
if [[ -z ${BENCH_BUILT_HERE:-} ]]; then
	BUILD_NOTE="MESHDNS_BIN=$MESHDNS_BIN (the tree was at $COMMIT)"
else
	# built by the first phase of this run (cargo build --release --locked)
	if [[ -n $(git -C "$ROOT" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]]; then
		COMMIT=$COMMIT-dirty
		BUILD_NOTE="built from the work tree at $COMMIT (uncommitted changes in src/ or Cargo.*)"
	else
		BUILD_NOTE="built from $COMMIT"
	fi
fi
MESHDNS=$WORK/meshdns
MESHDNS_VERSION=$("$MESHDNS" --version 2>&1 | head -1)

log "compiling the floor reflector, the latency probe and the flood and black-hole helpers"
for c in floor probe flood blackhole; do
	gcc -O2 -Wall -o "$WORK/$c" "$BENCH/$c.c" 2>"$WORK/$c-build.log" || {
		cat "$WORK/$c-build.log" >&2
		die "gcc failed on bench/$c.c"
	}
done

# Our addresses must be free (in the bench's own network namespace they are, but BENCH_NET
# also lets a run share one on purpose).
for a in "$STANDIN" "$MESH" "$UNBOUND" "$DNSMASQ" "$FLOOR" "$GATHER" "$RELAY" "$GATHER_BIG" "$OUTAGE" \
	"$OUTAGE_HOLE" "$IDLE_PLAIN" "$IDLE_DIR" "$IDLE_TLS" "$TLSMESH" "$OVERLOAD" "$FLOOD_HOLE" "$RELOADER" \
	"$MESH_T2" "$UNBOUND_T2" "$MESH_T1" "$MESH_M1" "$MESH_M2" "$SEARCH_ON" "$SEARCH_OFF" "$SEARCH_KUBE" "$SEARCH_B" \
	"${CLUSTER_NSD[@]}" "${CLUSTER_PROXY[@]}" "${LOSSY_NSD[@]}" "$LOSSY_PROXY" "$LOSS_MESH" "$LOSS_MESH_RTT" \
	"$LOSS_UNBOUND" "$LOSS_UNBOUND_RTT"; do
	if listening "$a" 53 u || listening "$a" 53 t; then
		die "$a:53 is already taken (another run of the bench? pick BENCH_NET)"
	fi
done
listening "$MESH" 9153 t && die "$MESH:9153 is already taken"
listening "$STUNNEL" 853 t && die "$STUNNEL:853 is already taken"
listening "$UNBOUND_DOT" 853 t && die "$UNBOUND_DOT:853 is already taken"

# ---------------------------------------------------------------------------------------------
# Query files: 20,000 names h0..h19999.bench.test. h0..h9999 fill the caches to 10k entries,
# h0..h999 are the cache-hit set, h10000..h19999 are asked once each for the cache-miss run.
# o0..o199.bench.test have a TTL of 2 s (the outage rows).
# ---------------------------------------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 10000; i++) print "h" i ".bench.test A" }' >"$WORK/fill.txt"
awk 'BEGIN { for (i = 0; i < 1000; i++) print "h" i ".bench.test A" }' >"$WORK/hot.txt"
awk 'BEGIN { for (i = 10000; i < 20000; i++) print "h" i ".bench.test A" }' >"$WORK/miss.txt"
OUTAGE_NAMES=200
awk -v n=$OUTAGE_NAMES 'BEGIN { for (i = 0; i < n; i++) print "o" i ".bench.test A" }' >"$WORK/outage-warm.txt"
awk -v n=$OUTAGE_NAMES 'BEGIN { for (k = 0; k < 1000; k++) for (i = 0; i < n; i++) print "o" i ".bench.test A" }' >"$WORK/outage.txt"
# 50 names no overload instance has asked: the fresh UDP misses sent during flood (c).
awk 'BEGIN { for (i = 19950; i < 20000; i++) print "h" i ".bench.test A" }' >"$WORK/fresh50.txt"
# Cluster names for the DoT rows: one name of the first cluster asked as cluster u (UDP),
# p (TCP) and t (DoT), one after the other (probe.c adds the zone); each a miss.
awk 'BEGIN { for (i = 0; i < 10000; i++) print "h" i ".mongo.db A" }' >"$WORK/cluster-names.txt"
awk 'BEGIN { for (i = 0; i < 1000; i++) print "h" i ".mongo.db.svc.cluster.local A" }' >"$WORK/direct-cluster.txt"
# The names asked while the configuration is swapped: cache hits of both routes that stay.
awk 'BEGIN { for (i = 0; i < 500; i++) { print "h" i ".bench.test A"; print "h" i ".mongo.db.cluster.a A" } }' >"$WORK/reload.txt"

# ---------------------------------------------------------------------------------------------
# NSD: the stand-in kube-dns and the three stand-in clusters
# ---------------------------------------------------------------------------------------------
NSD_CONF=nsd_conf # nsd_conf_control for an NSD whose queries are counted (nsd-control stats)
start_nsd() { # NAME ADDR ZONE PROBE_NAME (zone file already at $WORK/NAME/zone)
	local d=$WORK/$1
	{
		"$NSD_CONF" "$d" "$2" 'hide-version: yes' 'minimal-responses: yes' 'verbosity: 1'
		nsd_zone "$3" "$d/zone"
	} >"$d/nsd.conf"
	nsd-checkconf "$d/nsd.conf" >"$d/check.log" 2>&1 || {
		cat "$d/check.log" >&2
		return 1
	}
	"${NSD_PIN[@]}" "${NICE_CMD[@]}" nsd -d -c "$d/nsd.conf" >"$d/out.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	wait_answers "$pid" "$2" "$4" 20 || {
		cat "$d/out.log" "$d/nsd.log" >&2 2>/dev/null
		return 1
	}
}

mkdir -p "$WORK/standin"
{
	# shellcheck disable=SC2016 # zone-file directives, not shell expansions
	printf '$ORIGIN bench.test.\n$TTL 3600\n'
	printf '@ IN SOA ns.bench.test. hostmaster.bench.test. 1 7200 1800 86400 60\n'
	printf '@ IN NS ns.bench.test.\nns IN A %s\nprobe IN A 192.0.2.1\n' "$STANDIN"
	awk 'BEGIN { for (i = 0; i < 20000; i++) printf "h%d IN A 10.%d.%d.%d\n", i, int(i / 65536), int(i / 256) % 256, i % 256 }'
	awk -v n=$OUTAGE_NAMES 'BEGIN { for (i = 0; i < n; i++) printf "o%d 2 IN A 10.200.%d.%d\n", i, int(i / 256), i % 256 }'
} >"$WORK/standin/zone"
# The stand-in kube-dns shares CPU 0 with the server under test: left to the scheduler, its
# placement made the cache-miss numbers jump by 2x from one round to the next.
log "starting the stand-in kube-dns (NSD on $STANDIN, 20,000 names)"
NSD_PIN=("${PIN_SERVER[@]}")
start_nsd standin "$STANDIN" bench.test probe.bench.test || die "NSD did not start"
NSD_PIN=()

# Each cluster: the mongo set (3 members), 10,000 names hN.mongo.db.svc (cluster-zone misses)
# and _big._tcp.big.db.svc with 60 SRV targets (too large for 1232 bytes: TC, then TCP).
BIG_TARGETS=60
for i in 0 1 2; do
	c=$((i + 1))
	mkdir -p "$WORK/cluster$c"
	{
		# shellcheck disable=SC2016 # zone-file directives, not shell expansions
		printf '$ORIGIN cluster.local.\n$TTL 30\n'
		printf '@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30\n'
		printf '@ IN NS ns.dns.cluster.local.\nns.dns IN A 10.%d.255.10\n' "$c"
		for p in 0 1 2; do
			printf 'mongo-%d.mongo.db.svc IN A 10.%d.0.%d\n' "$p" "$c" $((10 + p))
			printf '_mongodb._tcp.mongo.db.svc IN SRV 0 33 27017 mongo-%d.mongo.db.svc.cluster.local.\n' "$p"
		done
		awk -v c=$c 'BEGIN { for (i = 0; i < 10000; i++) printf "h%d.mongo.db.svc IN A 10.%d.%d.%d\n", i, 100 + c, int(i / 256), i % 256 }'
		awk -v c=$c -v n=$BIG_TARGETS 'BEGIN { for (i = 0; i < n; i++) {
			printf "_big._tcp.big.db.svc IN SRV 0 1 27017 big-%d.big.db.svc.cluster.local.\n", i
			printf "big-%d.big.db.svc IN A 10.%d.1.%d\n", i, c, i } }'
	} >"$WORK/cluster$c/zone"
	start_nsd "cluster$c" "${CLUSTER_NSD[$i]}" cluster.local ns.dns.cluster.local || die "cluster NSD $c did not start"
done
# The search group's upstreams: NSDs of their own (the zones of clusters 1 and 2), whose queries
# are counted with nsd-control (its stats make NSD drop open TCP connections: not on the NSDs
# the other groups use).
if has search; then
	log "starting the search group's kube-dns and cluster b (NSD on $SEARCH_KUBE and $SEARCH_B, counted)"
	NSD_CONF=nsd_conf_control
	for c in kube b; do
		mkdir -p "$WORK/search-$c"
		cp "$WORK/cluster$([[ $c == kube ]] && echo 1 || echo 2)/zone" "$WORK/search-$c/zone"
	done
	start_nsd search-kube "$SEARCH_KUBE" cluster.local ns.dns.cluster.local || die "NSD (search kube-dns) did not start"
	start_nsd search-b "$SEARCH_B" cluster.local ns.dns.cluster.local || die "NSD (search cluster b) did not start"
	NSD_CONF=nsd_conf
fi

"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/floor" "$FLOOR" 53 >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")
wait_answers "$FLOOR_PID" "$FLOOR" probe.bench.test 10 || die "the floor did not start"
"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/floor" "$RELAY" 53 "$STANDIN:53" >"$WORK/relay.log" 2>&1 &
RELAY_PID=$!
PIDS+=("$RELAY_PID")
wait_answers "$RELAY_PID" "$RELAY" probe.bench.test 10 || die "the floor relay did not start"
"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/floor" "$RELAY_FRESH" 53 "$STANDIN:53" fresh >"$WORK/relay-fresh.log" 2>&1 &
RELAY_FRESH_PID=$!
PIDS+=("$RELAY_FRESH_PID")
wait_answers "$RELAY_FRESH_PID" "$RELAY_FRESH" probe.bench.test 10 || die "the fresh-socket floor relay did not start"

# Every meshdns: an empty environment but for these, BENCH_MESHDNS_ENV and the arguments.
meshdns_env() { # LISTEN [VAR=VALUE...] COMMAND...: run in the background (&) only; execs
	# Every meshdns runs in cluster "here", whose DNS is the stand-in kube-dns: a cluster list
	# must name its local cluster (here=, asked through MESHDNS_UPSTREAMS), so the measured
	# clusters stay peers asked at their own endpoints.
	local listen=$1
	shift
	exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin MESHDNS_LISTEN="$listen:53" \
		MESHDNS_UPSTREAMS="$STANDIN" MESHDNS_ADMIN_LISTEN="$listen:9153" MESHDNS_LOCAL_CLUSTER=here \
		"${MESHDNS_EXTRA_ENV[@]}" "$@"
}
start_meshdns() { # VAR LISTEN LOG [VAR=VALUE...]: a meshdns on CPU 0, its PID in VAR; up when it
	# answers MESH_PROBE (default probe.bench.test, a name of the stand-in kube-dns)
	local var=$1 listen=$2 logf=$3 pid
	shift 3
	meshdns_env "$listen" "$@" "${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$MESHDNS" >"$logf" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	printf -v "$var" %s "$pid"
	wait_answers "$pid" "$listen" "${MESH_PROBE:-probe.bench.test}" 20 || {
		cat "$logf" >&2
		die "meshdns on $listen did not start"
	}
}

start_delayproxy() { # LOG PROBE_ADDR SPEC...: bench/delayproxy.py with SPECs, up when PROBE_ADDR answers
	local logf=$1 probe_addr=$2 pid
	shift 2
	"${NICE_CMD[@]}" "$PY" "$BENCH/delayproxy.py" "$@" >"$logf" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait_answers "$pid" "$probe_addr" ns.dns.cluster.local 20 || {
		cat "$logf" >&2
		die "the delaying proxy ($*) did not start"
	}
}

if has gather; then
	log "starting the delaying proxies (${LEG_MS[*]} ms) and the gathering meshdns"
	specs=()
	for i in 0 1 2; do specs+=("${CLUSTER_PROXY[$i]}:53=${CLUSTER_NSD[$i]}:53@${LEG_MS[$i]}"); done
	start_delayproxy "$WORK/proxy.log" "${CLUSTER_PROXY[2]}" "${specs[@]}"
	# The gathered-SRV meshdns: three clusters behind the proxies, cache off so every query
	# gathers. Not pinned, as before: it shares the machine with the proxies.
	meshdns_env "$GATHER" MESHDNS_CACHE_SIZE=0 \
		MESHDNS_CLUSTERS="here=; a=${CLUSTER_PROXY[0]}; b=${CLUSTER_PROXY[1]}; c=${CLUSTER_PROXY[2]}" \
		"${NICE_CMD[@]}" "$MESHDNS" >"$WORK/meshdns-gather.log" 2>&1 &
	GATHER_PID=$!
	PIDS+=("$GATHER_PID")
	wait_answers "$GATHER_PID" "$GATHER" probe.bench.test 20 || {
		cat "$WORK/meshdns-gather.log" >&2
		die "meshdns (gather instance) did not start"
	}
	# 3 x 60 targets: the clusters' NSDs asked directly, cache off.
	start_meshdns GATHER_BIG_PID "$GATHER_BIG" "$WORK/meshdns-gather-big.log" MESHDNS_CACHE_SIZE=0 \
		MESHDNS_CLUSTERS="here=; a=${CLUSTER_NSD[0]}; b=${CLUSTER_NSD[1]}; c=${CLUSTER_NSD[2]}"
fi

if has loss; then
	log "starting the loss group's lossy clusters (NSD on ${LOSSY_NSD[*]}), the ${LOSS_RTT_MS} ms proxy and two meshdns"
	for i in 0 1; do
		mkdir -p "$WORK/lossy$i"
		cp "$WORK/cluster$((i + 2))/zone" "$WORK/lossy$i/zone"
		start_nsd "lossy$i" "${LOSSY_NSD[$i]}" cluster.local ns.dns.cluster.local || die "NSD (lossy cluster $i) did not start"
	done
	# The proxy's own leg to b's zone goes to the unlossy copy (cluster 2's NSD): the loss is
	# on the link to the proxy, where meshdns and unbound send.
	start_delayproxy "$WORK/loss-proxy.log" "$LOSSY_PROXY" "$LOSSY_PROXY:53=${CLUSTER_NSD[1]}:53@$LOSS_RTT_MS"
	# The gathering one runs in cluster a (not lossy: its kube-dns is cluster 1's NSD), so a
	# gathered answer asks a, b and c, and nothing else.
	MESH_PROBE=ns.dns.cluster.local start_meshdns LOSS_MESH_PID "$LOSS_MESH" "$WORK/meshdns-loss.log" \
		MESHDNS_CACHE_SIZE=0 MESHDNS_UPSTREAMS="${CLUSTER_NSD[0]}" MESHDNS_LOCAL_CLUSTER=a \
		MESHDNS_CLUSTERS="a=; b=${LOSSY_NSD[0]}; c=${LOSSY_NSD[1]}"
	start_meshdns LOSS_MESH_RTT_PID "$LOSS_MESH_RTT" "$WORK/meshdns-loss-rtt.log" MESHDNS_CACHE_SIZE=0 \
		MESHDNS_CLUSTERS="here=; b=$LOSSY_PROXY"
fi

# ---------------------------------------------------------------------------------------------
# The servers under test, started afresh every round
# ---------------------------------------------------------------------------------------------
declare -A SPID ADDR
ADDR=([meshdns]=$MESH [unbound]=$UNBOUND [dnsmasq]=$DNSMASQ [floor]=$FLOOR [direct]=$STANDIN [relay]=$RELAY [fresh]=$RELAY_FRESH
	[meshdns-t2]=$MESH_T2 [unbound-t2]=$UNBOUND_T2 [meshdns-t1]=$MESH_T1 [meshdns-m1]=$MESH_M1 [meshdns-m2]=$MESH_M2)
SPID[floor]=$FLOOR_PID

unbound_conf() { # ADDR THREADS DIR: unbound forwarding "." to the stand-in
	cat <<EOF
server:
	num-threads: $2
	interface: $1
	port: 53
	do-ip4: yes
	do-ip6: no
	do-udp: yes
	do-tcp: yes
	access-control: 127.0.0.0/8 allow
	do-not-query-localhost: no
	module-config: "iterator"
	username: ""
	chroot: ""
	directory: "$3"
	pidfile: ""
	use-syslog: no
	logfile: "$3/unbound.log"
	verbosity: 0
	msg-cache-size: 64m
	rrset-cache-size: 128m
	qname-minimisation: no
	prefetch: no
	so-reuseport: $( (($2 > 1)) && echo yes || echo no)
	local-zone: "test." nodefault
remote-control:
	control-enable: no
forward-zone:
	name: "."
	forward-addr: $STANDIN@53
EOF
}
for u in "unbound $UNBOUND 1" "unbound-t2 $UNBOUND_T2 2"; do
	read -r d a n <<<"$u"
	mkdir -p "$WORK/$d"
	unbound_conf "$a" "$n" "$WORK/$d" >"$WORK/$d/unbound.conf"
	unbound-checkconf "$WORK/$d/unbound.conf" >"$WORK/$d/check.log" 2>&1 || {
		cat "$WORK/$d/check.log" >&2
		die "bad $d/unbound.conf"
	}
done

# The loss group's unbound: forwarding cluster.local. over the lossy link (the rest to the stand-in).
if has loss; then
	for u in "unbound-loss $LOSS_UNBOUND ${LOSSY_NSD[0]}" "unbound-loss-rtt $LOSS_UNBOUND_RTT $LOSSY_PROXY"; do
		read -r d a fwd <<<"$u"
		mkdir -p "$WORK/$d"
		{
			unbound_conf "$a" 1 "$WORK/$d"
			printf 'forward-zone:\n\tname: "cluster.local."\n\tforward-addr: %s@53\n' "$fwd"
		} >"$WORK/$d/unbound.conf"
		unbound-checkconf "$WORK/$d/unbound.conf" >"$WORK/$d/check.log" 2>&1 || {
			cat "$WORK/$d/check.log" >&2
			die "bad $d/unbound.conf"
		}
		"${PIN_SERVER[@]}" "${NICE_CMD[@]}" unbound -d -c "$WORK/$d/unbound.conf" >"$WORK/$d.log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		wait_answers "$pid" "$a" probe.bench.test 20 || {
			cat "$WORK/$d.log" "$WORK/$d/unbound.log" >&2 2>/dev/null
			die "$d did not start"
		}
	done
fi

start_server() { # NAME ROUND
	local name=$1 r=$2 pid
	case $name in
	meshdns)
		meshdns_env "$MESH" "${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$MESHDNS" >"$WORK/r$r-meshdns.log" 2>&1 &
		;;
	meshdns-t[12]) # the threads and sizing groups: not pinned
		meshdns_env "${ADDR[$name]}" MESHDNS_THREADS="${name#meshdns-t}" "${NICE_CMD[@]}" "$MESHDNS" >"$WORK/r$r-$name.log" 2>&1 &
		;;
	meshdns-m[12]) # the sizing group's misses: the cache off, not pinned
		meshdns_env "${ADDR[$name]}" MESHDNS_THREADS="${name#meshdns-m}" MESHDNS_CACHE_SIZE=0 "${NICE_CMD[@]}" "$MESHDNS" \
			>"$WORK/r$r-$name.log" 2>&1 &
		;;
	unbound)
		"${PIN_SERVER[@]}" "${NICE_CMD[@]}" unbound -d -c "$WORK/unbound/unbound.conf" >"$WORK/r$r-unbound.log" 2>&1 &
		;;
	unbound-t2)
		"${NICE_CMD[@]}" unbound -d -c "$WORK/unbound-t2/unbound.conf" >"$WORK/r$r-unbound-t2.log" 2>&1 &
		;;
	dnsmasq)
		"${PIN_SERVER[@]}" "${NICE_CMD[@]}" dnsmasq --conf-file=/dev/null --keep-in-foreground \
			--no-resolv --no-hosts --no-poll --server="$STANDIN" --cache-size=10000 \
			--listen-address="$DNSMASQ" --bind-interfaces --port=53 --pid-file= --user=root \
			--log-facility="$WORK/r$r-dnsmasq.log" >"$WORK/r$r-dnsmasq.out" 2>&1 &
		;;
	esac
	pid=$!
	PIDS+=("$pid")
	SPID[$name]=$pid
	wait_answers "$pid" "${ADDR[$name]}" probe.bench.test 20 || {
		cat "$WORK/r$r-$name".* >&2 2>/dev/null
		die "$name did not start"
	}
}

RAW=$WORK/raw.tsv
: >"$RAW"
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RAW"; } # ROUND SERVER METRIC VALUE
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; } # utime stime, every thread
sched_ns() {                                            # PID: time on a CPU, all threads (ns)
	cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'
}
ctx_switches() { # PID: voluntary + involuntary context switches, all threads
	cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/ {s += $2} END {print s + 0}'
}
threads() { # PID: how many threads
	local t=(/proc/"$1"/task/*)
	echo "${#t[@]}"
}
metric_of() { # ADDR SERIES: a meshdns counter or gauge (SERIES with its labels, as printed), or 0
	curl -s --noproxy '*' --max-time 2 "http://$1:9153/metrics" | awk -v m="$2" '$1 == m {print $2; f=1} END {if (!f) print 0}'
}
metric() { metric_of "$MESH" "$1"; } # NAME: the meshdns under comparison's
metrics_dump() { curl -s --noproxy '*' --max-time 2 "http://$1:9153/metrics" >"$2"; } # ADDR FILE
perf() { # dnsperf on the client core, explicit server, nothing else asked
	"${PIN_CLIENT[@]}" "${NICE_CMD[@]}" dnsperf "$@"
}
probe() { # the sequential latency probe, on the client core
	"${PIN_CLIENT[@]}" "${NICE_CMD[@]}" "$WORK/probe" "$@"
}
dnsperf_free() { # dnsperf on any core: the threads group's servers are not pinned either
	"${NICE_CMD[@]}" dnsperf "$@"
}
flood() { # the flood helper, on the client core
	"${PIN_CLIENT[@]}" "${NICE_CMD[@]}" "$WORK/flood" "$@"
}
rotate() { # ROUND ITEMS...: the items rotated by ROUND, so each takes each slot in turn
	local r=$1
	shift
	local a=("$@") n=$# i
	for ((i = 0; i < n; i++)); do printf '%s ' "${a[$(((i + r) % n))]}"; done
}
now() { printf '%s\n' "$EPOCHREALTIME"; } # wall clock, the sampler's and blackhole.c's axis
elapsed_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}'; }

# ---------------------------------------------------------------------------------------------
# TLS: a CA, a server certificate for the stand-in cluster and a client certificate (mutual TLS),
# made now; stunnel terminates DoT on $STUNNEL:853 and passes the queries to the first cluster's
# NSD over TCP.
# ---------------------------------------------------------------------------------------------
TLS_NAME=cluster-a.bench.test
TLS_ENV=()
if has tls || has reload; then
	dot_certs "$WORK/tls" "$TLS_NAME" || {
		cat "$WORK/tls/openssl.log" >&2
		die "openssl could not make the certificates"
	}
	TLS_ENV=(MESHDNS_TLS_CA_FILE="$WORK/tls/ca.pem" MESHDNS_TLS_CERT_FILE="$WORK/tls/client.pem"
		MESHDNS_TLS_KEY_FILE="$WORK/tls/client.key")
fi
if has tls; then
	log "starting stunnel (DoT on $STUNNEL:853, client certificates required) in front of ${CLUSTER_NSD[0]}"
	cat >"$WORK/tls/stunnel.conf" <<EOF
foreground = yes
pid =
output = $WORK/stunnel.log
debug = 5
[dot]
accept = $STUNNEL:853
connect = ${CLUSTER_NSD[0]}:53
cert = $WORK/tls/server.pem
key = $WORK/tls/server.key
CAfile = $WORK/tls/ca.pem
verify = 2
[dot-open]
accept = $STUNNEL:854
connect = ${CLUSTER_NSD[0]}:53
cert = $WORK/tls/server.pem
key = $WORK/tls/server.key
EOF
	"${PIN_SERVER[@]}" "${NICE_CMD[@]}" stunnel4 "$WORK/tls/stunnel.conf" >"$WORK/tls/stunnel.out" 2>&1 &
	STUNNEL_PID=$!
	PIDS+=("$STUNNEL_PID")
	comes_up "$STUNNEL" 853 || {
		cat "$WORK/tls/stunnel.out" "$WORK/stunnel.log" >&2 2>/dev/null
		die "stunnel did not start"
	}
fi
# The DoT row without a second hop: unbound terminates TLS itself and answers the first
# cluster's 10,000 names from its own data (the same addresses as that cluster's NSD). unbound
# does not ask for client certificates; meshdns presents its own anyway.
if has tls; then
	log "starting unbound (DoT on $UNBOUND_DOT:853, the first cluster's names as local data)"
	mkdir -p "$WORK/unbound-dot"
	unbound_dot_conf "$WORK/unbound-dot" "$UNBOUND_DOT" "$WORK/tls" >"$WORK/unbound-dot/unbound.conf"
	unbound-checkconf "$WORK/unbound-dot/unbound.conf" >"$WORK/unbound-dot/check.log" 2>&1 || {
		cat "$WORK/unbound-dot/check.log" >&2
		die "bad unbound.conf for DoT"
	}
	"${PIN_SERVER[@]}" "${NICE_CMD[@]}" unbound -d -c "$WORK/unbound-dot/unbound.conf" >"$WORK/unbound-dot/out.log" 2>&1 &
	PIDS+=("$!")
	comes_up "$UNBOUND_DOT" 853 || {
		cat "$WORK/unbound-dot/out.log" "$WORK/unbound-dot/unbound.log" >&2 2>/dev/null
		die "unbound (DoT) did not start"
	}
fi
# Cluster u over UDP, p over TCP, t over DoT through stunnel: one NSD behind all three; k over
# DoT to unbound answering itself, q over plain TCP to the same unbound (DoT vs TCP, one server). The second stunnel service (:854, no client certificate) is
# for dnsperf -m dot asking directly.
TLS_CLUSTERS="here=; u=${CLUSTER_NSD[0]}; p=${CLUSTER_NSD[0]} transport=tcp; t=$STUNNEL:853 transport=tls tls_name=$TLS_NAME"
TLS_CLUSTERS+="; k=$UNBOUND_DOT:853 transport=tls tls_name=$TLS_NAME; q=$UNBOUND_DOT:53 transport=tcp"

# ---------------------------------------------------------------------------------------------
# Idle meshdns (live configuration, DoT): started now, measured over BENCH_IDLE_SECONDS while the
# rounds run (an idle process gets no CPU time from other processes' load; nothing asks them).
# ---------------------------------------------------------------------------------------------
CLUSTERS3="here=; a=${CLUSTER_NSD[0]}; b=${CLUSTER_NSD[1]}; c=${CLUSTER_NSD[2]}"
write_config() { # DIR VAR=VALUE...: a source directory for reload.py, one file per variable
	local d=$1 kv
	shift
	mkdir -p "$d"
	for kv in "$@"; do printf '%s\n' "${kv#*=}" >"$d/${kv%%=*}"; done
}
declare -A IDLE_PID
IDLE_T0=
IDLE_DONE=
if has reload || has tls; then
	log "starting the idle meshdns (environment only / MESHDNS_CONFIG_DIR / DoT configured)"
	write_config "$WORK/idle-src" MESHDNS_CLUSTERS="$CLUSTERS3" MESHDNS_CACHE_SIZE=10000
	"$PY" "$BENCH/reload.py" write "$WORK/idle-config" "$WORK/idle-src" || die "reload.py write failed"
	start_meshdns "IDLE_PID[plain]" "$IDLE_PLAIN" "$WORK/meshdns-idle-plain.log" MESHDNS_CLUSTERS="$CLUSTERS3"
	start_meshdns "IDLE_PID[configdir]" "$IDLE_DIR" "$WORK/meshdns-idle-configdir.log" MESHDNS_CONFIG_DIR="$WORK/idle-config"
	has tls && start_meshdns "IDLE_PID[dot]" "$IDLE_TLS" "$WORK/meshdns-idle-dot.log" \
		MESHDNS_CLUSTERS="$TLS_CLUSTERS" "${TLS_ENV[@]}"
	sleep 2 # past the start-up work and the one query each was asked
	IDLE_T0=$(now)
	for k in "${!IDLE_PID[@]}"; do
		read -r u s < <(cpu_ticks "${IDLE_PID[$k]}")
		printf '%s %s %s %s %s %s\n' "$k" "$((u + s))" "$(ctx_switches "${IDLE_PID[$k]}")" \
			"$(sched_ns "${IDLE_PID[$k]}")" "$(rss_kb "${IDLE_PID[$k]}")" "$(threads "${IDLE_PID[$k]}")" >>"$WORK/idle-begin.txt"
	done
fi
idle_finish() { # [wait]: after BENCH_IDLE_SECONDS (waiting for them with "wait"), the idle rows
	[[ -n $IDLE_T0 && -z $IDLE_DONE ]] || return 0
	local left
	left=$(awk -v e="$(elapsed_since "$IDLE_T0")" -v w="$IDLE_SECONDS" 'BEGIN {l = w - e; print (l > 0 ? l : 0)}')
	if [[ $left != 0 ]]; then
		[[ ${1:-} == wait ]] || return 0
		log "waiting ${left}s for the end of the idle window"
		sleep "$left"
	fi
	local k u s
	for k in "${!IDLE_PID[@]}"; do
		read -r u s < <(cpu_ticks "${IDLE_PID[$k]}")
		printf '%s %s %s %s %s %s\n' "$k" "$((u + s))" "$(ctx_switches "${IDLE_PID[$k]}")" \
			"$(sched_ns "${IDLE_PID[$k]}")" "$(rss_kb "${IDLE_PID[$k]}")" "$(threads "${IDLE_PID[$k]}")" >>"$WORK/idle-end.txt"
	done
	elapsed_since "$IDLE_T0" >"$WORK/idle-seconds.txt"
	for k in "${!IDLE_PID[@]}"; do stop_pid "${IDLE_PID[$k]}"; done
	IDLE_DONE=1
}

# The meshdns whose configuration directory is swapped: clusters a and b (A), a, b and c (B).
if has reload; then
	write_config "$WORK/reload-a" MESHDNS_CLUSTERS="here=; a=${CLUSTER_NSD[0]}; b=${CLUSTER_NSD[1]}"
	write_config "$WORK/reload-b" MESHDNS_CLUSTERS="$CLUSTERS3"
	"$PY" "$BENCH/reload.py" write "$WORK/reload-config" "$WORK/reload-a" || die "reload.py write failed"
	start_meshdns RELOAD_PID "$RELOADER" "$WORK/meshdns-reload.log" MESHDNS_CONFIG_DIR="$WORK/reload-config"
fi

wait_ready() { # PID ADDR: /readyz answers 200 (for a meshdns whose upstream never answers)
	local n=200
	while ((n-- > 0)); do
		kill -0 "$1" 2>/dev/null || return 1
		[[ $(curl -s --noproxy '*' --max-time 1 -o /dev/null -w '%{http_code}' "http://$2:9153/readyz") == 200 ]] && return 0
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------------------------------------------
# The groups of one round
# ---------------------------------------------------------------------------------------------
round_fill() { # ROUND: RSS idle, 10,000 names into each cache, RSS with them
	local r=$1 s pass
	for s in meshdns unbound dnsmasq floor; do rec "$r" "$s" rss_idle_kb "$(rss_kb "${SPID[$s]}")"; done
	# 10,000 distinct names into each cache (twice: the second pass fills what a loss missed).
	for s in $(rotate "$r" meshdns unbound dnsmasq); do
		for pass in 1 2; do
			perf -s "${ADDR[$s]}" -d "$WORK/fill.txt" -n 1 -c 4 -q 20 -t 2 >"$WORK/r$r-fill$pass-$s.out" 2>&1
		done
	done
	sleep 1
	for s in meshdns unbound dnsmasq floor; do rec "$r" "$s" rss_10k_kb "$(rss_kb "${SPID[$s]}")"; done
	rec "$r" meshdns cache_entries "$(metric meshdns_cache_entries)"
}

round_hits() { # ROUND
	local r=$1 k s h0 u0 s0 u1 s1
	# Timed runs come in slices of BENCH_SLICE seconds, the servers taking turns slice by slice,
	# so a burst of load from elsewhere on the machine falls on every server alike.
	log "round $r: cache-hit QPS (${SECONDS_PER_RUN}s each, in ${SLICES} slices)"
	for ((k = 1; k <= SLICES; k++)); do
		for s in $(rotate $((r + k)) meshdns unbound dnsmasq floor); do
			h0=$(metric meshdns_cache_hits_total)
			perf -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$SLICE" -c 4 -q 200 -t 1 >"$WORK/r$r-qps-$s-$k.out" 2>&1
			[[ $s == meshdns ]] && rec "$r" meshdns qps_hits "$(($(metric meshdns_cache_hits_total) - h0))"
		done
	done

	log "round $r: fixed rate $RATE qps, CPU and latency (${SECONDS_PER_RUN}s each, in ${SLICES} slices)"
	for ((k = 1; k <= SLICES; k++)); do
		for s in $(rotate $((r + k)) meshdns unbound dnsmasq floor); do
			read -r u0 s0 < <(cpu_ticks "${SPID[$s]}")
			perf -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$SLICE" -Q "$RATE" -c 4 -q 200 -t 1 -v >"$WORK/r$r-fixed-$s-$k.out" 2>&1
			read -r u1 s1 < <(cpu_ticks "${SPID[$s]}")
			rec "$r" "$s" cpu_user_ticks $((u1 - u0))
			rec "$r" "$s" cpu_sys_ticks $((s1 - s0))
		done
	done
}

round_lowrate() { # ROUND: the servers side by side, each at LOW_RATE, cache hits
	local r=$1 s pids=()
	local -A c0 w0
	log "round $r: $LOW_RATE qps paced, CPU and wake-ups per query (${LOW_PER_ROUND}s, the servers side by side)"
	for s in meshdns unbound dnsmasq; do
		c0[$s]=$(sched_ns "${SPID[$s]}")
		w0[$s]=$(ctx_switches "${SPID[$s]}")
	done
	for s in meshdns unbound dnsmasq; do
		perf -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$LOW_PER_ROUND" -Q "$LOW_RATE" -c 1 -q 10 -t 1 >"$WORK/r$r-low-$s.out" 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	for s in meshdns unbound dnsmasq; do
		rec "$r" "$s" low_cpu_ns $(($(sched_ns "${SPID[$s]}") - c0[$s]))
		rec "$r" "$s" low_ctxsw $(($(ctx_switches "${SPID[$s]}") - w0[$s]))
		rec "$r" "$s" threads "$(threads "${SPID[$s]}")"
	done
}

round_misses() { # ROUND
	local r=$1 s targets=()
	# Each of h10000..h19999 asked once of each server (a miss) and of the stand-in directly, one
	# query in flight, the targets taking turns name by name; the floor relay shows what one more
	# hop costs with no DNS work at all, the fresh-socket relay that hop with a socket per query
	# (a random source port, RFC 5452, as meshdns opens for every attempt).
	log "round $r: cache misses, one query at a time, interleaved (${SECONDS_PER_RUN}s)"
	for s in $(rotate "$r" direct meshdns unbound dnsmasq relay fresh); do targets+=("$s=${ADDR[$s]}:53"); done
	probe "$SECONDS_PER_RUN" 10000 "$WORK/miss.txt" "${targets[@]}" >"$WORK/r$r-miss.out" 2>"$WORK/r$r-miss.err"
}

round_gather() { # ROUND
	local r=$1 c0 w0 legs=() i
	log "round $r: gathered SRV, legs ${LEG_MS[*]} ms, interleaved with the slowest leg alone (${SECONDS_PER_RUN}s)"
	probe "$SECONDS_PER_RUN" 100000 /dev/null \
		"slowest=${CLUSTER_PROXY[2]}:53/_mongodb._tcp.mongo.db.svc.cluster.local/SRV" \
		"gathered=$GATHER:53/_mongodb._tcp.mongo.db.svc.distributed.local/SRV" >"$WORK/r$r-gather.out" 2>"$WORK/r$r-gather.err"

	log "round $r: gathered SRV of 3 x $BIG_TARGETS targets (legs TC, then TCP), interleaved with each leg asked directly (${SECONDS_PER_RUN}s)"
	for i in 0 1 2; do legs+=("leg$i=${CLUSTER_NSD[$i]}:53/_big._tcp.big.db.svc.cluster.local/SRV"); done
	c0=$(sched_ns "$GATHER_BIG_PID")
	w0=$(ctx_switches "$GATHER_BIG_PID")
	# meshdns asked over TCP (one gather an answer; over UDP the client's TCP retry would gather
	# again, the cache being off); its legs go UDP, truncated, then TCP, like the direct ones,
	# the first time, and over TCP at once after that (each cluster remembers the truncation).
	probe "$SECONDS_PER_RUN" 100000 /dev/null "${legs[@]}" \
		"gathered=$GATHER_BIG:53/_big._tcp.big.db.svc.distributed.local/SRV/tcp" >"$WORK/r$r-big.out" 2>"$WORK/r$r-big.err"
	rec "$r" meshdns big_cpu_ns $(($(sched_ns "$GATHER_BIG_PID") - c0))
	rec "$r" meshdns big_ctxsw $(($(ctx_switches "$GATHER_BIG_PID") - w0))
}

round_reload() { # ROUND
	local r=$1 k s a0 a1 pairs=$(((SLICES + 1) / 2)) churn_pid
	log "round $r: live configuration: 5 swaps timed, then $pairs x ${SLICE}s at $RELOAD_RATE qps steady and while swapping every 0.25 s"
	"$PY" "$BENCH/reload.py" time "$WORK/reload-config" "$WORK/reload-a" "$WORK/reload-b" "$RELOADER:53" 5 "$WORK/r$r-swap.out" ||
		log "warning: reload.py time failed"
	perf -s "$RELOADER" -d "$WORK/reload.txt" -n 1 -c 1 -q 20 -t 2 >"$WORK/r$r-reload-fill.out" 2>&1
	a0=$(metric_of "$RELOADER" 'meshdns_config_reloads_total{result="applied"}')
	for ((k = 1; k <= pairs; k++)); do
		for s in $(rotate $((r + k)) steady reloading); do
			if [[ $s == reloading ]]; then
				"$PY" "$BENCH/reload.py" churn "$WORK/reload-config" "$WORK/reload-a" "$WORK/reload-b" "$SLICE" 0.25 >"$WORK/r$r-churn-$k.out" 2>&1 &
				churn_pid=$!
			fi
			perf -s "$RELOADER" -d "$WORK/reload.txt" -l "$SLICE" -Q "$RELOAD_RATE" -c 4 -q 200 -t 1 -v >"$WORK/r$r-reload-$s-$k.out" 2>&1
			[[ $s == reloading ]] && wait "$churn_pid"
		done
	done
	a1=$(metric_of "$RELOADER" 'meshdns_config_reloads_total{result="applied"}')
	rec "$r" meshdns reloads_applied $((a1 - a0))
	rec "$r" meshdns reloads_rejected "$(metric_of "$RELOADER" 'meshdns_config_reloads_total{result="rejected"}')"
}

TCP_CONNECTS='meshdns_upstream_connections_total{peer="p",transport="tcp"}'
round_tls() { # ROUND
	local r=$1 c0 c1 h0 h1 hw k0 k1 x0 x1 targets=() s
	log "round $r: cache misses to one cluster over UDP, TCP and DoT (${SECONDS_PER_RUN}s)"
	start_meshdns TLS_PID "$TLSMESH" "$WORK/r$r-meshdns-tls.log" MESHDNS_CLUSTERS="$TLS_CLUSTERS" "${TLS_ENV[@]}"
	sleep 1
	rec "$r" meshdns tls_rss_idle_kb "$(rss_kb "$TLS_PID")"
	hw=$(metric_of "$TLSMESH" 'meshdns_upstream_tls_handshakes_total{peer="t"}')
	# Warm-up: the connection opens on the first DoT query (names not asked afterwards).
	tail -n 20 "$WORK/cluster-names.txt" >"$WORK/tls-warm.txt"
	probe 5 20 "$WORK/tls-warm.txt" "p=$TLSMESH:53+cluster.p" "t=$TLSMESH:53+cluster.t" "k=$TLSMESH:53+cluster.k" "q=$TLSMESH:53+cluster.q" \
		>"$WORK/r$r-tls-warm.out" 2>&1
	c0=$(metric_of "$TLSMESH" "$TCP_CONNECTS")
	h0=$(metric_of "$TLSMESH" 'meshdns_upstream_tls_handshakes_total{peer="t"}')
	k0=$(metric_of "$TLSMESH" 'meshdns_upstream_tls_handshakes_total{peer="k"}')
	x0=$(grep -c 'accepted connection' "$WORK/stunnel.log" 2>/dev/null)
	for s in $(rotate "$r" u p t k q); do targets+=("$s=$TLSMESH:53+cluster.$s"); done
	probe "$SECONDS_PER_RUN" 9900 "$WORK/cluster-names.txt" "${targets[@]}" >"$WORK/r$r-tls.out" 2>"$WORK/r$r-tls.err"
	c1=$(metric_of "$TLSMESH" "$TCP_CONNECTS")
	h1=$(metric_of "$TLSMESH" 'meshdns_upstream_tls_handshakes_total{peer="t"}')
	k1=$(metric_of "$TLSMESH" 'meshdns_upstream_tls_handshakes_total{peer="k"}')
	x1=$(grep -c 'accepted connection' "$WORK/stunnel.log" 2>/dev/null)
	rec "$r" meshdns tcp_connects $((c1 - c0))
	rec "$r" meshdns tls_handshakes_warmup $((h0 - hw))
	rec "$r" meshdns tls_handshakes $((h1 - h0))
	rec "$r" meshdns tls_handshakes_unbound $((k1 - k0))
	rec "$r" meshdns tls_stunnel_accepts $((x1 - x0))
	rec "$r" meshdns tls_rss_open_kb "$(rss_kb "$TLS_PID")"
	metrics_dump "$TLSMESH" "$WORK/r$r-tls.metrics"
	stop_pid "$TLS_PID"
	# What each path costs without meshdns: dnsperf asking the NSD directly, one query at a time
	# (TCP and DoT over one kept connection; DoT through stunnel's service without client
	# certificates, as dnsperf has none).
	for s in $(rotate "$r" udp tcp dot dotunbound tcpunbound); do
		local port=53 server=${CLUSTER_NSD[0]} mode=$s
		[[ $s == dot ]] && port=854 server=$STUNNEL
		[[ $s == dotunbound ]] && port=853 server=$UNBOUND_DOT mode=dot
		[[ $s == tcpunbound ]] && server=$UNBOUND_DOT mode=tcp
		perf -m "$mode" -s "$server" -p "$port" -d "$WORK/direct-cluster.txt" -l "$SLICE" -c 1 -q 1 -t 1 -v \
			>"$WORK/r$r-direct-$s.out" 2>&1
	done
}

round_threads() { # ROUND: two threads each, and meshdns with one, not pinned
	local r=$1 k s u0 s0 u1 s1 servers=(meshdns-t2 unbound-t2 meshdns-t1)
	log "round $r: threads: starting meshdns (MESHDNS_THREADS=2 and 1) and unbound (num-threads: 2), not pinned"
	for s in $(rotate "$r" "${servers[@]}"); do start_server "$s" "$r"; done
	for s in "${servers[@]}"; do
		dnsperf_free -s "${ADDR[$s]}" -d "$WORK/hot.txt" -n 1 -c 4 -q 20 -t 2 >"$WORK/r$r-thr-fill-$s.out" 2>&1
	done
	sleep 1
	log "round $r: threads: cache-hit QPS (${SECONDS_PER_RUN}s each, in ${SLICES} slices)"
	for ((k = 1; k <= SLICES; k++)); do
		for s in $(rotate $((r + k)) "${servers[@]}"); do
			dnsperf_free -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$SLICE" -c 4 -q 200 -t 1 >"$WORK/r$r-thrqps-$s-$k.out" 2>&1
		done
	done
	log "round $r: threads: fixed rate $RATE qps, CPU and latency (${SECONDS_PER_RUN}s each, in ${SLICES} slices)"
	for ((k = 1; k <= SLICES; k++)); do
		for s in $(rotate $((r + k)) "${servers[@]}"); do
			read -r u0 s0 < <(cpu_ticks "${SPID[$s]}")
			dnsperf_free -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$SLICE" -Q "$RATE" -c 4 -q 200 -t 1 -v >"$WORK/r$r-thrfixed-$s-$k.out" 2>&1
			read -r u1 s1 < <(cpu_ticks "${SPID[$s]}")
			rec "$r" "$s" cpu_ticks $((u1 - u0 + s1 - s0))
		done
	done
	for s in "${servers[@]}"; do
		rec "$r" "$s" threads "$(threads "${SPID[$s]}")"
		stop_pid "${SPID[$s]}"
	done
}

round_sizing() { # ROUND: one replica's capacity and its latency from 1,000 client addresses
	local r=$1 k s u0 s0 u1 s1 servers=(meshdns-t1 meshdns-t2 meshdns-m1 meshdns-m2)
	log "round $r: sizing: meshdns MESHDNS_THREADS=1 and 2, cache on (hits) and off (misses), not pinned"
	for s in $(rotate "$r" "${servers[@]}"); do start_server "$s" "$r"; done
	for s in meshdns-t1 meshdns-t2; do
		dnsperf_free -s "${ADDR[$s]}" -d "$WORK/hot.txt" -n 1 -c 4 -q 20 -t 2 >"$WORK/r$r-sz-fill-$s.out" 2>&1
	done
	sleep 1
	log "round $r: sizing: QPS (${SECONDS_PER_RUN}s each, in ${SLICES} slices), the same 1,000 names (the cache off: each one asked upstream)"
	for ((k = 1; k <= SLICES; k++)); do
		for s in $(rotate $((r + k)) "${servers[@]}"); do
			read -r u0 s0 < <(cpu_ticks "${SPID[$s]}")
			dnsperf_free -s "${ADDR[$s]}" -d "$WORK/hot.txt" -l "$SLICE" -c 4 -q 200 -t 1 \
				>"$WORK/r$r-szqps-$s-$k.out" 2>&1
			read -r u1 s1 < <(cpu_ticks "${SPID[$s]}")
			rec "$r" "$s" sz_cpu_ticks $((u1 - u0 + s1 - s0))
		done
	done
	log "round $r: sizing: latency at $SIZING_RATE qps from 1,000 source addresses (${SECONDS_PER_RUN}s each)"
	for s in $(rotate "$r" "${servers[@]}"); do
		"${NICE_CMD[@]}" "$PY" "$BENCH/sources.py" "${ADDR[$s]}:53" "$WORK/hot.txt" "$SOURCES_BASE" 1000 \
			"$SIZING_RATE" "$SECONDS_PER_RUN" >"$WORK/r$r-szlat-$s.out" 2>&1
	done
	for s in "${servers[@]}"; do stop_pid "${SPID[$s]}"; done
}

# The search group: one getent ahosts per name, in a mount namespace whose resolv.conf has the
# pod's search list and ndots:5 and points at the meshdns under test; the names are distinct
# (hN.mongo.db.cluster.b, 4 dots: glibc tries the three expansions first), so no cache hides a
# query. Counted at the two NSDs (nsd-control stats_noreset).
SEARCH_LIST="db.svc.cluster.local svc.cluster.local cluster.local"
SEARCH_NAMES=${BENCH_SEARCH_NAMES:-50}
if has search; then
	printf 'search %s\nnameserver %s\noptions ndots:5\n' "$SEARCH_LIST" "$SEARCH_ON" >"$WORK/resolv-on.conf"
	printf 'search %s\nnameserver %s\noptions ndots:5\n' "$SEARCH_LIST" "$SEARCH_OFF" >"$WORK/resolv-off-client.conf"
	printf 'nameserver %s\n' "$SEARCH_KUBE" >"$WORK/resolv-off.conf" # what meshdns "off" reads
	printf 'hosts: files dns\n' >"$WORK/nsswitch.conf"
	printf '127.0.0.1 localhost\n' >"$WORK/hosts"
	SEARCH_ENV=(MESHDNS_UPSTREAMS="$SEARCH_KUBE" MESHDNS_LOCAL_CLUSTER=a MESHDNS_CLUSTERS="a=; b=$SEARCH_B")
	MESH_PROBE=ns.dns.cluster.local start_meshdns SEARCH_ON_PID "$SEARCH_ON" "$WORK/meshdns-search-on.log" "${SEARCH_ENV[@]}" MESHDNS_RESOLV_CONF="$WORK/resolv-on.conf"
	MESH_PROBE=ns.dns.cluster.local start_meshdns SEARCH_OFF_PID "$SEARCH_OFF" "$WORK/meshdns-search-off.log" "${SEARCH_ENV[@]}" MESHDNS_RESOLV_CONF="$WORK/resolv-off.conf"
fi
nsd_queries() { # NAME: queries an NSD started with nsd_conf_control has answered
	nsd-control -c "$WORK/$1/nsd.conf" stats_noreset 2>/dev/null | sed -n 's/^num\.queries=//p'
}
in_pod() { # RESOLV_CONF CMD...: CMD sees that resolv.conf, "hosts: files dns" and no nscd
	local rc=$1
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	timeout 120 unshare -m --propagation private sh -c '
		mount --bind "$1" /etc/resolv.conf || exit 97
		mount --bind "$2" /etc/nsswitch.conf || exit 97
		mount --bind "$3" /etc/hosts || exit 97
		if [ -d /var/run/nscd ]; then mount -t tmpfs none /var/run/nscd || exit 97; fi
		shift 3
		exec "$@"' sh "$rc" "$WORK/nsswitch.conf" "$WORK/hosts" "$@"
}
round_search() { # ROUND
	local r=$1 mode k0 b0 t0 base first
	base=$(((r - 1) * 2 * SEARCH_NAMES))
	log "round $r: search: $SEARCH_NAMES getent ahosts each, through meshdns with and without the search-list answers"
	for mode in $(rotate "$r" on off); do
		[[ $mode == on ]] && first=$base || first=$((base + SEARCH_NAMES))
		k0=$(nsd_queries search-kube)
		b0=$(nsd_queries search-b)
		t0=$(now)
		# shellcheck disable=SC2016 # expanded by the inner shell
		in_pod "$WORK/resolv-$mode$([[ $mode == off ]] && echo -client).conf" sh -c '
			i=$1
			while [ "$i" -lt $(($1 + $2)) ]; do
				if getent ahosts "h$i.mongo.db.cluster.b" | grep -q "^10\.102\."; then echo ok; else echo failed "h$i"; fi
				i=$((i + 1))
			done' sh "$first" "$SEARCH_NAMES" >"$WORK/r$r-search-$mode.out" 2>&1
		rec "$r" "search-$mode" seconds "$(elapsed_since "$t0")"
		rec "$r" "search-$mode" kube_queries $(($(nsd_queries search-kube) - k0))
		rec "$r" "search-$mode" cluster_queries $(($(nsd_queries search-b) - b0))
		rec "$r" "search-$mode" lookups_ok "$(grep -c '^ok$' "$WORK/r$r-search-$mode.out")"
	done
}

OUTAGE_SECONDS=${BENCH_OUTAGE_SECONDS:-32}
round_outage() { # ROUND
	local r=$1 hole t_out t_q t_e
	log "round $r: outage: $OUTAGE_NAMES names cached (TTL 2 s), upstream black-holed, asked for ${OUTAGE_SECONDS}s"
	"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/blackhole" "$OUTAGE_HOLE" 53 "$WORK/r$r-hole.log" "$STANDIN:53" >"$WORK/r$r-hole.out" 2>&1 &
	hole=$!
	PIDS+=("$hole")
	wait_answers "$hole" "$OUTAGE_HOLE" probe.bench.test 10 || die "blackhole.c did not start"
	start_meshdns OUTAGE_PID "$OUTAGE" "$WORK/r$r-meshdns-outage.log" MESHDNS_UPSTREAMS="$OUTAGE_HOLE" MESHDNS_CACHE_MAX_TTL=2s
	probe 10 "$OUTAGE_NAMES" "$WORK/outage-warm.txt" "warm=$OUTAGE:53" >"$WORK/r$r-outage-warm.out" 2>&1
	kill -USR1 "$hole"
	t_out=$(now)
	sleep 2.5 # every entry expires (TTL 2 s, MESHDNS_CACHE_MAX_TTL=2s)
	t_q=$(now)
	PROBE_GAP_US=500 "${PIN_CLIENT[@]}" "${NICE_CMD[@]}" "$WORK/probe" "$OUTAGE_SECONDS" 100000000 "$WORK/outage.txt" \
		"o=$OUTAGE:53" >"$WORK/r$r-outage.out" 2>"$WORK/r$r-outage.err"
	t_e=$(now)
	metrics_dump "$OUTAGE" "$WORK/r$r-outage.metrics"
	stop_pid "$OUTAGE_PID"
	stop_pid "$hole"
	printf 'outage %s\nquery %s\nend %s\n' "$t_out" "$t_q" "$t_e" >"$WORK/r$r-outage.events"
}

overload_case() { # ROUND CASE: one flood against a fresh meshdns with default settings
	local r=$1 c=$2 upstream=$STANDIN hole='' sampler t_start t_end pid
	if [[ $c == b ]]; then
		"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/blackhole" "$FLOOD_HOLE" 53 "$WORK/r$r-ovl-b-hole.log" >"$WORK/r$r-ovl-b-hole.out" 2>&1 &
		hole=$!
		PIDS+=("$hole")
		upstream=$FLOOD_HOLE
	fi
	meshdns_env "$OVERLOAD" MESHDNS_UPSTREAMS="$upstream" "${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$MESHDNS" >"$WORK/r$r-ovl-$c.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait_ready "$pid" "$OVERLOAD" || {
		cat "$WORK/r$r-ovl-$c.log" >&2
		die "meshdns (overload $c) did not start"
	}
	"${PIN_CLIENT[@]}" "$PY" "$BENCH/sampler.py" "$pid" "http://$OVERLOAD:9153/metrics" 120 "$WORK/r$r-ovl-$c.rss" &
	sampler=$!
	PIDS+=("$sampler")
	sleep 1
	t_start=$(now)
	case $c in
	a) flood mangled "$OVERLOAD:53" 60000 "$FLOOD_RATE" "$r" >"$WORK/r$r-ovl-a.flood" 2>&1 ;;
	b) flood names "$OVERLOAD:53" 40000 4000 "f${r}x" flood.test >"$WORK/r$r-ovl-b.flood" 2>&1 ;;
	c)
		flood tcpstall "$OVERLOAD:53" 300 2000 8 "$WORK/hot.txt" >"$WORK/r$r-ovl-c.flood" 2>&1 &
		local stall=$!
		sleep 2
		# 50 fresh UDP misses while the connections hold their queries: are any shed?
		probe 5 50 "$WORK/fresh50.txt" "fresh=$OVERLOAD:53" >"$WORK/r$r-ovl-c-fresh.out" 2>&1
		wait "$stall"
		;;
	esac
	t_end=$(now)
	sleep 10.3
	metrics_dump "$OVERLOAD" "$WORK/r$r-ovl-$c.metrics"
	stop_pid "$sampler"
	stop_pid "$pid"
	[[ -n $hole ]] && stop_pid "$hole"
	printf 'start %s\nend %s\n' "$t_start" "$t_end" >"$WORK/r$r-ovl-$c.events"
}

round_overload() { # ROUND
	local r=$1 c
	log "round $r: overload: (a) 60,000 mangled datagrams at $FLOOD_RATE/s, (b) 40,000 misses at 4,000/s, upstream black-holed, (c) 300 TCP connections that never read; RSS every 100 ms"
	for c in a b c; do overload_case "$r" "$c"; done
}

loss_links() { # PERCENT: every loss group link drops PERCENT % of UDP datagrams each way (0: none)
	nft delete table inet bench_loss 2>/dev/null
	(($1 > 0)) || return 0
	nft add table inet bench_loss &&
		nft add chain inet bench_loss in '{ type filter hook input priority 0; }' || return 1
	local a
	# On arrival (the input hook): a datagram dropped on its way out makes send() fail with
	# EPERM, which no WAN does; dropped on arrival it is silently lost, as on a real link.
	for a in "${LOSSY_NSD[@]}" "$LOSSY_PROXY"; do
		# Queries to the peer and its replies, each dropped at random.
		nft add rule inet bench_loss in ip daddr "$a" udp dport 53 numgen random mod 100 '<' "$1" drop &&
			nft add rule inet bench_loss in ip saddr "$a" udp sport 53 numgen random mod 100 '<' "$1" drop || return 1
	done
}

loss_names() { # FIRST COUNT FILE: names hFIRST.. of the clusters' zones (probe adds the suffix)
	awk -v a="$1" -v n="$2" 'BEGIN { for (i = a; i < a + n; i++) print "h" i ".mongo.db A" }' >"$3"
}

round_loss() { # ROUND: each case's names are new to every cache (unbound's: meshdns runs without)
	local r=$1 p k=0 base targets
	base=$(((r - 1) * 4 * LOSS_STEPS))
	# Warm-up without loss: both meshdns and both unbound have measured their links.
	loss_links 0
	loss_names $((9000 + r * 50)) 50 "$WORK/r$r-loss-warm.txt"
	probe 10 50 "$WORK/r$r-loss-warm.txt" "m=$LOSS_MESH:53+cluster.b" "u=$LOSS_UNBOUND:53+svc.cluster.local" \
		"mr=$LOSS_MESH_RTT:53+cluster.b" "ur=$LOSS_UNBOUND_RTT:53+svc.cluster.local" >"$WORK/r$r-loss-warm.out" 2>&1
	for p in "${LOSS_LEVELS[@]}"; do
		loss_links "$p" || die "nft could not set up the lossy links"
		log "round $r: loss $p % each way: $LOSS_STEPS cluster-route misses, meshdns and unbound interleaved; the same over +${LOSS_RTT_MS} ms; $LOSS_STEPS gathered SRV"
		loss_names $((base + k * LOSS_STEPS)) "$LOSS_STEPS" "$WORK/r$r-loss-names.txt"
		k=$((k + 1))
		read -ra targets <<<"$(rotate "$r" "m=$LOSS_MESH:53+cluster.b" "u=$LOSS_UNBOUND:53+svc.cluster.local")"
		probe 120 "$LOSS_STEPS" "$WORK/r$r-loss-names.txt" "${targets[@]}" \
			>"$WORK/r$r-loss-route-$p.out" 2>"$WORK/r$r-loss-route-$p.err"
		loss_names $((base + k * LOSS_STEPS)) "$LOSS_STEPS" "$WORK/r$r-loss-names.txt"
		k=$((k + 1))
		read -ra targets <<<"$(rotate "$r" "m=$LOSS_MESH_RTT:53+cluster.b" "u=$LOSS_UNBOUND_RTT:53+svc.cluster.local")"
		probe 120 "$LOSS_STEPS" "$WORK/r$r-loss-names.txt" "${targets[@]}" \
			>"$WORK/r$r-loss-rtt-$p.out" 2>"$WORK/r$r-loss-rtt-$p.err"
		rec "$r" meshdns "loss_partial0_$p" "$(metric_of "$LOSS_MESH" meshdns_gather_partial_total)"
		probe 120 "$LOSS_STEPS" /dev/null "g=$LOSS_MESH:53/_mongodb._tcp.mongo.db.svc.distributed.local/SRV" \
			>"$WORK/r$r-loss-gather-$p.out" 2>"$WORK/r$r-loss-gather-$p.err"
		rec "$r" meshdns "loss_partial1_$p" "$(metric_of "$LOSS_MESH" meshdns_gather_partial_total)"
	done
	loss_links 0
	metrics_dump "$LOSS_MESH" "$WORK/r$r-loss.metrics"
	metrics_dump "$LOSS_MESH_RTT" "$WORK/r$r-loss-rtt.metrics"
}

# ---------------------------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------------------------
for ((r = 1; r <= ROUNDS; r++)); do
	if has hits || has misses || has lowrate; then
		log "round $r/$ROUNDS: starting meshdns, unbound, dnsmasq"
		for s in $(rotate "$r" meshdns unbound dnsmasq); do start_server "$s" "$r"; done
		sleep 1
		if has hits || has lowrate; then round_fill "$r"; fi
		has hits && round_hits "$r"
		idle_finish
		has lowrate && round_lowrate "$r"
		idle_finish
		has misses && round_misses "$r"
		for s in meshdns unbound dnsmasq; do stop_pid "${SPID[$s]}"; done
	fi
	has gather && round_gather "$r"
	idle_finish
	has reload && round_reload "$r"
	has tls && round_tls "$r"
	idle_finish
	has threads && round_threads "$r"
	has search && round_search "$r"
	idle_finish
	has outage && round_outage "$r"
	idle_finish
	has overload && round_overload "$r"
	idle_finish
	has loss && round_loss "$r"
	has sizing && round_sizing "$r"
done
idle_finish wait
# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
cat >"$WORK/meta.env" <<EOF
date=$(date -u '+%Y-%m-%d %H:%M UTC')
machine=$(nproc) cores, $CPU_MODEL, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)
load=$LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end
seconds=$SECONDS_PER_RUN
slice=$SLICE
rounds=$ROUNDS
rate=$RATE
nice=$NICE
pinning=$( ((${#PIN_SERVER[@]})) && echo "servers on CPU 0, dnsperf on CPU 1" || echo none)
commit=$COMMIT
build=$BUILD_NOTE
meshdns=$MESHDNS_VERSION
unbound=$(unbound -V 2>/dev/null | awk 'NR == 1 {print $2}')
dnsmasq=$(dnsmasq -v 2>/dev/null | awk 'NR == 1 {print $3}')
dnsperf=$(dnsperf -h 2>&1 | awk '/^Version/ {print $2}')
nsd=$(nsd -v 2>&1 | awk 'NR == 1 {print $3}')
legs=${LEG_MS[*]}
groups=$GROUPS_RUN
low_rate=$LOW_RATE
low_seconds=$((LOW_PER_ROUND * ROUNDS))
idle_seconds=$IDLE_SECONDS
flood_rate=$FLOOD_RATE
reload_rate=$RELOAD_RATE
sizing_rate=$SIZING_RATE
outage_names=$OUTAGE_NAMES
outage_seconds=$OUTAGE_SECONDS
big_targets=$BIG_TARGETS
loss_steps=$LOSS_STEPS
loss_levels=${LOSS_LEVELS[*]}
loss_rtt_ms=$LOSS_RTT_MS
search_names=$SEARCH_NAMES
search_list=$SEARCH_LIST
binary_bytes=$(stat -c %s "$MESHDNS")
binary_kind=$(ldd "$MESHDNS" >/dev/null 2>&1 && echo "dynamic (glibc)" || echo "static (musl)")
meshdns_env=${BENCH_MESHDNS_ENV:-}
stunnel=$(stunnel4 -version 2>&1 | awk '/^stunnel/ {print $2; exit}')
elapsed=$(($(date +%s) - T0))
EOF
mkdir -p "$RESULTS"
"$PY" "$BENCH/report.py" "$WORK" "$RESULTS" "$STAMP-$COMMIT" || die "report.py failed (raw data in $WORK, BENCH_KEEP=1 keeps it)"
log "done in $(($(date +%s) - T0)) s: $RESULTS/latest.md, latest.png, $STAMP-$COMMIT.md"
