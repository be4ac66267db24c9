# shellcheck shell=bash
# etcd (docs/databases/etcd.md): three members, one per cluster, by distributed names — plain
# peer URLs, then TLS formed by --discovery-srv with certificates that carry only the prefixed
# names; a write in a read in c; cluster c's DNS down; a restart; a member on a new address.
# Sourced by run.sh. Pods etcd-CLUSTER at 10.i.1.10, etcds-CLUSTER at 10.i.2.10 (moved: .11).

etcd_pod() { # SERVICE CLUSTER IP: pod SERVICE-CLUSTER with its sidecar, published
	local ports="etcd-server:2380 etcd-client:2379"
	[[ $1 == etcds ]] && ports="etcd-server-ssl:2380 etcd-client-ssl:2379"
	member "$1-$2" "$2" "$1" "$3" $ports
}
etcd_start() { # SERVICE CLUSTER: the member started in its pod by the guide's command
	local svc=$1 c=$2 pod=$1-$2
	mkdir -p "$WORK/data/$pod"
	guide_spawn "$pod" etcd "$svc-member" "$WORK/pods/$pod/etcd.log" CLUSTER="$c" \
		DATA="$WORK/data/$pod" PKI="$WORK/pki"
	ETCD_PID[$pod]=$SPAWNED
}
declare -A ETCD_PID

# etcd_health SERVICE CLUSTER: every member healthy, asked from CLUSTER's pod by names
etcd_health() {
	local svc=$1 c=$2
	if [[ $svc == etcd ]]; then
		pod_exec "etcd-$c" timeout 10 etcdctl --endpoints "http://$c-etcd-0.etcd.$NS.$DZ:2379" \
			endpoint health --cluster
	else
		guide_run "etcds-$c" etcd etcds-health PKI="$WORK/pki" timeout 10
	fi
}

etcd_form() { # SERVICE FIRST_OCTET: three members, healthy through their own names
	local svc=$1 net=$2 c t0
	# Every pod published first: a member's --discovery-srv must see all three (a partial SRV set
	# gives it another cluster ID; docs/databases/etcd.md).
	for c in "${CLUSTERS[@]}"; do etcd_pod "$svc" "$c" "10.${INDEX[$c]}.$net.10" || return 1; done
	t0=$(date +%s%N)
	for c in "${CLUSTERS[@]}"; do etcd_start "$svc" "$c"; done
	within 60 etcd_health "$svc" c || fail_with "not healthy after 60 s: $(etcd_health "$svc" c 2>&1 | tail -3 | tr '\n' ' '); log of b: $(tail -2 "$WORK/pods/$svc-b/etcd.log" | tr '\n' ' ')" || return 1
	result "$(db_title "$svc")" "time to form (start of 3 members to healthy)" "$((($(date +%s%N) - t0) / 1000000)) ms"
}

etcd_write_read() {
	guide_run etcd-a etcd etcd-put CLUSTER=a >/dev/null || fail_with "put on a failed" || return 1
	local got
	got=$(guide_run etcd-c etcd etcd-get CLUSTER=c 2>&1)
	[[ $got == "from a" ]] || fail_with "read on c: '$got'"
}

etcd_members_by_name() { # the member list names every peer by its prefixed name, no address
	local list
	list=$(pod_exec etcd-b etcdctl --endpoints "http://b-etcd-0.etcd.$NS.$DZ:2379" member list 2>&1)
	for c in "${CLUSTERS[@]}"; do
		grep -q "http://$c-etcd-0.etcd.$NS.$DZ:2380" <<<"$list" || fail_with "no $c peer URL by name: $list" || return 1
	done
}

etcd_stop_plain() { # frees the CPU for the rest; the TLS cluster carries the fault cases
	local c
	for c in "${CLUSTERS[@]}"; do kill -TERM "${ETCD_PID[etcd-$c]}" 2>/dev/null; done
	return 0
}

etcds_pki() { # the CA, then each member's certificate by the guide's commands
	local c
	mkdir -p "$WORK/pki"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-keyout "$WORK/pki/ca.key" -subj /CN=etcd-test-ca -out "$WORK/pki/ca.crt" 2>/dev/null || return 1
	for c in "${CLUSTERS[@]}"; do
		PKI=$WORK/pki CLUSTER=$c bash -c "$(guide_block etcd etcd-cert)" 2>/dev/null ||
			fail_with "the guide's etcd-cert block failed for $c" || return 1
	done
	openssl x509 -in "$WORK/pki/a.crt" -noout -ext subjectAltName | grep -q 'DNS:a-etcds-0.etcds.db.svc.distributed.local$' ||
		fail_with "a's certificate: $(openssl x509 -in "$WORK/pki/a.crt" -noout -ext subjectAltName)"
}

# The peer certificate check: a's certificate from a's pod is accepted by b's peer port; the same
# certificate from another address (a pod of cluster c with no name) is refused.
etcds_peer_from() { # POD
	pod_exec "$1" curl -s --http1.1 --max-time 5 -o /dev/null -w '%{http_code}' --cacert "$WORK/pki/ca.crt" \
		--cert "$WORK/pki/a.crt" --key "$WORK/pki/a.key" \
		--resolve "b-etcds-0.etcds.$NS.$DZ:2380:10.2.2.10" "https://b-etcds-0.etcds.$NS.$DZ:2380/members"
}
etcds_cert_address() {
	local code
	code=$(etcds_peer_from etcds-a)
	[[ $code == 200 ]] || fail_with "a's certificate from a's own address: HTTP '$code', want 200" || return 1
	pod_create rogue-c 10.3.9.66 127.0.0.1 "$SEARCH" rogue-0.rogue.$NS.svc.cluster.local || return 1
	code=$(etcds_peer_from rogue-c)
	[[ $code != 200 ]] || fail_with "a's certificate from 10.3.9.66 was accepted" || return 1
	grep -q 'rejected connection from "10.3.9.66' "$WORK/pods/etcds-b/etcd.log" ||
		fail_with "b's log has no 'rejected connection from 10.3.9.66': $(grep -m1 -i reject "$WORK/pods/etcds-b/etcd.log")"
}

etcds_put() { # CLUSTER KEY VALUE
	pod_exec "etcds-$1" timeout 10 etcdctl --endpoints "https://$1-etcds-0.etcds.$NS.$DZ:2379" \
		--cacert "$WORK/pki/ca.crt" put "$2" "$3"
}

# Cluster c's DNS stopped: a and b keep quorum, still resolve each other (a write through a's
# name from b's pod), and a restarted member rejoins — its sidecar answers c's name from the
# stale cache (MESHDNS_SERVE_STALE).
etcds_c_dns_down() {
	kubedns_stop c
	etcds_put b k1 during-outage >/dev/null || fail_with "write through a from b with c's DNS down failed" || return 1
	pod_exec etcds-a timeout 10 etcdctl --endpoints "https://b-etcds-0.etcds.$NS.$DZ:2379" \
		--cacert "$WORK/pki/ca.crt" endpoint health >/dev/null 2>&1 || fail_with "a cannot reach b by name" || return 1
}
etcds_restart_rejoins() {
	local before t0
	before=$(metric etcds-a meshdns_cache_stale_served_total)
	kill -TERM "${ETCD_PID[etcds-a]}"
	wait "${ETCD_PID[etcds-a]}" 2>/dev/null
	sleep 6 # longer than the 5 s TTL: c's name is stale in a's sidecar now
	t0=$(date +%s%N)
	etcd_start etcds a
	within 40 etcds_put a k2 after-restart || fail_with "no write through the restarted a within 40 s" || return 1
	within 20 etcds_peer_active a c || fail_with "the restarted a has no stream to c: $(grep -c 'established a TCP streaming' "$WORK/pods/etcds-a/etcd.log")" || return 1
	result "etcd (TLS)" "restart with cluster c's DNS down, to healthy" "$((($(date +%s%N) - t0) / 1000000)) ms"
	(($(metric etcds-a meshdns_cache_stale_served_total) > before)) ||
		fail_with "a's sidecar served nothing stale (stale_served_total stayed $before)"
}
etcds_c_dns_back() { kubedns_restart c; }
# etcds_peer_active FROM TO: FROM's etcd, since its last start, streams with TO's member
etcds_peer_active() {
	local id
	id=$(pod_exec "etcds-$1" etcdctl --endpoints "https://$1-etcds-0.etcds.$NS.$DZ:2379" --cacert "$WORK/pki/ca.crt" \
		member list | awk -F', ' -v n="$2-etcds-0" '$3 == n { print $1 }')
	[[ -n $id ]] && awk '/starting an etcd server|etcd Version/ { n = NR } { l[NR] = $0 } END { for (i = n; i <= NR; i++) print l[i] }' \
		"$WORK/pods/etcds-$1/etcd.log" | grep -q "established a TCP streaming connection with peer $id"
}

# Member c recreated on a new address (its volume kept): the peers follow the name.
etcds_moved() {
	local t0
	t0=$(date +%s%N)
	member_gone etcds-c c etcds "${ETCD_PID[etcds-c]}" || return 1
	etcd_pod etcds c 10.3.2.11 || return 1
	etcd_start etcds c
	within 60 etcd_health etcds a || fail_with "not healthy 60 s after c moved: $(etcd_health etcds a 2>&1 | tail -3 | tr '\n' ' ')" || return 1
	within 30 etcds_put a k3 after-move || return 1
	result "etcd (TLS)" "member moved to a new address (deleted, recreated), to healthy" "$((($(date +%s%N) - t0) / 1000000)) ms"
}

# cases_DB: the database formed and checked; faults_DB: what happens to it afterwards (run.sh
# measures the steady state of every database in between).
cases_etcd() {
	case_ "etcd: three members by distributed names (plain peer URLs) become healthy" etcd_form etcd 1
	case_ "etcd: a write on a is read on c" etcd_write_read
	case_ "etcd: the member list names each peer by its prefixed name" etcd_members_by_name
}
faults_etcd() { etcd_stop_plain; }
cases_etcd_tls() {
	case_ "etcd TLS: the CA and the guide's peer certificates (SAN = the prefixed name only)" etcds_pki
	case_ "etcd TLS: formed by --discovery-srv etcds.db.svc.distributed.local" etcd_form etcds 2
	case_ "etcd TLS: a's certificate accepted from a's address, refused from another (10.3.9.66)" etcds_cert_address
}
faults_etcd_tls() {
	case_ "etcd TLS: cluster c's DNS stopped -> a and b keep quorum and resolve each other" etcds_c_dns_down
	case_ "etcd TLS: a restarted with c's DNS down rejoins (stale answers), c reachable" etcds_restart_rejoins
	etcds_c_dns_back
	case_ "etcd TLS: member c recreated on 10.3.2.11 -> healthy within 60 s" etcds_moved
}
