#!/bin/bash
# Liveness of the workers: Python workers that beat on CRUN_HEARTBEAT_FD
# with the standard library (tests/helpers/beat_worker.py). One of four
# SIGSTOPped with a 2 s timeout is named within 3 s, its stack taken (here
# from /proc: neither py-spy nor gdb is on PATH), the group restarted and
# the job finished; a section outliving its timeout and an expired torch
# FileTimer are hangs too; a section under its own timeout, a worker that
# never beats and a user's own TORCHELASTIC_TIMER_FILE are left alone.
# Stacks come from py-spy, else gdb, else /proc (fakes of the tools here).
set -u
. "$(dirname "$0")/crun-lib.sh"
command -v python3 >/dev/null || { echo "no python3: skipping"; exit 77; }
W=$CRUN_TEST_HELPERS_SRC/beat_worker.py

# Only python3 and timeout on PATH for the hangs: stacks come from /proc.
mkdir "$tmp/bin"
ln -s "$(python3 -c "import sys; print(sys.executable)")" "$tmp/bin/python3"
ln -s "$(command -v timeout)" "$tmp/bin/timeout"

# run NAME ARGS...: crun's stderr, each line after the time it was read
run() {
	local name=$1
	shift
	crun "$@" >"$tmp/$name.out" 2> >(python3 -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))' >"$tmp/$name.err")
	local rc=$?
	wait
	return $rc
}
# detected NAME: seconds from the fault (HANG_MARK) to crun's "hung" line
detected() {
	local at
	at=$(grep -m1 ' crun: rank .* hung: ' "$tmp/$1.err" | cut -d' ' -f1)
	[ -n "$at" ] || fail "$1: no hung line: $(cat "$tmp/$1.err")"
	python3 -c "print('%.2f' % ($at - float(open('$tmp/$1.mark').read())))"
}
within() {
	python3 -c "import sys; sys.exit(0 if $1 <= $2 else 1)"
}

# SIGSTOP: rank 2 of 4, beating every 0.2 s, timeout 2 s
HANG_RANK=2 HANG_HOW=stop HANG_MARK=$tmp/stop.mark BEAT_STEPS=8 PATH=$tmp/bin \
	run stop --nproc-per-node=4 --heartbeat-timeout=2 "$W"
rc=$?
[ $rc = 0 ] || fail "stop: exit $rc: $(cat "$tmp/stop.err")"
t=$(detected stop)
within "$t" 3 || fail "stop: detected after $t s"
grep -q ' crun: rank 2 (local rank 2, pid [0-9]*) hung: no heartbeat for 2[.0-9]* s, last step 5;' \
	"$tmp/stop.err" || fail "stop: hung line: $(cat "$tmp/stop.err")"
grep -q '\[2\]: crun: stack of the hung worker (/proc):' "$tmp/stop.err" ||
	fail "stop: no stack: $(cat "$tmp/stop.err")"
grep -q '\[2\]: /proc/[0-9]*/wchan:' "$tmp/stop.err" || fail "stop: no wchan in the stack"
grep -q 'worker group failed: rank 2 (local rank 2, pid [0-9]*) hung: no heartbeat' \
	"$tmp/stop.err" || fail "stop: no restart naming rank 2: $(cat "$tmp/stop.err")"
for r in 0 1 2 3; do
	grep -q "^\[$r\]:done rank $r restart 1$" "$tmp/stop.out" ||
		fail "stop: rank $r did not finish the second attempt"
done
lacks "$tmp/stop.err" "shutdown timeout"
echo "ok SIGSTOP: rank 2 named after $t s, stack from /proc, restarted, done"

# The summary and crun's error file name the hung rank, never the others.
HANG_RANK=1 HANG_HOW=stop HANG_MARK=$tmp/sum.mark BEAT_STEPS=8 PATH=$tmp/bin \
	TORCHELASTIC_ERROR_FILE=$tmp/crun-error.json \
	run sum --nproc-per-node=3 --max-restarts=0 --heartbeat-timeout=1 "$W"
rc=$?
[ $rc = 1 ] || fail "summary: exit $rc"
grep -q '^[0-9.]* Root Cause (first observed failure):$' "$tmp/sum.err" || fail "no summary"
grep -A4 'Root Cause' "$tmp/sum.err" | grep -q ' rank      : 1 (local_rank: 1)$' ||
	fail "summary: root cause is not rank 1: $(cat "$tmp/sum.err")"
grep -q ' message   : hung: no heartbeat for 1[.0-9]* s, last step 5$' "$tmp/sum.err" ||
	fail "summary: message: $(cat "$tmp/sum.err")"
grep -q ' stack     : /proc/[0-9]*/wchan:' "$tmp/sum.err" || fail "summary: no stack"
grep -q ' time      : 19[0-9][0-9]-' "$tmp/sum.err" && fail "summary: no time"
python3 - "$tmp/crun-error.json" <<'PY' || fail "error file: $(cat "$tmp/crun-error.json")"
import json, sys
m = json.load(open(sys.argv[1]))["message"]
assert "rank 1 (local_rank 1) on " in m["message"], m["message"]
assert "hung: no heartbeat for 1" in m["message"], m["message"]
PY
echo "ok summary and error file name the hung rank"

# Tools: py-spy before gdb; a tool that fails gets /proc added. Fakes
# here, that say how they were called.
mkdir "$tmp/spy" "$tmp/gdb"
ln -s "$tmp/bin/python3" "$tmp/bin/timeout" "$tmp/spy/"
ln -s "$tmp/bin/python3" "$tmp/bin/timeout" "$tmp/gdb/"
printf '#!/bin/sh\necho "fake py-spy $*"\n' >"$tmp/spy/py-spy"
printf '#!/bin/sh\necho "fake gdb $*"\nexit 1\n' >"$tmp/spy/gdb"
cp "$tmp/spy/gdb" "$tmp/gdb/gdb"
chmod +x "$tmp/spy/py-spy" "$tmp/spy/gdb" "$tmp/gdb/gdb"

# A section past its own timeout (the steady timeout is long)
HANG_RANK=0 HANG_HOW=section HANG_SECTION=checkpoint HANG_MARK=$tmp/sec.mark \
	BEAT_STEPS=8 BEAT_INTERVAL=0.1 PATH=$tmp/spy \
	run sec --nproc-per-node=2 --heartbeat-timeout=30 \
	--heartbeat-section-timeouts=eval=20,checkpoint=1500ms "$W"
rc=$?
[ $rc = 0 ] || fail "section: exit $rc: $(cat "$tmp/sec.err")"
t=$(detected sec)
within "$t" 2.5 || fail "section: detected after $t s"
grep -q " crun: rank 0 (local rank 0, pid [0-9]*) hung: section 'checkpoint' open for 1.5 s" \
	"$tmp/sec.err" || fail "section: hung line: $(cat "$tmp/sec.err")"
grep -q '^[0-9.]* \[0\]: fake py-spy dump --pid [0-9]*$' "$tmp/sec.err" ||
	fail "section: no py-spy dump: $(cat "$tmp/sec.err")"
lacks "$tmp/sec.err" "fake gdb"
lacks "$tmp/sec.err" "wchan"
echo "ok section timeout: detected after $t s, stack by py-spy"

# A section under its own timeout outlives the steady timeout unharmed
HANG_RANK=1 HANG_HOW=slow-section HANG_SECTION=save HANG_SECONDS=2 BEAT_STEPS=8 \
	BEAT_INTERVAL=0.1 \
	run slow --nproc-per-node=2 --heartbeat-timeout=1 \
	--heartbeat-section-timeouts=save=5 "$W" || fail "slow section: exit $?"
lacks "$tmp/slow.err" "hung"
grep -q '^\[1\]:done rank 1 restart 0$' "$tmp/slow.out" || fail "slow section: restarted"
echo "ok a section under its timeout is not a hang"

# torch's FileTimer: the request's SIGKILL to the worker, a hang of rank 1
TORCHELASTIC_ENABLE_FILE_TIMER=1 HANG_RANK=1 HANG_HOW=filetimer HANG_MARK=$tmp/ft.mark \
	BEAT_STEPS=8 BEAT_INTERVAL=0.1 PATH=$tmp/gdb \
	run ft --nproc-per-node=2 "$W"
rc=$?
[ $rc = 0 ] || fail "FileTimer: exit $rc: $(cat "$tmp/ft.err")"
t=$(detected ft)
within "$t" 1 || fail "FileTimer: detected $t s after its expiry"
grep -q " crun: rank 1 (local rank 1, pid [0-9]*) hung: FileTimer 'train_step' of pid [0-9]* expired" \
	"$tmp/ft.err" || fail "FileTimer: hung line: $(cat "$tmp/ft.err")"
grep -q '^\[1\]:done rank 1 restart 1$' "$tmp/ft.out" || fail "FileTimer: no restart"
grep -q "^[0-9.]* \[1\]: fake gdb -batch -nx -iex set auto-load off -p [0-9]* -ex thread apply all bt$" \
	"$tmp/ft.err" || fail "FileTimer: no gdb: $(cat "$tmp/ft.err")"
grep -q '^[0-9.]* \[1\]: /proc/[0-9]*/wchan:' "$tmp/ft.err" || fail "FileTimer: gdb failed, no /proc"
echo "ok FileTimer expiry: detected $t s after it, stack by gdb, then /proc"

# A FileTimer for a child that has exited by its expiry is dropped, as
# torch's server drops it: nobody is hung, nothing restarts.
TORCHELASTIC_ENABLE_FILE_TIMER=1 HANG_RANK=0 HANG_HOW=filetimer-child HANG_MARK=$tmp/ftc.mark \
	BEAT_STEPS=8 BEAT_INTERVAL=0.1 PATH=$tmp/bin \
	run ftc --nproc-per-node=2 --heartbeat-timeout=5 "$W" || fail "FileTimer child: exit $?"
lacks "$tmp/ftc.err" "hung"
grep -q " crun: local rank 0: FileTimer 'child_step' of pid [0-9]* expired, but that process is gone" \
	"$tmp/ftc.err" || fail "FileTimer child: not dropped: $(cat "$tmp/ftc.err")"
grep -c '^\[[01]\]:done rank [01] restart 0$' "$tmp/ftc.out" | grep -qx 2 ||
	fail "FileTimer child: $(cat "$tmp/ftc.out")"
echo "ok an expired FileTimer of an exited child is dropped"

# An unfinished request on the shared pipe does not swallow the next one:
# the release that follows it is taken, and the timer does not expire.
TORCHELASTIC_ENABLE_FILE_TIMER=1 HANG_RANK=1 HANG_HOW=filetimer-fragment \
	HANG_MARK=$tmp/ftf.mark BEAT_STEPS=8 BEAT_INTERVAL=0.1 PATH=$tmp/bin \
	run ftf --nproc-per-node=2 "$W" || fail "FileTimer fragment: exit $?"
lacks "$tmp/ftf.err" "hung"
grep -c '^\[[01]\]:done rank [01] restart 0$' "$tmp/ftf.out" | grep -qx 2 ||
	fail "FileTimer fragment: $(cat "$tmp/ftf.out") $(cat "$tmp/ftf.err")"
echo "ok an unfinished FileTimer request does not eat the next"

# crun killed by SIGKILL during a FileTimer job leaves no pipe behind: it
# lies in the directory that crun's guard removes (with a log directory too).
for logs in "" "--log-dir=$tmp/klogs"; do
	rm -rf "$tmp/tmpk"
	mkdir "$tmp/tmpk"
	# shellcheck disable=SC2086
	TMPDIR=$tmp/tmpk TORCHELASTIC_ENABLE_FILE_TIMER=1 BEAT_STEPS=100 BEAT_INTERVAL=0.1 \
		"$CRUN" --nproc-per-node=2 $logs "$W" >"$tmp/kill.out" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		[ -n "$(find "$tmp/tmpk" -name timer.fifo)" ] && break
		sleep 0.05
	done
	[ -n "$(find "$tmp/tmpk" -name timer.fifo)" ] ||
		fail "SIGKILL ($logs): no FileTimer pipe in TMPDIR"
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	for _ in $(seq 100); do
		[ -z "$(ls -A "$tmp/tmpk")" ] && break
		sleep 0.05
	done
	left=$(find "$tmp/tmpk" -mindepth 1)
	[ -z "$left" ] || fail "SIGKILL ($logs): left in TMPDIR: $left"
done
echo "ok SIGKILL of crun leaves no FileTimer pipe"

# With torch (pip's in python3, or Debian's python3-torch), a real
# FileTimerClient
torch_py=""
for py in python3 /usr/bin/python3; do
	if "$py" "$CRUN_TEST_HELPERS_SRC/torch_probe.py" torch.distributed.elastic.timer \
		>/dev/null 2>&1; then
		torch_py=$(command -v "$py")
		break
	fi
done
if [ -n "$torch_py" ]; then
	cat >"$tmp/torch_timer.py" <<'PY'
import os, time
from torch.distributed.elastic import timer
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
if os.environ["RANK"] == "0" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    with timer.expires(after=1):
        time.sleep(60)
print("done", flush=True)
PY
	PYTHON_EXEC=$torch_py TORCHELASTIC_ENABLE_FILE_TIMER=1 \
		run torch --nproc-per-node=1 "$tmp/torch_timer.py" ||
		fail "torch FileTimerClient: exit $?: $(cat "$tmp/torch.err")"
	grep -q " crun: rank 0 (local rank 0, pid [0-9]*) hung: FileTimer " "$tmp/torch.err" ||
		fail "torch FileTimerClient: no hang: $(cat "$tmp/torch.err")"
	echo "ok torch's FileTimerClient.expires()"
else
	echo "no torch: skipping the real FileTimerClient"
fi

# A user's own TORCHELASTIC_TIMER_FILE passes through, unread
# shellcheck disable=SC2016
TORCHELASTIC_ENABLE_FILE_TIMER=1 TORCHELASTIC_TIMER_FILE=$tmp/mine \
	crun --nproc-per-node=1 --no-python /bin/sh -c \
	'echo "timer=$TORCHELASTIC_TIMER_FILE fd=$CRUN_HEARTBEAT_FD"' >"$tmp/own.out" 2>&1 ||
	fail "own timer file: exit $?"
has "$tmp/own.out" "[0]:timer=$tmp/mine fd=3"

# A worker that never beats is never watched
BEAT_NEVER=1 BEAT_STEPS=15 BEAT_INTERVAL=0.1 run never --nproc-per-node=2 --heartbeat-timeout=0.5 \
	--heartbeat-initial-timeout=0.5 "$W" || fail "never beats: exit $?"
lacks "$tmp/never.err" "hung"
grep -c '^\[[01]\]:done rank [01] restart 0$' "$tmp/never.out" | grep -qx 2 ||
	fail "never beats: $(cat "$tmp/never.out")"
echo "ok a worker that never beats is left alone"
