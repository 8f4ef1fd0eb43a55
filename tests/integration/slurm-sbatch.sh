#!/bin/bash
# configs/slurm/train.sbatch, the example of crun(1), submitted to a real
# Slurm (slurm-lib.sh) with sbatch --wait on two nodes: the batch script
# runs on node1, srun starts crun on both nodes, crun-train (tiny.yaml,
# shortened by the script's arguments) runs to completion on two ranks and
# writes its checkpoint to the script's checkpoint directory. Everything the
# cluster started is gone at the end. Skips (77) where the machine cannot
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
CRUN=$CRUN CRUN_TRAIN=$TRAIN CKPT_DIR=$tmp/job/ckpt \
	slurm_exec timeout 90 sbatch --wait --chdir="$tmp/job" --output="$tmp/job/%j.out" \
	--time=2 "$script" "$TINY" "${SMALL[@]}" >"$tmp/sbatch.out" 2>&1 ||
	fail "sbatch --wait of train.sbatch failed: $(cat "$tmp/sbatch.out")
$(cat "$tmp"/job/*.out)
$(slurm_logs)"
id=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$tmp/sbatch.out")
[ -n "$id" ] || fail "sbatch printed no job id: $(cat "$tmp/sbatch.out")"
out=$tmp/job/$id.out
[ -f "$out" ] || fail "no output file $out: $(ls "$tmp/job")"
has "$out" "job $id on node[1-2] (restart 0)"
grep -Eq "^crun: round 1 of run '[^']+' closed with 2 nodes \(world size 2\)$" "$out" ||
	fail "round 1 did not close with 2 nodes: $(cat "$out")"
grep -Eq "^\[0\]:summary: steps=40 .* world_size=2 " "$out" ||
	fail "crun-train's summary is not of 40 steps on 2 ranks: $(cat "$out")"
has "$out" "job $id done"
# the checkpoint after the last step, where the script put it
[ -n "$(find "$tmp/job/ckpt" -name MANIFEST 2>/dev/null)" ] ||
	fail "no checkpoint in $tmp/job/ckpt: $(find "$tmp/job")"

slurm_down
end=$EPOCHREALTIME
echo "ok: sbatch train.sbatch on 2 slurmd nodes; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
