# shellcheck shell=bash
# Redis with Sentinel (docs/databases/redis.md): a master in a, a replica in b by the cluster.a
# host name, one Sentinel per cluster with resolve-hostnames and announce-hostnames; the master
# killed -> every Sentinel names the new master by host name. Sourced by run.sh. Pods
# redis-CLUSTER at 10.i.4.10.

redis_guide_spawn() { # CLUSTER BLOCK LOG
	guide_spawn "redis-$1" redis "$2" "$WORK/pods/redis-$1/$3" CLUSTER="$1" DATA="$WORK/data/redis-$1"
}
redis_cli() { # CLUSTER ARGS...: redis-cli in redis-CLUSTER's pod
	local c=$1
	shift
	pod_exec "redis-$c" timeout 5 redis-cli "$@"
}
redis_master_is() { # CLUSTER: every Sentinel names redis-0.redis.db.cluster.CLUSTER
	local s
	for s in "${CLUSTERS[@]}"; do
		[[ $(guide_run "redis-$s" redis redis-which-master CLUSTER="$s" | head -1) == "redis-0.redis.$NS.cluster.$1" ]] || return 1
	done
}

redis_form() {
	local c t0
	for c in "${CLUSTERS[@]}"; do
		member "redis-$c" "$c" redis "10.${INDEX[$c]}.4.10" redis:6379 sentinel:26379 || return 1
		mkdir -p "$WORK/data/redis-$c"
	done
	t0=$(date +%s%N)
	redis_guide_spawn a redis-master redis.log
	REDIS_PID[a]=$SPAWNED
	redis_guide_spawn b redis-replica redis.log
	REDIS_PID[b]=$SPAWNED
	within 20 redis_link_up || fail_with "the replica in b is not linked: $(redis_cli b INFO replication | grep -E 'master_(host|link)' | tr -d '\r' | tr '\n' ' ')" || return 1
	for c in "${CLUSTERS[@]}"; do redis_guide_spawn "$c" redis-sentinel sentinel.log; done
	within 30 redis_sentinels_agree || fail_with "the Sentinels do not see each other: $(redis_cli a -p 26379 SENTINEL master mymaster | tr -d '\r' | paste -sd' ' | cut -c1-300)" || return 1
	result Redis "time to form (master, replica, three Sentinels seeing each other and the replica)" "$((($(date +%s%N) - t0) / 1000000)) ms"
}
declare -A REDIS_PID
REDIS_MASTER=a # the cluster of the master the Sentinels name
redis_link_up() {
	redis_cli b INFO replication | tr -d '\r' | grep -qx 'master_link_status:up'
}
redis_sentinels_agree() { # each Sentinel: the master by name, 2 other Sentinels, 1 replica
	local c info
	redis_master_is a || return 1
	for c in "${CLUSTERS[@]}"; do
		info=$(redis_cli "$c" -p 26379 SENTINEL master mymaster | tr -d '\r' | paste -sd' ')
		[[ " $info " == *" num-other-sentinels 2 "* && " $info " == *" num-slaves 1 "* ]] || return 1
	done
}

redis_replicates() {
	redis_cli a SET greeting from-a >/dev/null || fail_with "SET on a" || return 1
	within 10 redis_replica_has from-a || fail_with "GET on b: $(redis_cli b GET greeting)"
}
redis_replica_has() { [[ $(redis_cli b GET greeting) == "$1" ]]; }

redis_replica_named() { # the Sentinels know the replica by its announced host name
	local got
	got=$(redis_cli c -p 26379 SENTINEL replicas mymaster | tr -d '\r' | awk 'p { print; exit } $0 == "name" { p = 1 }')
	[[ $got == "redis-0.redis.$NS.cluster.b:6379" ]] || fail_with "replica known as '$got'"
}

redis_failover() {
	local t0
	kill -KILL "${REDIS_PID[a]}"
	t0=$(date +%s%N)
	wait "${REDIS_PID[a]}" 2>/dev/null
	within 30 redis_master_is b || fail_with "after 30 s: $(for s in "${CLUSTERS[@]}"; do guide_run "redis-$s" redis redis-which-master CLUSTER="$s" | head -1; done | tr '\n' ' ')" || return 1
	REDIS_MASTER=b
	result Redis "failover (master killed to every Sentinel naming the new one)" "$((($(date +%s%N) - t0) / 1000000)) ms"
	[[ $(redis_cli b ROLE | head -1) == master ]] || fail_with "b's role: $(redis_cli b ROLE | head -1)"
}

cases_redis() {
	case_ "Redis: master in a, replica in b by redis-0.redis.db.cluster.a, three Sentinels agree" redis_form
	case_ "Redis: a key set on the master is read on the replica" redis_replicates
	case_ "Redis: the Sentinels know the replica as redis-0.redis.db.cluster.b:6379" redis_replica_named
}
faults_redis() {
	case_ "Redis: master killed -> every Sentinel names redis-0.redis.db.cluster.b within 30 s" redis_failover
}
