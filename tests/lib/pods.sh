# shellcheck shell=bash
# "Pods" for the shell suites: each one a network and a mount namespace of its own, as a
# Kubernetes pod has, joined to the suite's network by a veth pair on one bridge.
#
#   pods_network                  the bridge br0 in the suite's (private) network namespace
#   node_addr ADDR                an address on br0 for servers outside the pods (stand-in DNS)
#   pod_create POD IP NAMESERVER SEARCH FQDN
#       POD's own network namespace with eth0 = IP/8 on br0 and lo, and its own mount namespace
#       where /etc/resolv.conf ("search SEARCH", "nameserver NAMESERVER", ndots:5),
#       /etc/hosts (the kubelet's: localhost and "IP FQDN HOST") and /etc/nsswitch.conf
#       ("hosts: files dns") are bind mounts of files in $WORK/pods/POD. A holder process
#       keeps the namespaces; pod_delete ends it (the veth goes with the network namespace).
#   pod_exec POD CMD...           CMD inside POD's namespaces (nsenter)
#   pod_spawn POD LOG CMD...      the same in the background, output appended to LOG; SPAWNED is
#                                 the command's own PID (tracked: ended with the suite)
#   pod_listening POD ADDR PORT u|t   something listens there, inside POD
#   pod_ip POD                    its address
#
# Why namespaces and not loopback addresses: the databases check where a peer connects from
# (etcd's peer certificate check, PostgreSQL's pg_hba host names), and in one network
# namespace a connection to 127.0.x.y leaves from an address the kernel picks, not from the
# member's own. In a pod of its own, eth0 carries one address and every connection leaves
# from it, whatever the client. The 10.0.0.0/8 addresses exist only on br0 and the veths,
# inside the suite's network namespace: no packet can leave it.
#
# Needs root, iproute2 (ip, ss), util-linux (unshare, nsenter) and the kernel's veth and bridge.
declare -A POD_PID POD_IP POD_VETH
POD_SEQ=0
export SPAWNED= # set by pod_spawn, read by its callers

# br0's MAC address is set once: a bridge left to choose takes the lowest MAC of its ports, so
# every pod made or deleted could change it, and the pods' ARP entries for the addresses on br0
# (the stand-in DNS servers) would point nowhere for half a minute.
pods_network() {
	ip link add br0 type bridge || return 1
	ip link set br0 address 02:00:00:00:00:01 && ip link set br0 up
}

node_addr() { ip addr add "$1/8" dev br0; }

pod_create() {
	local pod=$1 ip=$2 nameserver=$3 search=$4 fqdn=$5 d=$WORK/pods/$1 n=50
	mkdir -p "$d"
	rm -f "$d/ready" # a pod recreated under the same name: wait for the new holder
	printf 'search %s\nnameserver %s\noptions ndots:5\n' "$search" "$nameserver" >"$d/resolv.conf"
	printf '127.0.0.1\tlocalhost\n%s\t%s\t%s\n' "$ip" "$fqdn" "${fqdn%%.*}" >"$d/hosts"
	printf 'hosts: files dns\n' >"$d/nsswitch.conf"
	# shellcheck disable=SC2016 # the holder's own script, its arguments in $1
	unshare -n -m --propagation private sh -c '
		for f in resolv.conf hosts nsswitch.conf; do mount --bind "$1/$f" "/etc/$f" || exit 97; done
		if [ -d /var/run/nscd ]; then mount -t tmpfs none /var/run/nscd || exit 97; fi
		: >"$1/ready"
		exec sleep infinity' sh "$d" &
	POD_PID[$pod]=$!
	POD_IP[$pod]=$ip
	track $!
	until [[ -e $d/ready ]]; do
		((n-- > 0)) && kill -0 "${POD_PID[$pod]}" 2>/dev/null || fail_with "pod $pod: the namespaces were not made" || return 1
		sleep 0.1
	done
	# One veth pair per pod made (a recreated pod gets a new one); the pod's end is renamed eth0.
	POD_SEQ=$((POD_SEQ + 1))
	POD_VETH[$pod]=veth$POD_SEQ
	if ! { ip link add "veth$POD_SEQ" type veth peer name "peer$POD_SEQ" &&
		ip link set "peer$POD_SEQ" netns "${POD_PID[$pod]}" &&
		ip link set "veth$POD_SEQ" master br0 &&
		ip link set "veth$POD_SEQ" up &&
		pod_exec "$pod" sh -c "ip link set lo up && ip link set peer$POD_SEQ name eth0 &&
			ip addr add $ip/8 dev eth0 && ip link set eth0 up"; }; then
		fail_with "pod $pod: its network could not be set up"
	fi
}

pod_exec() {
	local pod=$1
	shift
	nsenter -t "${POD_PID[$pod]}" -n -m -- "$@"
}

pod_spawn() {
	local pod=$1 log=$2
	shift 2
	(exec nsenter -t "${POD_PID[$pod]}" -n -m -- "$@") >>"$log" 2>&1 &
	SPAWNED=$!
	track $!
}

pod_delete() { # POD: its holder ended and its veth removed (end the processes in it first)
	kill -KILL "${POD_PID[$1]}" 2>/dev/null
	wait "${POD_PID[$1]}" 2>/dev/null
	ip link del "${POD_VETH[$1]}" 2>/dev/null
	unset "POD_PID[$1]"
	return 0
}

pod_listening() { # POD ADDR PORT u|t
	pod_exec "$1" ss -Hln"$4" 2>/dev/null | awk '{print $4}' | grep -qxF "$2:$3"
}

pod_ip() { echo "${POD_IP[$1]}"; }
