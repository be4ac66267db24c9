# shellcheck shell=bash
# A network namespace of its own for the e2e suite, the soak and the benchmark: they bind fixed
# 127.0.x.y addresses (port 53 among them), which in the machine's namespace collide with
# whatever else holds them (another run, a system resolver on 127.0.1.1:53, ...) and could
# disturb it. In a namespace made by `unshare -n` there is only a loopback interface, every
# 127.0.0.0/8 address is ours, and no packet can leave it.
#
#   netns_private SCRIPT [ARGS...]
#       Called by SCRIPT after its host-side steps (apt-get, pip, cargo build: they need the
#       registries) and before it binds anything. The first time, it re-executes
#       `bash SCRIPT ARGS...` under `unshare -n` with TESTS_NETNS_PRIVATE=1 and does not
#       return (the script's exit code is the child's); in the child it brings `lo` up and
#       returns. Set TESTS_NETNS_PRIVATE=1 yourself to run in the namespace you are in.
#
# Needs root (unshare -n) and iproute2 (ip). Not a MESHDNS_* name: meshdns refuses unknown
# MESHDNS_* variables in its environment.
netns_private() {
	local script=$1
	shift
	if [[ -n ${TESTS_NETNS_PRIVATE:-} ]]; then
		ip link set lo up || {
			echo "netns: cannot bring up lo in this network namespace" >&2
			exit 2
		}
		return 0
	fi
	exec env TESTS_NETNS_PRIVATE=1 unshare --net -- bash "$script" "$@"
}
