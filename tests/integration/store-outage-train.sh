#!/bin/bash
# A crun-rdzvd restart under a training job: three nodes made by
# scripts/cluster (network namespaces), one crun-train worker each, with
# checkpoints, the store a crun-rdzvd on node 0 at a fixed address and port.
# Once the job has trained a little, the daemon is SIGKILLed and started
# again after STORE_OUTAGE_S seconds: every agent keeps its worker, resumes
# the round, and the job finishes with exit 0 and final parameters bitwise
# equal to those of the same job run without an outage.
# The default run is one case: STORE_OUTAGE_S (3) s without a journal.
# With the argument --long, and CRUN_TEST_LONG=1 (scripts/test --long), it
# runs 3 s and 20 s, each without and with crun-rdzvd --state-dir; without
# CRUN_TEST_LONG it skips.
# Skips (77) where network namespaces are not available. Every wait is
# bounded; the cluster goes with the test (cluster-lib.sh).
# shellcheck disable=SC2016,SC2154 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/multinode-lib.sh"
. "$here/cluster-lib.sh"
: "${CRUN_TRAIN:?CRUN_TRAIN must name crun-train}"
if [ "${1:-}" = --long ]; then
	[ "${CRUN_TEST_LONG:-0}" = 1 ] || {
		echo "a long test (scripts/test --long): skipping"
		exit 77
	}
	matrix="3:plain 3:journal 20:plain 20:journal"
else
	matrix="${STORE_OUTAGE_S:-3}:plain"
fi
cluster_skip_unless_available
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

cluster_up 3
A=("${CLUSTER_ADDRS[@]}")
port=29400
ep="${A[0]}:$port"
steps=600
args=(--set model.context=16 --set model.embed_dim=8 --set model.width=48
	--set model.layers=2 --set data.generate_bytes=200000 --set train.batch_size=30
	--set train.eval_samples=256 --set log.every=50 --set optim.warmup_steps=2
	--set "train.steps=$steps" --set checkpoint.every=50)
ka="keep_alive_interval=0.5,keep_alive_max_attempt=6,last_call_timeout=1"

nagent() {
	local node=$1 name=$2
	shift 2
	cluster_bg "$node" "$CRUN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	printf -v "pid_$name" '%s' "$CLUSTER_LAST_PID"
}

daemon=""
# start_store N [ARGS...]: crun-rdzvd on node 0 at $ep; its Nth start
start_store() {
	local n=$1
	shift
	cluster_bg 0 "$CRUN_RDZVD" --host "${A[0]}" --port "$port" "$@" 2>>"$tmp/rdzvd.log"
	daemon=$CLUSTER_LAST_PID
	wait_for "$tmp/rdzvd.log" "crun-rdzvd: listening on ${A[0]}:$port" "$n"
}

kill_store() {
	kill -9 "$daemon" 2>/dev/null
	wait "$daemon" 2>/dev/null
}

# job NAME DELAY_MS: three agents training into $tmp/NAME.ckpt, rank 0
# sleeping DELAY_MS in each step (the same numbers, a longer run)
job() {
	local name=$1 delay=$2 i
	for i in 0 1 2; do
		nagent "$i" "$name$i" --nnodes=3 --nproc-per-node=1 --rdzv-endpoint="$ep" \
			--rdzv-id="$name-$marker" --rdzv-conf="$ka" --max-restarts=0 "$CRUN_TRAIN" \
			"${args[@]}" --set checkpoint.dir="$tmp/$name.ckpt" \
			--set train.slow_rank=0 --set train.slow_delay="${delay}ms"
	done
}

starts=0
start_store $((starts += 1))
job ref 0
for i in 0 1 2; do
	expect_rc "ref$i" 0 60
done
"$CRUN_TRAIN" export "$tmp/ref.ckpt" "$tmp/ref.bin" >/dev/null || fail "export of the reference"

for c in $matrix; do
	outage=${c%%:*}
	kind=${c#*:}
	name=o$outage$kind
	extra=()
	if [ "$kind" = journal ]; then
		mkdir -p "$tmp/state-$name"
		extra=(--state-dir "$tmp/state-$name")
	fi
	kill_store
	start_store $((starts += 1)) "${extra[@]}"
	# long enough to train through the outage: about outage + 5 s
	job "$name" $(((outage + 5) * 1000 / steps))
	# rank 0 logs the steps, on whichever node it is
	for _ in $(seq 1200); do
		grep -q "step 100/$steps" "$tmp/$name"?.out && break
		sleep 0.05
	done
	grep -q "step 100/$steps" "$tmp/$name"?.out || fail "$name: no step 100 within 60 s"
	kill_store
	for i in 0 1 2; do
		wait_for "$tmp/$name$i.err" "the workers keep running; reconnecting for up to 60s"
	done
	sleep "$outage"
	start_store $((starts += 1)) "${extra[@]}"
	for i in 0 1 2; do
		wait_for "$tmp/$name$i.err" "resumed round 1 with the store at '$ep' after" 1 20
	done
	for i in 0 1 2; do
		expect_rc "$name$i" 0 60
		lacks "$tmp/$name$i.err" "round 1 ended"
	done
	"$CRUN_TRAIN" export "$tmp/$name.ckpt" "$tmp/$name.bin" >/dev/null ||
		fail "$name: export failed"
	"$CRUN_TRAIN" compare "$tmp/ref.bin" "$tmp/$name.bin" >"$tmp/$name.cmp" ||
		fail "$name: the final parameters differ: $(cat "$tmp/$name.cmp")"
	echo "ok $name: ${outage}s outage ($kind), same round, bitwise equal"
done
kill_store
wait_none "$marker"
