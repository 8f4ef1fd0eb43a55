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

# rank_pid CRUN_PID RANK: the pid of that crun's worker of global rank RANK
rank_pid() {
	local p
	for p in $(pgrep -P "$1"); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && {
			echo "$p"
			return
		}
	done
}

# warned NAME STEPS WHOM ARGS...: a 2-rank job; SIGUSR1 after step 5 to
# crun (WHOM=crun) or to rank 1's worker alone (WHOM=rank1); sets out and
# rc.
warned() {
	local name=$1 steps=$2 whom=$3 pid target
	shift 3
	out=$tmp/$name.out
	"$CRUN" --nproc-per-node=2 --max-restarts=0 "$CRUN_TRAIN" "${small[@]}" \
		--set train.steps="$steps" "$@" >"$out" 2>&1 &
	pid=$!
	wait_lines "$out" 'step 5/' 1
	target=$pid
	if [ "$whom" = rank1 ]; then
		target=$(rank_pid "$pid" 1)
		[ -n "$target" ] || fail "$name: no worker of rank 1 under crun $pid"
	fi
	kill -USR1 "$target"
	for _ in $(seq 600); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "$name: crun did not end: $(tail "$out")"; }
	wait "$pid"
	rc=$?
}

# check_warned NAME: one warned checkpoint, of a logged step before the
# last, kept in checkpoint.dir next to the final one; trained to the end.
check_warned() {
	[ "$rc" = 0 ] || fail "$1: exit $rc: $(tail -n 5 "$out")"
	[ "$(grep -c "checkpoint of step [0-9]* saved: warned by a signal" "$out")" = 1 ] ||
		fail "$1: not one warned checkpoint: $(tail -n 8 "$out")"
	saved=$(sed -n 's/.*checkpoint of step \([0-9]*\) saved: warned.*/\1/p' "$out")
	[ $((saved % 5)) = 0 ] && [ "$saved" -ge 5 ] || fail "$1: warned checkpoint of step $saved"
	grep -q "step 200/200" "$out" || fail "$1: did not train to the end"
	# (crun's closing line counts the restarts: 0)
	grep -i "restart" "$out" | grep -qv "^crun: run '[^']*' ended: succeeded (0 restarts, " &&
		fail "$1: the warning restarted the job: $(grep -i restart "$out")"
}

warned ckpt 200 crun --set checkpoint.dir="$tmp/ckpt" --set checkpoint.every=0 \
	--set checkpoint.keep=3
check_warned "warned through crun"
echo "ok: SIGUSR1 forwarded by crun, checkpoint of step $saved, trained to step 200"

# Only rank 1 is warned: rank 0 learns it from the agreement, and both
# write the checkpoint of the same step (rank 0 reports it).
warned one 200 rank1 --set checkpoint.dir="$tmp/one" --set checkpoint.every=0 \
	--set checkpoint.keep=3
check_warned "rank 1 warned"
echo "ok: rank 1 alone warned, both ranks saved step $saved"

warned nodir 40 crun
[ "$rc" = 0 ] || fail "job without checkpoint.dir: exit $rc: $(tail -n 5 "$out")"
grep -q "warned by a signal at step [0-9]*: no checkpoint.dir, nothing saved" "$out" ||
	fail "no note of the warning: $(tail -n 5 "$out")"
echo "ok: without checkpoint.dir the warning is noted and the job completes"
