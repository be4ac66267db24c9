# shellcheck shell=bash
# PostgreSQL (docs/databases/postgresql.md): a primary in a, a streaming standby in b made with
# pg_basebackup from pg-0.pg.db.cluster.a, pg_hba by host name (b admitted, c refused: reverse
# lookups across clusters, forward-confirmed), the primary moved to a new address, pgbouncer in c
# by cluster name. Sourced by run.sh. Pods pg-CLUSTER at 10.i.3.10 (the moved primary: .11).

pg_pod() { # CLUSTER IP
	member "pg-$1" "$1" pg "$2" postgresql:5432 || return 1
	mkdir -p "$WORK/data/pg-$1" && chown postgres:postgres "$WORK/data/pg-$1" && chmod 700 "$WORK/data/pg-$1" &&
		# the server's socket directory, the pod's own (the pods share the machine's /run)
		pod_exec "pg-$1" mount -t tmpfs -o mode=2775,uid=postgres,gid=postgres tmpfs /run/postgresql
}
pg_guide() { # CLUSTER BLOCK: a block of the guide in pg-CLUSTER, as postgres
	GUIDE_USER=postgres guide_run "pg-$1" postgresql "$2" DATA="$WORK/data/pg-$1"
}
pg_start() { # CLUSTER: the server, then pg_isready
	GUIDE_USER=postgres guide_spawn "pg-$1" postgresql pg-start "$WORK/pods/pg-$1/postgres.log" DATA="$WORK/data/pg-$1"
	PG_PID[$1]=$SPAWNED
	within 30 pod_exec "pg-$1" pg_isready -q ||
		fail_with "postgres in pg-$1 not ready: $(tail -3 "$WORK/pods/pg-$1/postgres.log" | tr '\n' ' ')"
}
declare -A PG_PID
psql_a() { # SQL: on the primary, over its socket
	pod_exec pg-a setpriv --reuid=postgres --regid=postgres --init-groups psql -U postgres -d app -Atqc "$1"
}
psql_b() { # SQL: on the standby
	pod_exec pg-b setpriv --reuid=postgres --regid=postgres --init-groups psql -U postgres -d app -Atqc "$1"
}

pg_primary() {
	local c
	for c in "${CLUSTERS[@]}"; do pg_pod "$c" "10.${INDEX[$c]}.3.10" || return 1; done
	PG_T0=$(date +%s%N)
	pg_guide a pg-primary-init >"$WORK/pods/pg-a/init.log" 2>&1 || fail_with "initdb: $(tail -2 "$WORK/pods/pg-a/init.log")" || return 1
	pg_start a || return 1
	pg_guide a pg-primary-roles || fail_with "roles"
}

pg_standby_streams() { # the primary sees b streaming, by its host name from the PTR
	[[ $(psql_a "SELECT state, host(client_addr), client_hostname FROM pg_stat_replication") == "streaming|10.2.3.10|pg-0.pg.db.cluster.b" ]]
}
pg_standby() {
	pg_guide b pg-standby-init >"$WORK/pods/pg-b/basebackup.log" 2>&1 ||
		fail_with "pg_basebackup from pg-0.pg.db.cluster.a: $(tail -3 "$WORK/pods/pg-b/basebackup.log" | tr '\n' ' ')" || return 1
	grep "host=''pg-0.pg.db.cluster.a''" "$WORK/data/pg-b/postgresql.auto.conf" | grep -q 'tcp_user_timeout=5000' ||
		fail_with "primary_conninfo: $(grep primary_conninfo "$WORK/data/pg-b/postgresql.auto.conf")" || return 1
	pg_start b || return 1
	within 30 pg_standby_streams || fail_with "pg_stat_replication: '$(psql_a "SELECT state, client_addr, client_hostname FROM pg_stat_replication")'" || return 1
	result PostgreSQL "time to form (initdb of the primary to the standby streaming)" "$((($(date +%s%N) - PG_T0) / 1000000)) ms"
}

pg_replicates() { # VALUE: written on the primary, read on the standby within 10 s
	psql_a "SET client_min_messages = warning; CREATE TABLE IF NOT EXISTS t (v text); INSERT INTO t VALUES ('$1')" || fail_with "insert on the primary" || return 1
	within 10 pg_standby_has "$1" || fail_with "'$1' not on the standby: $(psql_b "SELECT v FROM t" | tr '\n' ' ')"
}
pg_standby_has() { psql_b "SELECT v FROM t" | grep -qx "$1"; }

pg_hba_by_name() { # b's pod admitted by the host-name line, c's pod refused
	local out
	out=$(pg_guide b pg-replication-check 2>&1) || fail_with "from b: $out" || return 1
	out=$(pg_guide c pg-replication-check 2>&1) && fail_with "from c admitted: $out" || true
	[[ $out == *'no pg_hba.conf entry for replication connection from host "10.3.3.10"'* ]] ||
		fail_with "from c: $out"
}

pg_primary_moved() { # the primary's pod recreated on 10.1.3.11 with its volume: b follows
	local t0
	t0=$(date +%s%N)
	kill -INT "${PG_PID[a]}" # fast shutdown (SIGTERM is "smart": it would wait for pgbouncer's connection)
	member_gone pg-a a pg "${PG_PID[a]}" || return 1
	pg_pod a 10.1.3.11 && pg_start a || return 1
	within 60 pg_standby_streams_from 10.1.3.11 || fail_with "the standby did not follow within 60 s: $(psql_b "SELECT status, sender_host FROM pg_stat_wal_receiver")" || return 1
	pg_replicates after-move || return 1
	result PostgreSQL "primary moved to a new address (deleted, recreated), to the standby streaming again" "$((($(date +%s%N) - t0) / 1000000)) ms"
}
pg_standby_streams_from() { # the standby's receiver streams (sender by name); the primary sees it
	[[ $(psql_b "SELECT status, sender_host FROM pg_stat_wal_receiver") == "streaming|pg-0.pg.db.cluster.a" ]] &&
		pg_standby_streams && [[ $(pod_exec pg-a ss -Htn state established '( sport = :5432 )' | awk '{print $3}' | sort -u) == "$1:5432" ]]
}

pgbouncer_query() { [[ $(pg_guide c pgbouncer-query 2>&1) == "$1" ]]; }
pg_bouncer() { # WANT_SERVER_ADDR
	if [[ -z ${PGBOUNCER_PID:-} ]]; then
		GUIDE_USER=postgres guide_spawn pg-c postgresql pgbouncer "$WORK/pods/pg-c/pgbouncer.out" DATA="$WORK/data/pg-c"
		PGBOUNCER_PID=$SPAWNED
	fi
	within 20 pgbouncer_query "$1" || fail_with "through pgbouncer: '$(pg_guide c pgbouncer-query 2>&1 | tail -2 | tr '\n' ' ')', want $1"
}

cases_postgresql() {
	case_ "PostgreSQL: the primary in a (initdb, pg_hba by host name, roles)" pg_primary
	case_ "PostgreSQL: standby in b by pg_basebackup -h pg-0.pg.db.cluster.a, streaming, named by PTR" pg_standby
	case_ "PostgreSQL: a row written on the primary is read on the standby" pg_replicates first
	case_ "PostgreSQL: pg_hba 'pg-0.pg.db.cluster.b' admits b's pod, refuses c's" pg_hba_by_name
	case_ "PostgreSQL: pgbouncer in c reaches the primary by pg-0.pg.db.cluster.a" pg_bouncer 10.1.3.10
}
faults_postgresql() {
	case_ "PostgreSQL: the primary moved to 10.1.3.11 -> the standby follows the name" pg_primary_moved
	case_ "PostgreSQL: pgbouncer follows the moved primary" pg_bouncer 10.1.3.11
}
