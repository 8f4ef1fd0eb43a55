# A real Slurm cluster for one test (sourced by bash scripts after
# crun-lib.sh, not run): Debian's slurmctld in node 0 and a slurmd in each
# of nodes 1 and 2 of a scripts/cluster cluster, every daemon in the
# network namespace of its node and in a UTS namespace of its own with the
# node's host name (ctl, node1, node2); a munged of the test's own (its own
# key and socket) in node 0. Node names resolve in every node through
# /etc/netns/<node's namespace>/hosts, which 'ip netns exec' mounts over
# /etc/hosts there. Configuration, state, spool and logs are all in
# $tmp/slurm. For example:
#
#   . "$here/crun-lib.sh"
#   . "$here/slurm-lib.sh"
#   slurm_skip_unless_available
#   slurm_up
#   slurm_exec timeout --foreground 60 srun -N2 --ntasks-per-node=1 hostname
#   slurm_down             # at the end: fails if anything is left running
#
#   slurm_skip_unless_available
#           exit 77 (skip) with one line where the machine cannot host the
#           cluster: not root, no network namespaces, a daemon or client
#           missing
#   slurm_up [LINE]...
#           bring the cluster up, LINEs added to slurm.conf, and return once
#           sinfo shows both compute nodes idle (fails after 30 s); sets
#           SLURM_DIR (the directory of configuration, state and logs),
#           SLURM_NODES (the compute nodes' host names) and SLURM_ADDRS
#           (their addresses). The cluster's teardown (cluster-lib.sh) runs
#           however the test ends and removes every process, namespace and
#           /etc/netns file; crun-lib.sh's cleanup runs after it
#   slurm_exec CMD [ARG]...
#           run CMD in node 0 (the controller's node and host name) with
#           SLURM_CONF set: the place for srun, sbatch, squeue, scontrol;
#           bound it yourself (timeout(1))
#   slurm_logs
#           the end of every daemon's log, for a failure message
#   slurm_job_id FILE
#           sets id to the job id sbatch printed into FILE ("Submitted
#           batch job N"); fails when there is none
#   slurm_wait_checkpoint DIR
#           up to 30 s for a crun-train checkpoint (a MANIFEST) under DIR;
#           fails with the jobs' output in $tmp/job when none comes
#   slurm_down
#           take the cluster down now and fail unless no process of it
#           (daemon, job step, worker) is left and its namespaces are gone
#   TRAIN, TINY, SMALL
#           crun-train, configs/tiny.yaml and --set overrides that make it
#           a job of a few seconds on two ranks
# shellcheck shell=bash disable=SC2016,SC2034,SC2154 source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/cluster-lib.sh"

SLURM_DIR=""
TRAIN=$CRUN_TRAIN
TINY=$CRUN_SOURCE_DIR/configs/tiny.yaml
SMALL=(--set model.context=16 --set model.embed_dim=8 --set model.width=48
	--set model.layers=2 --set data.generate_bytes=200000 --set train.batch_size=32
	--set train.eval_samples=256 --set optim.warmup_steps=2 --set train.eval_every=0
	--set train.steps=40 --set log.every=10)
# Slurm's variables of a job the test may run in are not the test cluster's.
for v in $(compgen -e | grep -E '^SLURM_'); do
	unset "$v"
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
SLURM_NODES=(node1 node2)
SLURM_ADDRS=()
slurm__ctl=ctl

slurm_skip_unless_available() {
	local p
	if [[ $(id -u) != 0 ]]; then
		echo "slurm: needs root (slurmd, network namespaces): skipping"
		exit 77
	fi
	for p in slurmctld slurmd srun sbatch sinfo squeue scontrol scancel munged unshare; do
		if ! PATH=$PATH:/usr/sbin:/sbin command -v "$p" >/dev/null; then
			echo "slurm: no $p (Debian's slurmctld, slurmd, slurm-client, munge): skipping"
			exit 77
		fi
	done
	cluster_skip_unless_available
}

# slurm__in_node I NAME CMD...: CMD in node I with the host name NAME
slurm__in_node() {
	local i=$1 name=$2
	shift 2
	cluster_exec "$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

slurm_exec() {
	SLURM_CONF=$SLURM_DIR/slurm.conf slurm__in_node 0 "$slurm__ctl" "$@"
}

slurm_logs() {
	local f
	for f in "$SLURM_DIR"/log/*; do
		[[ -f $f ]] || continue
		printf -- '--- %s\n%s\n' "${f##*/}" "$(tail -n 15 "$f")"
	done
}

slurm_job_id() {
	id=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$1")
	[ -n "$id" ] || fail "sbatch printed no job id: $(cat "$1")"
}

slurm_wait_checkpoint() {
	for _ in $(seq 300); do
		[ -n "$(find "$1" -name MANIFEST 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	fail "no checkpoint after 30 s: $(cat "$tmp"/job/*.out 2>/dev/null)
$(slurm_logs)"
}

# slurm__conf LINE...: slurm.conf and cgroup.conf for the cluster
slurm__conf() {
	local d=$SLURM_DIR
	cat >"$d/slurm.conf" <<EOF
# A test's cluster (tests/integration/slurm-lib.sh)
ClusterName=crun
SlurmctldHost=$slurm__ctl(${CLUSTER_ADDRS[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: also how long a requeued job waits before it starts again
AuthInfo=socket=$d/munge/socket,cred_expire=5
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Every node is a network namespace of the test's own: these are free
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=2
MinJobAge=2
TCPTimeout=2
SchedulerParameters=sched_interval=1
NodeName=${SLURM_NODES[0]} NodeAddr=${CLUSTER_ADDRS[1]} CPUs=2 State=UNKNOWN
NodeName=${SLURM_NODES[1]} NodeAddr=${CLUSTER_ADDRS[2]} CPUs=2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=NO
EOF
	printf '%s\n' "$@" >>"$d/slurm.conf"
	cat >"$d/cgroup.conf" <<EOF
# slurmd loads a cgroup plugin even where no other plugin uses one: v1,
# pointed at an empty directory of the test's
CgroupPlugin=cgroup/v1
CgroupMountpoint=$d/cgroup
CgroupAutomount=no
EOF
}

# slurm__hosts: every node's /etc/hosts, in /etc/netns/<its namespace>
slurm__hosts() {
	local i
	for i in 0 1 2; do
		mkdir -p "/etc/netns/$CLUSTER_NAME-$i" || return 1
		printf '127.0.0.1 localhost\n%s %s\n%s %s\n%s %s\n' \
			"${CLUSTER_ADDRS[0]}" "$slurm__ctl" \
			"${CLUSTER_ADDRS[1]}" "${SLURM_NODES[0]}" \
			"${CLUSTER_ADDRS[2]}" "${SLURM_NODES[1]}" \
			>"/etc/netns/$CLUSTER_NAME-$i/hosts" || return 1
	done
}

# slurm__wait_idle: up to 30 s for sinfo to show both nodes idle
slurm__wait_idle() {
	local out
	for _ in $(seq 150); do
		out=$(slurm_exec timeout --foreground 5 sinfo -h -N -o '%N %t' 2>&1)
		[[ $(grep -c ' idle$' <<<"$out") == 2 ]] && return 0
		sleep 0.2
	done
	fail "the Slurm nodes are not idle after 30 s: $out
$(slurm_logs)"
}

# shellcheck disable=SC2120
slurm_up() {
	local d i
	cluster_up 3
	SLURM_ADDRS=("${CLUSTER_ADDRS[1]}" "${CLUSTER_ADDRS[2]}")
	d=$tmp/slurm
	SLURM_DIR=$d
	mkdir -p "$d/munge" "$d/state" "$d/run" "$d/log" "$d/cgroup" \
		"$d/spool/${SLURM_NODES[0]}" "$d/spool/${SLURM_NODES[1]}" || fail "cannot make $d"
	# munged's socket: in a directory that everyone may search (munged
	# insists), on a path of such directories
	chmod 711 "$tmp" "$d" "$d/munge" || fail "cannot chmod $d/munge"
	slurm__hosts || fail "cannot write /etc/netns/$CLUSTER_NAME-*/hosts"
	slurm__conf "$@"
	# The test's own munge key, readable by its owner only (munged
	# refuses any other).
	if ! dd if=/dev/urandom of="$d/munge/key" bs=1024 count=1 status=none ||
		! chmod 400 "$d/munge/key"; then
		fail "cannot write a munge key"
	fi
	cluster_bg 0 munged -F --key-file="$d/munge/key" --socket="$d/munge/socket" \
		--pid-file="$d/munge/pid" --log-file="$d/log/munged.log" \
		--seed-file="$d/munge/seed" --num-threads=2 --origin=127.0.0.1 \
		>"$d/log/munged.out" 2>&1
	cluster_wait_file "$d/munge/pid" || fail "munged did not start: $(slurm_logs)"
	for _ in $(seq 100); do
		[[ -S $d/munge/socket ]] && break
		sleep 0.05
	done
	[[ -S $d/munge/socket ]] || fail "munged has no socket: $(slurm_logs)"
	cluster_bg 0 unshare --uts sh -c 'hostname "$0" && exec slurmctld -D -f "$1"' \
		"$slurm__ctl" "$d/slurm.conf" >"$d/log/slurmctld.out" 2>&1
	for i in 1 2; do
		cluster_bg "$i" unshare --uts sh -c 'hostname "$0" && exec slurmd -D -f "$1"' \
			"${SLURM_NODES[i - 1]}" "$d/slurm.conf" >"$d/log/slurmd-$i.out" 2>&1
	done
	slurm__wait_idle
}

slurm_down() {
	local name=$CLUSTER_NAME left
	cluster_teardown || fail "cannot take the Slurm cluster down"
	# the daemons name $SLURM_DIR, the tests' workers and jobs $tmp
	left=$(pgrep -af -- "$tmp" || true)
	[[ -z $left ]] || fail "processes of the Slurm cluster are left: $left"
	left=$(ip netns list | grep -F -- "$name-" || true)
	[[ -z $left ]] || fail "namespaces of the Slurm cluster are left: $left"
	[[ ! -e /etc/netns/$name-0 ]] || fail "/etc/netns/$name-0 is left"
}
