#!/bin/bash
# crun under a real Slurm (slurm-lib.sh: slurmctld and two slurmd, each in
# a network and UTS namespace of its own): srun -N2 starts one crun per
# node, with no crun flags, and crun-train's tiny.yaml, shortened, runs to
# completion as one job of two ranks over both nodes: each crun reads the
# step from Slurm's variables, and the agents of node1 and node2 join one
# round of run <job id>.<step id> on the store of node1 (the first host of
# the node list), at the port of the job id. A stale
# SLURM_NTASKS_PER_NODE (sbatch's) does not make a step of one task per
# node one of several. Everything the cluster started is gone at the end. Skips (77) where the
# machine cannot host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up

slurm_exec timeout --foreground 60 srun -N2 --ntasks-per-node=1 -l "$CRUN" "$TRAIN" "$TINY" \
	"${SMALL[@]}" >"$tmp/srun.out" 2>&1 ||
	fail "srun -N2 crun crun-train failed: $(tail -n 30 "$tmp/srun.out")
$(slurm_logs)"
out=$tmp/srun.out
# Each crun found the step: job, node list and its node rank (task t runs
# on node t+1, SLURM_NODEID t)
for t in 0 1; do
	grep -Eq "^$t: crun: scheduler slurm: job [0-9]+ step 0 on node\[1-2\] \(2 nodes\), node $t$" "$out" ||
		fail "task $t did not read the step from Slurm: $(cat "$out")"
done
job=$(sed -n 's/^0: crun: scheduler slurm: job \([0-9]*\) .*/\1/p' "$out")
# The store: on node1, the first host of the node list, at the port of the
# job id; the run id: job.step
port=$((20000 + job % 1000 * 10))
has "$out" "0: crun: hosting the rendezvous store of run '$job.0' on 'node1:$port'"
# node1's agent names both nodes as they join, each by its own host name
for n in node1 node2; do
	grep -Eq "^0: crun: run '$job.0': node '$n:[^']+' \($n, 1 worker\) joins round 1 \(nnodes 2\)$" "$out" ||
		fail "node $n did not join round 1: $(cat "$out")"
done
has "$out" "0: crun: round 1 of run '$job.0' closed with 2 nodes (world size 2)"
grep -Eq "^0: \[0\]:summary: steps=40 .* world_size=2 " "$out" ||
	fail "crun-train's summary is not of 40 steps on 2 ranks: $(cat "$out")"
has "$out" "0: crun: run '$job.0' is closed: the job has finished (round 1, 0 restarts)"
# No task exited non-zero (srun says "error: ... exited with exit code")
lacks "$out" "exited with exit code"

# sbatch --ntasks-per-node=2 leaves SLURM_NTASKS_PER_NODE=2 to every srun
# of the job: a step of one task per node (srun -N2 -n2) is still one,
# from the step's SLURM_STEP_TASKS_PER_NODE=1(x2); one of two per node is
# refused, naming it.
slurm_exec env SLURM_NTASKS_PER_NODE=2 timeout --foreground 30 srun -N2 -n2 -l "$CRUN" --dry-run true \
	>"$tmp/stale.out" 2>&1 || fail "srun -N2 -n2 crun --dry-run failed: $(cat "$tmp/stale.out")"
for t in 0 1; do
	grep -Eq "^$t: scheduler=slurm: job [0-9]+ step 0 on node\[1-2\] \(2 nodes\), node $t$" \
		"$tmp/stale.out" || fail "task $t of srun -N2 -n2 was refused: $(cat "$tmp/stale.out")"
done
slurm_exec env SLURM_NTASKS_PER_NODE=2 timeout --foreground 30 srun -N2 -n4 -l "$CRUN" --dry-run true \
	>"$tmp/two.out" 2>&1 && fail "srun -N2 -n4 crun --dry-run succeeded: $(cat "$tmp/two.out")"
grep -Fq "0: crun: slurm: several tasks per node (SLURM_STEP_TASKS_PER_NODE=2(x2)): crun wants one per node" \
	"$tmp/two.out" || fail "srun -N2 -n4: not refused for its tasks per node: $(cat "$tmp/two.out")"

slurm_down
end=$EPOCHREALTIME
echo "ok: srun -N2 crun crun-train on 2 slurmd nodes; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
