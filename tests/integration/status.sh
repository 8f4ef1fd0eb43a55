#!/bin/bash
# crun status of a --standalone job with two workers:
# - the start line names the run, its store and its token file (never the
#   token); the job file and the token file are the user's alone (0600 in
#   a 0700 directory);
# - `crun status` finds the job by its job file, `crun status --json` and
#   `crunctl status --json` show the run, its store, both ranks, each with
#   its pid, running;
# - `crun status --endpoint --run --token-file` from elsewhere (no job
#   file) shows it too; a wrong token exits 3 with one line;
# - --watch refreshes until SIGINT (exit 0), goes on through a passing
#   failure to read the job, and ends by itself when the job is gone;
# - after the job, its closing line says how it ended, and the job file
#   and token file are gone; a stale job file (dead agent) is removed;
#   a failed run's closing line names its root cause;
# - job files that are not the user's alone (a FIFO, a group-writable
#   file, a 0755 directory, a token file of another user) are not
#   trusted, and do not hang crun status.
# shellcheck disable=SC2015,SC2016,SC2154 source-path=SCRIPTDIR
set -u
. "$(dirname "$0")/crun-lib.sh"
: "${CRUN_CTL:?CRUN_CTL must name crunctl}"

marker="crun-status-$$"
"$CRUN" --standalone --nproc-per-node=2 --max-restarts=1 sh -c \
	'i=0; while [ $i -lt 300 ] && [ ! -e "$1" ]; do sleep 0.1; i=$((i + 1)); done' \
	"$marker" "$tmp/stop" >"$tmp/out" 2>"$tmp/err" &
pid=$!
stray_pids=$pid
wait_lines "$tmp/err" "; status: crun status --run " 1
line=$(grep -F "; status: crun status --run " "$tmp/err")
run=$(sed -n "s/^crun: run '\([^']*\)' store on .*/\1/p" <<<"$line")
ep=$(sed -n "s/^crun: run '[^']*' store on \([^ ;]*\) .*/\1/p" <<<"$line")
tok=$(sed -n "s/.*(token file '\([^']*\)').*/\1/p" <<<"$line")
[ -n "$run" ] && [ -n "$ep" ] && [ -n "$tok" ] || fail "start line: $line"
[ "$line" = "crun: run '$run' store on $ep (token file '$tok'); status: crun status --run $run" ] ||
	fail "start line: $line"
jf=$XDG_RUNTIME_DIR/crun/jobs/$run.$pid.json
[ -f "$jf" ] || fail "no job file $jf"
[ "$(stat -c %a "$jf") $(stat -c %a "$tok") $(stat -c %a "$XDG_RUNTIME_DIR/crun")" = "600 600 700" ] ||
	fail "modes: $(ls -la "$XDG_RUNTIME_DIR/crun" "$jf" "$tok")"
lacks "$tmp/err" "$(cat "$tok")"

# crun status, found by the job file: poll (bounded) until both ranks are
# running.
for _ in $(seq 50); do
	timeout --foreground 10 "$CRUN" status >"$tmp/st.out" 2>"$tmp/st.err" || fail "crun status: $(cat "$tmp/st.err")"
	[ "$(grep -c ' running ' "$tmp/st.out")" -ge 2 ] && break
	sleep 0.1
done
grep -q "^run $run  store $ep  round .*  restarts 0/1  state " "$tmp/st.out" ||
	fail "table header: $(cat "$tmp/st.out")"
[ "$(grep -cE '^[-0-9]+ +[^ ]+ +[01] +' "$tmp/st.out")" = 2 ] || fail "rank rows: $(cat "$tmp/st.out")"
[ -s "$tmp/st.err" ] && fail "crun status wrote on stderr: $(cat "$tmp/st.err")"

# check_json FILE: the job document of this run
check_json() {
	python3 - "$1" "$run" "$ep" "$pid" <<'PY' || fail "json of $1: $(cat "$1")"
import json, os, sys
doc = json.load(open(sys.argv[1]))
run, ep, agent = sys.argv[2], sys.argv[3], int(sys.argv[4])
assert doc["version"] == 1 and doc["run_id"] == run and doc["endpoint"] == ep, doc
assert doc["restart_count"] == 0 and doc["max_restarts"] == 1, doc
assert len(doc["nodes"]) == 1 and doc["nodes"][0]["pid"] == agent, doc["nodes"]
assert len(doc["members"]) == 1 and doc["members"][0]["local_world_size"] == 2, doc
ranks = doc["ranks"]
assert [r["local_rank"] for r in ranks] == [0, 1], ranks
for k in ("rank", "node", "pid", "state", "beat_age_s", "step", "gpu"):
    assert all(k in r for r in ranks), (k, ranks)
assert doc["last_failure"] is None, doc
assert [r["rank"] for r in ranks] == [0, 1], ranks
for r in ranks:
    assert r["state"] == "running" and r["pid"] > 0, ranks
    os.kill(r["pid"], 0)
PY
}
timeout --foreground 10 "$CRUN" status --json >"$tmp/st.json" 2>"$tmp/st.err" || fail "--json: $(cat "$tmp/st.err")"
[ "$(wc -l <"$tmp/st.json")" = 1 ] || fail "--json is not one line: $(cat "$tmp/st.json")"
check_json "$tmp/st.json"
timeout --foreground 10 "$CRUN_CTL" status --json >"$tmp/ctl.json" 2>"$tmp/ctl.err" ||
	fail "crunctl status: $(cat "$tmp/ctl.err")"
check_json "$tmp/ctl.json"

# From elsewhere: no job file, the endpoint and the token file.
mkdir -m 700 "$tmp/other"
XDG_RUNTIME_DIR=$tmp/other timeout --foreground 10 "$CRUN" status >/dev/null 2>"$tmp/none.err"
rc=$?
[ $rc = 1 ] || fail "no job here: exit $rc, want 1: $(cat "$tmp/none.err")"
XDG_RUNTIME_DIR=$tmp/other timeout --foreground 10 "$CRUN" status --endpoint "$ep" --run "$run" \
	--token-file "$tok" --json >"$tmp/ep.json" 2>"$tmp/ep.err" || fail "--endpoint: $(cat "$tmp/ep.err")"
check_json "$tmp/ep.json"
XDG_RUNTIME_DIR=$tmp/other timeout --foreground 10 "$CRUN_CTL" --endpoint "$ep" --run "$run" \
	--token-file "$tok" status --json >"$tmp/ep2.json" 2>"$tmp/ep2.err" ||
	fail "crunctl --endpoint: $(cat "$tmp/ep2.err")"
check_json "$tmp/ep2.json"
echo wrong-token >"$tmp/bad"
timeout --foreground 10 "$CRUN" status --endpoint "$ep" --run "$run" --token-file "$tmp/bad" \
	>"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[ $rc = 3 ] || fail "wrong token: exit $rc, want 3: $(cat "$tmp/bad.err")"
[ "$(wc -l <"$tmp/bad.err")" = 1 ] && [ ! -s "$tmp/bad.out" ] ||
	fail "wrong token: want one line: $(cat "$tmp/bad.out" "$tmp/bad.err")"
# The token's order is --token-file, $CRUN_TOKEN, $CRUN_TOKEN_FILE, then
# the job file's: a wrong $CRUN_TOKEN is used before the job file's.
CRUN_TOKEN=wrong-token timeout --foreground 10 "$CRUN" status --json >/dev/null 2>"$tmp/envtok.err"
rc=$?
[ $rc = 3 ] || fail "\$CRUN_TOKEN before the job file's: exit $rc, want 3: $(cat "$tmp/envtok.err")"
CRUN_TOKEN_FILE=$tok timeout --foreground 10 "$CRUN" status --json >/dev/null 2>"$tmp/envtf.err" ||
	fail "\$CRUN_TOKEN_FILE: $(cat "$tmp/envtf.err")"
# Usage errors.
timeout --foreground 10 "$CRUN" status --bogus >/dev/null 2>&1
[ $? = 2 ] || fail "crun status --bogus: want exit 2"
timeout --foreground 10 "$CRUN" status --endpoint "$ep" >/dev/null 2>&1
[ $? = 2 ] || fail "crun status --endpoint without --run: want exit 2"
timeout --foreground 10 "$CRUN" status --watch 0 >/dev/null 2>&1
[ $? = 2 ] || fail "crun status --watch 0: want exit 2"
for bad in --run= --endpoint= --token-file=; do
	timeout --foreground 10 "$CRUN" status "$bad" >/dev/null 2>&1
	rc=$?
	[ $rc = 2 ] || fail "crun status $bad: exit $rc, want 2"
done
CRUN_LOG_LEVEL=loud timeout --foreground 10 "$CRUN" status >/dev/null 2>"$tmp/ll.err"
rc=$?
[ $rc = 2 ] && grep -q "CRUN_LOG_LEVEL" "$tmp/ll.err" ||
	fail "crun status with a bad CRUN_LOG_LEVEL: exit $rc: $(cat "$tmp/ll.err")"
timeout --foreground 10 "$CRUN_CTL" --timeout 0 status >/dev/null 2>&1
rc=$?
[ $rc = 2 ] || fail "crunctl --timeout 0 status: exit $rc, want 2"
for ctl in "$CRUN status --endpoint 127.0.0.1:0 --run x" "$CRUN_CTL --endpoint 127.0.0.1:0 --run x status" \
	"$CRUN_CTL --endpoint 127.0.0.1:0 --run x get k"; do
	# shellcheck disable=SC2086
	timeout --foreground 10 $ctl >/dev/null 2>"$tmp/port0.err"
	rc=$?
	[ $rc = 2 ] && grep -q "bad port in endpoint '127.0.0.1:0'" "$tmp/port0.err" ||
		fail "$ctl: exit $rc, want 2: $(cat "$tmp/port0.err")"
done

# --watch: refreshes until SIGINT, then exits 0.
"$CRUN" status --watch 0.2 >"$tmp/w1.out" 2>"$tmp/w1.err" &
w=$!
stray_pids="$stray_pids $w"
wait_lines "$tmp/w1.out" "^run $run " 2
kill -INT $w
for _ in $(seq 100); do kill -0 $w 2>/dev/null || break; sleep 0.05; done
kill -0 $w 2>/dev/null && fail "--watch did not end on SIGINT"
wait $w
rc=$?
[ $rc = 0 ] || fail "--watch after SIGINT: exit $rc: $(cat "$tmp/w1.err")"

# Without --watch, SIGTERM ends crun status at once (its default), even
# while it retries a connection.
"$CRUN" status --endpoint 127.0.0.1:9 --run x --connect-timeout 60s >/dev/null 2>&1 &
w=$!
stray_pids="$stray_pids $w"
sleep 0.3
kill -TERM $w
for _ in $(seq 40); do kill -0 $w 2>/dev/null || break; sleep 0.05; done
kill -0 $w 2>/dev/null && fail "crun status did not end on SIGTERM"
wait $w
rc=$?
[ $rc = 143 ] || fail "crun status after SIGTERM: exit $rc, want 143 (killed by SIGTERM)"

# --watch goes on through a failure to read the job while its job file
# is there (its agent stopped: the read times out), and shows it again.
"$CRUN" status --watch 0.2 --json >"$tmp/w3.out" 2>"$tmp/w3.err" &
w=$!
stray_pids="$stray_pids $w"
wait_lines "$tmp/w3.out" '"run_id"' 1
kill -STOP $pid
for _ in $(seq 300); do grep -q "cannot" "$tmp/w3.err" && break; sleep 0.05; done
kill -CONT $pid
grep -q "cannot" "$tmp/w3.err" || fail "--watch: no failure while the agent was stopped"
n=$(grep -c '"run_id"' "$tmp/w3.out")
wait_lines "$tmp/w3.out" '"run_id"' $((n + 2))
kill -0 $w 2>/dev/null || fail "--watch ended on a passing failure: $(cat "$tmp/w3.err")"
kill -INT $w
wait $w
rc=$?
[ $rc = 0 ] || fail "--watch after SIGINT: exit $rc: $(cat "$tmp/w3.err")"

# --watch ends by itself when the job ends; the job's closing line.
"$CRUN" status --watch 0.2 --json >"$tmp/w2.out" 2>"$tmp/w2.err" &
w=$!
stray_pids="$stray_pids $w"
wait_lines "$tmp/w2.out" '"run_id"' 1
touch "$tmp/stop"
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
wait $pid
rc=$?
[ $rc = 0 ] || fail "the job: exit $rc: $(cat "$tmp/err")"
grep -qE "^crun: run '$run' ended: succeeded \(0 restarts, [0-9]+\.[0-9]s\)$" "$tmp/err" ||
	fail "closing line: $(cat "$tmp/err")"
for _ in $(seq 200); do kill -0 $w 2>/dev/null || break; sleep 0.05; done
kill -0 $w 2>/dev/null && fail "--watch did not end with the job"
wait $w
rc=$?
[ $rc = 0 ] || fail "--watch after the job: exit $rc: $(cat "$tmp/w2.err")"
[ ! -e "$jf" ] && [ ! -e "$tok" ] || fail "job or token file left: $(ls -la "$XDG_RUNTIME_DIR/crun"/*)"
timeout --foreground 10 "$CRUN" status >/dev/null 2>"$tmp/after.err"
rc=$?
[ $rc = 1 ] || fail "after the job: exit $rc, want 1"
has "$tmp/after.err" "crun: no crun job runs on this machine (give --endpoint and --run to look elsewhere)"

# A job file whose agent is gone is not shown, and goes, with its token
# file; so does one whose pid runs another process now (its agent's lock
# is gone).
dead=$(sh -c 'echo $$')
for p in "$dead" $$; do
	printf '{"run_id":"stale","endpoint":"127.0.0.1:9","pid":%d}' "$p" \
		>"$XDG_RUNTIME_DIR/crun/jobs/stale.$p.json"
	echo t >"$XDG_RUNTIME_DIR/crun/tokens/stale.$p.token"
	timeout --foreground 10 "$CRUN" status --run stale >/dev/null 2>&1
	[ $? = 1 ] || fail "stale job (pid $p): want exit 1"
	[ ! -e "$XDG_RUNTIME_DIR/crun/jobs/stale.$p.json" ] || fail "stale job file left (pid $p)"
	[ ! -e "$XDG_RUNTIME_DIR/crun/tokens/stale.$p.token" ] || fail "stale token file left (pid $p)"
done

# Job files are trusted only in a directory of this user's alone, and
# only regular files of this user that no one else can write: a FIFO
# planted there does not block, a group-writable file is not read, a
# directory that others can enter (/tmp/crun-UID made first by someone
# else) is refused with one line, and a token file that is not ours is
# not sent anywhere.
jobs=$XDG_RUNTIME_DIR/crun/jobs
mkfifo "$jobs/fifo.1.json"
printf '{"run_id":"loose","endpoint":"127.0.0.1:9","pid":%d}' $$ >"$jobs/loose.$$.json"
chmod 666 "$jobs/loose.$$.json"
timeout --foreground 10 "$CRUN" status >/dev/null 2>"$tmp/plant.err"
rc=$?
[ $rc = 1 ] || fail "planted FIFO / writable job file: exit $rc, want 1: $(cat "$tmp/plant.err")"
rm -f "$jobs/fifo.1.json" "$jobs/loose.$$.json"
mkdir -p "$tmp/open/crun/jobs"
chmod 755 "$tmp/open/crun/jobs"
chmod 755 "$tmp/open/crun"
printf '{"run_id":"evil","endpoint":"127.0.0.1:9","pid":%d}' $$ >"$tmp/open/crun/jobs/evil.$$.json"
XDG_RUNTIME_DIR=$tmp/open timeout --foreground 10 "$CRUN" status >/dev/null 2>"$tmp/open.err"
rc=$?
[ $rc = 1 ] || fail "0755 job directory: exit $rc, want 1: $(cat "$tmp/open.err")"
[ "$(wc -l <"$tmp/open.err")" = 1 ] && grep -q "not trusted" "$tmp/open.err" ||
	fail "0755 job directory: $(cat "$tmp/open.err")"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
	echo planted-token >"$tmp/their-token"
	chown nobody "$tmp/their-token"
	printf '{"run_id":"theirs","endpoint":"127.0.0.1:9","pid":%d,"token_file":"%s"}' \
		$$ "$tmp/their-token" >"$jobs/theirs.$$.json"
	# Its "agent" (this shell) holds the job file's lock.
	exec 7<"$jobs/theirs.$$.json"
	flock -x 7
	timeout --foreground 10 "$CRUN" status --run theirs >/dev/null 2>"$tmp/theirs.err"
	rc=$?
	exec 7<&-
	[ $rc = 3 ] && grep -q "not trusted" "$tmp/theirs.err" ||
		fail "a token file of another user: exit $rc: $(cat "$tmp/theirs.err")"
	rm -f "$jobs/theirs.$$.json"
fi

# A failed run: its closing line names the root cause.
crun --standalone --max-restarts=0 sh -c 'exit 3' >/dev/null 2>"$tmp/f.err"
[ $? = 1 ] || fail "failing run: $(cat "$tmp/f.err")"
grep -qE "^crun: run '[^']+' ended: failed: rank 0 .*exited with code 3 \(0 restarts, [0-9.]+s\)$" \
	"$tmp/f.err" || fail "failed closing line: $(cat "$tmp/f.err")"
echo "ok"
