# Shared by the multinode-*.sh tests (sourced, not run): several crun
# agents on this machine over loopback, each a real crun process, form one
# job. On top of crun-lib.sh (fail, has, lacks, live, wait_none, cleanup):
#
#   free_port             prints a TCP port that was free a moment ago
#   agent NAME ARGS...    starts "$CRUN ARGS..." in the background, output
#                         in $tmp/NAME.out and $tmp/NAME.err; its pid in
#                         pid_NAME (killed by the cleanup if still there)
#   finish NAME [SECS]    waits up to SECS (30) for the agent to exit and
#                         sets rc_NAME to its status; fails (killing it)
#                         when it does not
#   expect_rc NAME RC     finish NAME, then fail unless it exited RC
#   wait_for FILE TEXT [N] [SECS]   up to SECS (10) for N (1) lines
#                         containing TEXT in FILE
#   worker                a worker command for sh -c: prints one line
#                         "w rank=R local=L group=G nodes=N world=W
#                         restart=C round=K master=A:P store=S" and then
#                         sleeps while $MN_UNTIL (a shell condition, true
#                         by default) is false, up to 60 s; the command
#                         line carries $marker, for wait_none
# shellcheck shell=bash disable=SC2034
. "$(dirname "${BASH_SOURCE[0]}")/crun-lib.sh"
: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"

marker="crun-mn-$$"
# The condition under which a worker exits 0; the tests change it.
MN_UNTIL=true
export MN_UNTIL
worker='echo "w rank=$RANK local=$LOCAL_RANK group=$GROUP_RANK nodes=$GROUP_WORLD_SIZE world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT round=$CRUN_ROUND master=$MASTER_ADDR:$MASTER_PORT store=$CRUN_STORE"
i=0
until eval "$MN_UNTIL"; do
	i=$((i + 1))
	[ $i -le 600 ] || exit 3
	sleep 0.1
done'

free_port() {
	local pf="$tmp/port.$RANDOM" p
	"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$pf" -q 2>/dev/null &
	p=$!
	for _ in $(seq 100); do
		[ -s "$pf" ] && break
		sleep 0.02
	done
	kill "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	[ -s "$pf" ] || fail "cannot find a free port"
	cat "$pf"
	rm -f "$pf"
}

agent() {
	local name=$1
	shift
	"$CRUN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	printf -v "pid_$name" '%s' "$!"
	stray_pids="$stray_pids $!"
}

finish() {
	local name=$1 secs=${2:-30} pidvar="pid_$1" p
	p=${!pidvar}
	for _ in $(seq $((secs * 20))); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$p" 2>/dev/null; then
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
		fail "agent $name did not exit within $secs s:
--- stdout
$(tail -n 20 "$tmp/$name.out")
--- stderr
$(tail -n 30 "$tmp/$name.err")"
	fi
	wait "$p"
	printf -v "rc_$1" '%s' "$?"
}

expect_rc() {
	local rcvar="rc_$1"
	finish "$1" "${3:-30}"
	[ "${!rcvar}" = "$2" ] || fail "agent $1 exited ${!rcvar}, expected $2:
--- stdout
$(tail -n 20 "$tmp/$1.out")
--- stderr
$(tail -n 30 "$tmp/$1.err")"
}

wait_for() {
	local file=$1 text=$2 n=${3:-1} secs=${4:-10}
	for _ in $(seq $((secs * 20))); do
		[ "$(grep -cF -- "$text" "$file" 2>/dev/null)" -ge "$n" ] && return 0
		sleep 0.05
	done
	fail "timed out waiting for $n lines '$text' in $file: $(tail -n 30 "$file")"
}

# field FILE... KEY: the values of KEY= in the worker lines of FILEs
field() {
	local key=${*: -1}
	set -- "${@:1:$#-1}"
	grep -h ' rank=' "$@" | grep -oE " $key=[^ ]*" | cut -d= -f2-
}

# metrics_url FILE: the URL a whole "metrics at" line of FILE names (10 s
# at most; empty when there is none)
metrics_url() {
	local u
	for _ in $(seq 200); do
		u=$(sed -n 's|.*metrics at \(http://.*:[0-9][0-9]*/metrics\)$|\1|p' "$1" | head -n 1)
		[ -n "$u" ] && break
		sleep 0.05
	done
	echo "$u"
}
