# shellcheck shell=bash
# NSD configuration for the stand-in DNS servers of tests/e2e/run.sh, tests/soak.sh and
# bench/run.sh: one server per loopback address, everything it writes in its own directory,
# no remote control over the network, and response rate limiting off (NSD limits answers per
# client netblock by default; at load it then drops answers to meshdns, which looks like a slow
# upstream).
#
#   nsd_conf DIR ADDR [SERVER_OPTION...] >DIR/nsd.conf   the server part ("verbosity: 1", ...)
#   nsd_conf_control DIR ADDR [SERVER_OPTION...]         the same, with nsd-control reaching the
#                                                        server through the unix socket
#                                                        DIR/control.sock (no certificates):
#                                                        nsd-control -c DIR/nsd.conf stats_noreset
#   nsd_zone NAME FILE >>DIR/nsd.conf                    one zone served from FILE

nsd_conf() {
	nsd_server_conf "$@"
	printf 'remote-control:\n\tcontrol-enable: no\n'
}

nsd_conf_control() {
	nsd_server_conf "$@"
	printf 'remote-control:\n\tcontrol-enable: yes\n\tcontrol-interface: "%s"\n' "$1/control.sock"
}

nsd_server_conf() {
	local dir=$1 addr=$2 option
	shift 2
	printf 'server:\n'
	for option in "ip-address: $addr" 'port: 53' 'do-ip6: no' 'server-count: 1' \
		'rrl-ratelimit: 0' 'rrl-whitelist-ratelimit: 0' 'reuseport: no' 'username: ""' \
		'chroot: ""' "zonesdir: \"$dir\"" 'database: ""' "zonelistfile: \"$dir/zone.list\"" \
		"xfrdfile: \"$dir/xfrd.state\"" "xfrdir: \"$dir\"" "pidfile: \"$dir/nsd.pid\"" \
		"logfile: \"$dir/nsd.log\"" "$@"; do
		printf '\t%s\n' "$option"
	done
}

nsd_zone() {
	printf 'zone:\n\tname: %s\n\tzonefile: "%s"\n' "$1" "$2"
}

# nsd_bench_zone DIR ADDR: the benchmark scripts' zone, bench.test with 1,000 names h0…h999
# (A 10.0.x.y), served from ADDR: DIR/zone, DIR/nsd.conf, and DIR/hot.txt with the 1,000
# questions in dnsperf's format.
nsd_bench_zone() {
	local dir=$1 addr=$2
	mkdir -p "$dir"
	{
		# shellcheck disable=SC2016 # zone-file directives, not shell expansions
		printf '$ORIGIN bench.test.\n$TTL 3600\n'
		printf '@ IN SOA ns.bench.test. hostmaster.bench.test. 1 7200 1800 86400 60\n@ IN NS ns\nns IN A %s\n' "$addr"
		awk 'BEGIN { for (i = 0; i < 1000; i++) printf "h%d IN A 10.0.%d.%d\n", i, int(i / 256), i % 256 }'
	} >"$dir/zone"
	{
		nsd_conf "$dir" "$addr" 'verbosity: 0'
		nsd_zone bench.test "$dir/zone"
	} >"$dir/nsd.conf"
	awk 'BEGIN { for (i = 0; i < 1000; i++) print "h" i ".bench.test A" }' >"$dir/hot.txt"
}
