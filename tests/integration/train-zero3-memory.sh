#!/bin/sh
# zero3 keeps about 1/N of the parameters on each rank (the padding of each
# unit to a multiple of N aside), zero1/zero2 shard the optimizer state
# (and zero2 the gradients), ddp keeps everything, as the summary reports.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=2 --set parallel.bucket_mb=0.05"
for s in ddp zero1 zero2 zero3; do
	run_ranks 4 $s $args --set parallel.strategy=$s || fail "$s on 4 ranks failed"
done
total=$(field zero3 param_bytes_total)
check() { # check RUN KEY LOW HIGH: LOW*total <= value <= HIGH*total
	v=$(field "$1" "$2")
	awk -v v="$v" -v t="$total" -v lo="$3" -v hi="$4" \
		'BEGIN { exit !(v != "" && v >= lo * t && v <= hi * t) }' ||
		fail "$1: $2=$v is not within [$3, $4] x $total"
}
check zero3 param_bytes_per_rank 0.25 0.26
check zero3 optim_bytes_per_rank 0.5 0.52
check ddp param_bytes_per_rank 1 1.01
check ddp optim_bytes_per_rank 2 2.02
check zero1 param_bytes_per_rank 1 1.01
check zero1 optim_bytes_per_rank 0.5 0.52
check zero2 optim_bytes_per_rank 0.5 0.52
g1=$(field zero1 grad_bytes_per_rank)
g2=$(field zero2 grad_bytes_per_rank)
awk -v a="$g1" -v b="$g2" 'BEGIN { exit !(b < a / 2) }' ||
	fail "zero2 gradients ($g2 bytes) not well below zero1's ($g1)"
echo "ok zero3 holds $(field zero3 param_bytes_per_rank) of $total parameter bytes per rank"
exit 0
