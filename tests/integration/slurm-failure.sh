#!/bin/bash
# A failure on one node of a job under a real Slurm (slurm-lib.sh): srun
# -N2 starts crun on node1 and node2, two workers each; in the first
# attempt a worker of node2 exits 3 while the others train. Both
# agents say so and restart the group, on both nodes, and the second
# attempt of crun-train runs to completion on all four ranks: every worker
# ran once with restart count 0 and once with 1, on both hosts. Everything
# the cluster started is gone at the end. Skips (77) where the machine
# cannot host the cluster.
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/crun-lib.sh"
. "$here/slurm-lib.sh"
slurm_skip_unless_available
start=$EPOCHREALTIME
slurm_up

# The worker: says where it runs, then node2's local rank 0 exits 3 in the
# first attempt once all four ranks have started (up to 10 s); the others
# run crun-train.
cat >"$tmp/worker" <<SH
#!/bin/sh
echo "start host=\$(hostname) rank=\$RANK restart=\$TORCHELASTIC_RESTART_COUNT"
touch "$tmp/started.\$RANK.\$TORCHELASTIC_RESTART_COUNT"
if [ "\$(hostname)" = node2 ] && [ "\$LOCAL_RANK" = 0 ] && [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
	i=0
	while [ "\$(ls "$tmp"/started.*.0 | wc -l)" != 4 ] && [ \$i -lt 200 ]; do
		sleep 0.05
		i=\$((i + 1))
	done
	exit 3
fi
exec "\$@"
SH
chmod 755 "$tmp/worker"
slurm_exec timeout --foreground 60 srun -N2 --ntasks-per-node=1 -l "$CRUN" --nproc-per-node=2 \
	--max-restarts=2 "$tmp/worker" "$TRAIN" "$TINY" "${SMALL[@]}" >"$tmp/srun.out" 2>&1 ||
	fail "the job did not recover: $(tail -n 40 "$tmp/srun.out")
$(slurm_logs)"
out=$tmp/srun.out
# Each agent (task 0 on node1, task 1 on node2) saw node2's worker fail
for t in 0 1; do
	grep -Eq "^$t: crun: warning: round 1 ended: rank 2 \(local rank 0\) on node2.* exited with code 3; restarting \(restart 1 of 2\)$" "$out" ||
		fail "task $t does not say why round 1 ended: $(cat "$out")"
done
# Every worker started in attempts 0 and 1 and no other, on both hosts
starts=$(grep -oE 'start host=[a-z0-9]+ rank=[0-9] restart=[0-9]+' "$out" | sort | tr '\n' ';')
want="start host=node1 rank=0 restart=0;start host=node1 rank=0 restart=1;start host=node1 rank=1 restart=0;start host=node1 rank=1 restart=1;start host=node2 rank=2 restart=0;start host=node2 rank=2 restart=1;start host=node2 rank=3 restart=0;start host=node2 rank=3 restart=1;"
[ "$starts" = "$want" ] || fail "the workers' starts: $starts; want $want: $(cat "$out")"
grep -Eq "^0: \[0\]:summary: steps=40 .* world_size=4 " "$out" ||
	fail "crun-train's summary is not of 40 steps on 4 ranks: $(cat "$out")"
grep -Eq "^0: crun: run '[^']+' is closed: the job has finished \(round 2, 1 restarts?\)$" "$out" ||
	fail "the job did not finish in round 2 after 1 restart: $(cat "$out")"
lacks "$out" "exited with exit code"

slurm_down
end=$EPOCHREALTIME
echo "ok: a failure on node2 restarted the group on both slurmd nodes; $(((${end/./} - ${start/./}) / 1000)) ms with the cluster's start and stop"
