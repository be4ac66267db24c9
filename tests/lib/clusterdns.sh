# shellcheck shell=bash
# The stand-in cluster DNS of the cluster-level mode (docs/design.md, "Cluster-level mode"):
# dnsdist, which like CoreDNS's `forward` relays a client's message as it is (EDNS options
# included) — meshdns's zones to the meshdns resolvers (the Service of the meshdns Deployment),
# everything else to kube-dns — and health-checks every server once a second, as a Service
# follows its pods' readiness. Used by tests/e2e/run.sh and tests/databases/run.sh.
#
#   clusterdns_conf LISTEN ACL KUBE_DNS "ZONE..." RESOLVER...   the dnsdist configuration
#       LISTEN: its address (port 53, and the source of what it relays); ACL: the client network;
#       KUBE_DNS and each RESOLVER: ADDR:PORT. Start it with
#       dnsdist --supervised --disable-syslog -C FILE
clusterdns_conf() {
	local listen=$1 acl=$2 kube=$3 zones=$4 r z
	local check="checkName='kube-dns.kube-system.svc.cluster.local.', checkInterval=1, maxCheckFailures=1, checkTimeout=500"
	shift 4
	echo "setSecurityPollSuffix('')"
	echo "setLocal('$listen:53')"
	echo "setACL({'$acl'})"
	echo "newServer({address='$kube', source='$listen', $check})"
	for r in "$@"; do
		echo "newServer({address='$r', pool='meshdns', source='$listen', $check})"
	done
	echo "zones = newSuffixMatchNode()"
	for z in $zones; do echo "zones:add(newDNSName('$z'))"; done
	echo "addAction(SuffixMatchNodeRule(zones), PoolAction('meshdns'))"
}
