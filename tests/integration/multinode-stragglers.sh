#!/bin/bash
# Stragglers across nodes: two agents on loopback form one job, node 0 with
# two ranks at 50 ms a step, node 1 with one rank at 150 ms. Node 1 alone
# has no one to compare its rank with; it names it (rank 2, on its host)
# once it has read node 0's summary from the store, and node 0 says
# nothing. With every rank at the same pace neither node warns.
# pid_NAME come from agent (printf -v).
# shellcheck disable=SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
command -v python3 >/dev/null || { echo "no python3: skipping"; exit 77; }

w=$CRUN_TEST_HELPERS_SRC/step_worker.py
host=$(hostname)

# run_job ID SLOW_SECONDS: node 0 (2 ranks) and node 1 (1 rank, rank 2)
run_job() {
	local port
	port=$(free_port)
	common=(--nnodes=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$1" --max-restarts=0)
	# Node 0's ranks stop after 100 steps (5 s); their summary stays in
	# the store while node 0 waits for node 1 in the exit barrier.
	agent n0 "${common[@]}" --node-rank=0 --nproc-per-node=2 "$w" 100 0.05
	agent n1 "${common[@]}" --node-rank=1 --nproc-per-node=1 "$w" 50 "$2"
	# 5 to 8 s of steps; the sanitizer build on 2 busy cores takes longer
	expect_rc n0 0 60
	expect_rc n1 0 60
}

run_job slow1 0.15
n=$(grep -c "is a straggler" "$tmp/n1.err")
[ "$n" = 1 ] || fail "node 1: $n straggler lines, expected 1: $(cat "$tmp/n1.err")"
grep -qE "^crun: warning: rank 2 on $host is a straggler: 0\.1[0-9]* s/step, [0-9.]+x the job's median 0\.0[0-9]+ s over the last 20 steps$" \
	"$tmp/n1.err" || fail "node 1's line: $(cat "$tmp/n1.err")"
lacks "$tmp/n0.err" "straggler"

run_job even1 0.05
lacks "$tmp/n0.err" "straggler"
lacks "$tmp/n1.err" "straggler"
echo "ok"
