#!/bin/bash
# crun in the pods Kubernetes' controllers make, with exactly the variables
# each gives a pod (and nothing else: env -i): Kubeflow's PyTorchJob (an
# older operator and a newer one), an elastic PyTorchJob, Trainer v2 and a
# plain Indexed Job. For each, --dry-run of pod 1 resolves nnodes, node
# rank, rendezvous, run id and workers with no flags, each value from the
# variable it names (from.KEY); then two "pods", crun processes on
# loopback with only those variables, run crun-train to completion, the
# store of pod 0 answering the manifests' readiness probe (crunctl ping).
# A crun started inside a worker is not taken for a pod; misconfigured
# pods fail with one line.
set -u
: "${CRUN:?CRUN must name crun}"
: "${CRUN_TRAIN:?CRUN_TRAIN must name crun-train}"
: "${CRUN_CTL:?CRUN_CTL must name crunctl}"
: "${CRUN_RDZVD:?}"
: "${CRUN_SOURCE_DIR:?}"

# tmp, fail, cleanup of stray_pids (crun-lib.sh) and free_port.
. "$(dirname "$0")/multinode-lib.sh"

# What every container gets from the kubelet.
base="PATH=/usr/bin:/bin KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 \
KUBERNETES_PORT=tcp://10.96.0.1:443"

# pod_env KIND INDEX PORT: the variables pod INDEX of a two-pod job of KIND
# gets, the job's store on 127.0.0.1:PORT (or localhost) instead of a
# Service's name.
pod_env() {
	local kind=$1 i=$2 port=$3
	case $kind in
	pytorchjob-old) # Master + 1 Worker; no PET_ variables
		local host=tj-master-0
		[ "$i" = 0 ] || host=tj-worker-$((i - 1))
		echo "$base HOSTNAME=$host PYTHONUNBUFFERED=0 MASTER_PORT=$port" \
			"MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=$i"
		;;
	pytorchjob) # newer: WORLD_SIZE = pods x nprocPerNode ("2")
		local host=tj-master-0
		[ "$i" = 0 ] || host=tj-worker-$((i - 1))
		echo "$base HOSTNAME=$host PYTHONUNBUFFERED=0 MASTER_PORT=$port" \
			"MASTER_ADDR=127.0.0.1 WORLD_SIZE=4 RANK=$i PET_NPROC_PER_NODE=2" \
			"PET_NODE_RANK=$i PET_NNODES=2"
		;;
	elastic) # 2 Workers, elasticPolicy {maxRestarts: 1, nProcPerNode: 2}
		echo "$base HOSTNAME=el-worker-$i PYTHONUNBUFFERED=0" \
			"PET_RDZV_ENDPOINT=127.0.0.1:$port PET_RDZV_BACKEND=c10d PET_NNODES=2" \
			"PET_MAX_RESTARTS=1 PET_N_PROC_PER_NODE=2"
		;;
	trainer-v2) # TrainJob tj, numNodes 2, numProcPerNode 1
		echo "$base HOSTNAME=tj-node-0-$i JOB_COMPLETION_INDEX=$i PET_NNODES=2" \
			"PET_NPROC_PER_NODE=1 PET_NODE_RANK=$i PET_MASTER_ADDR=localhost" \
			"PET_MASTER_PORT=$port"
		;;
	indexed-job) # configs/k8s/indexed-job.yaml's env
		echo "$base HOSTNAME=train-$i JOB_COMPLETION_INDEX=$i PET_NNODES=2" \
			"PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$port PET_NPROC_PER_NODE=1"
		;;
	esac
}

# pod KIND INDEX PORT ARGS...: crun ARGS in that pod's environment
pod() {
	local kind=$1 i=$2 port=$3
	shift 3
	# shellcheck disable=SC2046
	env -i $(pod_env "$kind" "$i" "$port") timeout --foreground -s KILL 40 "$CRUN" "$@"
}

# dry KIND EXPECTED-LINES FROM-LINES: pod 1's --dry-run has every expected
# line and exactly these from.* lines.
dry() {
	local kind=$1 want=$2 from=$3 out=$tmp/dry-$1
	pod "$kind" 1 29500 --dry-run true >"$out" 2>&1 || fail "$kind: --dry-run: $(cat "$out")"
	while read -r l; do
		[ -n "$l" ] || continue
		grep -qxF -- "$l" "$out" || fail "$kind: no line '$l' in:
$(grep -vE '^(rdzv_conf|heartbeat|straggler)' "$out")"
	done <<<"$want"
	diff <(grep '^from\.' "$out" | sort) <(tr ' ' '\n' <<<"$from" | sed 's/%/ /' | sort) \
		>"$tmp/diff" || fail "$kind: from.* lines differ (< got, > expected):
$(cat "$tmp/diff")"
	echo "$kind: $(grep '^scheduler=' "$out")"
}

dry pytorchjob-old "nnodes=2
node_rank=1
rdzv_backend=static
rdzv_store=127.0.0.1:29500
run_id=tj
nproc_per_node=1
scheduler=kubernetes: PyTorchJob pod, rank 1 of 2, master 127.0.0.1:29500" \
	"from.nnodes=kubernetes%WORLD_SIZE from.node_rank=kubernetes%RANK
from.rdzv_id=kubernetes%HOSTNAME from.master_addr=kubernetes%MASTER_ADDR
from.master_port=kubernetes%MASTER_PORT"

dry pytorchjob "nnodes=2
node_rank=1
rdzv_backend=static
rdzv_store=127.0.0.1:29500
run_id=tj
nproc_per_node=2
scheduler=kubernetes: PyTorchJob pod, rank 1 of 2, master 127.0.0.1:29500" \
	"from.nnodes=PET_NNODES from.node_rank=PET_NODE_RANK from.nproc_per_node=PET_NPROC_PER_NODE
from.rdzv_id=kubernetes%HOSTNAME from.master_addr=kubernetes%MASTER_ADDR
from.master_port=kubernetes%MASTER_PORT"

dry elastic "nnodes=2
rdzv_backend=c10d
rdzv_endpoint=127.0.0.1:29500
run_id=el
nproc_per_node=2
max_restarts=1
scheduler=kubernetes: elastic PyTorchJob pod, rendezvous 127.0.0.1:29500 (c10d), nodes 2" \
	"from.nnodes=PET_NNODES from.rdzv_backend=PET_RDZV_BACKEND
from.rdzv_endpoint=PET_RDZV_ENDPOINT from.max_restarts=PET_MAX_RESTARTS
from.nproc_per_node=kubernetes%PET_N_PROC_PER_NODE from.rdzv_id=kubernetes%HOSTNAME"

dry trainer-v2 "nnodes=2
node_rank=1
rdzv_backend=static
rdzv_store=localhost:29500
run_id=tj-node-0
nproc_per_node=1
scheduler=kubernetes: Trainer v2 (JobSet) pod, node 1 of 2, master localhost:29500" \
	"from.nnodes=PET_NNODES from.node_rank=PET_NODE_RANK from.nproc_per_node=PET_NPROC_PER_NODE
from.master_addr=PET_MASTER_ADDR from.master_port=PET_MASTER_PORT
from.rdzv_id=kubernetes%HOSTNAME"

dry indexed-job "nnodes=2
node_rank=1
rdzv_backend=static
rdzv_store=127.0.0.1:29500
run_id=train
nproc_per_node=1
scheduler=kubernetes: Indexed Job pod, index 1 of 2" \
	"from.nnodes=PET_NNODES from.node_rank=kubernetes%JOB_COMPLETION_INDEX
from.nproc_per_node=PET_NPROC_PER_NODE from.master_addr=PET_MASTER_ADDR
from.master_port=PET_MASTER_PORT from.rdzv_id=kubernetes%HOSTNAME"

# Flags win over the pod's values.
pod indexed-job 1 29500 --nnodes=3 --node-rank=2 --dry-run true >"$tmp/flags" 2>&1 ||
	fail "flags: $(cat "$tmp/flags")"
for l in node_rank=2 from.node_rank=--node-rank nnodes=3 from.nnodes=--nnodes; do
	grep -qx "$l" "$tmp/flags" ||
		fail "flags do not win: no '$l' in: $(grep -E '^(from|nnodes|node_rank)' "$tmp/flags")"
done

# Misconfigured pods: one line, exit 2.
bad() {
	local name=$1 want=$2
	shift 2
	# shellcheck disable=SC2086
	env -i $base "$@" timeout --foreground -s KILL 20 "$CRUN" --dry-run true >"$tmp/bad" 2>&1
	local rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, expected 2: $(cat "$tmp/bad")"
	[ "$(cat "$tmp/bad")" = "$want" ] || fail "$name: got '$(cat "$tmp/bad")', expected '$want'"
}
bad "index without a node count" \
	"crun: node_rank from JOB_COMPLETION_INDEX (kubernetes) needs the number of nodes: set PET_NNODES (or --nnodes, or nnodes in the config file)" \
	HOSTNAME=train-0 JOB_COMPLETION_INDEX=0 PET_MASTER_ADDR=train-0.train
bad "RANK not below WORLD_SIZE" \
	"crun: kubernetes: RANK=2 is not below WORLD_SIZE=2 (a PyTorchJob pod's index is below the number of pods)" \
	MASTER_ADDR=tj-master-0 MASTER_PORT=23456 WORLD_SIZE=2 RANK=2
bad "index not below PET_NNODES" \
	"crun: invalid value '2' for node_rank from JOB_COMPLETION_INDEX (kubernetes): expected a node rank below --nnodes (2)" \
	HOSTNAME=train-2 JOB_COMPLETION_INDEX=2 PET_NNODES=2 PET_MASTER_ADDR=train-0.train
echo "misconfigured pods: one line each, exit 2"

# A crun inside a worker of crun in a pod sees the agent's RANK,
# WORLD_SIZE and MASTER_ADDR and the pod's variables: it is no pod.
# shellcheck disable=SC2016
pod pytorchjob-old 0 "$(free_port)" --nnodes=1 --node-rank=0 --no-python sh -c \
	'"$0" --dry-run true | grep -E "^(scheduler|nnodes|node_rank)="
	"$0" --scheduler=kubernetes --dry-run true; echo "rc=$?"' "$CRUN" >"$tmp/inner" 2>&1 ||
	fail "crun in a worker: $(cat "$tmp/inner")"
for l in '[0]:scheduler=none' '[0]:nnodes=1' '[0]:node_rank=0' '[0]:rc=2'; do
	grep -qxF -- "$l" "$tmp/inner" || fail "crun in a worker: no '$l' in: $(cat "$tmp/inner")"
done
grep -qF 'crun: --scheduler kubernetes: no Kubernetes job in the environment' "$tmp/inner" ||
	fail "crun in a worker with --scheduler=kubernetes: $(cat "$tmp/inner")"
echo "crun inside a worker: scheduler=none"

# Two pods of each kind run crun-train's small job to completion.
small="--set model.context=16 --set model.embed_dim=8 --set model.width=48 \
--set model.layers=2 --set data.generate_bytes=200000 --set train.batch_size=32 \
--set train.eval_samples=256 --set log.every=1000 --set optim.warmup_steps=2 \
--set train.steps=20 --set train.eval_every=0"
run_pair() {
	local kind=$1 world=$2 port p0 rc0 rc1
	port=$(free_port)
	# shellcheck disable=SC2086
	pod "$kind" 0 "$port" "$CRUN_TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" $small \
		--set checkpoint.dir="$tmp/$kind-0" >"$tmp/$kind-0.out" 2>&1 &
	p0=$!
	stray_pids="$stray_pids $p0"
	# The manifests' readiness probe, against pod 0 before pod 1 starts.
	"$CRUN_CTL" --endpoint=127.0.0.1:"$port" --connect-timeout=10s --timeout=2s ping \
		>"$tmp/ping" 2>&1 || fail "$kind: pod 0's store does not answer: $(cat "$tmp/ping")
$(cat "$tmp/$kind-0.out")"
	# shellcheck disable=SC2086
	pod "$kind" 1 "$port" "$CRUN_TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" $small \
		--set checkpoint.dir="$tmp/$kind-1" >"$tmp/$kind-1.out" 2>&1
	rc1=$?
	wait "$p0"
	rc0=$?
	[ "$rc0$rc1" = 00 ] ||
		fail "$kind: pods exited $rc0 and $rc1:
--- pod 0
$(tail -n 20 "$tmp/$kind-0.out")
--- pod 1
$(tail -n 20 "$tmp/$kind-1.out")"
	grep -h 'summary: steps=20 ' "$tmp/$kind-0.out" "$tmp/$kind-1.out" |
		grep -q " world_size=$world " ||
		fail "$kind: no summary of 20 steps over $world ranks: $(tail -n 5 "$tmp/$kind-0.out")"
	echo "$kind: two pods, $world ranks: done"
}
run_pair pytorchjob-old 2
run_pair pytorchjob 4
run_pair elastic 4
run_pair trainer-v2 2
run_pair indexed-job 2
echo "ok"
