#!/bin/sh
# Resume equals uninterrupted: a run stopped after step 8 (train.stop_at)
# and started again on its checkpoint.dir ends with parameters bitwise
# equal to a run that was never stopped, on 1 rank and on 2 ranks (zero2,
# with gradient accumulation), and the two runs' metrics CSV has one row
# per step, validation in the rows of steps 8 and 14, and a training time
# that goes on across the resume; a run on a finished checkpoint trains
# nothing and says so. Also: a checkpoint without MANIFEST (a
# crash mid-write) is never loaded, a damaged shard stops the run with a
# clear error, and a checkpoint of another model is a config error (78).
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=14 --set checkpoint.every=4 --set log.csv=$tmp/m.csv"

for n in 1 2; do
	par="--set parallel.strategy=zero2 --set parallel.grad_accum=2"
	[ $n -eq 1 ] && par="--set parallel.strategy=ddp"
	run_ranks $n full$n $args $par --set checkpoint.dir="$tmp/full$n" ||
		fail "uninterrupted run on $n ranks failed"
	run_ranks $n part$n $args $par --set checkpoint.dir="$tmp/part$n" \
		--set train.stop_at=8 --set log.csv="$tmp/part$n.csv" ||
		fail "interrupted run on $n ranks failed"
	grep -q "stopping after step 8" "$tmp/part$n.out" || fail "no stop at step 8"
	[ "$(field part$n steps)" = 8 ] || fail "stopped run did not stop at step 8"
	# a crash while writing step 12 left a directory without MANIFEST
	mkdir "$tmp/part$n/step-0000000012"
	echo garbage >"$tmp/part$n/step-0000000012/shard-00000-of-00001.bin"
	TORCHELASTIC_RESTART_COUNT=1 run_ranks $n resumed$n $args $par \
		--set checkpoint.dir="$tmp/part$n" --set log.csv="$tmp/part$n.csv" ||
		fail "resumed run on $n ranks failed"
	# the CSV of both runs: one row per step, and elapsed_s never decreases
	# from one step to the next, over the resume too
	[ "$(cut -d, -f1 "$tmp/part$n.csv" | sed 1d | tr '\n' ' ')" = "$(seq 1 14 | tr '\n' ' ')" ] ||
		fail "$n ranks: the CSV's steps are not 1 to 14, once each: $(cut -d, -f1 "$tmp/part$n.csv" | tr '\n' ' ')"
	awk -F, 'NR > 2 && $6 + 0 < prev { exit 1 } NR > 1 { prev = $6 + 0 }' "$tmp/part$n.csv" ||
		fail "$n ranks: elapsed_s goes back: $(cut -d, -f1,6 "$tmp/part$n.csv" | tr '\n' ' ')"
	[ "$(sed -n 2p "$tmp/part$n.csv" | cut -d, -f7)" = "" ] &&
		[ "$(sed -n 9p "$tmp/part$n.csv" | cut -d, -f7)" != "" ] &&
		[ "$(sed -n 15p "$tmp/part$n.csv" | cut -d, -f7)" = "$(field resumed$n val_loss)" ] ||
		fail "$n ranks: validation is not in the rows of steps 8 and 14"
	grep -q "resuming from checkpoint '.*step-0000000008': step 8 of 14.*restart 1" \
		"$tmp/resumed$n.out" || fail "did not resume from step 8"
	[ "$(field resumed$n resumed_from)" = 8 ] || fail "summary: resumed_from is not 8"
	[ "$(field resumed$n param_l2)" = "$(field full$n param_l2)" ] ||
		fail "$n ranks: param_l2 after resume differs"
	[ "$(field resumed$n val_loss)" = "$(field full$n val_loss)" ] ||
		fail "$n ranks: val_loss after resume differs"
	"$TRAIN" export "$tmp/full$n" "$tmp/full$n.bin" >/dev/null || fail "export failed"
	"$TRAIN" export "$tmp/part$n" "$tmp/part$n.bin" >/dev/null || fail "export failed"
	"$TRAIN" compare "$tmp/full$n.bin" "$tmp/part$n.bin" >"$tmp/cmp" ||
		fail "$n ranks: resumed parameters are not bitwise equal: $(cat "$tmp/cmp")"
	grep -q "steps=14,14 .*bitwise_equal=yes" "$tmp/cmp" || fail "compare: $(cat "$tmp/cmp")"
	# the partial step 12 was replaced by a complete one; keep=2 pruned older ones
	ls "$tmp/part$n" >"$tmp/ls"
	[ "$(cat "$tmp/ls" | tr '\n' ' ')" = "step-0000000012 step-0000000014 " ] ||
		fail "checkpoint dir holds: $(cat "$tmp/ls" | tr '\n' ' ')"
	echo "ok resume on $n rank(s): bitwise equal"
done

# resuming from the last step: nothing to train, and the summary has the
# checkpoint's loss and a validation of its parameters
run_ranks 1 again $args --set checkpoint.dir="$tmp/full1" --set log.csv="$tmp/again.csv" ||
	fail "a run on a finished checkpoint.dir failed"
grep -q "^nothing to train: the checkpoint of step 14 is at or past train.steps 14$" \
	"$tmp/again.out" || fail "finished checkpoint: no 'nothing to train' line"
grep -q "nan" "$tmp/again.out" && fail "finished checkpoint: nan in the output"
for k in steps train_loss val_loss param_l2 resumed_from; do
	want=$(field full1 $k)
	[ $k = resumed_from ] && want=14
	[ "$(field again $k)" = "$want" ] ||
		fail "finished checkpoint: summary $k=$(field again $k), want $want"
done
[ "$(wc -l <"$tmp/again.csv")" -eq 1 ] ||
	fail "finished checkpoint: rows in the CSV: $(cat "$tmp/again.csv")"
run_ranks 1 past $args --set train.steps=10 --set checkpoint.dir="$tmp/full1" \
	--set log.csv="$tmp/past.csv" || fail "a run with fewer steps than its checkpoint failed"
grep -q "^nothing to train: the checkpoint of step 14 is at or past train.steps 10$" \
	"$tmp/past.out" || fail "checkpoint past train.steps: no 'nothing to train' line"
echo "ok resume from the last step: nothing to train, the checkpoint's loss"

# a damaged shard: exit 1 naming the shard
f=$(ls "$tmp"/part1/step-0000000014/shard-*.bin)
printf 'X' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
run_ranks 1 damaged $args --set checkpoint.dir="$tmp/part1"
rc=$?
[ $rc -eq 1 ] || fail "damaged checkpoint: exit $rc, want 1"
grep -q "crun-train: checkpoint shard '.*shard-00000-of-00001.bin' is damaged: checksum" \
	"$tmp/damaged.out" || fail "damaged checkpoint: no clear error"

# another model on the same checkpoint.dir: exit 78
run_ranks 1 other $args --set model.width=64 --set checkpoint.dir="$tmp/full1"
rc=$?
[ $rc -eq 78 ] || fail "checkpoint of another model: exit $rc, want 78"
grep -q "is of another model" "$tmp/other.out" || fail "another model: no clear error"

# resume: false starts from scratch
run_ranks 1 fresh $args --set checkpoint.dir="$tmp/full1" --set checkpoint.resume=false ||
	fail "checkpoint.resume=false failed"
[ "$(field fresh resumed_from)" = 0 ] || fail "checkpoint.resume=false resumed"
[ "$(field fresh param_l2)" = "$(field full1 param_l2)" ] || fail "fresh run differs"
echo "ok damaged shard, other model, resume=false"
exit 0
