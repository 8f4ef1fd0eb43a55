# Sourced by the crun-rdzvd tests: rdzvd_test_init NAME makes $tmp and
# kills every daemon in $pids on exit; fail prints the daemons' logs;
# start_daemon starts one on an ephemeral loopback port.
# shellcheck shell=sh

: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"
: "${CRUN_CTL:?CRUN_CTL must name the crunctl binary}"
unset CRUN_STORE CRUN_RUN_ID CRUN_TOKEN CRUN_TOKEN_FILE CRUN_TIMEOUT CRUN_CONNECT_TIMEOUT

pids=""
rdzvd_cleanup() {
	for p in $pids; do
		kill "$p" 2>/dev/null
	done
	for p in $pids; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}

# rdzvd_test_init NAME: $tmp, a fresh directory; the daemons go on exit.
rdzvd_test_init() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-$1.XXXXXX") || exit 1
	trap rdzvd_cleanup EXIT
	trap 'exit 1' INT TERM
}

# fail MSG: the message and the tail of every log in $tmp, then exit 1
fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/*.log "$tmp"/err; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
	done
	exit 1
}

# start_daemon NAME [ARGS...]: starts crun-rdzvd on an ephemeral port of
# 127.0.0.1 (its log $tmp/NAME.log), sets $port and $pid, and adds it to
# $pids. $rdzvd_wrap, when set, is a command that runs it ("prlimit ... --").
start_daemon() {
	name=$1
	shift
	# shellcheck disable=SC2086
	${rdzvd_wrap:-} "$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/$name.port" "$@" \
		2>"$tmp/$name.log" &
	pid=$!
	pids="$pids $pid"
	i=0
	while [ ! -s "$tmp/$name.port" ]; do
		i=$((i + 1))
		[ $i -le 100 ] || fail "$name: no port file after 10 s"
		kill -0 "$pid" 2>/dev/null || fail "$name: crun-rdzvd exited at start"
		sleep 0.1
	done
	port=$(cat "$tmp/$name.port")
	case $port in
	'' | *[!0-9]*) fail "$name: bad port file content '$port'" ;;
	esac
	grep -q "crun-rdzvd: listening on 127.0.0.1:$port" "$tmp/$name.log" ||
		fail "$name: no 'listening on 127.0.0.1:$port' line"
}
