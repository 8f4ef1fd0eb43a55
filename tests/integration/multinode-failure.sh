#!/bin/bash
# Failures across nodes, with real crun agents on loopback:
# - a worker fails on the node that does not host the store: both nodes
#   restart, and every worker on both sees the same restart count;
# - restarts run out: both agents exit 1 with a failure summary (the
#   failing node's names the host and global rank of the failed rank);
# - the store's host dies (SIGKILL): the other agent stops its workers and
#   exits 1 with a line naming the store, within the keep-alive window;
# - a node that stops answering (SIGSTOP: a partition as the others see it)
#   is dropped after the keep-alive window and the job goes on without it;
#   a stopped store host ends the others' job within the window.
# pid_NAME come from agent (printf -v); conditions and --rdzv-conf values are
# literal text.
# shellcheck disable=SC2016,SC2046,SC2054,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

# A worker on the non-host node fails in restart 0 only. The host starts
# first, so that it is known; rank 3 is on the other node (group rank 1:
# the order of first joins).
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=fail1
	--max-restarts=3)
agent f0 "${common[@]}" "$H/crun-test-exit" --fail-rank 3 --fail-below 1 --delay-ms 100 \
	--others-ms 2500 "$marker"
wait_for "$tmp/f0.err" "hosting the rendezvous store"
agent f1 "${common[@]}" "$H/crun-test-exit" --fail-rank 3 --fail-below 1 --delay-ms 100 \
	--others-ms 2500 "$marker"
expect_rc f0 0
expect_rc f1 0
for f in f0 f1; do
	# Every worker of this node ran in restart 0 and 1, none in 2.
	[ "$(grep -oE 'restart=[0-9]+' "$tmp/$f.out" | sort | uniq -c | tr -s ' ')" = " 2 restart=0
 2 restart=1" ] || fail "restart counts on $f: $(cat "$tmp/$f.out")"
	grep -q "round 1 ended: rank 3 (local rank 1) on .* exited with code 1; restarting (restart 1 of 3)" \
		"$tmp/$f.err" || fail "$f does not say why round 1 ended: $(cat "$tmp/$f.err")"
done
grep -q "start rank=3 restart=0" "$tmp/f1.out" || fail "rank 3 is not on f1: $(cat "$tmp/f1.out")"
lacks "$tmp/f0.err" "FAILED"
lacks "$tmp/f1.err" "FAILED"
wait_none "$marker"

# Restarts run out: rank 2 always fails, --max-restarts=1 (each attempt
# longer than --min-attempt-time, so the repeat rule does not stop it).
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=fail2
	--max-restarts=1 --min-attempt-time=50ms)
agent e0 "${common[@]}" "$H/crun-test-exit" --fail-rank 2 --code 7 --delay-ms 100 \
	--others-ms 5000 "$marker"
wait_for "$tmp/e0.err" "hosting the rendezvous store"
agent e1 "${common[@]}" "$H/crun-test-exit" --fail-rank 2 --code 7 --delay-ms 100 \
	--others-ms 5000 "$marker"
expect_rc e0 1
expect_rc e1 1
for f in e0 e1; do
	grep -q "round 2 ended: rank 2 (local rank 0) on .* exited with code 7; no restarts left (--max-restarts 1)" \
		"$tmp/$f.err" || fail "$f: $(cat "$tmp/$f.err")"
	grep -q "FAILED (after 1 restart)" "$tmp/$f.err" || fail "$f summary: $(cat "$tmp/$f.err")"
done
host=$(hostname)
grep -qx "  host      : $host" "$tmp/e1.err" || fail "the summary names no host: $(cat "$tmp/e1.err")"
grep -qx "  rank      : 2 (local_rank: 0)" "$tmp/e1.err" || fail "summary rank: $(cat "$tmp/e1.err")"
grep -q "Root Cause (as the rendezvous store reported it)" "$tmp/e0.err" ||
	fail "the host's summary: $(cat "$tmp/e0.err")"
wait_none "$marker"

# The store's host dies; the other agent stops its workers and ends at
# once, naming the store that went with node 0's agent (no rejoin: that
# store never comes back).
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=lost
	--rdzv-conf=keep_alive_interval=300ms,keep_alive_max_attempt=3,rejoin_timeout=500ms)
export MN_UNTIL=false
agent s0 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/s0.err" "hosting the rendezvous store"
agent s1 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/s0.out" "nodes=2" 2
wait_for "$tmp/s1.out" "nodes=2" 2
start=$(date +%s%N)
kill -9 "$pid_s0"
expect_rc s1 1 5
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 2000 ] || fail "the store's loss took $ms ms to end the job"
has "$tmp/s1.err" "crun: the rendezvous store hosted by node 0's agent at '127.0.0.1:$port' is gone (connection closed): the job cannot go on without it; a job that must survive the loss of node 0 uses a standalone crun-rdzvd (crun-rdzvd(8))"
lacks "$tmp/s1.err" "rejoin"
finish s0
wait_none "$marker"

# A node that stops answering: the host drops it after 3 x 200ms and goes
# on alone (--nnodes=1:2), a counted restart.
port=$(free_port)
common=(--nnodes=1:2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=part
	--rdzv-conf=keep_alive_interval=200ms,keep_alive_max_attempt=3,last_call_timeout=10s)
export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 1 ]'
agent p0 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/p0.err" "hosting the rendezvous store"
agent p1 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/p1.out" "nodes=2" 1
kill -STOP "$pid_p1"
start=$(date +%s%N)
expect_rc p0 0 5
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 3000 ] || fail "the silent node was dropped after $ms ms"
grep -q "round 1 ended: node 1 (.*) left: no keep-alive for 600ms; restarting (restart 1 of 3)" \
	"$tmp/p0.err" || fail "p0: $(cat "$tmp/p0.err")"
wait_for "$tmp/p0.out" "nodes=1 world=1 restart=1 round=2" 1 1
kill -9 "$pid_p1"
finish p1

# The store's host stops answering: the other agent notices within the
# window and ends after its rejoin timeout (300ms).
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=part2
	--rdzv-conf=keep_alive_interval=200ms,keep_alive_max_attempt=3,rejoin_timeout=300ms)
export MN_UNTIL=false
agent q0 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/q0.err" "hosting the rendezvous store"
agent q1 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/q1.out" "nodes=2" 1
kill -STOP "$pid_q0"
start=$(date +%s%N)
expect_rc q1 1 5
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 2000 ] || fail "the silent store was noticed after $ms ms"
has "$tmp/q1.err" "crun: lost the rendezvous store at '127.0.0.1:$port' (no reply for 600ms); rejoining within 300ms"
has "$tmp/q1.err" "crun: cannot rejoin run 'part2' at '127.0.0.1:$port' within 300ms; giving up"
kill -9 "$pid_q0"
finish q0
wait_none "$marker"
echo "ok"
