#!/bin/bash
# A store that goes away under a running job, over loopback: three crun
# agents, one worker each, against a crun-rdzvd.
# - resume: the daemon is SIGKILLed and started again on the same port
#   STORE_OUTAGE_S (default 3) seconds later. Every agent says its workers
#   keep running, resumes round 1 when the daemon is back, and the same
#   worker processes finish the job: exit 0, round 1 only.
# - left: the same (a 1 s outage), but one agent dies (SIGKILL) while the
#   daemon is down (--nnodes=2:3): the other two resume, the round ends as
#   if that node had left, and their round 2 finishes: exit 0; their
#   events name it evicted once and show one restart (cause node_left).
# - held: while the daemon is down (1 s) every worker ends, one of them
#   with exit status 1: its agent holds the failure and the others their
#   exit barrier until the round is resumed; then the failure ends round 1
#   and round 2 finishes: exit 0.
# - away: the daemon does not come back within reconnect_timeout (1s): the
#   agents take the store as lost (the workers are killed; they
#   try to join again for rejoin_timeout, 1s) and exit 1, saying why;
#   their events show the loss and no restart.
# - old: a crun-rdzvd that cannot resume rounds (its test hook
#   CRUN_TEST_RDZV_OLD_STORE) is lost at once: the workers are
#   killed, and the agents exit 1 after rejoin_timeout (1s).
# - embedded: the store is hosted by the first agent (node 0); that agent is
#   SIGKILLed: the others stop their workers and exit 1 at once, saying the
#   job cannot go on without node 0's store.
# With the argument --journal, and CRUN_TEST_LONG=1 (scripts/test --long),
# the cases that restart the daemon run again with crun-rdzvd --state-dir
# (without CRUN_TEST_LONG it skips).
# pid_NAME come from agent (printf -v); conditions are literal text.
# shellcheck disable=SC2016,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

outage=${STORE_OUTAGE_S:-3}
cases=${STORE_OUTAGE_CASES:-resume left held away old embedded}
journal=()
if [ "${1:-}" = --journal ]; then
	[ "${CRUN_TEST_LONG:-0}" = 1 ] || {
		echo "a long test (scripts/test --long): skipping"
		exit 77
	}
	cases=${STORE_OUTAGE_CASES:-resume left held}
	mkdir "$tmp/state" || fail "cannot make the state directory"
	journal=(--state-dir "$tmp/state")
fi
# A short keep-alive window (3 s): a resume waits for the others that long.
ka=keep_alive_interval=0.5,keep_alive_max_attempt=6,last_call_timeout=1
# Each worker prints its pid and round, then waits for the file $0.go or,
# with $0.go-2, for a round after the first ($0 carries $marker); in round
# 1 it exits 1 when $0.fail-RANK is there.
work='echo "w rank=$RANK round=$CRUN_ROUND pid=$$"
i=0
until [ -e "$0.go" ] || { [ -e "$0.go-2" ] && [ "$CRUN_ROUND" -ge 2 ]; }; do
	i=$((i + 1))
	[ $i -le 600 ] || exit 3
	sleep 0.1
done
[ "$CRUN_ROUND" != 1 ] || [ ! -e "$0.fail-$RANK" ]'

daemon_pid=""
# start_store N: crun-rdzvd on 127.0.0.1:$port for the Nth time (its log
# $tmp/rdzvd.$port.log)
start_store() {
	"$CRUN_RDZVD" --host 127.0.0.1 --port "$port" "${journal[@]}" \
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

# events FILE PROGRAM: python PROGRAM with ev, FILE's events (crun(1)
# EVENTS), and names, their names; it asserts.
events() {
	python3 -c 'import json, sys
ev = [json.loads(line) for line in open(sys.argv[1])]
names = [e["event"] for e in ev]
exec(sys.argv[2])' "$1" "$2" || fail "events in $1: $(cat "$1")"
}

# start_agents CASE NNODES NAME...: one agent per NAME, waits for a worker
# of each (its events in $tmp/NAME.jsonl); $conf adds to --rdzv-conf
conf=""
start_agents() {
	local c=$1 nn=$2 n
	shift 2
	for n in "$@"; do
		agent "$n" --nnodes="$nn" --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" \
			--rdzv-id="$c-$marker" --rdzv-conf="$ka$conf" --events "$tmp/$n.jsonl" \
			sh -c "$work" "$tmp/$c-$marker"
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
	sleep 1
	start_store 2
	for n in l0 l1; do
		wait_for "$tmp/$n.err" "round 1 ended:" 1 20
		expect_rc "$n" 0 30
	done
	[ "$(field "$tmp/l0.out" "$tmp/l1.out" round | sort -u | tr '\n' ' ')" = "1 2 " ] ||
		fail "rounds: $(cat "$tmp"/l?.out)"
	kill_store
	# The store dropped the node that did not come back: one eviction,
	# named; one restart, for it.
	for n in l0 l1; do
		events "$tmp/$n.jsonl" '
gone = [e for e in ev if e["event"] == "member_evicted"]
assert len(gone) == 1 and gone[0]["member"] == ev[0]["node"], gone
assert "did not come back" in gone[0]["message"], gone
r = [e for e in ev if e["event"] == "restart"]
assert len(r) == 1 and r[0]["cause"] == "node_left", r'
	done
}

case_away() {
	port=$(free_port)
	start_store 1
	conf=,reconnect_timeout=1s,rejoin_timeout=1s
	start_agents a 2 a0 a1
	conf=""
	local w
	w=$(pids a0 a1)
	kill_store
	for n in a0 a1; do
		expect_rc "$n" 1 10
		has "$tmp/$n.err" "crun: warning: lost the rendezvous store at '127.0.0.1:$port' (connection closed); the workers keep running; reconnecting for up to 1s"
		has "$tmp/$n.err" "crun: lost the rendezvous store at '127.0.0.1:$port' (connection closed; no resume: cannot connect to the store at '127.0.0.1:$port' within 1s: connection refused); rejoining within 1s"
		has "$tmp/$n.err" "crun: cannot rejoin run 'a-$marker' at '127.0.0.1:$port' within 1s; giving up"
	done
	for p in $w; do
		! kill -0 "$p" 2>/dev/null || fail "worker $p outlived its agent"
	done
	# Lost, and no rejoin: no attempt followed, so no restart.
	for n in a0 a1; do
		events "$tmp/$n.jsonl" '
assert "store_lost" in names and "restart" not in names, names
assert names[-1] == "job_finished" and ev[-1]["exit_code"] == 1, ev[-1]'
	done
}

case_old() {
	port=$(free_port)
	CRUN_TEST_RDZV_OLD_STORE=1 start_store 1
	conf=,rejoin_timeout=1s
	start_agents o 2 o0 o1
	conf=""
	kill_store
	for n in o0 o1; do
		expect_rc "$n" 1 10
		has "$tmp/$n.err" "crun: lost the rendezvous store at '127.0.0.1:$port' (connection closed); rejoining within 1s"
		lacks "$tmp/$n.err" "keep running"
	done
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

case_held() {
	port=$(free_port)
	start_store 1
	start_agents h 3 h0 h1 h2
	kill_store
	for n in h0 h1 h2; do
		wait_for "$tmp/$n.err" "the workers keep running"
	done
	local w
	w=$(pids h0 h1 h2)
	touch "$tmp/h-$marker.fail-2" "$tmp/h-$marker.go" "$tmp/h-$marker.go-2"
	for p in $w; do
		for _ in $(seq 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.05
		done
		! kill -0 "$p" 2>/dev/null || fail "worker $p did not end"
	done
	sleep 1
	start_store 2
	for n in h0 h1 h2; do
		wait_for "$tmp/$n.err" "resumed round 1 with the store" 1 15
		expect_rc "$n" 0
		grep -qF "round 1 ended: rank 2 (local rank 0) on" "$tmp/$n.err" ||
			fail "$n: $(cat "$tmp/$n.err")"
	done
	[ "$(field "$tmp/h0.out" "$tmp/h1.out" "$tmp/h2.out" round | sort -u | tr '\n' ' ')" = "1 2 " ] ||
		fail "rounds: $(cat "$tmp"/h?.out)"
	kill_store
}

for c in $cases; do
	"case_$c"
done
wait_none "$marker"
echo "ok: $cases"
