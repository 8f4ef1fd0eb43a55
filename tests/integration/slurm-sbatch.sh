#!/bin/bash
# configs/slurm/train.sbatch, the example of crun(1), submitted to a real
# Slurm (slurm-lib.sh) with sbatch --wait on two nodes: the batch script
# runs on node1, srun starts crun on both nodes, crun-train (tiny.yaml,
# shortened by the script's arguments) runs to completion on two ranks and
# writes its checkpoint to the script's checkpoint directory, through the
# script's warning trap in a job that cannot be requeued. Then the
# script's own requeue before the time limit (SIGUSR1 to the batch shell):
# the job comes back, resumes from its checkpoint and completes. Everything
# the cluster started is gone at the end. Skips (77) where the machine cannot
# host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up

script=$CRUN_SOURCE_DIR/configs/slurm/train.sbatch
mkdir "$tmp/job"
# A job that cannot be requeued (--no-requeue): the warning (SIGUSR1 to the
# batch shell, as --signal=B:USR1@120 sends it) still saves a checkpoint,
# scontrol requeue fails, and the script waits for srun and ends with its
# status; the run completes. Rank 0 is slowed down (50 ms a step) so that
# the warning comes in the middle of it.
CRUN=$CRUN CRUN_TRAIN=$TRAIN CKPT_DIR=$tmp/job/ckpt \
	slurm_exec timeout --foreground 90 sbatch --wait --no-requeue --chdir="$tmp/job" \
	--output="$tmp/job/%j.out" --time=10 "$script" "$TINY" "${SMALL[@]}" --set log.every=5 \
	--set train.slow_rank=0 --set train.slow_delay=50ms >"$tmp/sbatch.out" 2>&1 &
sbatch_pid=$!
for _ in $(seq 300); do
	grep -q '^\[0\]:step ' "$tmp"/job/*.out 2>/dev/null && break
	sleep 0.1
done
slurm_job_id "$tmp/sbatch.out"
out=$tmp/job/$id.out
grep -q '^\[0\]:step ' "$out" || fail "crun-train logged no step in 30 s: $(cat "$out")"
slurm_exec timeout --foreground 10 scancel --batch --signal=USR1 "$id" || fail "scancel --batch --signal=USR1 failed"
wait "$sbatch_pid" || fail "sbatch --wait of train.sbatch failed: $(cat "$tmp/sbatch.out")
$(cat "$tmp"/job/*.out)
$(slurm_logs)"
has "$out" "job $id on node[1-2] (restart 0)"
grep -Eq "^crun: round 1 of run '[^']+' closed with 2 nodes \(world size 2\)$" "$out" ||
	fail "round 1 did not close with 2 nodes: $(cat "$out")"
has "$out" "job $id: the time limit is near; saving a checkpoint"
grep -q "checkpoint of step [0-9]* saved: warned by a signal" "$out" ||
	fail "crun-train saved no checkpoint on the warning: $(cat "$out")"
has "$out" "job $id: scontrol requeue failed"
grep -Eq "^\[0\]:summary: steps=40 .* world_size=2 " "$out" ||
	fail "crun-train's summary is not of 40 steps on 2 ranks: $(cat "$out")"
has "$out" "job $id done (status 0)"
[ "$(grep -c "^job $id on " "$out")" = 1 ] || fail "the job ran more than once: $(cat "$out")"
# the checkpoint after the last step, where the script put it
[ -n "$(find "$tmp/job/ckpt" -name MANIFEST 2>/dev/null)" ] ||
	fail "no checkpoint in $tmp/job/ckpt: $(find "$tmp/job")"

# The script's requeue: SIGUSR1 to the batch shell (what --signal=B:USR1@120
# sends before the time limit) once a checkpoint is there; the script
# passes the warning to the step (crun-train saves a checkpoint) and
# requeues the job, Slurm stops both crun with SIGTERM, and the job runs
# again, resumes from the checkpoint and completes; sbatch --wait waits
# for the end of it all. Rank 0 is slowed down (50 ms a step) so that the
# signal comes in the middle of the first run.
rm -rf "$tmp/job"
mkdir "$tmp/job"
CRUN=$CRUN CRUN_TRAIN=$TRAIN CKPT_DIR=$tmp/job/ckpt \
	slurm_exec timeout --foreground 90 sbatch --wait --chdir="$tmp/job" --output="$tmp/job/%j.out" \
	--time=10 "$script" "$TINY" "${SMALL[@]}" --set train.steps=60 --set checkpoint.every=5 \
	--set log.every=5 --set train.slow_rank=0 --set train.slow_delay=50ms >"$tmp/sbatch.out" 2>&1 &
sbatch_pid=$!
slurm_wait_checkpoint "$tmp/job/ckpt"
slurm_job_id "$tmp/sbatch.out"
slurm_exec timeout --foreground 10 scancel --batch --signal=USR1 "$id" || fail "scancel --batch --signal=USR1 failed"
wait "$sbatch_pid" || fail "sbatch --wait of the requeued job failed: $(cat "$tmp/sbatch.out")
$(cat "$tmp"/job/*.out)
$(slurm_logs)"
out=$tmp/job/$id.out
has "$out" "job $id on node[1-2] (restart 0)"
has "$out" "job $id: the time limit is near; saving a checkpoint"
grep -q "checkpoint of step [0-9]* saved: warned by a signal" "$out" ||
	fail "crun-train saved no checkpoint on the warning: $(cat "$out")"
has "$out" "job $id: requeueing"
# the script waited for the warned checkpoint, not any checkpoint
warned=$(grep -n "saved: warned by a signal" "$out" | head -n 1 | cut -d: -f1)
requeued=$(grep -n "^job $id: requeueing$" "$out" | head -n 1 | cut -d: -f1)
[ "$warned" -lt "$requeued" ] || fail "requeued before the warned checkpoint: $(cat "$out")"
has "$out" "job $id on node[1-2] (restart 1)"
grep -q "^\[0\]:resuming from checkpoint " "$out" || fail "crun-train did not resume: $(cat "$out")"
grep -Eq "^\[0\]:summary: steps=60 .* world_size=2 .* resumed_from=[1-9][0-9]*$" "$out" ||
	fail "the requeued run did not finish from a checkpoint: $(cat "$out")"
has "$out" "job $id done (status 0)"
[ "$(grep -c "^job $id done (status 0)$" "$out")" = 1 ] || fail "the job completed twice: $(cat "$out")"

slurm_down
end=$EPOCHREALTIME
echo "ok: sbatch train.sbatch on 2 slurmd nodes, and requeued by its trap; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
