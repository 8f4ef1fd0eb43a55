# Several hosts on one machine for integration tests (sourced by bash
# scripts, not run): nodes with real distinct addresses made by
# scripts/cluster from network namespaces, a way to cut a node off, and a
# teardown that runs however the test ends. For example:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/cluster-lib.sh"
#   cluster_skip_unless_available
#   cluster_up 2
#   cluster_bg 0 "$CRUN_RDZVD" --host "${CLUSTER_ADDRS[0]}" --port 0 \
#           --port-file "$tmp/port" 2>"$tmp/rdzvd.log"
#   cluster_wait_file "$tmp/port" || exit 1
#   cluster_exec 1 timeout --foreground 10 "$CRUN_CTL" \
#           --endpoint "${CLUSTER_ADDRS[0]}:$(cat "$tmp/port")" ping
#   cluster_cut 1          # node 1 is cut off: connections time out
#
#   cluster_skip_unless_available
#           exit 77 (skip) with the reason where the harness cannot work
#   cluster_up N [--subnet A.B.C.0/24]
#           bring up nodes 0 .. N-1; sets CLUSTER_NAME (crun-<pid>-<k>),
#           CLUSTER_ADDRS (node i's IPv4 address) and CLUSTER_ADDRS6 (its
#           IPv6 address; empty without IPv6); installs the teardown on
#           EXIT, INT, TERM and HUP. An EXIT trap the test set before still
#           runs, after the teardown; set traps before cluster_up, or call
#           cluster_teardown from your own.
#   cluster_exec I CMD [ARG]...
#           run CMD in node I in the foreground, returning its status; bound
#           it yourself (timeout(1))
#   cluster_bg I CMD [ARG]...
#           start CMD in node I in the background; CLUSTER_LAST_PID is its
#           pid, which the teardown kills with everything else in the nodes
#   cluster_cut I [--link] / cluster_heal I
#           cut node I off the others and put it back (scripts/cluster cut)
#   cluster_wait_file FILE [SECONDS]
#           wait up to SECONDS (10) for FILE to be non-empty; 1 if it is not
#   cluster_teardown
#           kill every process in the nodes, remove every namespace; also
#           run by the traps. Runs in a session of its own, so that a
#           SIGKILL of the test's process group after a SIGTERM (what meson
#           does on a timeout) does not stop it halfway. Where the traps
#           cannot run (SIGKILL) or run late (bash waits for a foreground
#           command to end before it runs a trap), a detached watchdog
#           ('scripts/cluster watch') takes the cluster down within a
#           quarter of a second of the test's end; and each cluster_up
#           removes the clusters of tests that have gone ('gc').
# shellcheck shell=bash disable=SC2034

CLUSTER_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/cluster
CLUSTER_NAME=""
CLUSTER_ADDRS=()
CLUSTER_ADDRS6=()
CLUSTER_PIDS=()
CLUSTER_LAST_PID=""
cluster__seq=0
cluster__trapped=""
cluster__prev_exit=""

cluster_skip_unless_available() {
	local out rc
	out=$("$CLUSTER_SCRIPT" check 2>&1)
	rc=$?
	case $rc in
	0) return 0 ;;
	77)
		echo "${out:-cluster: unavailable}: skipping"
		exit 77
		;;
	*)
		echo "cluster_skip_unless_available: 'scripts/cluster check' failed ($rc): $out"
		exit 1
		;;
	esac
}

cluster__install_traps() {
	local prev
	local -a words
	[[ -z $cluster__trapped ]] || return 0
	cluster__trapped=1
	prev=$(trap -p EXIT)
	if [[ -n $prev ]]; then
		# "trap -- 'CMD' EXIT", quoted for eval
		eval "words=($prev)"
		cluster__prev_exit=${words[2]}
	fi
	trap 'cluster__on_exit' EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

cluster__on_exit() {
	local rc=$?
	cluster_teardown
	if [[ -n $cluster__prev_exit ]]; then
		eval "$cluster__prev_exit"
	fi
	return "$rc"
}

cluster_up() {
	local out
	if (($# < 1)); then
		echo "cluster_up: want N" >&2
		exit 1
	fi
	if [[ -n $CLUSTER_NAME ]]; then
		echo "cluster_up: cluster '$CLUSTER_NAME' is already up" >&2
		exit 1
	fi
	cluster__seq=$((cluster__seq + 1))
	CLUSTER_NAME=crun-$$-$cluster__seq
	# Traps first: a signal during "up" still removes what it made.
	cluster__install_traps
	"$CLUSTER_SCRIPT" gc
	out=$("$CLUSTER_SCRIPT" up "$CLUSTER_NAME" "$1" --owner $$ --watch "${@:2}") || {
		echo "cluster_up: cannot bring up $1 nodes as '$CLUSTER_NAME'" >&2
		exit 1
	}
	mapfile -t CLUSTER_ADDRS <<<"$out"
	mapfile -t CLUSTER_ADDRS6 < <("$CLUSTER_SCRIPT" addrs "$CLUSTER_NAME" -6)
}

cluster__node() {
	if [[ -z $CLUSTER_NAME ]]; then
		echo "$2: no cluster is up" >&2
		return 1
	fi
	if [[ ! $1 =~ ^[0-9]+$ ]] || (($1 >= ${#CLUSTER_ADDRS[@]})); then
		echo "$2: no node '$1' (nodes 0 to $((${#CLUSTER_ADDRS[@]} - 1)))" >&2
		return 1
	fi
}

cluster_exec() {
	cluster__node "$1" cluster_exec || return 1
	ip netns exec "$CLUSTER_NAME-$1" "${@:2}"
}

cluster_bg() {
	cluster__node "$1" cluster_bg || return 1
	ip netns exec "$CLUSTER_NAME-$1" "${@:2}" &
	CLUSTER_LAST_PID=$!
	CLUSTER_PIDS+=("$CLUSTER_LAST_PID")
}

cluster_cut() {
	cluster__node "$1" cluster_cut || return 1
	"$CLUSTER_SCRIPT" cut "$CLUSTER_NAME" "$@"
}

cluster_heal() {
	cluster__node "$1" cluster_heal || return 1
	"$CLUSTER_SCRIPT" heal "$CLUSTER_NAME" "$1"
}

cluster_wait_file() {
	local i n=$((${2:-10} * 20))
	for ((i = 0; i < n; i++)); do
		[[ -s $1 ]] && return 0
		sleep 0.05
	done
	[[ -s $1 ]]
}

cluster_teardown() {
	local p rc=0
	[[ -n $CLUSTER_NAME ]] || return 0
	setsid -w "$CLUSTER_SCRIPT" down "$CLUSTER_NAME" </dev/null || rc=1
	# Our own children are reaped here; one that left its namespace (it
	# cannot, short of setns) would still be killed.
	for p in "${CLUSTER_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	((rc == 0)) || echo "cluster_teardown: cannot remove cluster '$CLUSTER_NAME'" >&2
	CLUSTER_NAME=""
	CLUSTER_ADDRS=()
	CLUSTER_ADDRS6=()
	CLUSTER_PIDS=()
	CLUSTER_LAST_PID=""
	return "$rc"
}
