#!/bin/sh
# crun-train's GPU path, run whole on cudasim (tests/cudasim: CUDA, cuBLAS
# and NCCL emulated on the CPU; only a -Dcudasim=true build registers this
# test). Against the cpu path as the reference, after K steps:
# - train.device cuda, fp32, on 1 rank and on 2 ranks over the cpu comm
#   backend and over nccl, for every strategy (with small buckets, so the
#   reductions overlap backward, and with gradient accumulation): relative
#   L2 difference of the parameters at most 1e-5;
# - bf16 with activation checkpointing and bf16 reductions over nccl: the
#   same loss as fp32 within 2%;
# - resume on the device equals uninterrupted, bitwise (zero3 over nccl);
# - a device too small for the model: one line, exit 78;
# - trace.path on the device: the spans come from CUDA events on the
#   compute and comm streams, in stream order, and tracing leaves the
#   numbers bitwise unchanged (the traced run is the resume test's
#   reference).
# The jobs run under two stream schedules, so that a missing stream
# dependency shows in one of them as wrong numbers: lazy (a stream runs
# only when the host needs it: the comm stream runs late) and first-late
# (every stream but the compute stream runs at once: the comm stream runs
# early).
# The default suite runs one representative of each: 1 rank under lazy,
# ddp over the cpu backend, zero1 and zero2 over nccl under lazy, zero3
# (the strategy with the most streams in flight) over nccl and bf16 under
# first-late; the resume runs zero3 over nccl under lazy. With
# CRUN_TEST_LONG=1 (scripts/test --long) it runs the whole matrix: 1 rank,
# both backends, every strategy and bf16 under both schedules.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

K=6
args="$SMALL --set train.steps=$K --set parallel.bucket_mb=0.05 --set checkpoint.every=0"
export CUDASIM_DEVICES=2 CUDASIM_NCCL_TIMEOUT_MS=30000

run_ranks 1 ref $args --set checkpoint.dir="$tmp/ref" || fail "cpu reference run failed"
"$TRAIN" export "$tmp/ref" "$tmp/ref.bin" >/dev/null || fail "export of the reference failed"

# check NAME: NAME's parameters match the cpu reference
check() {
	"$TRAIN" export "$tmp/$1" "$tmp/$1.bin" >/dev/null || fail "export of $1 failed"
	"$TRAIN" compare --tolerance 1e-5 "$tmp/ref.bin" "$tmp/$1.bin" >"$tmp/$1.cmp" ||
		fail "$1 differs from the cpu path: $(cat "$tmp/$1.cmp")"
	[ "$(field "$1" device)" = cuda ] || fail "$1 did not run on the device"
	# the phase times: the emulator's clock, but there and not negative
	for k in gpu_ms_compute gpu_ms_exposed_comm gpu_ms_update; do
		awk -v v="$(field "$1" $k)" 'BEGIN {exit !(v != "" && v >= 0)}' ||
			fail "$1: $k='$(field "$1" $k)'"
	done
	echo "ok $1: $(sed 's/.*rel_l2_diff=\([^ ]*\).*/rel_l2_diff=\1/' "$tmp/$1.cmp")"
}

long=${CRUN_TEST_LONG:-0}
for sched in lazy first-late; do
	export CUDASIM_SCHED=$sched
	name=$sched-1
	if [ "$long" = 1 ] || [ $sched = lazy ]; then
		run_ranks 1 "$name" $args --set train.device=cuda --set checkpoint.dir="$tmp/$name" ||
			fail "$name: 1 rank on the device failed"
		check "$name"
	fi
	# the cpu backend waits for ms on the host after every collective:
	# its stream order is tested once
	backends="cpu nccl"
	[ $sched = first-late ] && backends=nccl
	for backend in $backends; do
		strategies="ddp zero1 zero2 zero3"
		if [ "$long" != 1 ]; then
			[ $backend = cpu ] && strategies=ddp
			[ $sched = lazy ] && [ $backend = nccl ] && strategies="zero1 zero2"
			[ $sched = first-late ] && strategies=zero3
		fi
		for strategy in $strategies; do
			accum=1
			[ $strategy = zero2 ] && accum=2
			name=$sched-$backend-$strategy
			run_ranks 2 "$name" $args --set train.device=cuda \
				--set parallel.backend=$backend --set parallel.strategy=$strategy \
				--set parallel.grad_accum=$accum --set checkpoint.dir="$tmp/$name" ||
				fail "$name: 2 ranks failed"
			[ "$(field "$name" backend)" = $backend ] || fail "$name: wrong backend"
			check "$name"
		done
	done
	# bf16 compute, recomputed activations, gradients reduced in bf16
	[ "$long" = 1 ] || [ $sched = first-late ] || continue
	name=$sched-bf16
	run_ranks 2 "$name" $args --set train.device=cuda --set parallel.backend=nccl \
		--set parallel.strategy=zero3 --set train.precision=bf16 \
		--set model.checkpoint_activations=true --set checkpoint.dir="$tmp/$name" ||
		fail "$name: bf16 on 2 ranks failed"
	[ "$(field "$name" precision)" = bf16 ] || fail "$name: not bf16"
	rel_close "$(field ref train_loss)" "$(field "$name" train_loss)" 0.02 ||
		fail "$name: loss $(field "$name" train_loss) vs fp32 $(field ref train_loss)"
	echo "ok $name: loss $(field "$name" train_loss) vs $(field ref train_loss)"
done

# out of device memory at setup: one line naming what did not fit and the
# man page's ladder, exit 78 (crun-train(1), OUT OF MEMORY)
CUDASIM_MEMORY_MB=34 timeout --foreground 60 "$TRAIN" $SMALL --set train.device=cuda \
	--set model.width=512 --set checkpoint.dir= >"$tmp/oom.out" 2>"$tmp/oom.err"
rc=$?
[ $rc -eq 78 ] || fail "out of device memory: exit $rc, want 78: $(cat "$tmp/oom.err")"
[ "$(wc -l <"$tmp/oom.err")" -eq 1 ] && grep -q "^crun-train: out of GPU memory for .*see OUT OF MEMORY in crun-train(1)$" \
	"$tmp/oom.err" || fail "out of device memory: '$(cat "$tmp/oom.err")'"
echo "ok out of device memory: $(cat "$tmp/oom.err")"

# resume on the device: stopped after step 4 and resumed ends bitwise
# equal to the uninterrupted run
export CUDASIM_SCHED=lazy
par="--set train.device=cuda --set parallel.backend=nccl --set parallel.strategy=zero3"
rargs="$SMALL --set train.steps=8 --set checkpoint.every=2 --set parallel.bucket_mb=0.05"
run_ranks 2 full $rargs $par --set checkpoint.dir="$tmp/full" \
	--set trace.path="$tmp/full-{rank}.json" --set trace.steps=3 || fail "uninterrupted run failed"
"$CRUN_SOURCE_DIR/scripts/trace-merge" "$tmp/full.json" "$tmp/full-0.json" "$tmp/full-1.json" \
	>/dev/null || fail "trace-merge of the device's traces failed"
python3 - "$tmp/full.json" <<'PY' || fail "the device's trace is wrong"
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for pid in (0, 1):
    for s in (2, 3, 4):
        es = [e for e in x if e["pid"] == pid and e["args"]["step"] == s
              and e["cat"] != "checkpoint"]
        fw = [e for e in es if e["name"] == "forward"]
        bw = [e for e in es if e["name"] == "backward"]
        assert len(fw) == len(bw) >= 3, (pid, s, len(fw), len(bw))
        assert [e["args"]["unit"] for e in fw] == list(range(len(fw))), fw
        for name in ("reduce-scatter", "all-gather", "adamw", "grad norm"):
            assert any(e["name"] == name for e in es), (pid, s, name)
        # one stream: each compute span starts after the one before ends
        comp = sorted((e for e in es if e["cat"] in ("compute", "optimizer")),
                      key=lambda e: e["ts"])
        for a, b in zip(comp, comp[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1, (a, b)
        step = [e for e in es if e["name"] == "step"][0]
        for e in es:
            assert e["dur"] >= 0 and step["ts"] <= e["ts"] + 1, (e, step)
            assert e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1, (e, step)
print("ok device trace: %d spans" % len(x))
PY
run_ranks 2 part $rargs $par --set checkpoint.dir="$tmp/part" --set train.stop_at=4 ||
	fail "interrupted run failed"
TORCHELASTIC_RESTART_COUNT=1 run_ranks 2 resumed $rargs $par --set checkpoint.dir="$tmp/part" ||
	fail "resumed run failed"
[ "$(field resumed resumed_from)" = 4 ] || fail "did not resume from step 4"
"$TRAIN" export "$tmp/full" "$tmp/full.bin" >/dev/null || fail "export failed"
"$TRAIN" export "$tmp/part" "$tmp/part.bin" >/dev/null || fail "export failed"
"$TRAIN" compare "$tmp/full.bin" "$tmp/part.bin" >"$tmp/cmp" ||
	fail "resumed parameters are not bitwise equal: $(cat "$tmp/cmp")"
echo "ok resume on the device: $(cat "$tmp/cmp")"
exit 0
