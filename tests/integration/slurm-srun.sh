#!/bin/bash
# crun under a real Slurm (slurm-lib.sh: slurmctld and two slurmd, each in
# a network and UTS namespace of its own): srun -N2 starts one crun per
# node, with no crun flags, and crun-train's tiny.yaml, shortened, runs to
# completion as one job of two ranks over both nodes: the agents of node1
# and node2 join one round of run <job id>.<step id> on node1's store.
# Everything the cluster started is gone at the end. Skips (77) where the
# machine cannot host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up

slurm_exec timeout 60 srun -N2 --ntasks-per-node=1 -l "${CRUN_SLURM[@]}" "$TRAIN" "$TINY" \
	"${SMALL[@]}" >"$tmp/srun.out" 2>&1 ||
	fail "srun -N2 crun crun-train failed: $(tail -n 30 "$tmp/srun.out")
$(slurm_logs)"
out=$tmp/srun.out
# node1's agent hosts the store and names both nodes as they join
for n in node1 node2; do
	grep -Eq "^0: crun: run '[^']+': node '$n:[^']+' \($n, 1 worker\) joins round 1 \(nnodes 2\)$" "$out" ||
		fail "node $n did not join round 1: $(cat "$out")"
done
grep -Eq "^0: crun: round 1 of run '[^']+' closed with 2 nodes \(world size 2\)$" "$out" ||
	fail "round 1 did not close with 2 nodes: $(cat "$out")"
grep -Eq "^0: \[0\]:summary: steps=40 .* world_size=2 " "$out" ||
	fail "crun-train's summary is not of 40 steps on 2 ranks: $(cat "$out")"
grep -Eq "^0: crun: run '[^']+' is closed: the job has finished \(round 1, 0 restarts\)$" "$out" ||
	fail "the job did not finish in round 1: $(cat "$out")"
# No task exited non-zero (srun says "error: ... exited with exit code")
lacks "$out" "exited with exit code"

slurm_down
end=$EPOCHREALTIME
echo "ok: srun -N2 crun crun-train on 2 slurmd nodes; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
