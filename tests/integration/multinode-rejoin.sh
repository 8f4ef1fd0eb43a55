#!/bin/bash
# Nodes that come back: three nodes made by scripts/cluster (network
# namespaces joined by a bridge), two workers each, the store hosted by
# node 0's agent.
# - link: node 1's link goes down (--nnodes=2:3). Node 1's workers are gone
#   within the keep-alive window (its agent kills them when it loses the
#   store), nodes 0 and 2 go on with 2 nodes; when the link is back node 1
#   rejoins as a new node, the running round ends for it (not counted) and
#   the job finishes with 3 nodes.
# - stop: node 1's agent is SIGSTOPped longer than the window (--nnodes=3:
#   a fixed size, so nodes 0 and 2 wait for the next round). Its guard
#   process kills its workers within the window, as the store drops the
#   node (the stopped agent cannot); on SIGCONT the agent learns it lost
#   the store and rejoins, and no worker of the next round starts while one
#   of an earlier round of its node is alive (each worker checks); the job
#   finishes with 3 nodes.
# - exclude: node 1's workers fail in rounds 1 and 2 (--nnodes=2:3,
#   blacklist_failures=2, blacklist_cooldown_range=2s): the store excludes
#   it, nodes 0 and 2 run round 3 without it, and after the cool-down it
#   joins round 4 and the job finishes with 3 nodes. The store's host and
#   node 1 each print one line about the exclusion.
# Every worker line carries its round; the checks are on what the agents
# print and on the processes. Prints the measured times (ms), one line per
# case: "timing CASE name=ms ...".
#
# Knobs (for scripts/bench/rejoin; the defaults keep the test short):
#   REJOIN_OUTAGE_MS  how long the link stays down / the agent stopped
#                     (default 3000; must exceed the keep-alive window)
#   REJOIN_KA         keep-alive settings for --rdzv-conf (default
#                     keep_alive_interval=0.5,keep_alive_max_attempt=3; "-":
#                     crun's defaults, 5s x 3)
#   REJOIN_CASES      the cases to run (default "link stop exclude")
# Skips (77) where network namespaces are not available. Every wait is
# bounded.
# shellcheck disable=SC2016,SC2154 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/multinode-lib.sh"
. "$here/cluster-lib.sh"
cluster_skip_unless_available

outage=${REJOIN_OUTAGE_MS:-3000}
ka=${REJOIN_KA:-keep_alive_interval=0.5,keep_alive_max_attempt=3}
cases=${REJOIN_CASES:-link stop exclude}
if [ "$ka" = - ]; then
	window=15000
	ka=""
else
	iv=$(sed -nE 's/.*keep_alive_interval=([0-9.]+).*/\1/p' <<<"$ka")
	at=$(sed -nE 's/.*keep_alive_max_attempt=([0-9]+).*/\1/p' <<<"$ka")
	window=$(awk -v i="$iv" -v a="$at" 'BEGIN { printf "%d", i * a * 1000 }')
	ka="$ka,"
fi
((outage > window)) || fail "REJOIN_OUTAGE_MS ($outage) must exceed the keep-alive window ($window ms)"

# now: milliseconds since the epoch into $now (no fork)
now() {
	now=${EPOCHREALTIME/./}
	now=$((now / 1000))
}

# A worker: one line with its place, then it fails the test through an
# "overlap" line if a worker of an earlier round of its node is alive, and
# waits until $MN_UNTIL holds (at most 120 s). $0 is the marker, $1 the
# node's directory of worker pids.
rworker='echo "w rank=$RANK local=$LOCAL_RANK group=$GROUP_RANK nodes=$GROUP_WORLD_SIZE world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT round=$CRUN_ROUND"
for f in "$1"/pid.*; do
	[ -e "$f" ] || continue
	case $f in */pid.$CRUN_ROUND.*) continue ;; esac
	kill -0 "$(cat "$f")" 2>/dev/null && echo "overlap: ${f##*/} alive in round $CRUN_ROUND"
done
echo $$ >"$1/pid.$CRUN_ROUND.$LOCAL_RANK"
[ "${0##*.}" = "${RJ_FAIL_NODE:-}" ] && [ "$CRUN_ROUND" -le "${RJ_FAIL_ROUNDS:-0}" ] && exit 1
i=0
until eval "$MN_UNTIL"; do
	i=$((i + 1))
	[ $i -le 1200 ] || exit 3
	sleep 0.1
done'

# workers MARK: the pids of the workers (sh -c ...) whose command line has
# MARK, not the agent's
workers() {
	ps -eo pid=,stat=,args= | awk -v m="$1" 'index($0, m) && $2 !~ /^Z/ && $3 == "sh" {print $1}'
}

# nagent NODE NAME ARGS...: "$CRUN ARGS... sh -c $rworker MARK DIR" in node
# NODE in the background; output in $tmp/NAME.{out,err}, pid in pid_NAME
nagent() {
	local node=$1 name=$2
	shift 2
	mkdir -p "$tmp/pids.$name"
	cluster_bg "$node" "$CRUN" "$@" sh -c "$rworker" "$marker.$name" "$tmp/pids.$name" \
		>"$tmp/$name.out" 2>"$tmp/$name.err"
	printf -v "pid_$name" '%s' "$CLUSTER_LAST_PID"
}

show() {
	local n
	for n in "$@"; do
		printf -- '--- %s.out\n%s\n--- %s.err\n%s\n' "$n" "$(tail -n 20 "$tmp/$n.out")" \
			"$n" "$(tail -n 30 "$tmp/$n.err")"
	done
}

# any_alive PID...: one of PIDs has not ended (a zombie has)
any_alive() {
	local p stat
	for p in "$@"; do
		stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		stat=${stat##*) }
		[[ ${stat:0:1} == Z ]] || return 0
	done
	return 1
}

# fmt_ms MS: a duration as crun prints it ("1500ms", "15s")
fmt_ms() {
	if (($1 % 1000 == 0)); then echo "$(($1 / 1000))s"; else echo "${1}ms"; fi
}

# lines NAME: the worker lines in NAME's output
lines() {
	grep -c ' rank=' "$tmp/$1.out" 2>/dev/null
}

cluster_up 3
A=("${CLUSTER_ADDRS[@]}")
port=29400
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
[ -s "$tmp/token" ] || fail "cannot write the job token"

# start NAME NNODES [CONF]: the three agents of case NAME, node 0 first
# (group rank 0, the store's host); returns once round 1 has closed with
# the three. CONF: more --rdzv-conf settings.
start() {
	local name=$1 nnodes=$2 more=${3:+,$3}
	port=$((port + 1))
	ep="${A[0]}:$port"
	# --min-attempt-time=0: the exclusion case fails the same way on purpose
	common=(--nnodes="$nnodes" --nproc-per-node=2 --rdzv-endpoint="$ep" --rdzv-id="$name"
		--min-attempt-time=0
		--rdzv-conf="${ka}last_call_timeout=1,token_file=$tmp/token$more")
	nagent 0 "${name}0" "${common[@]}"
	wait_for "$tmp/${name}0.err" "joins round 1"
	nagent 1 "${name}1" "${common[@]}"
	nagent 2 "${name}2" "${common[@]}"
	wait_for "$tmp/${name}0.err" "round 1 of run '$name' closed with 3 nodes" 1 15
}

# running1 NAME: waits until every worker of round 1 runs
running1() {
	local n
	for n in 0 1 2; do
		wait_for "$tmp/$1$n.out" "nodes=3 world=6 restart=0 round=1" 2 15
	done
}

# finish_all NAME ROUND [RESTARTS]: every agent exits 0, node 1's workers
# ran in the last round ROUND with 3 nodes (after RESTARTS, 1), and no
# worker saw one of an earlier round
finish_all() {
	local name=$1 round=$2 restarts=${3:-1} n
	for n in 0 1 2; do
		expect_rc "$name$n" 0 20
		lacks "$tmp/$name$n.out" "overlap"
	done
	wait_for "$tmp/${name}1.out" "nodes=3 world=6" 4 1
	grep -qF "nodes=3 world=6 restart=$restarts round=$round" "$tmp/${name}1.out" ||
		fail "node 1 did not run in round $round with 3 nodes: $(show "${name}1")"
	wait_none "$marker.$name"
}

bound=$((window + outage + 15000))

# --- link: node 1's link down, then back ------------------------------------
if [[ " $cases " == *" link "* ]]; then
	export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 3 ] && [ "$CRUN_ROUND" -ge 3 ]'
	start l 2:3
	running1 l
	cluster_cut 1 --link || fail "cannot take node 1's link down"
	now
	t_cut=$now
	t_gone="" t_evict=""
	while :; do
		now
		[ -n "$t_gone" ] || [ -n "$(workers "$marker.l1")" ] || { now; t_gone=$((now - t_cut)); }
		[ -n "$t_evict" ] || ! grep -qF "left: no keep-alive" "$tmp/l0.err" ||
			{ now; t_evict=$((now - t_cut)); }
		((now - t_cut >= outage)) && break
		sleep 0.02
	done
	[ -n "$t_gone" ] || fail "node 1's workers still run ${outage} ms after its link went down: $(show l1)"
	[ -n "$t_evict" ] || fail "the store did not evict node 1 within ${outage} ms: $(show l0)"
	((t_gone <= window + 1000)) ||
		fail "node 1's workers were gone after $t_gone ms, want the keep-alive window ($window ms)"
	# Nodes 0 and 2 went on with 2 nodes meanwhile.
	wait_for "$tmp/l0.out" "nodes=2 world=4 restart=1 round=2" 2 5
	# From the start of the heal: it returns once the link has its carrier.
	now
	t_heal=$now
	cluster_heal 1 || fail "cannot bring node 1's link back"
	now
	t_up=$((now - t_heal))
	t_back="" t_run=""
	while ((now - t_heal < bound)); do
		now
		[ -n "$t_back" ] || ! grep -qF "rejoined run 'l'" "$tmp/l1.err" || { now; t_back=$((now - t_heal)); }
		[ -n "$t_run" ] || (($(lines l1) < 4)) || { now; t_run=$((now - t_heal)); }
		[ -n "$t_back" ] && [ -n "$t_run" ] && break
		sleep 0.02
	done
	[ -n "$t_back" ] || fail "node 1 did not rejoin: $(show l0 l1)"
	[ -n "$t_run" ] || fail "node 1's workers did not run again: $(show l0 l1)"
	has "$tmp/l1.err" "crun: lost the rendezvous store at '$ep' (no reply for $(fmt_ms "$window")); rejoining within 600s"
	grep -qF "is joining; restarting (a joining node is not counted as a restart)" "$tmp/l0.err" ||
		fail "node 0 did not restart for the joining node: $(show l0)"
	finish_all l 3
	echo "timing link gone=$t_gone evicted=$t_evict link_up=$t_up rejoined=$t_back running=$t_run"
fi

# --- stop: node 1's agent SIGSTOPped, then SIGCONT ----------------------------
if [[ " $cases " == *" stop "* ]]; then
	export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 3 ] && [ "$CRUN_ROUND" -ge 2 ]'
	start s 3
	running1 s
	read -ra old <<<"$(workers "$marker.s1" | tr '\n' ' ')"
	((${#old[@]} == 2)) || fail "node 1's workers: ${old[*]}"
	kill -STOP "$pid_s1"
	now
	t_stop=$now
	t_evict="" t_gone=""
	while ((now - t_stop < outage)); do
		now
		[ -n "$t_evict" ] || ! grep -qF "left: no keep-alive" "$tmp/s0.err" ||
			{ now; t_evict=$((now - t_stop)); }
		[ -n "$t_gone" ] || any_alive "${old[@]}" || { now; t_gone=$((now - t_stop)); }
		sleep 0.02
	done
	[ -n "$t_evict" ] || fail "the store did not evict the stopped node within ${outage} ms: $(show s0)"
	[ -n "$t_gone" ] || fail "the stopped node's workers still run ${outage} ms later: $(show s1)"
	((t_gone <= window + 1000)) ||
		fail "the stopped node's workers were gone after $t_gone ms, want the keep-alive window ($window ms)"
	grep -qF "crun: the agent was silent for $window ms (stopped?) and has lost its place in the job; killed 2 worker process groups" \
		"$tmp/s1.err" || fail "the guard did not say why it killed the workers: $(show s1)"
	# A fixed size: nodes 0 and 2 wait for node 1 in round 2.
	(($(lines s0) == 2)) || fail "node 0 ran workers without node 1: $(show s0)"
	kill -CONT "$pid_s1"
	now
	t_cont=$now
	t_back="" t_run=""
	while ((now - t_cont < bound)); do
		now
		[ -n "$t_back" ] || ! grep -qF "rejoined run 's'" "$tmp/s1.err" || { now; t_back=$((now - t_cont)); }
		[ -n "$t_run" ] || (($(lines s1) < 4)) || { now; t_run=$((now - t_cont)); }
		[ -n "$t_back" ] && [ -n "$t_run" ] && break
		sleep 0.02
	done
	[ -n "$t_back" ] || fail "the stopped node did not rejoin: $(show s0 s1)"
	[ -n "$t_run" ] || fail "the stopped node's workers did not run again: $(show s0 s1)"
	finish_all s 2
	grep -qE "^crun: lost the rendezvous store at '$ep' \(.*\); rejoining within 600s$" "$tmp/s1.err" ||
		fail "the stopped node did not say it lost the store: $(show s1)"
	# the workers its guard killed are no failure of the node's: whichever
	# the agent hears first after SIGCONT, their exits or the loss
	! grep -qE "SIGKILL|failed" "$tmp/s1.err" ||
		fail "the guard's kills counted as a failure: $(show s1)"
	! grep -qE "reported a failure|failure" "$tmp/s0.err" ||
		fail "the store heard of a failure of node 1: $(show s0)"
	echo "timing stop evicted=$t_evict gone=$t_gone rejoined=$t_back running=$t_run"
fi
# --- exclude: node 1 keeps failing --------------------------------------------
if [[ " $cases " == *" exclude "* ]]; then
	export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 3 ] && [ "$CRUN_ROUND" -ge 4 ]'
	export RJ_FAIL_NODE=x1 RJ_FAIL_ROUNDS=2
	start x 2:3 "blacklist_failures=2,blacklist_cooldown_range=2s"
	wait_for "$tmp/x0.err" "is excluded for 2s: 2 failures within 600s" 1 15
	now
	t_ex=$now
	wait_for "$tmp/x0.out" "nodes=2 world=4 restart=2 round=3" 2 5
	wait_for "$tmp/x1.out" "nodes=3 world=6 restart=2 round=4" 2 15
	now
	t_back=$((now - t_ex))
	((t_back >= 1500)) || fail "node 1 was back $t_back ms after its exclusion, want the 2 s cool-down"
	grep -qE "^crun: warning: node '[^']+' \(.*\) is excluded from run 'x' for [0-9.]+m?s more: it failed 2 times within 600s; waiting for the cool-down$" \
		"$tmp/x1.err" || fail "node 1 did not say it is excluded: $(show x1)"
	[ "$(grep -c "is excluded for" "$tmp/x0.err")" = 1 ] || fail "exclusions: $(show x0)"
	finish_all x 4 2
	unset RJ_FAIL_NODE RJ_FAIL_ROUNDS
	echo "timing exclude back=$t_back"
fi
echo ok
