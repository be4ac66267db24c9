# shellcheck shell=bash
# ZooKeeper (docs/databases/zookeeper.md): a three-server ensemble by cluster names, a write on
# a read on c, a server moved to a new address rejoins. Sourced by run.sh. Pods zk-CLUSTER at
# 10.i.5.10 (moved: .11).

zk_pod() { # CLUSTER IP
	member "zk-$1" "$1" zk "$2" client:2181 quorum:2888 election:3888 && mkdir -p "$WORK/data/zk-$1"
}
zk_start() { # CLUSTER
	guide_spawn "zk-$1" zookeeper zk-server "$WORK/pods/zk-$1/zookeeper.log" CLUSTER="$1" DATA="$WORK/data/zk-$1"
	ZK_PID[$1]=$SPAWNED
}
declare -A ZK_PID
zk_4lw() { # CLUSTER WORD: a four-letter word to the server's client port (from the node network)
	local ip
	ip=$(pod_ip "zk-$1")
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/2181" && printf %s "$1" >&3 && cat <&3' "$ip" "$2" 2>/dev/null
}
zk_mode() { zk_4lw "$1" srvr | sed -n 's/^Mode: //p'; }
zk_ensemble() { # one leader, two followers
	local modes
	modes=$(for c in "${CLUSTERS[@]}"; do zk_mode "$c"; done | sort | tr '\n' ' ')
	[[ $modes == "follower follower leader " ]]
}
zk_cli() { # CLUSTER ARGS...: ZooKeeperMain through CLUSTER's server, in CLUSTER's pod
	local c=$1 block
	shift
	block=$(guide_block zookeeper zk-cli)
	pod_exec "zk-$c" env CLUSTER="$c" timeout 30 bash -c "$block" zk-cli "$@" 2>&1
}

zk_form() {
	local c t0
	for c in "${CLUSTERS[@]}"; do zk_pod "$c" "10.${INDEX[$c]}.5.10" || return 1; done
	t0=$(date +%s%N)
	for c in "${CLUSTERS[@]}"; do zk_start "$c"; done
	within 60 zk_ensemble || fail_with "modes after 60 s: $(for c in "${CLUSTERS[@]}"; do echo "$c=$(zk_mode "$c")"; done | tr '\n' ' ')" || return 1
	result ZooKeeper "time to form (three JVMs started to a leader and two followers)" "$((($(date +%s%N) - t0) / 1000000)) ms"
}

zk_write_read() { # VALUE: created (or set) through a, read through c
	local out
	out=$(zk_cli a create /greeting "$1")
	[[ $out == *"Created /greeting"* || $out == *"already exists"* ]] || fail_with "create through a: $(tail -2 <<<"$out")" || return 1
	[[ $out == *"Created /greeting"* ]] || zk_cli a set /greeting "$1" >/dev/null
	within 20 zk_c_reads "$1" || fail_with "get through c: $(zk_cli c get /greeting | tail -2)"
}
zk_c_reads() { zk_cli c get /greeting | grep -qx "$1"; }

zk_moved() { # server c recreated on 10.3.5.11 with its volume: it rejoins
	local t0
	t0=$(date +%s%N)
	member_gone zk-c c zk "${ZK_PID[c]}" || return 1
	zk_pod c 10.3.5.11 || return 1
	zk_start c
	within 60 zk_ensemble || fail_with "modes 60 s after the move: $(for c in "${CLUSTERS[@]}"; do echo "$c=$(zk_mode "$c")"; done | tr '\n' ' ')" || return 1
	result ZooKeeper "server moved to a new address (deleted, recreated), to a follower again" "$((($(date +%s%N) - t0) / 1000000)) ms"
	zk_write_read after-move
}

cases_zookeeper() {
	case_ "ZooKeeper: three servers by cluster names form an ensemble (one leader)" zk_form
	case_ "ZooKeeper: a znode created through a is read through c" zk_write_read from-a
}
faults_zookeeper() {
	case_ "ZooKeeper: server c recreated on 10.3.5.11 rejoins; writes still reach c" zk_moved
}
