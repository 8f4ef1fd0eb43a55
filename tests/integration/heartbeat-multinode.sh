#!/bin/bash
# A hung rank on one of two nodes (real crun agents on loopback, Python
# workers of tests/helpers/beat_worker.py): the node that runs it names it
# and tells the store, and both nodes' summaries and both agents' error
# files name the hung rank, never a rank that failed because of it.
# shellcheck disable=SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
command -v python3 >/dev/null || { echo "no python3: skipping"; exit 77; }
W=$CRUN_TEST_HELPERS_SRC/beat_worker.py
mkdir "$tmp/bin"
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$tmp/bin/python3"

port=$(free_port)
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=hb1
	--max-restarts=0 --heartbeat-timeout=1)
export HANG_RANK=3 HANG_HOW=stop BEAT_STEPS=20 BEAT_INTERVAL=0.1
TORCHELASTIC_ERROR_FILE=$tmp/h0.json PATH=$tmp/bin agent h0 "${common[@]}" "$W"
wait_for "$tmp/h0.err" "hosting the rendezvous store"
TORCHELASTIC_ERROR_FILE=$tmp/h1.json PATH=$tmp/bin agent h1 "${common[@]}" "$W"
expect_rc h0 1
expect_rc h1 1
n=0
for f in h0 h1; do
	if grep -q "crun: rank 3 (local rank 1, pid [0-9]*) hung: no heartbeat for 1" "$tmp/$f.err"; then
		n=$((n + 1))
		grep -A4 'Root Cause' "$tmp/$f.err" | grep -q ' rank      : 3 (local_rank: 1)$' ||
			fail "$f: root cause: $(cat "$tmp/$f.err")"
	else
		grep -A3 'Root Cause' "$tmp/$f.err" |
			grep -q ' message   : rank 3 (local rank 1) on .* hung: no heartbeat for 1' ||
			fail "$f: root cause: $(cat "$tmp/$f.err")"
	fi
	grep -q 'hung: no heartbeat for 1' "$tmp/$f.json" || fail "$f: error file: $(cat "$tmp/$f.json")"
done
[ $n = 1 ] || fail "rank 3 reported by $n nodes"
echo "ok both nodes name rank 3 as hung"
