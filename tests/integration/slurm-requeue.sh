#!/bin/bash
# Preemption and requeue under a real Slurm (slurm-lib.sh, with slurm.conf's
# RequeueExit=99): a batch job of two nodes runs crun-train through srun and
# crun --slurm-requeue=99, checkpointing every 5 steps. Once a checkpoint is
# there, every crun gets SIGTERM (scancel --signal=TERM, as on preemption):
# crun stops its workers and exits 99, the job ends with 99 and Slurm
# requeues it. On the way back the job and each crun see
# SLURM_RESTART_COUNT=1, the run has the id <job>.<step>.r1, and crun-train
# resumes from the checkpoint and finishes. Everything the
# cluster started is gone at the end. Skips (77) where the machine cannot
# host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up RequeueExit=99

mkdir "$tmp/job"
# The first run is slowed down (100 ms a step on rank 0), so that SIGTERM
# comes in the middle of it; the second is not.
cat >"$tmp/job/job.sbatch" <<EOF
#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --requeue --open-mode=append
echo "job \$SLURM_JOB_ID restart=\${SLURM_RESTART_COUNT:-0}"
delay=100ms
[ "\${SLURM_RESTART_COUNT:-0}" = 0 ] || delay=0s
srun -l "$CRUN" --slurm-requeue=99 "$TRAIN" "$TINY" ${SMALL[*]} \\
	--set train.steps=60 --set checkpoint.dir="$tmp/job/ckpt" --set checkpoint.every=5 \\
	--set train.slow_rank=0 --set train.slow_delay=\$delay
rc=\$?
echo "srun exited \$rc"
exit \$rc
EOF
slurm_exec timeout 10 sbatch --chdir="$tmp/job" --output="$tmp/job/out" "$tmp/job/job.sbatch" \
	>"$tmp/sbatch.out" 2>&1 || fail "sbatch: $(cat "$tmp/sbatch.out")"
id=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$tmp/sbatch.out")
[ -n "$id" ] || fail "sbatch printed no job id: $(cat "$tmp/sbatch.out")"
for _ in $(seq 300); do
	[ -n "$(find "$tmp/job/ckpt" -name MANIFEST 2>/dev/null)" ] && break
	sleep 0.1
done
[ -n "$(find "$tmp/job/ckpt" -name MANIFEST 2>/dev/null)" ] ||
	fail "no checkpoint after 30 s: $(cat "$tmp/job/out")
$(slurm_logs)"
slurm_exec timeout 10 scancel --signal=TERM "$id" || fail "scancel --signal=TERM $id failed"
# Up to 60 s for the requeued job to end (cred_expire=10 delays its start)
state=""
for _ in $(seq 300); do
	state=$(slurm_exec timeout 5 squeue -h -j "$id" -o '%T' 2>/dev/null)
	grep -q "^srun exited 0$" "$tmp/job/out" 2>/dev/null && [ -z "$state" ] && break
	sleep 0.2
done
out=$tmp/job/out
grep -q "^srun exited 0$" "$out" || fail "the requeued job did not finish (state '$state'): $(cat "$out")
$(slurm_logs)"
has "$out" "job $id restart=0"
has "$out" "srun exited 99"
has "$out" "job $id restart=1"
[ "$(grep -c '^job ' "$out")" = 2 ] || fail "the job ran more than twice: $(cat "$out")"
# Both crun stopped on SIGTERM with the status of RequeueExit
for t in 0 1; do
	has "$out" "$t: crun: ended by SIGTERM: exit 99 for Slurm's RequeueExit (--slurm-requeue)"
done
# The second run: each crun read the restart count, and the run has an id
# of its own
for t in 0 1; do
	has "$out" "$t: crun: scheduler slurm: job $id step 0 on node[1-2] (2 nodes), node $t, restart 1"
done
grep -q "^0: crun: hosting the rendezvous store of run '$id.0.r1' on 'node1:" "$out" ||
	fail "the requeued run's id is not $id.0.r1: $(cat "$out")"
[ "$(grep -c "is closed: the job has finished" "$out")" = 1 ] || fail "finished runs: $(cat "$out")"
grep -q "^0: \[0\]:resuming from checkpoint " "$out" || fail "crun-train did not resume: $(cat "$out")"
grep -Eq "^0: \[0\]:summary: steps=60 .* resumed_from=([5-9]|[1-5][05])$" "$out" ||
	fail "crun-train did not resume from a checkpoint of the first run: $(cat "$out")"

slurm_down
end=$EPOCHREALTIME
echo "ok: SIGTERM, exit 99, requeued, resumed with SLURM_RESTART_COUNT=1; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
