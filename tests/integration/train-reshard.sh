#!/bin/sh
# Reshard: a zero3 checkpoint saved by 4 ranks at step 6 is loaded by 2
# ranks (zero1) and by 1 rank (ddp), which train on to step 12 and end
# within 1e-5 (relative L2) of an uninterrupted 4-rank run.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=12 --set checkpoint.every=6 --set parallel.bucket_mb=0.05"

run_ranks 4 full $args --set parallel.strategy=zero3 --set checkpoint.dir="$tmp/full" ||
	fail "uninterrupted 4-rank run failed"
"$TRAIN" export "$tmp/full" "$tmp/full.bin" >/dev/null || fail "export failed"
run_ranks 4 four $args --set parallel.strategy=zero3 --set checkpoint.dir="$tmp/four" \
	--set train.stop_at=6 || fail "4-rank run to step 6 failed"
grep -q "^shard 3 shard-00003-of-00004.bin" "$tmp/four/step-0000000006/MANIFEST" ||
	fail "no 4-shard checkpoint at step 6"

for to in "2 zero1" "1 ddp"; do
	set -- $to
	n=$1
	cp -r "$tmp/four" "$tmp/to$n"
	run_ranks $n to$n $args --set parallel.strategy=$2 --set checkpoint.dir="$tmp/to$n" ||
		fail "resuming the 4-rank checkpoint on $n ranks failed"
	grep -q "resuming from checkpoint .*step 6 of 12, saved by 4 ranks as zero3" \
		"$tmp/to$n.out" || fail "$n ranks did not resume from the 4-rank checkpoint"
	"$TRAIN" export "$tmp/to$n" "$tmp/to$n.bin" >/dev/null || fail "export failed"
	"$TRAIN" compare --tolerance 1e-5 "$tmp/full.bin" "$tmp/to$n.bin" >"$tmp/cmp" ||
		fail "4 -> $n ranks differs: $(cat "$tmp/cmp")"
	echo "ok reshard 4 -> $n ($2): $(cat "$tmp/cmp")"
done
exit 0
