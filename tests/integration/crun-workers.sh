#!/bin/bash
# crun's workers: the environment of every rank, ${local_rank}, stdin,
# OMP_NUM_THREADS, restarts and their counts, the failure summary when
# restarts run out, and no restart for a command that cannot be executed
# (127 not found, 126 not executable).
set -u
. "$(dirname "$0")/crun-lib.sh"

# The environment of every rank.
crun --standalone --nproc-per-node=4 --max-restarts=0 "$H/crun-test-env" 'lr=${local_rank}' \
	>"$tmp/out" 2>"$tmp/err" || fail "env run failed: $(cat "$tmp/err")"
for r in 0 1 2 3; do
	for kv in "LOCAL_RANK=$r" "RANK=$r" "GROUP_RANK=0" "ROLE_RANK=$r" "ROLE_NAME=default" \
		"LOCAL_WORLD_SIZE=4" "WORLD_SIZE=4" "ROLE_WORLD_SIZE=4" "GROUP_WORLD_SIZE=1" \
		"TORCHELASTIC_RESTART_COUNT=0" "TORCHELASTIC_MAX_RESTARTS=0" \
		"TORCHELASTIC_USE_AGENT_STORE=True" "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" \
		"OMP_NUM_THREADS=1" "ARG1=lr=$r" "STDIN_IS_DEVNULL=1" "CRUN_ROUND=0"; do
		has "$tmp/out" "[$r]:$kv"
	done
	for re in 'MASTER_ADDR=.+' 'MASTER_PORT=[0-9]+' 'TORCHELASTIC_RUN_ID=.+' \
		'TORCHELASTIC_ERROR_FILE=/.+' 'CRUN_STORE=127\.0\.0\.1:[0-9]+' 'CRUN_TOKEN=.+' \
		'CRUN_RUN_ID=.+'; do
		grep -qE "^\[$r\]:$re\$" "$tmp/out" || fail "rank $r lacks $re"
	done
done
[ "$(grep -E '^\[[0-9]\]:(MASTER_PORT|TORCHELASTIC_RUN_ID|CRUN_STORE)=' "$tmp/out" |
	sed 's/^\[[0-9]\]://' | sort -u | wc -l)" = 3 ] || fail "ranks disagree on the job"
# The agent store: MASTER_ADDR:MASTER_PORT is the store of CRUN_STORE.
[ "$(sed -n 's/^\[0\]:CRUN_STORE=//p' "$tmp/out")" = \
	"$(sed -n 's/^\[0\]:MASTER_ADDR=//p' "$tmp/out"):$(sed -n 's/^\[0\]:MASTER_PORT=//p' "$tmp/out")" ] ||
	fail "MASTER_ADDR:MASTER_PORT is not the agent's store: $(grep -E '^\[0\]:(MASTER|CRUN_STORE)' "$tmp/out")"
crun --standalone --nproc-per-node=2 --max-restarts=0 --agent-store=off "$H/crun-test-env" \
	>"$tmp/out2" 2>"$tmp/err" || fail "env run with --agent-store=off failed: $(cat "$tmp/err")"
has "$tmp/out2" "[1]:TORCHELASTIC_USE_AGENT_STORE=False"
[ "$(sed -n 's/^\[0\]:CRUN_STORE=.*://p' "$tmp/out2")" != "$(sed -n 's/^\[0\]:MASTER_PORT=//p' "$tmp/out2")" ] ||
	fail "--agent-store=off: MASTER_PORT is still the agent's store"
[ "$(grep -E '^\[[0-9]\]:TORCHELASTIC_ERROR_FILE=' "$tmp/out" | sed 's/^\[[0-9]\]://' |
	sort -u | wc -l)" = 4 ] || fail "ranks share an error file"
[ "$(grep -c OMP_NUM_THREADS "$tmp/err")" = 1 ] || fail "expected one OMP notice: $(cat "$tmp/err")"

# The embedded store works for the workers with what crun gives them
# (CRUN_STORE, CRUN_RUN_ID, CRUN_TOKEN), and CRUN_ROUND follows restarts.
# The run holds their three keys and the agent's status (crun/status/HOST).
if [ -n "${CRUN_CTL:-}" ]; then
	crun --standalone --nproc-per-node=3 --max-restarts=1 sh -c '
		"$0" set "key-$RANK" "$CRUN_ROUND" && "$0" --timeout 10s wait key-0 key-1 key-2 &&
		echo "round $CRUN_ROUND count $("$0" count)" && [ "$CRUN_ROUND" = 1 ]' \
		"$CRUN_CTL" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 0 ] || fail "store job: exit $rc: $(cat "$tmp/err")"
	for r in 0 1 2; do
		has "$tmp/out" "[$r]:round 1 count 4"
	done
fi

# What the user set is kept; one worker gets no OMP_NUM_THREADS.
OMP_NUM_THREADS=7 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 crun --nproc-per-node=2 "$H/crun-test-env" \
	>"$tmp/out" 2>"$tmp/err" || fail "run failed"
has "$tmp/out" "[1]:OMP_NUM_THREADS=7"
has "$tmp/out" "[1]:TORCH_NCCL_ASYNC_ERROR_HANDLING=0"
lacks "$tmp/err" OMP_NUM_THREADS
crun --nproc-per-node=1 "$H/crun-test-env" >"$tmp/out" 2>"$tmp/err" || fail "run failed"
lacks "$tmp/out" OMP_NUM_THREADS
lacks "$tmp/err" OMP_NUM_THREADS

# Restarts: rank 1 fails in attempts 0 and 1; attempt 2 succeeds. Each
# attempt runs longer than --min-attempt-time, so the same failure again is
# restarted (crun-repeat.sh tests the rule).
crun --nproc-per-node=3 --max-restarts=3 --min-attempt-time=50ms "$H/crun-test-exit" \
	--fail-rank 1 --fail-below 2 --code 4 --delay-ms 100 --others-ms 300 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] || fail "restarted job: exit $rc: $(cat "$tmp/err")"
for a in 0 1 2; do
	grep -q "^\[1\]:start rank=1 restart=$a " "$tmp/out" || fail "no attempt $a"
done
lacks "$tmp/out" "restart=3"
[ "$(grep -c 'restarting (restart' "$tmp/err")" = 2 ] || fail "expected 2 restarts"
grep -q "rank 1 (local rank 1, pid [0-9]*) exited with code 4; restarting (restart 2 of 3)" \
	"$tmp/err" || fail "restart line: $(cat "$tmp/err")"

# Restarts exhausted (the default is 3): exit 1 and the summary.
crun --nproc-per-node=2 --min-attempt-time=50ms "$H/crun-test-exit" --fail-rank 0 --code 9 \
	--delay-ms 100 --others-ms 5000 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] || fail "failed job: exit $rc"
[ "$(grep -c '^\[0\]:start rank=0' "$tmp/out")" = 4 ] || fail "expected 4 attempts"
has "$tmp/err" "Root Cause (first observed failure):"
has "$tmp/err" "  rank      : 0 (local_rank: 0)"
grep -qE '^  exitcode  : 9 \(pid: [0-9]+\)$' "$tmp/err" || fail "no exit code in summary"
grep -qE '^  time      : [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' "$tmp/err" ||
	fail "no ISO 8601 time in summary"
has "$tmp/err" "  <NO_OTHER_FAILURES>"
grep -q "FAILED (after 3 restarts)" "$tmp/err" || fail "no FAILED header"

# A worker killed by a signal is named by the signal.
crun --nproc-per-node=1 --max-restarts=0 "$H/crun-test-exit" --signal 11 \
	>"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] || fail "crashed job: exit $rc"
grep -qE '^  exitcode  : -11 \(SIGSEGV, pid: [0-9]+\)$' "$tmp/err" || fail "no SIGSEGV: $(cat "$tmp/err")"

# Not found: 127, not executable: 126; never restarted.
crun --nproc-per-node=3 --max-restarts=3 crun-no-such-program-here >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 127 ] || fail "missing command: exit $rc"
has "$tmp/err" "crun: cannot execute 'crun-no-such-program-here': no such file or directory"
lacks "$tmp/err" restarting
printf '#!/bin/sh\necho hi\n' >"$tmp/noexec"
chmod 644 "$tmp/noexec"
crun --nproc-per-node=2 --no-python "$tmp/noexec" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 126 ] || fail "not executable: exit $rc"
has "$tmp/err" "crun: cannot execute '$tmp/noexec': permission denied"
lacks "$tmp/err" restarting
crun --nproc-per-node=2 --no-python "$tmp" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 126 ] || fail "a directory: exit $rc"
echo "ok"
