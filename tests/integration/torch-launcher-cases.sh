#!/bin/bash
# PyTorch's own launcher tests, ported to crun: the cases of
# test/distributed/launcher/test_run.py and of the elastic agent's tests
# (test/distributed/elastic/agent/server/test/local_elastic_agent_test.py,
# shutdown_timeout_test.py) that a launcher binary can be held to, each
# under the name of the PyTorch test it ports. The workers are
# tests/helpers/launcher_cases.py (the behaviours of PyTorch's test
# scripts and entrypoints, in plain Python) and launcher_script.sh; the
# cases that need torch itself are in torch-launcher-init.sh.
# Where crun deliberately differs from torchrun (crun(1): --max-restarts
# defaults to 3, 128+N after a signal, rank-prefixed console lines, an
# unknown --rdzv-conf key is an error), the case asserts crun's behaviour
# and says so.
set -u
. "$(dirname "$0")/multinode-lib.sh"

L=$CRUN_TEST_HELPERS_SRC/launcher_cases.py
# The interpreter itself, not a shim in front of it (pyenv's costs
# 100 ms a start).
PYTHON_EXEC=$(python3 -c 'import sys; print(sys.executable)')
export PYTHON_EXEC
SH=$CRUN_TEST_HELPERS_SRC/launcher_script.sh
# test_run.py's setUp: a sentinel the workers must inherit.
export TEST_SENTINEL_PARENT=FOOBAR
cases=0

# newdir: a fresh directory in $d
newdir() {
	d=$(mktemp -d "$tmp/touch.XXXXXX")
}
# touched N: $d holds exactly the files 0..N-1 (each worker touches its rank)
touched() {
	local want got
	want=$(seq 0 $(($1 - 1)) | sort | tr '\n' ' ')
	got=$(ls "$d" | sort | tr '\n' ' ')
	[ "$got" = "$want" ] || fail "${FUNCNAME[1]}: files '$got', expected '$want'"
}
# run NAME RC ARGS...: crun ARGS exits RC; output in $tmp/out, $tmp/err
run() {
	local name=$1 want=$2 rc
	shift 2
	cases=$((cases + 1))
	crun "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" = "$want" ] || fail "$name: exit $rc, expected $want:
$(tail -n 30 "$tmp/err")"
}
run_id() {
	echo "$RANDOM$RANDOM"
}

# ---- test/distributed/launcher/test_run.py ---------------------------

test_launch_user_script_python() {
	newdir
	run "${FUNCNAME[0]}" 0 --nnodes=1 --nproc-per-node=4 --rdzv-id="$(run_id)" \
		--monitor-interval=1 --start-method=spawn "$L" script --touch-file-dir="$d"
	touched 4
	has "$tmp/out" "[3]:TEST_SENTINEL_PARENT = FOOBAR"
}

test_launch_user_script_python_caffe2_bc() {
	newdir
	run "${FUNCNAME[0]}" 0 --nnodes=1 --nproc-per-node=4 --monitor-interval=1 \
		--start-method=spawn --master-addr=localhost --master-port="$(free_port)" \
		--node-rank=0 "$L" script --touch-file-dir="$d"
	touched 4
}

test_launch_user_script_bash() {
	local args=(--nnodes=1 --nproc-per-node=4 --rdzv-id="$(run_id)" --monitor-interval=1
		--start-method=spawn --no-python)
	newdir
	# torchrun raises ValueError: --no-python cannot be used with --module
	run "${FUNCNAME[0]}" 2 "${args[@]}" --module "$SH" "$d"
	grep -q "cannot be used together" "$tmp/err" || fail "no reason: $(cat "$tmp/err")"
	run "${FUNCNAME[0]}" 0 "${args[@]}" "$SH" "$d"
	touched 4
}

test_launch_user_script_default_nproc() {
	newdir
	run "${FUNCNAME[0]}" 2 --nnodes=1 --rdzv-id="$(run_id)" --no-python --module "$SH" "$d"
	run "${FUNCNAME[0]}" 0 --nnodes=1 --rdzv-id="$(run_id)" --monitor-interval=1 \
		--start-method=spawn --no-python "$SH" "$d"
	touched 1
}

test_launch_with_env_vars() {
	newdir
	(
		PET_RDZV_ID=$(run_id)
		export PET_NNODES=1 PET_NPROC_PER_NODE=4 PET_RDZV_ID PET_MONITOR_INTERVAL=1 \
			PET_START_METHOD=spawn PET_NO_PYTHON=1
		PET_MODULE=1 run "${FUNCNAME[0]}" 2 "$SH" "$d"
		PET_MODULE=0 run "${FUNCNAME[0]}" 0 "$SH" "$d"
	) || exit 1
	touched 4
}

# _test_nproc_launch_configuration
nproc_case() {
	newdir
	run "$1" 0 --nnodes=1 --nproc-per-node="$2" --rdzv-id="$(run_id)" --monitor-interval=1 \
		--start-method=spawn --no-python "$SH" "$d"
	touched "$3"
}

test_nproc_launch_auto_configurations() {
	# torchrun counts CPUs when there is no accelerator; crun's auto is
	# gpu with NVIDIA GPUs, so the case holds on a machine without.
	if ls /proc/driver/nvidia/gpus/* /dev/nvidia0 >/dev/null 2>&1; then
		echo "skipping ${FUNCNAME[0]}: this machine has GPUs"
		return
	fi
	nproc_case "${FUNCNAME[0]}" auto "$(getconf _NPROCESSORS_ONLN)"
	nproc_case "${FUNCNAME[0]}" cpu "$(getconf _NPROCESSORS_ONLN)"
}

test_nproc_launch_number_configurations() {
	nproc_case "${FUNCNAME[0]}" 4 4
}

test_nproc_launch_unknown_configurations() {
	newdir
	# torchrun raises ValueError; crun: a usage error
	run "${FUNCNAME[0]}" 2 --nnodes=1 --nproc-per-node=unknown --no-python "$SH" "$d"
	grep -q "invalid value 'unknown' for --nproc-per-node" "$tmp/err" ||
		fail "${FUNCNAME[0]}: $(cat "$tmp/err")"
}

# The value arrives with its quotes: PyTorch's test passes the argument
# list without a shell. torchrun ignores the keys it does not read; crun
# takes the quotes off (and would refuse an unknown key).
ELASTIC_CONF="'join_timeout=5,last_call_timeout=1,timeout=5'"

test_launch_elastic() {
	newdir
	run "${FUNCNAME[0]}" 0 --nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d \
		--rdzv-endpoint="localhost:$(free_port)" --rdzv-conf="$ELASTIC_CONF" \
		--rdzv-id="$(run_id)" --monitor-interval=1 --start-method=spawn \
		"$L" script --touch-file-dir="$d"
	touched 4
}

test_launch_elastic_worker_raise_exception() {
	# torchrun raises ChildFailedError; crun exits 1 with the summary
	run "${FUNCNAME[0]}" 1 --nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d \
		--rdzv-endpoint="localhost:$(free_port)" --rdzv-conf="$ELASTIC_CONF" \
		--rdzv-id="$(run_id)" --monitor-interval=1 --max-restarts=0 --start-method=spawn \
		"$L" script --fail
	has "$tmp/err" "  message   : RuntimeError: raising exception since --fail flag was set"
	grep -q "FAILED" "$tmp/err" || fail "no summary"
}

test_launch_standalone() {
	newdir
	run "${FUNCNAME[0]}" 0 --nnodes=1 --nproc-per-node=4 --standalone --monitor-interval=1 \
		--start-method=spawn "$L" script --touch-file-dir="$d"
	touched 4
	# torchrun: a random run id (uuid4)
	grep -qE '^\[0\]:TORCHELASTIC_RUN_ID = [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' \
		"$tmp/out" || fail "${FUNCNAME[0]}: run id: $(grep RUN_ID "$tmp/out")"
}

test_launch_run_path() {
	newdir
	run "${FUNCNAME[0]}" 0 --run-path --nnodes=1 --nproc-per-node=4 --monitor-interval=1 \
		--start-method=spawn "$L" script --touch-file-dir="$d"
	touched 4
}

test_launch_elastic_multiple_agents() {
	local port args
	port=$(free_port)
	newdir
	args=(--nnodes=1:2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint="localhost:$port"
		--rdzv_conf=timeout=5 --rdzv-id="$(run_id)" --monitor-interval=1
		--start-method=spawn "$L" script --touch-file-dir="$d")
	cases=$((cases + 1))
	agent a1 "${args[@]}"
	agent a0 "${args[@]}"
	expect_rc a0 0
	expect_rc a1 0
	touched 8
}

test_min_max_nodes_parse() {
	run "${FUNCNAME[0]}" 0 --dry-run --nnodes=1 x
	has "$tmp/out" "nnodes=1"
	run "${FUNCNAME[0]}" 0 --dry-run --nnodes=2:20 --rdzv-endpoint=localhost x
	has "$tmp/out" "nnodes=2:20"
	# torchrun raises RuntimeError
	run "${FUNCNAME[0]}" 2 --nnodes=2:20:30 x
}

test_is_torchelastic_launched() {
	run "${FUNCNAME[0]}" 0 --run-path --nnodes=1 --nproc-per-node=1 --monitor-interval=1 \
		"$L" is-launched "$tmp/launched"
	[ "$(cat "$tmp/launched")" = True ] || fail "${FUNCNAME[0]}: $(cat "$tmp/launched")"
}

test_is_not_torchelastic_launched() {
	cases=$((cases + 1))
	python3 "$L" is-launched "$tmp/launched" || fail "${FUNCNAME[0]}"
	[ "$(cat "$tmp/launched")" = False ] || fail "${FUNCNAME[0]}: $(cat "$tmp/launched")"
}

test_capture_logs_using_default_logs_specs() {
	newdir
	# --redirect: a prefix of --redirects, as argparse takes it. No
	# --log-dir: the logs go to a fresh directory in TMPDIR, kept in $tmp.
	mkdir -p "$tmp/tmpdir"
	TMPDIR=$tmp/tmpdir TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: ' run "${FUNCNAME[0]}" 0 \
		--nnodes=1 --nproc-per-node=4 --rdzv-id="$(run_id)" --redirect=3 --tee=3 \
		--monitor-interval=1 --start-method=spawn --no-python "$SH" "$d"
	for i in 0 1 2 3; do
		grep -qF "[rank$i]: creating " "$tmp/out" || fail "${FUNCNAME[0]}: rank $i:
$(cat "$tmp/out")"
	done
	touched 4
}

test_virtual_local_rank() {
	# The GPU half (identical compiled code on every rank) needs GPUs and
	# torch.compile; what the launcher owes it is the environment: every
	# worker sees LOCAL_RANK=0.
	run "${FUNCNAME[0]}" 0 --nnodes=1 --nproc-per-node=2 --virtual-local-rank \
		--redirect=3 --tee=3 --log-dir="$tmp/vlr-logs" "$L" env LOCAL_RANK=0
	run "${FUNCNAME[0]}" 1 --nnodes=1 --nproc-per-node=2 --max-restarts=0 \
		"$L" env LOCAL_RANK=0
}

# ---- elastic agent: local_elastic_agent_test.py ----------------------

test_run_happy_function_c10d() {
	run "${FUNCNAME[0]}" 0 --nproc-per-node=2 "$L" sleep 0
	has "$tmp/out" "[1]:rank 1 slept"
}

test_run_check_env_function() {
	# every variable the workers need (the value of
	# TORCHELASTIC_USE_AGENT_STORE depends on --agent-store)
	run "${FUNCNAME[0]}" 0 --nproc-per-node=2 --max-restarts=0 "$L" env RANK LOCAL_RANK \
		ROLE_RANK GROUP_RANK=0 LOCAL_WORLD_SIZE=2 ROLE_WORLD_SIZE=2 WORLD_SIZE=2 \
		GROUP_WORLD_SIZE=1 MASTER_ADDR MASTER_PORT TORCHELASTIC_MAX_RESTARTS=0 \
		TORCHELASTIC_USE_AGENT_STORE TORCH_NCCL_ASYNC_ERROR_HANDLING OMP_NUM_THREADS=1 \
		TORCHELASTIC_ERROR_FILE TEST_SENTINEL_PARENT=FOOBAR \
		TORCHELASTIC_RUN_ID=none TORCHELASTIC_RESTART_COUNT=0 ROLE_NAME=default
	# torchrun's defaults above: run id "none", no restart counted yet, the
	# default role; and what the options set
	run "${FUNCNAME[0]}" 0 --max-restarts=0 --rdzv-id=job7 --role=trainer "$L" env \
		TORCHELASTIC_RUN_ID=job7 ROLE_NAME=trainer
	# crun's default --max-restarts is 3 (torchrun's is 0): crun(1)
	run "${FUNCNAME[0]}" 0 "$L" env TORCHELASTIC_MAX_RESTARTS=3
	crun --max-restarts=0 sh -c 'echo "agent store $TORCHELASTIC_USE_AGENT_STORE"' \
		>"$tmp/out" 2>"$tmp/err"
	grep -qxE "\[0\]:agent store (True|False)" "$tmp/out" || fail "agent store: $(cat "$tmp/out")"
}

test_run_check_nccl_async_error_handling_env_c10d() {
	TORCH_NCCL_ASYNC_ERROR_HANDLING=0 run "${FUNCNAME[0]}" 0 --max-restarts=0 \
		"$L" env TORCH_NCCL_ASYNC_ERROR_HANDLING=0
}

test_run_check_nccl_async_error_handling_env_default_c10d() {
	run "${FUNCNAME[0]}" 0 --max-restarts=0 "$L" env TORCH_NCCL_ASYNC_ERROR_HANDLING=1
}

test_check_master_addr_port_override() {
	# the workers get the port given; the address as given or resolved
	# (with the agent store, the address the store listens on)
	local port
	port=$(free_port)
	run "${FUNCNAME[0]}" 0 --max-restarts=0 --master-addr=localhost --master-port="$port" \
		sh -c 'echo "$MASTER_ADDR:$MASTER_PORT"'
	grep -qxE "\[0\]:(localhost|127\.0\.0\.1):$port" "$tmp/out" ||
		fail "${FUNCNAME[0]}: $(cat "$tmp/out")"
}

test_run_agent_local_watchdog_setup_enabled_c10d() {
	TORCHELASTIC_TIMER_FILE=/tmp/watchdog_timer_$$ run "${FUNCNAME[0]}" 0 --max-restarts=2 \
		"$L" env "TORCHELASTIC_TIMER_FILE=/tmp/watchdog_timer_$$"
}

test_run_agent_local_watchdog_setup_disabled_c10d() {
	run "${FUNCNAME[0]}" 0 --max-restarts=2 "$L" unset TORCHELASTIC_TIMER_FILE
}

test_run_sad_function_c10d() {
	# Both ranks fail; the first failure is rank 0 or 1 with exit code 1,
	# and crun's own TORCHELASTIC_ERROR_FILE gets the worker's message and
	# timestamp.
	local reply=$tmp/reply.json
	TORCHELASTIC_ERROR_FILE=$reply run "${FUNCNAME[0]}" 1 --nproc-per-node=2 --max-restarts=0 \
		"$L" sad
	python3 - "$reply" "$tmp/err" <<'PY' || fail "test_run_sad_function_c10d: $(cat "$tmp/err")"
import json, re, sys
data = json.load(open(sys.argv[1]))["message"]
assert data["message"] == "RuntimeError: sad because i throw", data
assert int(data["extraInfo"]["timestamp"]) > 0
summary = open(sys.argv[2]).read()
root = summary.split("Root Cause")[1].split("Other Failures")[0]
assert re.search(r"rank      : [01] \(local_rank: [01]\)", root), root
assert "exitcode  : 1 (pid" in root, root
PY
}

test_run_bipolar_function_c10d() {
	# max_restarts=2: three attempts, then the job fails. crun also stops
	# restarting a failure that repeats without progress within
	# --min-attempt-time; 0 turns that off, as torchrun has no such rule.
	run "${FUNCNAME[0]}" 1 --nproc-per-node=4 --max-restarts=2 --min-attempt-time=0 \
		"$L" bipolar
	[ "$(grep -c "restarting (restart" "$tmp/err")" = 2 ] || fail "${FUNCNAME[0]}: $(cat "$tmp/err")"
	grep -q "(after 2 restarts)" "$tmp/err" || fail "${FUNCNAME[0]}: $(cat "$tmp/err")"
	# crun's default --max-restarts is 3, torchrun's 0 (crun(1))
	run "${FUNCNAME[0]} default" 1 --nproc-per-node=2 --min-attempt-time=0 "$L" bipolar
	[ "$(grep -c "restarting (restart" "$tmp/err")" = 3 ] || fail "default restarts: $(cat "$tmp/err")"
}

test_rank_restart_after_failure() {
	# fail_rank_one_once: rank 1 dies by SIGKILL in the first attempt; the
	# restart succeeds
	run "${FUNCNAME[0]}" 0 --nproc-per-node=2 --max-restarts=3 "$L" kill-once
	grep -q "restarting (restart 1 of 3)" "$tmp/err" || fail "${FUNCNAME[0]}: $(cat "$tmp/err")"
}

test_fatal_signal() {
	# a worker killed by a signal: torchrun reports exitcode -N; crun too,
	# and exits 1 (the job failed; 128+N is for a signal crun itself got)
	run "${FUNCNAME[0]}" 1 --nproc-per-node=2 --max-restarts=0 "$L" signal 1 SIGSEGV
	grep -q "exitcode  : -11 (SIGSEGV" "$tmp/err" || fail "${FUNCNAME[0]}: $(cat "$tmp/err")"
}

test_run_distributed_sum_heterogeneous_ranks() {
	# correct_rank_assignment / run_distributed_sum_heterogeneous: agents
	# with 1 and 3 workers; global ranks 0..3, consecutive per agent, one
	# group rank per agent, world size 4 everywhere (one role: crun runs
	# one role per job)
	local port args
	port=$(free_port)
	newdir
	args=(--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$(run_id)"
		--max-restarts=0)
	cases=$((cases + 1))
	agent h0 --nproc-per-node=1 "${args[@]}" "$L" rank-info "$d"
	agent h1 --nproc-per-node=3 "${args[@]}" "$L" rank-info "$d"
	expect_rc h0 0
	expect_rc h1 0
	touched 4
	python3 - "$d" <<'PY' || fail "test_run_distributed_sum_heterogeneous_ranks"
import os, sys
rows = [list(map(int, open(os.path.join(sys.argv[1], f)).read().split()))
        for f in os.listdir(sys.argv[1])]
# RANK LOCAL_RANK ROLE_RANK GROUP_RANK ROLE_WORLD_SIZE WORLD_SIZE LOCAL_WORLD_SIZE GROUP_WORLD_SIZE
assert sorted(r[0] for r in rows) == [0, 1, 2, 3], rows
for r in rows:
    assert r[2] == r[0] and r[4] == 4 and r[5] == 4 and r[7] == 2, r
groups = {}
for r in rows:
    groups.setdefault(r[3], []).append(r)
assert sorted(len(g) for g in groups.values()) == [1, 3], groups
for g in groups.values():
    ranks = sorted(r[0] for r in g)
    assert ranks == list(range(ranks[0], ranks[0] + len(g))), g
    assert sorted(r[1] for r in g) == list(range(len(g))), g
    assert all(r[6] == len(g) for r in g), g
PY
}

test_no_exit_barrier_on_failure() {
	# odd ranks fail at once, even ones would sleep 20 s: both agents exit
	# non-zero soon after, without waiting for the sleepers
	local port args
	port=$(free_port)
	args=(--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$port"
		--rdzv-id="$(run_id)" --max-restarts=0)
	cases=$((cases + 1))
	agent b0 "${args[@]}" "$L" bipolar 20
	agent b1 "${args[@]}" "$L" bipolar 20
	expect_rc b0 1 10
	expect_rc b1 1 10
}

test_workers_drift_success() {
	# two agents whose workers finish 1 s apart both succeed
	local port args
	port=$(free_port)
	args=(--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$port"
		--rdzv-id="$(run_id)" --max-restarts=0)
	cases=$((cases + 1))
	agent z0 "${args[@]}" "$L" sleep 0
	agent z1 "${args[@]}" "$L" sleep 1
	expect_rc z0 0
	expect_rc z1 0
	grep -qE "^\[[01]\]:rank [01] slept$" "$tmp/z1.out" || fail "z1: $(cat "$tmp/z1.out")"
}

# ---- shutdown_timeout_test.py -----------------------------------------

test_shutdown_timeout() {
	# A worker that ignores SIGTERM gets SIGKILL after the shutdown timeout
	# (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, as torchrun reads it). crun exits
	# 128+15 after SIGTERM (crun(1)).
	local start end
	cases=$((cases + 1))
	TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1 "$CRUN" --nproc-per-node=2 sh -c \
		'trap "" TERM; echo up; while :; do sleep 0.1; done' >"$tmp/st.out" 2>"$tmp/st.err" &
	local p=$!
	stray_pids="$stray_pids $p"
	wait_lines "$tmp/st.out" ":up" 2
	start=$(date +%s%N)
	kill -TERM "$p"
	for _ in $(seq 100); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.05
	done
	wait "$p"
	local rc=$?
	end=$(date +%s%N)
	[ "$rc" = 143 ] || fail "${FUNCNAME[0]}: exit $rc: $(cat "$tmp/st.err")"
	[ $(((end - start) / 1000000)) -ge 900 ] || fail "${FUNCNAME[0]}: SIGKILL before the timeout"
}

for t in $(declare -F | awk '$3 ~ /^test_/ {print $3}'); do
	"$t"
done
echo "ok: $cases cases"
