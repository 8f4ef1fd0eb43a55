#!/bin/sh
# The GPU keys of crun-train's config, in any build: a crun-train built
# without CUDA refuses train.device cuda and the nccl backend as a config
# error (exit 78, one line, before anything starts); in a CUDA build
# without a GPU, train.device cuda fails with exit 1 and says there is no
# device (with a GPU it trains: exit 0). The keys that need train.device
# cuda are refused on the cpu device in every build.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

# expect STATUS MESSAGE ARGS...
expect() {
	want_rc=$1
	want=$2
	shift 2
	timeout --foreground 60 "$TRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc -eq "$want_rc" ] || fail "crun-train $*: exit $rc, want $want_rc ($(cat "$tmp/err"))"
	[ "$(cat "$tmp/err")" = "$want" ] || fail "crun-train $*: got '$(cat "$tmp/err")', want '$want'"
}

expect 78 "crun-train: config: train.precision bf16 needs train.device cuda (the cpu path computes in fp32)" \
	--set train.precision=bf16
expect 78 "crun-train: config: model.checkpoint_activations needs train.device cuda" \
	--set model.checkpoint_activations=true

small="--set train.steps=2 --set train.batch_size=8 --set data.generate_bytes=20000 --set train.eval_samples=16"
# shellcheck disable=SC2086
timeout --foreground 120 "$TRAIN" --set train.device=cuda $small >"$tmp/cuda.out" 2>"$tmp/cuda.err"
rc=$?
case $rc in
78)
	[ "$(cat "$tmp/cuda.err")" = "crun-train: config: train.device cuda needs a crun-train built with CUDA (meson setup -Dcuda=enabled); this one computes on the cpu only" ] ||
		fail "train.device cuda, exit 78: '$(cat "$tmp/cuda.err")'"
	expect 78 "crun-train: config: parallel.backend nccl needs a crun-train built with CUDA (meson setup -Dcuda=enabled); this one computes on the cpu only" \
		--set parallel.backend=nccl
	echo "ok: a build without CUDA refuses the GPU keys"
	;;
1)
	grep -q "^crun-train: train.device cuda: no CUDA device" "$tmp/cuda.err" ||
		fail "train.device cuda, exit 1: '$(cat "$tmp/cuda.err")'"
	expect 78 "crun-train: config: parallel.backend nccl needs train.device cuda" \
		--set parallel.backend=nccl
	echo "ok: a CUDA build without a GPU says so"
	;;
0)
	grep -q "^summary: .* device=cuda" "$tmp/cuda.out" || fail "train.device cuda: no device=cuda in the summary"
	echo "ok: trained on the device ($(sed -n "s/^device: //p" "$tmp/cuda.out" | head -1))"
	;;
*)
	fail "train.device cuda: exit $rc: $(cat "$tmp/cuda.err")"
	;;
esac
exit 0
