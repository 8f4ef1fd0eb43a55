#!/bin/bash
# Requeue by RequeueExit under a real Slurm (slurm-lib.sh, with slurm.conf's
# RequeueExit=99): configs/slurm/train.sbatch runs crun-train on two nodes
# with CRUN_FLAGS=--slurm-requeue=99, checkpointing every 5 steps. Once a
# checkpoint is there, every crun gets SIGTERM, the job's steps alone
# (scancel --signal=TERM, not the batch shell, which the job's end would
# signal): crun stops its workers and exits 99, srun exits 99, the script
# ends with srun's status, and Slurm requeues the job. On the way back every crun sees
# SLURM_RESTART_COUNT=1, the run has the id <job>.<step>.r1, and crun-train
# resumes from the checkpoint and finishes. (A job that Slurm ends, by its
# time limit or a plain scancel, is not requeued by RequeueExit: see crun(1)
# SLURM.) Everything the cluster started is gone at the end. Skips (77)
# where the machine cannot host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up RequeueExit=99

script=$CRUN_SOURCE_DIR/configs/slurm/train.sbatch
mkdir "$tmp/job"
# Rank 0 is slowed down (50 ms a step) so that SIGTERM comes in the middle
# of the first run.
CRUN=$CRUN CRUN_TRAIN=$TRAIN CKPT_DIR=$tmp/job/ckpt CRUN_FLAGS=--slurm-requeue=99 \
	slurm_exec timeout --foreground 90 sbatch --wait --chdir="$tmp/job" --output="$tmp/job/%j.out" \
	--time=10 "$script" "$TINY" "${SMALL[@]}" --set train.steps=60 --set checkpoint.every=5 \
	--set train.slow_rank=0 --set train.slow_delay=50ms >"$tmp/sbatch.out" 2>&1 &
sbatch_pid=$!
slurm_wait_checkpoint "$tmp/job/ckpt"
slurm_job_id "$tmp/sbatch.out"
slurm_exec timeout --foreground 10 scancel --signal=TERM "$id" || fail "scancel --signal=TERM $id failed"
wait "$sbatch_pid" || fail "sbatch --wait of the requeued job failed: $(cat "$tmp/sbatch.out")
$(cat "$tmp"/job/*.out)
$(slurm_logs)"
out=$tmp/job/$id.out
has "$out" "job $id on node[1-2] (restart 0)"
# Both crun stopped on SIGTERM with the status of RequeueExit, and the
# script ended with it
[ "$(grep -c "^crun: ended by SIGTERM: exit 99 for Slurm's RequeueExit (--slurm-requeue)$" "$out")" = 2 ] ||
	fail "not both crun exited 99 on SIGTERM: $(cat "$out")"
has "$out" "job $id done (status 99)"
has "$out" "job $id on node[1-2] (restart 1)"
has "$out" "job $id done (status 0)"
[ "$(grep -c "^job $id on " "$out")" = 2 ] || fail "the job did not run exactly twice: $(cat "$out")"
# The second run: each crun read the restart count, and the run has an id
# of its own
for t in 0 1; do
	has "$out" "crun: scheduler slurm: job $id step 0 on node[1-2] (2 nodes), node $t, restart 1"
done
grep -q "^crun: hosting the rendezvous store of run '$id.0.r1' on 'node1:" "$out" ||
	fail "the requeued run's id is not $id.0.r1: $(cat "$out")"
grep -q "^\[0\]:resuming from checkpoint " "$out" || fail "crun-train did not resume: $(cat "$out")"
grep -Eq "^\[0\]:summary: steps=60 .* resumed_from=([5-9]|[1-5][05])$" "$out" ||
	fail "crun-train did not resume from a checkpoint of the first run: $(cat "$out")"

slurm_down
end=$EPOCHREALTIME
echo "ok: SIGTERM to the steps, exit 99, requeued, resumed with SLURM_RESTART_COUNT=1; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
