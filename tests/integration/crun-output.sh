#!/bin/bash
# Worker output: whole lines prefixed with the rank (or role), stdout and
# stderr kept apart, no line split or mixed with another, also with four
# workers writing at once, lines longer than a pipe buffer (and longer than
# crun's line buffer), a last line without a newline; log files under
# --log-dir per attempt, --redirects and --tee, --local-ranks-filter.
set -u
. "$(dirname "$0")/crun-lib.sh"

# check_lines FILE RANKS LEN COUNT: every line is "[r]:" and LEN copies of
# r's letter; COUNT lines per rank.
check_lines() {
	python3 - "$@" <<'PY' || fail "bad output in $1"
import re, sys
path, ranks, length, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = open(path, "rb").read()
assert data.endswith(b"\n"), "no final newline"
seen = {}
for line in data[:-1].split(b"\n"):
    m = re.match(rb"^\[(\d+)\]:(.*)$", line, re.S)
    assert m, "line without prefix: %r" % line[:80]
    r = int(m.group(1))
    body = m.group(2)
    letter = bytes([ord("a") + r % 26])
    assert len(body) == length and body == letter * length, \
        "rank %d: line of %d bytes, %d foreign" % (r, len(body), len(body) - body.count(letter))
    seen[r] = seen.get(r, 0) + 1
assert seen == {r: count for r in range(ranks)}, "lines per rank: %r" % seen
PY
}

# Four workers, many lines each written in two pieces.
crun --nproc-per-node=4 "$H/crun-test-lines" many 300 5000 >"$tmp/out" 2>"$tmp/err" ||
	fail "many: $(cat "$tmp/err")"
check_lines "$tmp/out" 4 5000 300

# Lines longer than a pipe buffer (200 KB) and than crun's line buffer (1 MB).
for len in 200000 1000000; do
	crun --nproc-per-node=3 "$H/crun-test-lines" long $len >"$tmp/out" 2>"$tmp/err" ||
		fail "long: $(cat "$tmp/err")"
	check_lines "$tmp/out" 3 $len 1
done

# A last line without a newline; stdout and stderr apart; the role prefix.
crun --nproc-per-node=2 "$H/crun-test-lines" partial "no newline" >"$tmp/out" 2>"$tmp/err" ||
	fail "partial"
has "$tmp/out" "[0]:no newline"
has "$tmp/out" "[1]:no newline"
crun --nproc-per-node=2 --role trainer "$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" ||
	fail "both"
has "$tmp/out" "[trainer1]:out"
has "$tmp/err" "[trainer1]:err"
lacks "$tmp/out" ":err"
lacks "$tmp/err" ":out"

# Log files: attempt directories, raw content, --tee and --redirects.
logs=$tmp/logs
crun --nproc-per-node=2 --max-restarts=1 --log-dir="$logs" --rdzv-id=logjob --tee=1 \
	--redirects=2 sh -c 'echo "out $RANK $TORCHELASTIC_RESTART_COUNT"; echo "err $RANK" >&2
	if [ "$RANK$TORCHELASTIC_RESTART_COUNT" = 00 ]; then sleep 0.3; exit 1; fi' \
	>"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] || fail "log job: exit $rc: $(cat "$tmp/err")"
for a in 0 1; do
	for r in 0 1; do
		d=$logs/logjob/attempt_$a/$r
		[ "$(cat "$d/stdout.log")" = "out $r $a" ] || fail "$d/stdout.log: $(cat "$d/stdout.log")"
		[ "$(cat "$d/stderr.log")" = "err $r" ] || fail "$d/stderr.log"
		has "$tmp/out" "[$r]:out $r $a"
	done
done
lacks "$tmp/err" ":err"
[ ! -e "$logs/logjob/attempt_2" ] || fail "an attempt too many"

has "$tmp/err" "crun: logs of this run in '$logs/logjob'"

# Every run has a directory of its own: a second run of the same id gets
# .1; runs of the default id "none" are named by their UTC start time, and
# two of them in one second still get one each. Each says where, once.
crun --log-dir="$logs" --rdzv-id=logjob --redirects=1 sh -c 'echo again' \
	>"$tmp/out" 2>"$tmp/err" || fail "second logjob: $(cat "$tmp/err")"
has "$tmp/err" "crun: logs of this run in '$logs/logjob.1'"
[ "$(cat "$logs/logjob.1/attempt_0/0/stdout.log")" = again ] || fail "logjob.1"
[ "$(cat "$logs/logjob/attempt_0/0/stdout.log")" = "out 0 0" ] || fail "logjob was overwritten"
mkdir "$tmp/anon"
for i in 1 2 3; do
	crun --log-dir="$tmp/anon" --redirects=1 sh -c "echo run $i" >"$tmp/out" 2>"$tmp/err" ||
		fail "anonymous run $i: $(cat "$tmp/err")"
	[ "$(grep -c "logs of this run in" "$tmp/err")" = 1 ] || fail "run $i: $(cat "$tmp/err")"
	d=$(sed -n "s/^crun: logs of this run in '\(.*\)'$/\1/p" "$tmp/err")
	[[ $d =~ ^$tmp/anon/20[0-9]{6}T[0-9]{6}Z(\.[0-9]+)?$ ]] || fail "run $i: directory '$d'"
	[ "$(cat "$d/attempt_0/0/stdout.log")" = "run $i" ] || fail "run $i: $d"
done
[ "$(find "$tmp/anon" -name stdout.log | wc -l)" = 3 ] || fail "$(find "$tmp/anon")"
for f in "$tmp"/anon/*/attempt_0/0/stdout.log; do
	cat "$f"
done | sort | tr '\n' ' ' | grep -qx "run 1 run 2 run 3 " || fail "a run's log was overwritten"

# --local-ranks-filter: only rank 1 on the console, every rank in files.
crun --nproc-per-node=3 --local-ranks-filter=1 --log-dir="$logs" --rdzv-id=filterjob --tee=3 \
	"$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" || fail "filter job"
[ "$(grep -c '^\[' "$tmp/out")" = 1 ] || fail "filter: $(cat "$tmp/out")"
has "$tmp/out" "[1]:out"
has "$tmp/err" "[1]:err"
for r in 0 1 2; do
	[ "$(cat "$logs/filterjob/attempt_0/$r/stdout.log")" = out ] || fail "rank $r log"
done
# A progress bar redrawn with '\r' (tqdm) never holds back another rank's
# lines: each redraw reaches the console as a segment of its own.
crun --nproc-per-node=2 --max-restarts=0 "$CRUN_TEST_HELPERS_SRC/progress_worker.py" \
	"$tmp/progress.flag" >"$tmp/out" 2>"$tmp/err" ||
	fail "progress bar job: $(tail -c 300 "$tmp/err")"
# A redraw has no newline of its own, so a line of rank 1 may follow one
# on the same line of the file (on a terminal it overwrites the bar).
grep -qF "[1]:log line 9999 of rank 1" "$tmp/err" || fail "rank 1's last line is missing"
grep -qF "[0]:step  19999" "$tmp/err" || fail "no last redraw"

# CRUN_LOG_LEVEL=debug speaks the operator's language: what happened and
# what crun does next, in words; no state machine's names, enum numbers,
# -1 placeholders or wire fields. One node that restarts once, then two
# nodes (the rendezvous and its store too) whose round ends once.
# internal_lines FILE: fails on a line that reads like the source.
# Also the store protocol's request names (MGET, RDZV_DONE, QUEUE_PUSH)
# and the worker group's state and event names (rdzv-ready, store-lost).
internal_lines() {
	! grep -nE -- '-> |event [0-9]|rank -1|arg [0-9]| id [0-9]+ | num -?[0-9]|\(null\)' "$1" ||
		fail "debug lines that need the source to be read (above), in $1"
	! grep -nwE -- 'HELLO|SET|GET|CHECK|WAIT|ADD|CAS|DELETE|APPEND|COUNT|MGET|MSET|LIST|PING|WATCH|UNWATCH|RDZV_[A-Z_]+|QUEUE_[A-Z_]+|OK|ERROR|VALUES?|INT|NOTIFY' "$1" ||
		fail "store protocol names in debug lines (above), in $1"
	! grep -nE -- '(^|[^-a-z])(spawn-failed|worker-exited|pipe-closed|timer-(kill|stuck|drain)|worker-hung|hang-captured|rdzv-(ready|error)|round-ended|barrier-passed|store-lost|exec-failed)([^-a-z]|$)' "$1" ||
		fail "worker group event or state names in debug lines (above), in $1"
}
rm -f "$tmp/failed-once"
CRUN_LOG_LEVEL=debug crun --nproc-per-node=2 --max-restarts=1 sh -c \
	'if [ "$RANK" = 1 ] && [ ! -e "$0" ]; then touch "$0"; exit 3; fi
	[ "$RANK$TORCHELASTIC_RESTART_COUNT" = 00 ] && sleep 20; echo ok' \
	"$tmp/failed-once" >"$tmp/out" 2>"$tmp/err" || fail "debug job: $(cat "$tmp/err")"
internal_lines "$tmp/err"
has "$tmp/err" "crun: worker group: the job starts; now starting the workers"
grep -q "^crun: worker group: local rank 1 (rank 1) exited with code 3; now stopping the workers because a worker failed" \
	"$tmp/err" || fail "no stop line: $(cat "$tmp/err")"
grep -q "^crun: worker group: local rank 0 (rank 0) was killed by SIGTERM; " \
	"$tmp/err" || fail "no SIGTERM line: $(cat "$tmp/err")"
grep -q "; now starting the workers again (restart 1)$" "$tmp/err" || fail "no restart line"
has "$tmp/err" "crun: the worker group is done: the job succeeded; crun's exit status is 0"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -f "$tmp/failed-once"
for n in 0 1; do
	CRUN_LOG_LEVEL=debug crun --nnodes=2 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" \
		--rdzv-id=dbg --max-restarts=1 sh -c \
		'if [ "$RANK" = 3 ] && [ ! -e "$0" ]; then touch "$0"; exit 3; fi; echo ok' \
		"$tmp/failed-once" >"$tmp/out.$n" 2>"$tmp/err.$n" &
	eval "node$n=\$!"
done
# shellcheck disable=SC2154
wait "$node0" || fail "debug node 0: $(cat "$tmp/err.0")"
# shellcheck disable=SC2154
wait "$node1" || fail "debug node 1: $(cat "$tmp/err.1")"
cat "$tmp/err.0" "$tmp/err.1" >"$tmp/err"
internal_lines "$tmp/err"
has "$tmp/err" "crun: run 'dbg': round 2 is open: waiting for the nodes to join"
has "$tmp/err" "crun: run 'dbg': round 2 is over: the run has ended, no more rounds"
grep -q "^crun: round 2: this is node [01] of 2; its workers are ranks [02] to [13] of 4 (restart 1)" \
	"$tmp/err" || fail "no placement line: $(cat "$tmp/err")"
grep -q "^crun: store: .* says it is done with round 2$" "$tmp/err" || fail "no store request line"
echo "ok"
