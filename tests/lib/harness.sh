# shellcheck shell=bash
# The case runner and the process bookkeeping of the shell suites (tests/e2e/run.sh,
# tests/databases/run.sh): one line per case, "N passed, M failed" at the end, and every
# process a suite starts ended when it exits.
#
#   case_ NAME FUNC [ARGS...]   runs FUNC: 0 is a pass; otherwise FUNC sets REASON (fail_with)
#   fail_with TEXT...           sets REASON, returns 1
#   note TEXT...                a "#" line in the output
#   track PID                   ended (TERM, then KILL) by harness_cleanup
#   harness_cleanup             the EXIT trap: ends the tracked processes, removes WORK unless
#                               KEEP_WORK is set
#   harness_summary             prints the time taken and "N passed, M failed"; status 1 on a failure
#   listening ADDR PORT u|t     something listens there (this network namespace)
#   wait_listen PID ADDR PORT SECONDS   UDP and TCP both bound, PID still alive
#
# The caller sets WORK (its temp dir) and may set HARNESS_DEADLINE (seconds since the start;
# cases after it fail as "not run", default 240) and HARNESS_DEADLINE_VAR (the variable named in
# that message).
PASS=0
FAIL=0
FAILED=()
REASON=
PIDS=()
HARNESS_START_NS=$(date +%s%N)

ok() { PASS=$((PASS + 1)); printf 'ok    %s\n' "$1"; }
bad() { FAIL=$((FAIL + 1)); FAILED+=("$1"); printf 'FAIL  %s -- %s\n' "$1" "$2"; }
note() { printf '#     %s\n' "$*"; }
fail_with() { REASON="$*"; return 1; }
elapsed_s() { echo $((($(date +%s%N) - HARNESS_START_NS) / 1000000000)); }

case_() {
	local name=$1 deadline=${HARNESS_DEADLINE:-240}
	shift
	if (($(date +%s%N) - HARNESS_START_NS > deadline * 1000000000)); then
		bad "$name" "not run: the suite passed its ${deadline}s deadline (${HARNESS_DEADLINE_VAR:-HARNESS_DEADLINE})"
		return
	fi
	REASON=
	if "$@"; then ok "$name"; else bad "$name" "${REASON:-check failed}"; fi
}

track() { PIDS+=("$@"); }

harness_cleanup() {
	local p alive
	exec 2>/dev/null # bash's "Killed" notes for the processes ended below
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		alive=0
		for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.2
	done
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	if [[ -n ${KEEP_WORK:-} ]]; then echo "# kept $WORK"; else rm -rf "$WORK"; fi
}

harness_summary() {
	echo "# took $(elapsed_s)s"
	echo "$PASS passed, $FAIL failed"
	((FAIL == 0))
}

listening() { # ADDR PORT PROTO(u|t)
	ss -Hln"$3" 2>/dev/null | awk '{print $4}' | grep -qxF "$1:$2"
}
wait_listen() { # PID ADDR PORT SECONDS -> waits for UDP and TCP
	local pid=$1 addr=$2 port=$3 n=$(($4 * 10))
	while ((n-- > 0)); do
		kill -0 "$pid" 2>/dev/null || return 1
		listening "$addr" "$port" u && listening "$addr" "$port" t && return 0
		sleep 0.1
	done
	return 1
}
