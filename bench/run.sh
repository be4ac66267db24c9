#!/usr/bin/env bash
# meshdns benchmark (issue 7; targets from issue 10). Not part of CI.
#
#   bench/run.sh                        build meshdns (cargo build --release --locked) and run
#   MESHDNS_BIN=path bench/run.sh       use that binary, no build
#   BENCH_SECONDS=10                    length of each timed run (default 10)
#   BENCH_ROUNDS=3                      interleaved rounds; the table quotes medians (default 3)
#   BENCH_RATE=20000                    the fixed rate of the CPU and latency runs (qps)
#   BENCH_SLICE=2                       timed runs are cut in slices this long, servers in turn
#   BENCH_NICE=-10                      niceness of every process the bench starts (root only)
#   BENCH_NET=20                        use 127.0.N.x, 127.0.N+1.x, 127.0.N+2.x (default 20)
#   BENCH_KEEP=1                        keep the work directory (configs, logs, raw dnsperf output)
#   BENCH_VENV=/opt/meshdns-bench/venv  where matplotlib is installed (pip, a venv)
#
# Compares meshdns with unbound (1 thread), dnsmasq and a floor (bench/floor.c: a UDP reflector
# that does no DNS work; for cache misses the same program as a relay with no DNS work), all in
# front of the same stand-in kube-dns (NSD). Measures, in one run and interleaved
# (each round starts every server afresh and takes them in a rotated order): cache-hit QPS,
# latency percentiles and CPU time per query at a fixed rate, RSS idle and with 10,000 cached
# entries, the latency a cache miss adds over asking the upstream directly, and the latency of a
# gathered SRV answer whose three cluster legs are delayed 20/40/80 ms.
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
BENCH=$ROOT/bench
BENCH_VENV=${BENCH_VENV:-/opt/meshdns-bench/venv}
PY=${PYTHON:-python3}
SECONDS_PER_RUN=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
RATE=${BENCH_RATE:-20000}
SLICE=${BENCH_SLICE:-2}
NICE=${BENCH_NICE:--10}
NET=${BENCH_NET:-20}
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

# Addresses (all loopback, all ours).
STANDIN=127.0.$NET.1  # stand-in kube-dns: NSD serving bench.test
MESH=127.0.$NET.2     # meshdns under test
UNBOUND=127.0.$NET.3  # unbound, 1 thread
DNSMASQ=127.0.$NET.4  # dnsmasq
FLOOR=127.0.$NET.5    # the floor reflector
GATHER=127.0.$NET.6   # meshdns for the gathered-SRV case (cache off, three clusters)
RELAY=127.0.$NET.7    # the floor for cache misses: floor.c relaying to the stand-in, no DNS work
CLUSTER_NSD=(127.0.$((NET + 1)).1 127.0.$((NET + 1)).2 127.0.$((NET + 1)).3)
CLUSTER_PROXY=(127.0.$((NET + 2)).1 127.0.$((NET + 2)).2 127.0.$((NET + 2)).3)
LEG_MS=(20 40 80)

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
	/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || pkgs+=(python3-venv)
	if ((${#pkgs[@]})); then
		log "installing ${pkgs[*]} (Debian)"
		# Packages with a service (unbound, nsd) must not start one: a system unbound would
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

log "compiling the floor reflector and the latency probe"
for c in floor probe; do
	gcc -O2 -Wall -o "$WORK/$c" "$BENCH/$c.c" 2>"$WORK/$c-build.log" || {
		cat "$WORK/$c-build.log" >&2
		die "gcc failed on bench/$c.c"
	}
done

# Our addresses must be free: other engineers run servers on other 127.x addresses.
for a in "$STANDIN" "$MESH" "$UNBOUND" "$DNSMASQ" "$FLOOR" "$GATHER" "$RELAY" "${CLUSTER_NSD[@]}" "${CLUSTER_PROXY[@]}"; do
	if listening "$a" 53 u || listening "$a" 53 t; then
		die "$a:53 is already taken (another run of the bench? pick BENCH_NET)"
	fi
done
listening "$MESH" 9153 t && die "$MESH:9153 is already taken"

# ---------------------------------------------------------------------------------------------
# Query files: 20,000 names h0..h19999.bench.test. h0..h9999 fill the caches to 10k entries,
# h0..h999 are the cache-hit set, h10000..h19999 are asked once each for the cache-miss run.
# ---------------------------------------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 10000; i++) print "h" i ".bench.test A" }' >"$WORK/fill.txt"
awk 'BEGIN { for (i = 0; i < 1000; i++) print "h" i ".bench.test A" }' >"$WORK/hot.txt"
awk 'BEGIN { for (i = 10000; i < 20000; i++) print "h" i ".bench.test A" }' >"$WORK/miss.txt"

# ---------------------------------------------------------------------------------------------
# NSD: the stand-in kube-dns and the three stand-in clusters
# ---------------------------------------------------------------------------------------------
start_nsd() { # NAME ADDR ZONE (zone file already at $WORK/NAME/zone)
	local d=$WORK/$1
	{
		nsd_conf "$d" "$2" 'hide-version: yes' 'minimal-responses: yes' 'verbosity: 1'
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
	printf '$ORIGIN bench.test.\n$TTL 3600\n'
	printf '@ IN SOA ns.bench.test. hostmaster.bench.test. 1 7200 1800 86400 60\n'
	printf '@ IN NS ns.bench.test.\nns IN A %s\nprobe IN A 192.0.2.1\n' "$STANDIN"
	awk 'BEGIN { for (i = 0; i < 20000; i++) printf "h%d IN A 10.%d.%d.%d\n", i, int(i / 65536), int(i / 256) % 256, i % 256 }'
} >"$WORK/standin/zone"
# The stand-in kube-dns shares CPU 0 with the server under test: left to the scheduler, its
# placement made the cache-miss numbers jump by 2x from one round to the next.
log "starting the stand-in kube-dns (NSD on $STANDIN, 20,000 names)"
NSD_PIN=("${PIN_SERVER[@]}")
start_nsd standin "$STANDIN" bench.test probe.bench.test || die "NSD did not start"
NSD_PIN=()

for i in 0 1 2; do
	c=$((i + 1))
	mkdir -p "$WORK/cluster$c"
	{
		printf '$ORIGIN cluster.local.\n$TTL 30\n'
		printf '@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30\n'
		printf '@ IN NS ns.dns.cluster.local.\nns.dns IN A 10.%d.255.10\n' "$c"
		for p in 0 1 2; do
			printf 'mongo-%d.mongo.db.svc IN A 10.%d.0.%d\n' "$p" "$c" $((10 + p))
			printf '_mongodb._tcp.mongo.db.svc IN SRV 0 33 27017 mongo-%d.mongo.db.svc.cluster.local.\n' "$p"
		done
	} >"$WORK/cluster$c/zone"
	start_nsd "cluster$c" "${CLUSTER_NSD[$i]}" cluster.local ns.dns.cluster.local || die "cluster NSD $c did not start"
done

log "starting the delaying proxies (${LEG_MS[*]} ms) and the floor"
specs=()
for i in 0 1 2; do specs+=("${CLUSTER_PROXY[$i]}:53=${CLUSTER_NSD[$i]}:53@${LEG_MS[$i]}"); done
"${NICE_CMD[@]}" "$PY" "$BENCH/delayproxy.py" "${specs[@]}" >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_answers "$PROXY_PID" "${CLUSTER_PROXY[2]}" ns.dns.cluster.local 20 || {
	cat "$WORK/proxy.log" >&2
	die "the delaying proxies did not start"
}

"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/floor" "$FLOOR" 53 >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")
wait_answers "$FLOOR_PID" "$FLOOR" probe.bench.test 10 || die "the floor did not start"
"${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$WORK/floor" "$RELAY" 53 "$STANDIN:53" >"$WORK/relay.log" 2>&1 &
RELAY_PID=$!
PIDS+=("$RELAY_PID")
wait_answers "$RELAY_PID" "$RELAY" probe.bench.test 10 || die "the floor relay did not start"

# The gathered-SRV meshdns: three clusters behind the proxies, cache off so every query gathers.
meshdns_env() { # LISTEN [VAR=VALUE...] COMMAND...: run in the background (&) only; execs
	local listen=$1
	shift
	exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin MESHDNS_LISTEN="$listen:53" \
		MESHDNS_UPSTREAMS="$STANDIN" MESHDNS_ADMIN_LISTEN="$listen:9153" "$@"
}
meshdns_env "$GATHER" MESHDNS_CACHE_SIZE=0 \
	MESHDNS_CLUSTERS="a=${CLUSTER_PROXY[0]}; b=${CLUSTER_PROXY[1]}; c=${CLUSTER_PROXY[2]}" \
	"${NICE_CMD[@]}" "$MESHDNS" >"$WORK/meshdns-gather.log" 2>&1 &
GATHER_PID=$!
PIDS+=("$GATHER_PID")
wait_answers "$GATHER_PID" "$GATHER" probe.bench.test 20 || {
	cat "$WORK/meshdns-gather.log" >&2
	die "meshdns (gather instance) did not start"
}

# ---------------------------------------------------------------------------------------------
# The servers under test, started afresh every round
# ---------------------------------------------------------------------------------------------
declare -A SPID ADDR
ADDR=([meshdns]=$MESH [unbound]=$UNBOUND [dnsmasq]=$DNSMASQ [floor]=$FLOOR [direct]=$STANDIN [relay]=$RELAY)
SPID[floor]=$FLOOR_PID

unbound_conf() {
	cat <<EOF
server:
	num-threads: 1
	interface: $UNBOUND
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
	directory: "$WORK/unbound"
	pidfile: ""
	use-syslog: no
	logfile: "$WORK/unbound/unbound.log"
	verbosity: 0
	msg-cache-size: 64m
	rrset-cache-size: 128m
	qname-minimisation: no
	prefetch: no
	so-reuseport: no
	local-zone: "test." nodefault
remote-control:
	control-enable: no
forward-zone:
	name: "."
	forward-addr: $STANDIN@53
EOF
}
mkdir -p "$WORK/unbound"
unbound_conf >"$WORK/unbound/unbound.conf"
unbound-checkconf "$WORK/unbound/unbound.conf" >"$WORK/unbound/check.log" 2>&1 || {
	cat "$WORK/unbound/check.log" >&2
	die "bad unbound.conf"
}

start_server() { # NAME ROUND
	local name=$1 r=$2 pid
	case $name in
	meshdns)
		meshdns_env "$MESH" "${PIN_SERVER[@]}" "${NICE_CMD[@]}" "$MESHDNS" >"$WORK/r$r-meshdns.log" 2>&1 &
		;;
	unbound)
		"${PIN_SERVER[@]}" "${NICE_CMD[@]}" unbound -d -c "$WORK/unbound/unbound.conf" >"$WORK/r$r-unbound.log" 2>&1 &
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
metric() {                                               # NAME: a meshdns counter, or 0
	curl -s --noproxy '*' --max-time 2 "http://$MESH:9153/metrics" | awk -v m="$1" '$1 == m {print $2; f=1} END {if (!f) print 0}'
}
perf() { # dnsperf on the client core, explicit server, nothing else asked
	"${PIN_CLIENT[@]}" "${NICE_CMD[@]}" dnsperf "$@"
}
probe() { # the sequential latency probe, on the client core
	"${PIN_CLIENT[@]}" "${NICE_CMD[@]}" "$WORK/probe" "$@"
}
rotate() { # ROUND ITEMS...: the items rotated by ROUND, so each takes each slot in turn
	local r=$1
	shift
	local a=("$@") n=$# i
	for ((i = 0; i < n; i++)); do printf '%s ' "${a[$(((i + r) % n))]}"; done
}

# ---------------------------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------------------------
for ((r = 1; r <= ROUNDS; r++)); do
	log "round $r/$ROUNDS: starting meshdns, unbound, dnsmasq"
	for s in $(rotate "$r" meshdns unbound dnsmasq); do start_server "$s" "$r"; done
	sleep 1
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

	# Each of h10000..h19999 asked once of each server (a miss) and of the stand-in directly, one
	# query in flight, the targets taking turns name by name; the floor relay shows what one more
	# hop costs with no DNS work at all.
	log "round $r: cache misses, one query at a time, interleaved (${SECONDS_PER_RUN}s)"
	targets=()
	for s in $(rotate "$r" direct meshdns unbound dnsmasq relay); do targets+=("$s=${ADDR[$s]}:53"); done
	probe "$SECONDS_PER_RUN" 10000 "$WORK/miss.txt" "${targets[@]}" >"$WORK/r$r-miss.out" 2>"$WORK/r$r-miss.err"

	log "round $r: gathered SRV, legs ${LEG_MS[*]} ms, interleaved with the slowest leg alone (${SECONDS_PER_RUN}s)"
	probe "$SECONDS_PER_RUN" 100000 /dev/null \
		"slowest=${CLUSTER_PROXY[2]}:53/_mongodb._tcp.mongo.db.svc.cluster.local/SRV" \
		"gathered=$GATHER:53/_mongodb._tcp.mongo.db.svc.distributed.local/SRV" >"$WORK/r$r-gather.out" 2>"$WORK/r$r-gather.err"

	for s in meshdns unbound dnsmasq; do stop_pid "${SPID[$s]}"; done
done

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
elapsed=$(($(date +%s) - T0))
EOF
mkdir -p "$BENCH/results"
"$PY" "$BENCH/report.py" "$WORK" "$BENCH/results" "$STAMP-$COMMIT" || die "report.py failed (raw data in $WORK, BENCH_KEEP=1 keeps it)"
log "done in $(($(date +%s) - T0)) s: bench/results/latest.md, bench/results/latest.png, bench/results/$STAMP-$COMMIT.md"
