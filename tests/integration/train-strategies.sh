#!/bin/sh
# Every strategy on 2 and 4 ranks reaches the same parameters as one rank
# after K steps on the same global batch (relative L2 difference of the
# exported parameters at most 1e-5), with small buckets (several
# collectives per step) and with gradient accumulation.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

K=8
args="$SMALL --set train.steps=$K --set parallel.bucket_mb=0.05 --set checkpoint.every=0"

run_ranks 1 ref $args --set checkpoint.dir="$tmp/ref" || fail "1-rank reference run failed"
"$TRAIN" export "$tmp/ref" "$tmp/ref.bin" >/dev/null || fail "export of the reference failed"

for strategy in ddp zero1 zero2 zero3; do
	for n in 2 4; do
		accum=1
		[ $n -eq 2 ] && accum=2
		name=$strategy-$n
		run_ranks $n "$name" $args --set parallel.strategy=$strategy \
			--set parallel.grad_accum=$accum --set checkpoint.dir="$tmp/$name" ||
			fail "$strategy on $n ranks failed"
		[ "$(field "$name" strategy)" = "$strategy" ] || fail "$name: wrong strategy"
		[ "$(field "$name" world_size)" = "$n" ] || fail "$name: wrong world size"
		"$TRAIN" export "$tmp/$name" "$tmp/$name.bin" >/dev/null ||
			fail "export of $name failed"
		"$TRAIN" compare --tolerance 1e-5 "$tmp/ref.bin" "$tmp/$name.bin" \
			>"$tmp/$name.cmp" || fail "$name differs from 1 rank: $(cat "$tmp/$name.cmp")"
		rel_close "$(field ref param_l2)" "$(field "$name" param_l2)" 1e-5 ||
			fail "$name: param_l2 $(field "$name" param_l2) vs $(field ref param_l2)"
		echo "ok $name, grad_accum $accum: $(cat "$tmp/$name.cmp")"
	done
done
exit 0
