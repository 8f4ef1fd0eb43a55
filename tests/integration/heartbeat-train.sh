#!/bin/sh
# A hung rank of crun-train: one of four SIGSTOPped after its second
# checkpoint is named within the timeout + 1 s, the group restarts from the
# checkpoint and the job ends with parameters bitwise equal to a run that
# was never interrupted.
# shellcheck disable=SC2086
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"
: "${CRUN:?CRUN must name crun}"

args="$SMALL --set train.steps=1200 --set checkpoint.every=100 --set log.every=100"
crun="timeout --foreground -s KILL 90 $CRUN --standalone --nproc-per-node=4 --heartbeat-timeout=2"

$crun "$TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" $args --set checkpoint.dir="$tmp/full" \
	>"$tmp/full.out" 2>&1 || fail "uninterrupted run failed"

$crun "$TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" $args --set checkpoint.dir="$tmp/hung" \
	>"$tmp/hung.out" 2>&1 &
crun_pid=$!
pids="$crun_pid"
# rank 2, once the checkpoint of step 200 exists
i=0
while [ ! -f "$tmp/hung/step-0000000200/MANIFEST" ]; do
	i=$((i + 1))
	[ $i -gt 600 ] && fail "no checkpoint of step 200"
	sleep 0.05
done
stopped=""
for p in $(pgrep -P "$(pgrep -P "$crun_pid" | head -n 1)") $(pgrep -P "$crun_pid"); do
	if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=2; then
		kill -STOP "$p" && stopped=$p
		break
	fi
done
[ -n "$stopped" ] || fail "rank 2 not found"
t0=$(date +%s.%N)
i=0
while ! grep -q "crun: rank 2 (local rank 2, pid $stopped) hung: no heartbeat" "$tmp/hung.out"; do
	i=$((i + 1))
	[ $i -gt 200 ] && fail "rank 2 not reported within 10 s"
	sleep 0.02
done
t=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.2f", $1 - $2 }')
awk -v t="$t" 'BEGIN { exit !(t <= 3) }' || fail "rank 2 reported after $t s"
wait "$crun_pid" || fail "the job failed after the hang: $(tail -n 20 "$tmp/hung.out")"
pids=""
grep -q "\[2\]: crun: stack of the hung worker" "$tmp/hung.out" || fail "no stack"
grep -q "worker group failed: rank 2 (local rank 2, pid $stopped) hung" "$tmp/hung.out" ||
	fail "the restart does not name rank 2"
grep -q "resuming from checkpoint '.*/step-0000000[0-9]00': step [1-9]00 of 1200" \
	"$tmp/hung.out" || fail "did not resume from a checkpoint"
"$TRAIN" export "$tmp/full" "$tmp/full.bin" >/dev/null || fail "export failed"
"$TRAIN" export "$tmp/hung" "$tmp/hung.bin" >/dev/null || fail "export failed"
"$TRAIN" compare "$tmp/full.bin" "$tmp/hung.bin" >"$tmp/cmp" ||
	fail "parameters after the hang differ: $(cat "$tmp/cmp")"
grep -q "bitwise_equal=yes" "$tmp/cmp" || fail "compare: $(cat "$tmp/cmp")"
echo "ok rank 2 hung: reported after $t s, restarted, parameters bitwise equal"
exit 0
