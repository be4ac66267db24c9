# shellcheck shell=bash
# DNS over TLS for bench/run.sh's tls group and bench/dotcost.sh: the certificates (made with
# openssl at run time, valid two days) and an unbound that terminates TLS itself, answering
# names of its own, so that a DoT miss and a TCP miss to the same server can be compared with
# no second hop.
#
#   dot_certs DIR NAME            DIR/ca.pem, DIR/server.{pem,key} for NAME (serverAuth) and
#                                 DIR/client.{pem,key} (clientAuth), P-256; openssl's output in
#                                 DIR/openssl.log; fails when openssl does
#   unbound_dot_conf DIR ADDR CERTS >DIR/unbound.conf
#                                 unbound with one thread on ADDR, DoT on :853 with CERTS's
#                                 server certificate (no client certificate asked for), plain
#                                 TCP on :53, no UDP, everything it writes in DIR, and the
#                                 10,000 names hN.mongo.db.svc.cluster.local. (A 10.101.x.y,
#                                 the bench's cluster addresses) as its own data (DIR/names.conf)

dot_certs() {
	local dir=$1 name=$2
	mkdir -p "$dir"
	(
		cd "$dir" || exit 1
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
			-subj "/CN=meshdns bench CA" -keyout ca.key -out ca.pem &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
				-keyout server.key -out server.csr &&
			printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n' "$name" >server.ext &&
			openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
				-extfile server.ext -out server.pem &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=meshdns sidecar" \
				-keyout client.key -out client.csr &&
			printf 'extendedKeyUsage=clientAuth\n' >client.ext &&
			openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
				-extfile client.ext -out client.pem
	) >"$dir/openssl.log" 2>&1
}

unbound_dot_conf() {
	local dir=$1 addr=$2 certs=$3
	awk 'BEGIN { for (i = 0; i < 10000; i++) printf "local-data: \"h%d.mongo.db.svc.cluster.local. 30 IN A 10.101.%d.%d\"\n", i, int(i / 256), i % 256 }' \
		>"$dir/names.conf"
	cat <<EOF
server:
	num-threads: 1
	interface: $addr@853
	interface: $addr@53
	tls-port: 853
	tls-service-key: "$certs/server.key"
	tls-service-pem: "$certs/server.pem"
	do-ip4: yes
	do-ip6: no
	do-udp: no
	do-tcp: yes
	access-control: 127.0.0.0/8 allow
	module-config: "iterator"
	username: ""
	chroot: ""
	directory: "$dir"
	pidfile: ""
	use-syslog: no
	logfile: "$dir/unbound.log"
	verbosity: 1
	so-reuseport: no
	local-zone: "mongo.db.svc.cluster.local." static
	include: "$dir/names.conf"
remote-control:
	control-enable: no
EOF
}
