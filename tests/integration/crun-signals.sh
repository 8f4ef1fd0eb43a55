#!/bin/bash
# Handled signals: forwarded to every worker's process group, crun exits
# 128+N; a worker that ignores the signal gets SIGKILL after
# --shutdown-timeout; a second signal kills at once; --signals-to-handle
# picks the set.
set -u
. "$(dirname "$0")/crun-lib.sh"

# start_job ARGS...: crun in the background (not under timeout(1), which
# would signal crun a second time), output in a new file $out (an old one
# could show "ready" before this crun even started); waits for two "ready".
n=0
start_job() {
	n=$((n + 1))
	out=$tmp/out.$n
	"$CRUN" "$@" >"$out" 2>&1 &
	job=$!
	wait_lines "$out" ':ready ' 2
}
# finish_job: up to 10 s for the job to end; sets rc.
finish_job() {
	for _ in $(seq 200); do
		kill -0 "$job" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$job" 2>/dev/null; then
		kill -9 "$job"
		fail "crun did not exit: $(cat "$out")"
	fi
	wait "$job"
	rc=$?
}

for pair in INT:2 TERM:15 HUP:1 QUIT:3; do
	sig=${pair%:*}
	num=${pair#*:}
	start_job --nproc-per-node=2 "$H/crun-test-signal" catch
	kill -s "$sig" "$job"
	finish_job
	[ $rc = $((128 + num)) ] || fail "SIG$sig: exit $rc, expected $((128 + num)): $(cat "$out")"
	has "$out" "[0]:got SIG$sig"
	has "$out" "[1]:got SIG$sig"
	if [ "$sig" = INT ]; then
		again="a second Ctrl-C kills them at once"
	else
		again="a second signal kills them at once"
	fi
	has "$out" "crun: got SIG$sig; stopping the workers (SIG$sig now, SIGKILL after 30s, --shutdown-timeout); $again"
	lacks "$out" "FAILED"
done

# Workers that ignore SIGTERM: SIGKILL after the shutdown timeout.
start_job --nproc-per-node=2 --shutdown-timeout=0.5 "$H/crun-test-signal" ignore
pids=$(sed -n 's/^\[[0-9]\]:ready //p' "$out")
t0=$(date +%s%N)
kill -TERM "$job"
finish_job
ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 143 ] || fail "ignored SIGTERM: exit $rc"
[ $ms -ge 450 ] && [ $ms -lt 5000 ] || fail "stopped after $ms ms, expected about 500"
grep -q "2 workers still running after the shutdown timeout (500ms); sending SIGKILL" \
	"$out" || fail "no SIGKILL notice: $(cat "$out")"
for p in $pids; do
	! kill -0 "$p" 2>/dev/null || fail "worker $p survived"
done

# A second signal does not wait for the shutdown timeout: SIGKILL at once
# to every worker's process group, a child of the worker included (it
# ignores SIGINT and SIGTERM as well). The hint is printed once.
start_job --nproc-per-node=2 --shutdown-timeout=60 sh -c \
	'trap "" INT TERM; sleep 60 & echo "ready $! $$"; wait'
pids=$(sed -n 's/^\[[0-9]\]:ready //p' "$out")
kill -INT "$job"
wait_lines "$out" "a second Ctrl-C kills" 1
sleep 0.2
for p in $pids; do
	kill -0 "$p" 2>/dev/null || fail "worker $p ended of the first SIGINT"
done
t0=$(date +%s%N)
kill -INT "$job"
finish_job
ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 130 ] || fail "second SIGINT: exit $rc"
[ $ms -lt 2000 ] || fail "second SIGINT took $ms ms"
has "$out" "crun: got SIGINT; stopping the workers (SIGINT now, SIGKILL after 60s, --shutdown-timeout); a second Ctrl-C kills them at once"
has "$out" "crun: got SIGINT again; killing the workers now (SIGKILL)"
[ "$(grep -c "kills them at once" "$out")" = 1 ] || fail "hint not once: $(cat "$out")"
for p in $pids; do # a zombie left to init counts as ended
	case $(ps -o stat= -p "$p") in
	"" | Z*) ;;
	*) fail "process $p of a worker survived the second SIGINT" ;;
	esac
done

# A signal while the workers are stopped after a failure: the grace period
# runs since the failure, so the hint gives the time left, not the whole.
start_job --nproc-per-node=2 --max-restarts=0 --shutdown-timeout=20 sh -c \
	'if [ "$LOCAL_RANK" = 0 ]; then echo "ready $$"; sleep 0.2; exit 1; fi
	trap "" INT TERM; sleep 60 & echo "ready $! $$"; wait'
pids=$(sed -n 's/^\[1\]:ready //p' "$out")
sleep 2.5
kill -INT "$job"
wait_lines "$out" "a second Ctrl-C kills" 1
line=$(grep "a second Ctrl-C kills" "$out")
[[ $line =~ "crun: got SIGINT; stopping the workers (SIGINT now, SIGKILL in at most "(1[0-9])s", --shutdown-timeout); a second Ctrl-C kills them at once" ]] ||
	fail "hint after a failure: $(cat "$out")"
kill -INT "$job"
finish_job
[ $rc != 0 ] || fail "failed job exited 0: $(cat "$out")"
for p in $pids; do
	case $(ps -o stat= -p "$p") in
	"" | Z*) ;;
	*) fail "process $p of a worker survived the second SIGINT" ;;
	esac
done

# --signals-to-handle: SIGUSR1 is forwarded when asked for.
start_job --nproc-per-node=2 --signals-to-handle=SIGUSR1,SIGTERM \
	"$H/crun-test-signal" catch
kill -USR1 "$job"
finish_job
[ $rc = 138 ] || fail "SIGUSR1: exit $rc"
has "$out" "[1]:got SIGUSR1"
# A signal that arrives while crun drains a failed attempt's output (an
# escaped grandchild holds the pipes) ends the job with 128+N instead of
# being lost to the restart.
mark=crun-sig-drain-$$
"$CRUN" --max-restarts=3 "$H/crun-test-fork" "$mark" --exit 1 --escape >"$tmp/drain" 2>&1 &
job=$!
sleep 0.4
kill -TERM "$job"
wait "$job"
rc=$?
pkill -9 -f "$mark" 2>/dev/null
[ $rc = 143 ] || fail "SIGTERM while draining: exit $rc: $(cat "$tmp/drain")"
! grep -q "restart 1" "$tmp/drain" || fail "restarted after SIGTERM: $(cat "$tmp/drain")"
echo "ok"
