#!/bin/bash
# A scheduler's warning (Slurm's --signal=USR1@60) through crun: crun
# forwards SIGUSR1 to its workers and goes on; crun-train saves a
# checkpoint at the next logged step, agreed on by both ranks, and trains
# to the end (a run that comes back resumes from its latest checkpoint as
# train-resume tests). Without checkpoint.dir the warning is noted and the
# job still completes.
set -u
. "$(dirname "$0")/crun-lib.sh"
: "${CRUN_TRAIN:?CRUN_TRAIN must name crun-train}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

small=(--set model.context=16 --set model.embed_dim=8 --set model.width=48
	--set model.layers=2 --set data.generate_bytes=200000 --set train.batch_size=8
	--set train.eval_every=0 --set log.every=5 --set optim.warmup_steps=2
	--set train.slow_rank=0 --set train.slow_delay=20ms)

# warned NAME STEPS ARGS...: a 2-rank job; SIGUSR1 to crun after step 5;
# sets out and rc.
warned() {
	local name=$1 steps=$2 pid
	shift 2
	out=$tmp/$name.out
	"$CRUN" --nproc-per-node=2 --max-restarts=0 "$CRUN_TRAIN" "${small[@]}" \
		--set train.steps="$steps" "$@" >"$out" 2>&1 &
	pid=$!
	wait_lines "$out" 'step 5/' 1
	kill -USR1 "$pid"
	for _ in $(seq 600); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "$name: crun did not end: $(tail "$out")"; }
	wait "$pid"
	rc=$?
}

warned ckpt 200 --set checkpoint.dir="$tmp/ckpt" --set checkpoint.every=0
[ "$rc" = 0 ] || fail "warned job: exit $rc: $(tail -n 5 "$out")"
grep -q "checkpoint of step [0-9]* saved: warned by a signal" "$out" ||
	fail "no warned checkpoint: $(tail -n 8 "$out")"
saved=$(sed -n 's/.*checkpoint of step \([0-9]*\) saved: warned.*/\1/p' "$out" | head -n 1)
[ "$saved" -lt 200 ] || fail "the warned checkpoint is the final one: step $saved"
grep -q "step 200/200" "$out" || fail "the warned job did not train to the end"
grep -qi "restart" "$out" && fail "the warning restarted the job: $(grep -i restart "$out")"
echo "ok: SIGUSR1 forwarded, checkpoint of step $saved, trained to step 200"

warned nodir 40
[ "$rc" = 0 ] || fail "job without checkpoint.dir: exit $rc: $(tail -n 5 "$out")"
grep -q "warned by a signal at step [0-9]*: no checkpoint.dir, nothing saved" "$out" ||
	fail "no note of the warning: $(tail -n 5 "$out")"
echo "ok: without checkpoint.dir the warning is noted and the job completes"
