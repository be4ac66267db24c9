# shellcheck shell=bash
# The frame of the bench's scripts that measure one meshdns binary (bench/hitcost.sh,
# misscost.sh, floodheap.sh, dotcost.sh): their argument and tool checks, and a scratch
# directory that goes, with every process the script started, when the script ends.
#
#   measure_args SCRIPT "$@"      exits 2 with SCRIPT's usage line unless the first argument
#                                 is an executable (the binary to measure)
#   measure_needs SCRIPT TOOL...  exits 2 naming the first TOOL not installed
#   measure_scratch SCRIPT        sets D (a new directory under /tmp) and PIDS (empty: add the
#                                 PID of each process started), and on exit kills those PIDs,
#                                 waits for them and removes D; `trap - EXIT` keeps D
#   measure_cpu PID               the CPU time of every thread of PID so far (ns, schedstat)
#   measure_switches PID          the context switches of every thread of PID so far
#   measure_straced PID OUT CMD...
#                                 runs CMD (its output passed on) with `strace -c -f` counting
#                                 PID's system calls by name into OUT

measure_args() {
	local script=$1
	shift
	[[ $# -ge 1 && -x $1 ]] || {
		echo "usage: bench/$script.sh BINARY [VAR=VALUE...]" >&2
		exit 2
	}
}

measure_needs() {
	local script=$1 tool
	shift
	for tool in "$@"; do
		command -v "$tool" >/dev/null || {
			echo "$script: $tool is not installed" >&2
			exit 2
		}
	done
}

measure_scratch() {
	D=$(mktemp -d "/tmp/meshdns-$1.XXXXXX")
	PIDS=()
	trap measure_cleanup EXIT
}

measure_cleanup() { # only the processes started here, by PID
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}

measure_cpu() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }

measure_switches() {
	cat /proc/"$1"/task/*/status | awk '/^(non)?voluntary_ctxt_switches:/ {s += $2} END {print s + 0}'
}

measure_straced() {
	local pid=$1 out=$2 st
	shift 2
	strace -c -f -p "$pid" -o "$out" 2>/dev/null &
	st=$!
	sleep 1 # attached
	"$@"
	kill -INT "$st"
	wait "$st"
}
