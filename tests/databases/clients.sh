# shellcheck shell=bash
# Clients without a sidecar (docs/design.md, "Cluster-level mode"): an application pod of cluster
# a whose resolv.conf names the cluster DNS (dnsdist, tests/lib/clusterdns.sh), which relays
# meshdns's zones to the cluster-level meshdns resolver; the same lookups as the members make:
# etcdctl --discovery-srv, psql by cluster name, redis-cli via a Sentinel. Then the steady-state
# measurement and the results file. Sourced by run.sh.
CLUSTER_DNS=10.1.255.53 # cluster a's DNS (the CoreDNS stand-in)
RESOLVER=10.1.255.20    # cluster a's meshdns resolver (the Deployment's Service)

clients_up() {
	local d=$WORK/clients n=50
	mkdir -p "$d"
	node_addr $CLUSTER_DNS && node_addr $RESOLVER || return 1
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin MESHDNS_LISTEN=$RESOLVER:53 MESHDNS_ADMIN_LISTEN=$RESOLVER:9153 \
		MESHDNS_ALLOW_FROM=10.1.0.0/16 MESHDNS_UPSTREAMS=$CLUSTER_DNS:53 MESHDNS_LOCAL_CLUSTER=a \
		MESHDNS_CLUSTERS="$MESH_CLUSTERS" "$MESHDNS_BIN" >"$d/resolver.log" 2>&1 &
	track $!
	wait_listen $! $RESOLVER 53 10 || fail_with "the resolver: $(tail -3 "$d/resolver.log" | tr '\n' ' ')" || return 1
	clusterdns_conf $CLUSTER_DNS 10.1.0.0/16 "$(kube_dns a):53" "cluster.a cluster.b cluster.c distributed.local" \
		$RESOLVER:53 >"$d/dnsdist.conf"
	dnsdist --supervised --disable-syslog -C "$d/dnsdist.conf" >"$d/dnsdist.log" 2>&1 &
	track $!
	wait_listen $! $CLUSTER_DNS 53 10 || fail_with "dnsdist: $(tail -3 "$d/dnsdist.log" | tr '\n' ' ')" || return 1
	until grep -q "Marking downstream $RESOLVER:53 as 'up'" "$d/dnsdist.log"; do
		((n-- > 0)) || fail_with "the cluster DNS never marked the resolver up" || return 1
		sleep 0.1
	done
	pod_create app-a 10.1.9.10 $CLUSTER_DNS "$SEARCH" app-0.app.$NS.svc.cluster.local
}

# client_runs NAME CMD...: CMD in the application pod; a database not in DB_ONLY is a note
CLIENT_OUT=
client_needs() { # DATABASE
	[[ " $DB_ONLY " == *" $1 "* ]] && return 0
	note "not run: $1 is not in DB_ONLY"
	return 1
}
client_etcd() {
	client_needs etcd-tls || return 0
	CLIENT_OUT=$(guide_run app-a etcd etcds-health PKI="$WORK/pki" 2>&1)
	[[ $(grep -c 'is healthy' <<<"$CLIENT_OUT") == 3 ]] || fail_with "$(tail -3 <<<"$CLIENT_OUT" | tr '\n' ' ')"
}
client_psql() {
	client_needs postgresql || return 0
	CLIENT_OUT=$(pod_exec app-a env PGPASSWORD=app-secret psql "host=pg-0.pg.$NS.cluster.a dbname=app user=app" \
		-Atc "SELECT inet_server_addr()" 2>&1)
	[[ $CLIENT_OUT == "$(pod_ip pg-a)" ]] || fail_with "$CLIENT_OUT"
}
client_redis() { # the master named by the Sentinel of cluster c, then a GET from it by that name
	client_needs redis || return 0
	local master
	master=$(pod_exec app-a timeout 5 redis-cli -h "redis-0.redis.$NS.cluster.c" -p 26379 \
		SENTINEL get-master-addr-by-name mymaster | head -1)
	[[ $master == "redis-0.redis.$NS.cluster.$REDIS_MASTER" ]] || fail_with "Sentinel of c names '$master'" || return 1
	CLIENT_OUT=$(pod_exec app-a timeout 5 redis-cli -h "$master" GET greeting)
	[[ $CLIENT_OUT == from-a ]] || fail_with "GET greeting from $master: '$CLIENT_OUT'"
}

# Steady state: what the members' sidecars answered and what they sent on (kube-dns and the
# peers' DNS) in 30 s of nobody doing anything but the databases themselves, every database
# formed and healthy (before the fault cases).
STEADY_S=30
steady_state() {
	local db pod pods=()
	declare -A req0 up0
	for pod in "${!SIDECAR_PID[@]}"; do
		kill -0 "${SIDECAR_PID[$pod]}" 2>/dev/null || continue
		pods+=("$pod")
		req0[$pod]=$(metric "$pod" meshdns_requests_total)
		up0[$pod]=$(metric "$pod" meshdns_upstream_requests_total)
	done
	sleep $STEADY_S
	declare -A req up members
	for pod in "${pods[@]}"; do
		db=${pod%-*}
		members[$db]=$((${members[$db]:-0} + 1))
		req[$db]=$((${req[$db]:-0} + $(metric "$pod" meshdns_requests_total) - req0[$pod]))
		up[$db]=$((${up[$db]:-0} + $(metric "$pod" meshdns_upstream_requests_total) - up0[$pod]))
	done
	for db in "${!members[@]}"; do
		[[ $db == rogue ]] && continue
		result "$(db_title "$db")" "steady state: DNS queries per minute (all ${members[$db]} members' sidecars), and sent on to a DNS server" \
			"$((req[$db] * 60 / STEADY_S)) / $((up[$db] * 60 / STEADY_S))"
	done
}

write_results() {
	{
		echo "# Databases through meshdns: measured by tests/databases/run.sh"
		echo
		echo "$(date -u +%Y-%m-%dT%H:%MZ), meshdns $("$MESHDNS_BIN" --version 2>/dev/null | awk '{print $2}'), $(nproc) CPUs, databases: $DB_ONLY"
		echo
		echo "| database | what | measured |"
		echo "|---|---|---|"
		printf '%s\n' "${RESULTS[@]}" | awk -F'|' '{ printf "| %s | %s | %s |\n", $1, $2, $3 }'
	} >"$DB_RESULTS"
	note "results: $DB_RESULTS"
}

cases_clients() {
	case_ "clients: cluster a's DNS (dnsdist) relays meshdns's zones to the meshdns resolver; an app pod" clients_up
	case_ "clients: etcdctl --discovery-srv from the app pod (no sidecar): 3 healthy" client_etcd
	case_ "clients: psql host=pg-0.pg.db.cluster.a from the app pod reaches the primary" client_psql
	case_ "clients: redis-cli asks c's Sentinel, then GETs from the master it names" client_redis
}
faults_clients() { :; }
