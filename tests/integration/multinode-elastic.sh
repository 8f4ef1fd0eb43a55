#!/bin/bash
# Elastic membership with real crun agents on loopback:
# - 3 agents with --nnodes=2:3; one that does not host the store is killed
#   (SIGKILL): the other two restart with 2 nodes (a counted restart);
# - a late joiner: 2:3 running with 2, a third arrives: a new round with 3
#   that is not counted as a restart;
# - below MIN: 2 agents with --nnodes=2, one killed; the survivor waits
#   join_timeout for a second node and fails naming the missing one.
# pid_NAME come from agent (printf -v); conditions and --rdzv-conf values are
# literal text.
# shellcheck disable=SC2016,SC2046,SC2054,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

# The agent among NAMES... that hosts the store / one that does not.
host_of() {
	for n in "$@"; do
		grep -q "hosting the rendezvous store" "$tmp/$n.err" && { echo "$n"; return; }
	done
	fail "no agent hosts the store"
}
client_of() {
	for n in "$@"; do
		grep -q "hosting the rendezvous store" "$tmp/$n.err" || { echo "$n"; return; }
	done
	fail "every agent hosts the store"
}

# One of three killed: the other two go on with 2 nodes.
port=$(free_port)
common=(--nnodes=2:3 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=kill3
	--rdzv-conf=last_call_timeout=10s)
export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 2 ]'
for n in k0 k1 k2; do
	agent "$n" "${common[@]}" sh -c "$worker" "$marker"
done
for n in k0 k1 k2; do
	wait_for "$tmp/$n.out" "nodes=3 world=6" 2
done
victim=$(client_of k0 k1 k2)
rest=$(printf '%s\n' k0 k1 k2 | grep -vx "$victim" | tr '\n' ' ')
pidvar="pid_$victim"
kill -9 "${!pidvar}"
for n in $rest; do
	expect_rc "$n" 0
	wait_for "$tmp/$n.out" "nodes=2 world=4 restart=1 round=2" 2 1
	grep -qE "round 1 ended: node [0-9] \(.*\) left: connection closed; restarting \(restart 1 of 3\)" \
		"$tmp/$n.err" || fail "$n does not say why round 1 ended: $(cat "$tmp/$n.err")"
done
finish "$victim"
[ "$(cat $(printf "$tmp/%s.out " $rest) | grep -F 'round=2' | grep -oE ' rank=[0-9]+' |
	cut -d= -f2 | sort -n | tr '\n' ' ')" = "0 1 2 3 " ] ||
	fail "ranks after the restart: $(cat "$tmp"/k?.out)"
wait_none "$marker"

# A late joiner: the job runs with 2 of 2:3; a third node arrives.
port=$(free_port)
common=(--nnodes=2:3 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=late
	--rdzv-conf=last_call_timeout=300ms)
export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 3 ]'
common+=(--log-dir="$tmp/logs" --tee=3)
agent l0 "${common[@]}" sh -c "$worker" "$marker"
agent l1 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/l0.out" "nodes=2 world=4 restart=0 round=1" 2
wait_for "$tmp/l1.out" "nodes=2 world=4 restart=0 round=1" 2
agent l2 "${common[@]}" sh -c "$worker" "$marker"
for n in l0 l1 l2; do
	expect_rc "$n" 0
	wait_for "$tmp/$n.out" "nodes=3 world=6 restart=0 round=2" 2 1
done
for n in l0 l1; do
	grep -q "round 1 ended: node '.*' (.*) is joining; restarting (a joining node is not counted" \
		"$tmp/$n.err" || fail "$n does not say why round 1 ended: $(cat "$tmp/$n.err")"
done
# The nodes share one run directory, each in its own named after its host
# (all three run on this one: HOST, HOST.1, HOST.2).
logdir_of() {
	sed -n "s/^crun: logs of this run in '\(.*\)'$/\1/p" "$tmp/$1.err"
}
host=$(hostname)
dirs=$(for n in l0 l1 l2; do logdir_of "$n"; done | sort | tr '\n' ' ')
[ "$dirs" = "$tmp/logs/late/$host $tmp/logs/late/$host.1 $tmp/logs/late/$host.2 " ] ||
	fail "node log directories: '$dirs'"
# The join restart is not counted, yet it keeps the first attempt's logs.
l0logs=$(logdir_of l0)
grep -q "round=1" "$l0logs/attempt_0/0/stdout.log" ||
	fail "attempt_0 log lost: $(ls -R "$tmp/logs" 2>&1)"
grep -q "round=2" "$l0logs/attempt_1/0/stdout.log" ||
	fail "no attempt_1 log: $(ls -R "$tmp/logs" 2>&1)"
[ "$(cat "$tmp"/l?.out | grep -F 'round=2' | grep -oE ' rank=[0-9]+' | cut -d= -f2 | sort -n |
	tr '\n' ' ')" = "0 1 2 3 4 5 " ] ||
	fail "ranks of the 3-node round: $(cat "$tmp"/l?.out)"
wait_none "$marker"
# A second run of the id takes the next name at the node level.
port=$(free_port)
export MN_UNTIL=true
agent l3 --nnodes=1:2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=late \
	--rdzv-conf=last_call_timeout=300ms --log-dir="$tmp/logs" --tee=3 sh -c "$worker" "$marker"
expect_rc l3 0
[ "$(logdir_of l3)" = "$tmp/logs/late/$host.3" ] || fail "rerun: $(cat "$tmp/l3.err")"
grep -q "nodes=1" "$tmp/logs/late/$host.3/attempt_0/0/stdout.log" ||
	fail "rerun log: $(ls -R "$tmp/logs" 2>&1)"
wait_none "$marker"

# Below MIN: the survivor waits join_timeout, then names who is missing.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=below
	--rdzv-conf=join_timeout=1500ms)
export MN_UNTIL=false
agent b0 "${common[@]}" sh -c "$worker" "$marker"
agent b1 "${common[@]}" sh -c "$worker" "$marker"
wait_for "$tmp/b0.out" "nodes=2" 1
wait_for "$tmp/b1.out" "nodes=2" 1
victim=$(client_of b0 b1)
survivor=$(host_of b0 b1)
pidvar="pid_$victim"
kill -9 "${!pidvar}"
expect_rc "$survivor" 1
finish "$victim"
grep -qE "only 1 of at least 2 nodes joined within 1500ms; missing from round 1: node [01] \(" \
	"$tmp/$survivor.err" || fail "join timeout message: $(cat "$tmp/$survivor.err")"
wait_none "$marker"
echo "ok"
