#!/bin/bash
# A store that goes away under a running job, over loopback: three crun
# agents, one worker each, against a crun-rdzvd.
# - resume: the daemon is SIGKILLed and started again on the same port
#   STORE_OUTAGE_S (default 3) seconds later. Every agent says its workers
#   keep running, resumes round 1 when the daemon is back, and the same
#   worker processes finish the job: exit 0, round 1 only.
# - left: the same, but one agent dies (SIGKILL) while the daemon is down
#   (--nnodes=2:3): the other two resume, the round ends as if that node had
#   left, and their round 2 finishes: exit 0.
# - embedded: the store is hosted by the first agent (node 0); that agent is
#   SIGKILLed: the others stop their workers and exit 1 at once, saying the
#   job cannot go on without node 0's store.
# Extra crun-rdzvd arguments (--state-dir DIR) come from STORE_OUTAGE_RDZVD.
# pid_NAME come from agent (printf -v); conditions are literal text.
# shellcheck disable=SC2016,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

outage=${STORE_OUTAGE_S:-3}
cases=${STORE_OUTAGE_CASES:-resume left embedded}
# A short keep-alive window (3 s): a resume waits for the others that long.
ka=keep_alive_interval=0.5,keep_alive_max_attempt=6,last_call_timeout=1
# Each worker prints its pid and round, then waits for the file $0.go or,
# with $0.go-2, for a round after the first ($0 carries $marker).
work='echo "w rank=$RANK round=$CRUN_ROUND pid=$$"
i=0
until [ -e "$0.go" ] || { [ -e "$0.go-2" ] && [ "$CRUN_ROUND" -ge 2 ]; }; do
	i=$((i + 1))
	[ $i -le 600 ] || exit 3
	sleep 0.1
done'

daemon_pid=""
# start_store N: crun-rdzvd on 127.0.0.1:$port for the Nth time (its log
# $tmp/rdzvd.$port.log)
start_store() {
	"$CRUN_RDZVD" --host 127.0.0.1 --port "$port" ${STORE_OUTAGE_RDZVD:-} \
		2>>"$tmp/rdzvd.$port.log" &
	daemon_pid=$!
	stray_pids="$stray_pids $daemon_pid"
	wait_for "$tmp/rdzvd.$port.log" "listening on 127.0.0.1:$port" "$1"
}

kill_store() {
	kill -9 "$daemon_pid"
	wait "$daemon_pid" 2>/dev/null
}

# pids NAME...: the worker pids the agents' outputs name, sorted
pids() {
	local n
	for n in "$@"; do
		field "$tmp/$n.out" pid
	done | sort -n | tr '\n' ' '
}

# start_agents CASE NNODES NAME...: one agent per NAME, waits for a worker
# of each
start_agents() {
	local c=$1 nn=$2 n
	shift 2
	for n in "$@"; do
		agent "$n" --nnodes="$nn" --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" \
			--rdzv-id="$c-$marker" --rdzv-conf="$ka" sh -c "$work" "$tmp/$c-$marker"
	done
	for n in "$@"; do
		wait_for "$tmp/$n.out" " rank=" 1 20
	done
}

case_resume() {
	port=$(free_port)
	start_store 1
	start_agents r 3 r0 r1 r2
	local before
	before=$(pids r0 r1 r2)
	kill_store
	for n in r0 r1 r2; do
		wait_for "$tmp/$n.err" "the workers keep running; reconnecting for up to 60s"
	done
	sleep "$outage"
	for p in $before; do
		kill -0 "$p" 2>/dev/null || fail "worker $p is gone while the store is away"
	done
	start_store 2
	for n in r0 r1 r2; do
		wait_for "$tmp/$n.err" "resumed round 1 with the store at '127.0.0.1:$port' after" 1 15
	done
	[ "$(pids r0 r1 r2)" = "$before" ] || fail "workers started again: $(cat "$tmp"/r?.out)"
	touch "$tmp/r-$marker.go"
	for n in r0 r1 r2; do
		expect_rc "$n" 0
		lacks "$tmp/$n.err" "round 1 ended"
		lacks "$tmp/$n.err" "rejoining"
	done
	[ "$(field "$tmp/r0.out" "$tmp/r1.out" "$tmp/r2.out" round | sort -u)" = 1 ] ||
		fail "a round after the first: $(cat "$tmp"/r?.out)"
	kill_store
}

case_left() {
	port=$(free_port)
	start_store 1
	start_agents l 2:3 l0 l1 l2
	kill_store
	for n in l0 l1 l2; do
		wait_for "$tmp/$n.err" "the workers keep running"
	done
	kill -9 "$pid_l2"
	wait "$pid_l2" 2>/dev/null
	# its worker goes with it (its guard kills it), and the others must
	# not wait for it
	touch "$tmp/l-$marker.go-2"
	sleep "$outage"
	start_store 2
	for n in l0 l1; do
		wait_for "$tmp/$n.err" "round 1 ended:" 1 20
		expect_rc "$n" 0 30
	done
	[ "$(field "$tmp/l0.out" "$tmp/l1.out" round | sort -u | tr '\n' ' ')" = "1 2 " ] ||
		fail "rounds: $(cat "$tmp"/l?.out)"
	kill_store
}

case_embedded() {
	port=$(free_port)
	local ep="127.0.0.1:$port" n t0 t1
	agent e0 --nnodes=3 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id="e-$marker" \
		--rdzv-conf="$ka" sh -c "$work" "$tmp/e-$marker"
	wait_for "$tmp/e0.err" "hosting the rendezvous store"
	for n in e1 e2; do
		agent "$n" --nnodes=3 --nproc-per-node=1 --rdzv-endpoint="$ep" \
			--rdzv-id="e-$marker" --rdzv-conf="$ka" sh -c "$work" "$tmp/e-$marker"
	done
	for n in e0 e1 e2; do
		wait_for "$tmp/$n.out" " rank=" 1 20
	done
	t0=${EPOCHREALTIME/./}
	kill -9 "$pid_e0"
	wait "$pid_e0" 2>/dev/null
	for n in e1 e2; do
		expect_rc "$n" 1 10
		grep -qF "crun: the rendezvous store hosted by node 0's agent at '$ep' is gone (connection closed): the job cannot go on without it; a job that must survive the loss of node 0 uses a standalone crun-rdzvd (crun-rdzvd(8))" "$tmp/$n.err" ||
			fail "$n: $(cat "$tmp/$n.err")"
		lacks "$tmp/$n.err" "rejoining"
	done
	t1=${EPOCHREALTIME/./}
	# prompt: well below the keep-alive window plus the shutdown timeout
	(((t1 - t0) / 1000 < 5000)) || fail "the others took $(((t1 - t0) / 1000)) ms to end"
}

for c in $cases; do
	"case_$c"
done
wait_none "$marker"
echo "ok: $cases"
