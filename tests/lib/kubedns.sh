# shellcheck shell=bash
# Stand-in kube-dns servers with the records CoreDNS's kubernetes plugin gives the pods of a
# headless Service (publishNotReadyAddresses, as database StatefulSets set it), for the
# suites that run real databases across simulated clusters. One NSD per cluster, serving
# cluster.local and the reverse zone of the cluster's pod network 10.INDEX.0.0/16, TTL 5 s
# (CoreDNS's default), SOA minimum 5.
#
#   kubedns_start CLUSTER INDEX ADDR    NSD for CLUSTER on ADDR:53 (tests/lib/nsd.sh must be sourced)
#   kubedns_pod CLUSTER NS SERVICE POD IP [PORTNAME:PORT...]
#       publishes (or moves) pod POD of headless Service SERVICE in namespace NS:
#         POD.SERVICE.NS.svc A IP, SERVICE.NS.svc A IP (the Service's set),
#         _PORTNAME._tcp.SERVICE.NS.svc SRV 0 100 PORT POD.SERVICE.NS.svc.cluster.local.,
#         the PTR of IP -> POD.SERVICE.NS.svc.cluster.local.
#       and reloads the server when it runs.
#   kubedns_pod_gone CLUSTER NS SERVICE POD    its records removed (the pod was deleted)
#   kubedns_stop CLUSTER / kubedns_restart CLUSTER    the cluster's DNS down / back
#
# Uses WORK, track and wait_listen (tests/lib/harness.sh).
declare -A KUBEDNS_PID KUBEDNS_ADDR KUBEDNS_INDEX KUBEDNS_SERIAL

kubedns_dir() { echo "$WORK/kube-dns-$1"; }

kubedns_zones() { # CLUSTER: writes both zone files from the pod list
	local c=$1 d i serial
	d=$(kubedns_dir "$c")
	i=${KUBEDNS_INDEX[$c]}
	KUBEDNS_SERIAL[$c]=$((${KUBEDNS_SERIAL[$c]:-0} + 1))
	serial=${KUBEDNS_SERIAL[$c]}
	{
		printf '%s\n' "\$ORIGIN cluster.local." "\$TTL 5"
		printf '@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. %s 7200 1800 86400 5\n' "$serial"
		printf '@ IN NS ns.dns.cluster.local.\nns.dns IN A %s\n' "${KUBEDNS_ADDR[$c]}"
		printf 'kube-dns.kube-system.svc IN A %s\n' "${KUBEDNS_ADDR[$c]}"
		awk '{
			svc = $3 "." $2 ".svc"
			printf "%s.%s IN A %s\n%s IN A %s\n", $4, svc, $5, svc, $5
			for (f = 6; f <= NF; f++) {
				split($f, p, ":")
				printf "_%s._tcp.%s IN SRV 0 100 %s %s.%s.cluster.local.\n", p[1], svc, p[2], $4, svc
			}
		}' "$d/pods"
	} >"$d/cluster.local.zone"
	{
		printf '%s\n' "\$ORIGIN $i.10.in-addr.arpa." "\$TTL 5"
		printf '@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. %s 7200 1800 86400 5\n' "$serial"
		printf '@ IN NS ns.dns.cluster.local.\n'
		awk '{ split($5, o, "."); printf "%s.%s IN PTR %s.%s.%s.svc.cluster.local.\n", o[4], o[3], $4, $3, $2 }' "$d/pods"
	} >"$d/reverse.zone"
}

kubedns_start() { # CLUSTER INDEX ADDR
	local c=$1 d
	d=$(kubedns_dir "$c")
	KUBEDNS_INDEX[$c]=$2
	KUBEDNS_ADDR[$c]=$3
	mkdir -p "$d"
	touch "$d/pods"
	kubedns_zones "$c"
	{
		nsd_conf_control "$d" "$3" 'verbosity: 1'
		nsd_zone cluster.local "$d/cluster.local.zone"
		nsd_zone "$2.10.in-addr.arpa" "$d/reverse.zone"
	} >"$d/nsd.conf"
	nsd-checkconf "$d/nsd.conf" >"$d/check.log" 2>&1 || fail_with "nsd-checkconf: $(tail -2 "$d/check.log")" || return 1
	kubedns_restart "$c"
}

kubedns_restart() { # CLUSTER
	local c=$1 d
	d=$(kubedns_dir "$c")
	nsd -d -c "$d/nsd.conf" >>"$d/nsd.log" 2>&1 &
	KUBEDNS_PID[$c]=$!
	track $!
	wait_listen $! "${KUBEDNS_ADDR[$c]}" 53 10 || fail_with "kube-dns $c did not start: $(tail -2 "$d/nsd.log")"
}

kubedns_stop() { # CLUSTER
	kill -TERM "${KUBEDNS_PID[$1]}" 2>/dev/null
	wait "${KUBEDNS_PID[$1]}" 2>/dev/null
	unset "KUBEDNS_PID[$1]"
	return 0
}

kubedns_pod() { # CLUSTER NS SERVICE POD IP [PORTNAME:PORT...]
	local c=$1
	shift
	kubedns_update "$c" "$1" "$2" "$3" "$c $*"
}
kubedns_pod_gone() { # CLUSTER NS SERVICE POD
	kubedns_update "$@" ""
}
kubedns_update() { # CLUSTER NS SERVICE POD LINE: POD's line replaced by LINE (none when empty)
	local c=$1 d
	d=$(kubedns_dir "$c")
	{
		awk -v ns="$2" -v svc="$3" -v pod="$4" '!($2 == ns && $3 == svc && $4 == pod)' "$d/pods"
		[[ -z $5 ]] || echo "$5"
	} >"$d/pods.new" && mv "$d/pods.new" "$d/pods"
	kubedns_zones "$c"
	[[ -z ${KUBEDNS_PID[$c]:-} ]] && return 0
	nsd-control -c "$d/nsd.conf" reload >/dev/null 2>&1 || fail_with "nsd-control reload ($c) failed"
}
