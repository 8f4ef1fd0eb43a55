#!/bin/sh
# The demo, shortened: configs/tiny.yaml on 4 workers (through crun when
# the build has it, else 4 ranks started by hand) for 150 of its steps.
# The validation loss must already be far below the unigram entropy of the
# data (by 1 bit per byte), and the progress lines and summary must have
# their documented shape.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

cfg="$CRUN_SOURCE_DIR/configs/tiny.yaml"
short="--set train.steps=150 --set optim.warmup_steps=20 --set train.eval_every=0 \
--set log.csv=$tmp/tiny.csv"
if [ -n "${CRUN:-}" ] && [ -x "$CRUN" ]; then
	timeout --foreground 120 "$CRUN" --standalone --nproc-per-node=4 "$TRAIN" "$cfg" $short \
		>"$tmp/tiny.out" 2>&1 || fail "crun --standalone --nproc-per-node=4 failed"
	how=crun
else
	run_ranks 4 tiny "$cfg" $short || fail "4 ranks of tiny.yaml failed"
	how="4 ranks by hand"
fi
grep -q "unigram entropy [0-9.]* bits/byte" "$tmp/tiny.out" || fail "no unigram entropy line"
grep -Eq "step 50/150 loss=[0-9]+\.[0-9]{4} lr=[0-9.]+e[-+][0-9]+ tokens/s=[0-9]+ eta=[0-9]+s" \
	"$tmp/tiny.out" || fail "no progress line of the documented shape"
[ "$(field tiny steps)" = 150 ] || fail "summary: steps is not 150"
[ "$(field tiny world_size)" = 4 ] || fail "summary: world_size is not 4"
for k in train_loss val_loss param_l2 tokens_per_s peak_rss_mib; do
	[ -n "$(field tiny $k)" ] || fail "summary has no $k="
done
echo "$(field tiny param_l2)" | grep -Eq '^[0-9]+\.[0-9]+$' || fail "param_l2 is not a number"
bpb=$(field tiny val_bpb)
uni=$(field tiny unigram_bpb)
awk -v b="$bpb" -v u="$uni" 'BEGIN { exit !(b != "" && u != "" && b < u - 1.0) }' ||
	fail "val_bpb $bpb is not 1 bit below the unigram entropy $uni"
[ "$(head -n 1 "$tmp/tiny.csv")" = "step,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss,val_bpb" ] ||
	fail "metrics CSV has no header"
[ "$(wc -l <"$tmp/tiny.csv")" -eq 151 ] || fail "metrics CSV does not have a header and 150 steps"
echo "ok tiny.yaml ($how): val_bpb $bpb, unigram entropy $uni bits/byte"
exit 0
