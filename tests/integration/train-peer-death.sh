#!/bin/sh
# A rank killed mid-run (SIGKILL) makes the other rank fail at once with a
# clear error and exit status 1, as crun needs to restart the group; the
# group started again resumes from the newest complete checkpoint and ends
# bitwise equal to a run that was never interrupted.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=600 --set checkpoint.every=50 --set log.every=50 \
--set parallel.strategy=zero3"
run_ranks 2 full $args --set checkpoint.dir="$tmp/full" || fail "uninterrupted run failed"

start_store
for r in 0 1; do
	RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r CRUN_STORE=127.0.0.1:$store_port \
		CRUN_RUN_ID="death-$$" CRUN_COMM_TIMEOUT=10s \
		"$TRAIN" $args --set checkpoint.dir="$tmp/cut" >"$tmp/cut.$r.out" 2>&1 &
	eval "pid$r=\$!"
	pids="$pids $!"
done
i=0
while ! grep -q "^step 100/600" "$tmp/cut.0.out"; do
	i=$((i + 1))
	[ $i -gt 600 ] && fail "rank 0 did not reach step 100"
	sleep 0.05
done
kill -9 "$pid1"
t0=$(date +%s)
wait "$pid0"
rc=$?
wait "$pid1" 2>/dev/null
pids=""
[ $rc -eq 1 ] || fail "rank 0 exited $rc after its peer died, want 1"
[ $(($(date +%s) - t0)) -le 10 ] || fail "rank 0 took more than 10 s to notice"
# the step's collectives or the checkpoint's, whichever ran into the gap
grep -Eq "^crun-train: (training step|checkpoint of step [0-9]+|agreement on a warned checkpoint) failed: .*rank 1 " \
	"$tmp/cut.0.out" || fail "rank 0 did not name the dead rank: $(tail -n 1 "$tmp/cut.0.out")"

TORCHELASTIC_RESTART_COUNT=1 run_ranks 2 again $args --set checkpoint.dir="$tmp/cut" ||
	fail "the restarted group failed"
from=$(field again resumed_from)
[ "$from" -ge 50 ] || fail "the restarted group did not resume (resumed_from=$from)"
"$TRAIN" export "$tmp/full" "$tmp/full.bin" >/dev/null || fail "export failed"
"$TRAIN" export "$tmp/cut" "$tmp/cut.bin" >/dev/null || fail "export failed"
"$TRAIN" compare "$tmp/full.bin" "$tmp/cut.bin" >"$tmp/cmp" ||
	fail "restarted run differs: $(cat "$tmp/cmp")"
echo "ok peer death: rank 0 exited 1 ($(tail -n 1 "$tmp/cut.0.out")); resumed from $from, bitwise equal"
exit 0
