#!/usr/bin/env bash
# Real databases form their clusters across three simulated Kubernetes clusters through meshdns
# (docs/databases/): etcd, PostgreSQL, Redis with Sentinel and ZooKeeper, each member a "pod"
# with its own network and mount namespace, its own meshdns sidecar configured as the sidecar
# component configures it, and an /etc/resolv.conf naming only that sidecar — so the
# database's own resolver (Go's, glibc's, Java's) goes through meshdns. The commands that
# start and join the members are the fenced blocks of the guides, extracted and run.
#
#   tests/databases/run.sh                      build (cargo build --release --locked), run all
#   MESHDNS_BIN=path tests/databases/run.sh     that binary, no build
#   DB_ONLY="etcd redis"                        some databases only (etcd etcd-tls postgresql
#                                               redis zookeeper clients)
#   DB_KEEP=1                                   keep the temp dir (configs, zones, logs)
#   DB_HOLD=600                                 keep the world running that long at the end
#   DB_RESULTS=path                             the measurements (default
#                                               target/databases-results.md)
#
# Runs as root. Packages and the build first, in the machine's network namespace; then the
# script runs itself again in a network namespace of its own (tests/lib/netns.sh), where the
# pods are made (tests/lib/pods.sh). tests/databases/README.md has the world and the figures.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DB=$ROOT/tests/databases
GUIDES=$ROOT/docs/databases
# shellcheck source=tests/lib/harness.sh
. "$ROOT/tests/lib/harness.sh"
# shellcheck source=tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=tests/lib/nsd.sh
. "$ROOT/tests/lib/nsd.sh"
# shellcheck source=tests/lib/pods.sh
. "$ROOT/tests/lib/pods.sh"
# shellcheck source=tests/lib/kubedns.sh
. "$ROOT/tests/lib/kubedns.sh"
# shellcheck source=tests/lib/clusterdns.sh
. "$ROOT/tests/lib/clusterdns.sh"
# shellcheck source=tests/e2e/configmap.sh
. "$ROOT/tests/e2e/configmap.sh"
HARNESS_DEADLINE=${DB_DEADLINE:-420}
HARNESS_DEADLINE_VAR=DB_DEADLINE
DB_ONLY=${DB_ONLY:-etcd etcd-tls postgresql redis zookeeper clients}
DB_RESULTS=${DB_RESULTS:-$ROOT/target/databases-results.md}

if [[ $(id -u) != 0 ]]; then
	echo "tests/databases/run.sh must run as root (namespaces, port 53)" >&2
	exit 2
fi

# Debian's packages; the ones with a daemon are stopped by policy-rc.d or simply never used:
# every server here is started by the suite, in its pods.
PACKAGES=(nsd dnsutils iproute2 util-linux openssl curl dnsdist etcd-server etcd-client
	postgresql pgbouncer postgresql-client redis-server redis-sentinel libzookeeper-java
	default-jre-headless)
if [[ -z ${TESTS_NETNS_PRIVATE:-} ]]; then
	echo "# databases: packages and build in the machine's network namespace"
	missing=()
	for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	if ((${#missing[@]})); then
		echo "# installing ${missing[*]}"
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}"; } >/tmp/meshdns-databases-apt.log 2>&1; then
			tail -20 /tmp/meshdns-databases-apt.log >&2
			exit 1
		fi
	fi
	if [[ -z ${MESHDNS_BIN:-} ]]; then
		MESHDNS_BIN=$ROOT/target/release/meshdns
		(cd "$ROOT" && cargo build --release --locked) || exit 1
	fi
	MESHDNS_BIN=$(realpath "$MESHDNS_BIN")
	mkdir -p "$(dirname "$DB_RESULTS")"
	export MESHDNS_BIN DB_RESULTS DB_ONLY
fi
netns_private "$DB/run.sh" "$@"

WORK=$(mktemp -d /tmp/meshdns-databases.XXXXXX)
chmod 755 "$WORK"
KEEP_WORK=${DB_KEEP:-}
trap harness_cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# The world: clusters a, b, c; kube-dns of cluster i at 10.i.255.10 (its pod network 10.i.0.0/16)
# ---------------------------------------------------------------------------------------------
NS=db
CLUSTERS=(a b c)
declare -A INDEX=([a]=1 [b]=2 [c]=3)
kube_dns() { echo "10.${INDEX[$1]}.255.10"; }
SEARCH="$NS.svc.cluster.local svc.cluster.local cluster.local"
# MESHDNS_CLUSTERS, the same in every cluster (the meshdns-clusters ConfigMap).
MESH_CLUSTERS="a=10.1.255.10:53 cidr=10.1.0.0/16; b=10.2.255.10:53 cidr=10.2.0.0/16; c=10.3.255.10:53 cidr=10.3.0.0/16"
DZ=svc.distributed.local # the distributed zone's names: SERVICE.NS.$DZ

# meshdns_sidecar POD CLUSTER: as k8s/components/sidecar configures it — the live configuration
# directory (MESHDNS_CLUSTERS, MESHDNS_LOCAL_CLUSTER, MESHDNS_UPSTREAMS), the downward API's
# pod identity (hostname and subdomain from the kubelet's /etc/hosts line), the pod's
# resolv.conf for the search list, 127.0.0.1:53.
meshdns_sidecar() {
	local pod=$1 cluster=$2 d=$WORK/pods/$1 n=100
	configmap_write "$d/meshdns" "MESHDNS_CLUSTERS=$MESH_CLUSTERS" "MESHDNS_LOCAL_CLUSTER=$cluster" \
		"MESHDNS_UPSTREAMS=$(kube_dns "$cluster"):53" || return 1
	pod_spawn "$pod" "$d/meshdns.log" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		MESHDNS_CONFIG_DIR="$d/meshdns" MESHDNS_ADMIN_LISTEN=0.0.0.0:9153 \
		MESHDNS_POD_IP="$(pod_ip "$pod")" MESHDNS_POD_IPS="$(pod_ip "$pod")" \
		MESHDNS_POD_NAMESPACE=$NS "$MESHDNS_BIN"
	SIDECAR_PID[$pod]=$SPAWNED
	until pod_listening "$pod" 127.0.0.1 53 u && pod_listening "$pod" 127.0.0.1 53 t; do
		((n-- > 0)) && kill -0 "${SIDECAR_PID[$pod]}" 2>/dev/null ||
			fail_with "meshdns in $pod did not start: $(tail -3 "$d/meshdns.log" | tr '\n' ' ')" || return 1
		sleep 0.1
	done
}
declare -A SIDECAR_PID

# member POD CLUSTER SERVICE IP [PORTNAME:PORT...]: pod SERVICE-0 of StatefulSet SERVICE in
# CLUSTER, published by that cluster's kube-dns, with its sidecar.
member() {
	local pod=$1 cluster=$2 service=$3 ip=$4
	shift 4
	pod_create "$pod" "$ip" 127.0.0.1 "$SEARCH" "$service-0.$service.$NS.svc.cluster.local" &&
		kubedns_pod "$cluster" $NS "$service" "$service-0" "$ip" "$@" &&
		meshdns_sidecar "$pod" "$cluster"
}

# member_gone POD CLUSTER SERVICE PID...: the pod deleted — its processes (the PIDs, then its
# sidecar) ended, its records gone from its cluster's kube-dns, as when a StatefulSet's pod is
# deleted and before it is recreated
member_gone() {
	local pod=$1 cluster=$2 service=$3
	shift 3
	kill -TERM "$@" 2>/dev/null
	wait "$@" 2>/dev/null
	kill -TERM "${SIDECAR_PID[$pod]}" 2>/dev/null
	wait "${SIDECAR_PID[$pod]}" 2>/dev/null
	unset "SIDECAR_PID[$pod]"
	pod_delete "$pod"
	kubedns_pod_gone "$cluster" $NS "$service" "$service-0"
}

# guide_block GUIDE NAME: the fenced block "```sh NAME" of docs/databases/GUIDE.md.
guide_block() {
	echo "$1 $2" >>"$WORK/guide-blocks-run"
	awk -v open="\`\`\`sh $2" '$0 == open { f = 1; next } f && /^```/ { exit } f' "$GUIDES/$1.md"
}
# guide_run POD GUIDE NAME [VAR=VALUE...]: runs that block in POD with those variables, as the
# user GUIDE_USER when set (PostgreSQL will not run as root).
# guide_spawn POD GUIDE NAME LOG [VAR=VALUE...]: the same in the background (a server: its block
# ends in `exec`, so SPAWNED is the server's PID).
guide_command() { # GUIDE NAME: the command line that runs the block (GUIDE_CMD)
	local block
	block=$(guide_block "$1" "$2")
	[[ -n $block ]] || { echo "no block '$2' in docs/databases/$1.md" >&2; return 96; }
	GUIDE_CMD=(bash -c "$block")
	# setpriv execs (runuser would stay as a parent, between the suite's signals and the server)
	[[ -z ${GUIDE_USER:-} ]] || GUIDE_CMD=(setpriv --reuid="$GUIDE_USER" --regid="$GUIDE_USER" --init-groups "${GUIDE_CMD[@]}")
}
guide_run() {
	local pod=$1 guide=$2 name=$3 GUIDE_CMD
	shift 3
	guide_command "$guide" "$name" || return
	pod_exec "$pod" env "$@" "${GUIDE_CMD[@]}"
}
guide_spawn() {
	local pod=$1 guide=$2 name=$3 log=$4 GUIDE_CMD
	shift 4
	guide_command "$guide" "$name" 2>>"$log" || return
	pod_spawn "$pod" "$log" env "$@" "${GUIDE_CMD[@]}"
}

# Every fenced sh block of a tested guide was run (when every database was): a block the suite
# never runs could drift from what was tested.
guides_all_run() {
	local g missing
	missing=$(for g in etcd postgresql redis zookeeper; do
		awk -v g="$g" '/^```sh / { print g, $2 }' "$GUIDES/$g.md"
	done | sort -u | comm -23 - <(sort -u "$WORK/guide-blocks-run"))
	[[ -z $missing ]] || fail_with "blocks never run: $(tr '\n' ' ' <<<"$missing")"
}

# metric POD FAMILY_REGEX: the sum of the matching series of POD's sidecar
metric() {
	curl -s --max-time 2 "http://$(pod_ip "$1"):9153/metrics" |
		awk -v re="^$2[ {]" '$0 ~ re { s += $NF } END { printf "%d\n", s }'
}
# within SECONDS FUNC [ARGS...]: FUNC retried every 0.5 s until it succeeds (its output dropped)
within() {
	local limit=$1 t0
	shift
	t0=$(date +%s%N)
	until "$@" >/dev/null 2>&1; do
		(($(date +%s%N) - t0 > limit * 1000000000)) && return 1
		sleep 0.5
	done
	return 0
}
# result DATABASE WHAT VALUE: one measurement for the results file
RESULTS=()
result() { RESULTS+=("$1|$2|$3"); note "measured: $1, $2: $3"; }
db_title() { # a pod name's first part -> the database's name in the results
	case $1 in etcd) echo etcd ;; etcds) echo "etcd (TLS)" ;; pg) echo PostgreSQL ;; redis) echo Redis ;; zk) echo ZooKeeper ;; *) echo "$1" ;; esac
}

world_up() {
	local c
	pods_network || fail_with "no bridge (the kernel's bridge and veth are needed)" || return 1
	for c in "${CLUSTERS[@]}"; do
		node_addr "$(kube_dns "$c")" && kubedns_start "$c" "${INDEX[$c]}" "$(kube_dns "$c")" || return 1
	done
}

# shellcheck source=tests/databases/etcd.sh
. "$DB/etcd.sh"
# shellcheck source=tests/databases/postgresql.sh
. "$DB/postgresql.sh"
# shellcheck source=tests/databases/redis.sh
. "$DB/redis.sh"
# shellcheck source=tests/databases/zookeeper.sh
. "$DB/zookeeper.sh"
# shellcheck source=tests/databases/clients.sh
. "$DB/clients.sh"

echo "# databases: $DB_ONLY; meshdns $("$MESHDNS_BIN" --version 2>/dev/null)"
case_ "world: bridge, stand-in kube-dns of clusters a, b, c" world_up || true
for d in $DB_ONLY; do
	"cases_${d//-/_}"
done
case_ "steady state: ${STEADY_S}s of DNS queries per database, from the sidecars' /metrics" steady_state
for d in $DB_ONLY; do
	"faults_${d//-/_}"
done
[[ $DB_ONLY != "etcd etcd-tls postgresql redis zookeeper clients" ]] ||
	case_ "guides: every fenced sh block of the etcd, PostgreSQL, Redis, ZooKeeper guides was run" guides_all_run
write_results
if [[ -n ${DB_HOLD:-} ]]; then # by hand: nsenter -t PID -n -m (a pod's holder) to look around
	note "holding the world for ${DB_HOLD}s; pods: $(for p in "${!POD_PID[@]}"; do printf '%s=%s ' "$p" "${POD_PID[$p]}"; done)"
	sleep "$DB_HOLD"
fi
harness_summary
