#!/bin/bash
# crun under Slurm's environment, without Slurm: each crun gets only the
# variables srun sets in a task (env -i), as srun -N2 --ntasks-per-node=1
# gives them, and nothing else.
#   1. --dry-run of node 0 and node 1 of a 2-node step: every value and
#      its from.KEY line; the user's flags and PET_ variables win.
#   2. Misconfigurations: exit 2 with one line naming the variable.
#   3. A real two-node job on loopback (node list 127.0.0.[1-2], two crun
#      processes, SLURM_NODEID 0 and 1): crun-train configs/tiny.yaml to
#      the end, the endpoint on the port derived from the job id.
#   4. Preemption: SIGUSR1 reaches the worker and the job goes on;
#      SIGTERM ends it with 143, or with --slurm-requeue's status; the start
#      line shows SLURM_RESTART_COUNT and the run id carries it.
# pid_NAME come from agent (printf -v).
# Worker commands are literal text for sh -c.
# shellcheck disable=SC2016,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
TRAIN=${CRUN_TRAIN:-}

# slurm_env JOB NODEID: what srun sets in task NODEID of step 0 of job JOB
# on two nodes, one task per node (Slurm 22.05), with 4 GPUs per node.
slurm_env() {
	local job=$1 node=$2
	printf '%s\n' PATH="$PATH" SLURM_JOB_ID="$job" SLURM_JOBID="$job" SLURM_STEP_ID=0 \
		SLURM_STEPID=0 SLURM_NNODES=2 SLURM_JOB_NUM_NODES=2 SLURM_STEP_NUM_NODES=2 \
		'SLURM_JOB_NODELIST=127.0.0.[1-2]' 'SLURM_NODELIST=127.0.0.[1-2]' \
		'SLURM_STEP_NODELIST=127.0.0.[1-2]' SLURM_NTASKS=2 SLURM_NPROCS=2 \
		SLURM_STEP_NUM_TASKS=2 'SLURM_TASKS_PER_NODE=1(x2)' \
		'SLURM_STEP_TASKS_PER_NODE=1(x2)' 'SLURM_JOB_CPUS_PER_NODE=2(x2)' \
		SLURM_NODEID="$node" SLURM_PROCID="$node" SLURM_LOCALID=0 SLURM_GTIDS="$node" \
		SLURM_CPUS_ON_NODE=2 SLURM_LAUNCH_NODE_IPADDR=127.0.0.1 \
		SLURM_SRUN_COMM_HOST=127.0.0.1 SLURM_SRUN_COMM_PORT=35000 \
		SLURM_CLUSTER_NAME=test SLURM_JOB_NAME=train SLURM_JOB_PARTITION=debug \
		SLURM_SUBMIT_DIR=/tmp SLURM_SUBMIT_HOST=login1 SLURM_TASK_PID=$$ \
		SLURM_TOPOLOGY_ADDR="n$node" SLURMD_NODENAME="n$node"
}

# in_slurm_env FILE JOB NODEID [VAR=VALUE...] --: writes slurm_env's
# variables into FILE, each VAR=VALUE added or replacing (VAR= removes)
in_slurm_env() {
	local file=$1 job=$2 node=$3
	shift 3
	slurm_env "$job" "$node" >"$file"
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		grep -v "^${1%%=*}=" "$file" >"$file.new"
		[ -n "${1#*=}" ] && printf '%s\n' "$1" >>"$file.new"
		mv "$file.new" "$file"
		shift
	done
}
# dry NAME JOB NODEID [VAR=VALUE...] -- ARGS...: crun --dry-run in that
# environment; stdout in $tmp/NAME.out, stderr in $tmp/NAME.err, status in rc
dry() {
	local name=$1 job=$2 node=$3 envs=()
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	in_slurm_env "$tmp/$name.env" "$job" "$node" "${envs[@]}" --
	mapfile -t vars <"$tmp/$name.env"
	rc=0
	env -i "${vars[@]}" timeout --foreground -s KILL 30 "$CRUN" --dry-run "$@" true \
		>"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}
# bad NAME MESSAGE-PREFIX [VAR=VALUE...] -- ARGS...: exit 2, one line
bad() {
	local name=$1 want=$2
	shift 2
	dry "$name" 77 0 "$@"
	[ "$rc" = 2 ] || fail "$name: exit $rc, expected 2: $(cat "$tmp/$name.err")"
	[ "$(wc -l <"$tmp/$name.err")" = 1 ] || fail "$name: not one line: $(cat "$tmp/$name.err")"
	case $(cat "$tmp/$name.err") in
	"crun: $want"*) ;;
	*) fail "$name: '$(cat "$tmp/$name.err")' does not start with 'crun: $want'" ;;
	esac
	[ -s "$tmp/$name.out" ] && fail "$name: printed a plan"
	return 0
}

# ---- 1. --dry-run of both nodes --------------------------------------
for node in 0 1; do
	dry "dry$node" 4242 "$node" SLURM_GPUS_ON_NODE=4 CUDA_VISIBLE_DEVICES=0,1,2,3 --
	[ "$rc" = 0 ] || fail "dry-run of node $node: exit $rc: $(cat "$tmp/dry$node.err")"
	f=$tmp/dry$node.out
	has "$f" nnodes=2
	has "$f" "node_rank=$node"
	has "$f" nproc_per_node=4
	has "$f" rdzv_backend=c10d
	has "$f" rdzv_endpoint=127.0.0.1:22420 # 20000 + 242 * 10 + 0
	has "$f" run_id=4242.0
	has "$f" "scheduler=slurm: job 4242 step 0 on 127.0.0.[1-2] (2 nodes), node $node"
	has "$f" "from.nnodes=slurm SLURM_STEP_NUM_NODES"
	has "$f" "from.node_rank=slurm SLURM_NODEID"
	has "$f" "from.nproc_per_node=slurm SLURM_GPUS_ON_NODE"
	has "$f" "from.rdzv_endpoint=slurm SLURM_STEP_NODELIST, SLURM_JOB_ID"
	has "$f" "from.rdzv_id=slurm SLURM_JOB_ID, SLURM_STEP_ID"
	[ "$(grep -c '^from\.' "$f")" = 5 ] || fail "node $node: other from. lines: $(grep '^from\.' "$f")"
	lacks "$f" slurm_restart_count=
done

# The user's flags, PET_ variables and config file win.
printf 'nproc_per_node: 2\n' >"$tmp/c.yaml"
dry user 4242 1 PET_RDZV_ID=mine -- --rdzv-endpoint=127.0.0.1:29999 -c "$tmp/c.yaml"
[ "$rc" = 0 ] || fail "user values: exit $rc: $(cat "$tmp/user.err")"
has "$tmp/user.out" rdzv_endpoint=127.0.0.1:29999
has "$tmp/user.out" run_id=mine
has "$tmp/user.out" nproc_per_node=2
has "$tmp/user.out" "from.rdzv_endpoint=--rdzv-endpoint"
has "$tmp/user.out" "from.rdzv_id=PET_RDZV_ID"
has "$tmp/user.out" "from.nproc_per_node=config $tmp/c.yaml line 1"
has "$tmp/user.out" "from.nnodes=slurm SLURM_STEP_NUM_NODES"

# --scheduler none reads nothing; SLURM_RESTART_COUNT shows up.
dry none 4242 1 -- --scheduler=none
has "$tmp/none.out" nnodes=1
has "$tmp/none.out" scheduler=none
dry requeued 4242 1 SLURM_RESTART_COUNT=2 -- --slurm-requeue=85
has "$tmp/requeued.out" run_id=4242.0.r2
has "$tmp/requeued.out" slurm_restart_count=2
has "$tmp/requeued.out" slurm_requeue=85
has "$tmp/requeued.out" "scheduler=slurm: job 4242 step 0 on 127.0.0.[1-2] (2 nodes), node 1, restart 2"

# Several tasks per node with the flag: each task a node.
dry tasks 4242 1 SLURM_STEP_NUM_TASKS=4 SLURM_NTASKS=4 'SLURM_STEP_TASKS_PER_NODE=2(x2)' SLURM_PROCID=3 -- --slurm-tasks-as-nodes
has "$tmp/tasks.out" nnodes=4
has "$tmp/tasks.out" node_rank=3
has "$tmp/tasks.out" "from.node_rank=slurm SLURM_PROCID"

# ---- 2. misconfigurations ----------------------------------------------
bad unresolved "slurm SLURM_STEP_NODELIST: host 'crun-no-such-host1' does not resolve: " \
	'SLURM_STEP_NODELIST=crun-no-such-host[1-2]' 'SLURM_JOB_NODELIST=crun-no-such-host[1-2]' --
bad disagree "slurm: SLURM_STEP_NUM_NODES=3 disagrees with SLURM_STEP_NODELIST '127.0.0.[1-2]' (2 hosts)" \
	SLURM_STEP_NUM_NODES=3 --
bad tasks "slurm: several tasks per node (SLURM_STEP_TASKS_PER_NODE=2(x2)): crun wants one per node" \
	SLURM_STEP_NUM_TASKS=4 SLURM_NTASKS=4 'SLURM_STEP_TASKS_PER_NODE=2(x2)' --
bad batch "slurm: SLURM_JOB_ID 77 has no SLURM_STEP_ID: crun runs in the batch script, on one of 2 nodes" \
	SLURM_STEP_ID= SLURM_STEPID= SLURM_STEP_NODELIST= SLURM_STEP_NUM_NODES= --
bad hostlist "invalid value '127.0.0.[2-1]' for SLURM_STEP_NODELIST: reversed range '2-1' at byte 9" \
	'SLURM_STEP_NODELIST=127.0.0.[2-1]' --
bad rank "invalid value '2' for SLURM_NODEID: expected a number from 0 to 1" SLURM_NODEID=2 --
bad gpus "invalid value 'x' for SLURM_GPUS_ON_NODE: expected a number from 0 to 4096" \
	SLURM_GPUS_ON_NODE=x --
bad requeue "invalid value '256' for --slurm-requeue: expected an exit status from 1 to 255" -- \
	--slurm-requeue=256

# ---- 3. a real two-node job ---------------------------------------------
# A job id whose port is free here.
job=""
for _ in $(seq 50); do
	j=$((RANDOM % 1000 + 1000))
	p=$((20000 + (j % 1000) * 10))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		job=$j
		break
	fi
done
[ -n "$job" ] || fail "no free port from 20000 to 29990"

if [ -n "$TRAIN" ] && [ -x "$TRAIN" ]; then
	cmd=("$TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" --set train.steps=30
		--set optim.warmup_steps=5 --set train.eval_every=0 --set log.every=10)
	what="crun-train configs/tiny.yaml"
else
	cmd=(sh -c 'echo "w rank=$RANK world=$WORLD_SIZE"')
	what="a shell worker (no crun-train)"
fi
for node in 1 0; do
	in_slurm_env "$tmp/job$node.env" "$job" "$node" --
	mapfile -t vars <"$tmp/job$node.env"
	env -i "${vars[@]}" "$CRUN" "${cmd[@]}" >"$tmp/job$node.out" 2>"$tmp/job$node.err" &
	printf -v "pid_job$node" '%s' "$!"
	stray_pids="$stray_pids $!"
done
finish job0 90
finish job1 90
[ "$rc_job0" = 0 ] || fail "node 0 exited $rc_job0: $(tail -n 20 "$tmp/job0.err")"
[ "$rc_job1" = 0 ] || fail "node 1 exited $rc_job1: $(tail -n 20 "$tmp/job1.err")"
for node in 0 1; do
	grep -qF "crun: scheduler slurm: job $job step 0 on 127.0.0.[1-2] (2 nodes), node $node" \
		"$tmp/job$node.err" || fail "node $node: no start line: $(head -n 5 "$tmp/job$node.err")"
done
if [ -n "$TRAIN" ] && [ -x "$TRAIN" ]; then
	grep -q "summary: steps=30 .*world_size=2" "$tmp/job0.out" "$tmp/job1.out" ||
		fail "no summary of 30 steps on 2 ranks: $(tail -n 5 "$tmp/job0.out" "$tmp/job1.out")"
else
	cat "$tmp/job0.out" "$tmp/job1.out" | grep -c "world=2" | grep -qx 2 ||
		fail "two ranks of 2: $(cat "$tmp/job0.out" "$tmp/job1.out")"
fi

# ---- 4. SIGUSR1 goes through, SIGTERM ends, requeue ----------------------
worker='trap "echo got-usr1" USR1; trap "echo got-term; exit 0" TERM
echo "ready run=$TORCHELASTIC_RUN_ID"
i=0
while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done'
one_node=(SLURM_STEP_NUM_NODES=1 SLURM_NNODES=1 SLURM_JOB_NUM_NODES=1
	SLURM_STEP_NODELIST=localhost SLURM_JOB_NODELIST=localhost SLURM_NODELIST=localhost
	SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 SLURM_RESTART_COUNT=3)
for requeue in none 85; do
	in_slurm_env "$tmp/sig.env" 4243 0 "${one_node[@]}" --
	mapfile -t vars <"$tmp/sig.env"
	env -i "${vars[@]}" "$CRUN" --slurm-requeue=$requeue --shutdown-timeout=5s \
		sh -c "$worker" "crun-slurm-$$" >"$tmp/sig.out" 2>"$tmp/sig.err" &
	pid_sig=$!
	stray_pids="$stray_pids $!"
	wait_for "$tmp/sig.out" "ready run=4243.0.r3"
	grep -qF "crun: scheduler slurm: job 4243 step 0 on localhost (1 node), node 0, restart 3" \
		"$tmp/sig.err" || fail "no start line with the restart count: $(cat "$tmp/sig.err")"
	kill -USR1 "$pid_sig"
	wait_for "$tmp/sig.out" got-usr1
	wait_for "$tmp/sig.err" "forwarded to 1 running worker"
	kill -0 "$pid_sig" 2>/dev/null || fail "crun ended on SIGUSR1"
	kill -USR1 "$pid_sig"
	wait_for "$tmp/sig.out" got-usr1 2
	kill -TERM "$pid_sig"
	wait_for "$tmp/sig.out" got-term
	want=143
	[ "$requeue" = none ] || want=$requeue
	expect_rc sig "$want"
	if [ "$requeue" != none ]; then
		grep -qF "exit 85 for Slurm's RequeueExit" "$tmp/sig.err" ||
			fail "no requeue line: $(cat "$tmp/sig.err")"
	fi
	wait_none "crun-slurm-$$"
done

echo "ok Slurm's environment: dry-run of a 2-node step, misconfigurations, $what on two nodes, SIGUSR1 forwarded, SIGTERM with and without --slurm-requeue"
exit 0
