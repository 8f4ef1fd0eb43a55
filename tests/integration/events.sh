#!/bin/bash
# The events file (--events, crun(1) EVENTS), as users read it:
# - a restart: one node, two workers that exit 1 in attempt 0 and 0 in
#   attempt 1 (TORCHELASTIC_RESTART_COUNT); the file holds job_started,
#   round_formed, worker_started, worker_exited (exit_code 1), restart
#   (cause worker_failed), the next round and its workers, job_finished
#   (exit_code 0), in that order; the same from PET_EVENTS and from the
#   config key, appended to what the file held; a path that cannot be
#   opened is one line and exit 2, before any worker starts;
# - an eviction: two agents on loopback (--nnodes=1:2), the second
#   SIGSTOPped longer than the keep-alive window: the store drops it; the
#   first's events show the round closed, member_evicted, member_left, a
#   round of one node and one restart with cause node_left, and the stopped
#   agent's own show its eviction once it runs again, and no restart (its
#   rejoin fails);
# - a straggler: one line with its rank, step, ratio and step time;
# - the pictures: scripts/plot-job draws the events as a PNG, when gnuplot
#   is there.
# Every line of every file must parse as JSON (python3's json.loads).
# shellcheck disable=SC2016,SC2054,SC2154 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/multinode-lib.sh"
command -v python3 >/dev/null || {
	echo "python3 is not installed: skipping"
	exit 77
}

# check FILE PROGRAM: runs the python PROGRAM with ev, the list of FILE's
# events (each line parsed by json.loads; a line that does not parse
# fails), and names(), their event names; PROGRAM raises (assert) to fail.
check() {
	python3 - "$1" "$2" <<'PY' || fail "events in $1:
$(cat "$1")"
import json, sys
ev = []
for n, line in enumerate(open(sys.argv[1]), 1):
    try:
        ev.append(json.loads(line))
    except ValueError as e:
        sys.exit(f"line {n} is not JSON ({e}): {line!r}")
def names():
    return [e["event"] for e in ev]
def first(name, **kv):
    for i, e in enumerate(ev):
        if e["event"] == name and all(e.get(k) == v for k, v in kv.items()):
            return i
    raise AssertionError(f"no {name} {kv}")
for e in ev:
    for k in ("time", "ts", "event", "run", "round", "node", "group_rank", "restart_count"):
        assert k in e, f"{k} missing in {e}"
    assert e["time"].endswith("Z") and len(e["time"]) == 24, e["time"]
exec(sys.argv[2])
PY
}

# --- a restart on one node --------------------------------------------------
cat >"$tmp/w.sh" <<'EOF'
#!/bin/sh
echo "attempt $TORCHELASTIC_RESTART_COUNT"
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && { echo "boom in attempt 0" >&2; exit 1; }
exit 0
EOF
chmod +x "$tmp/w.sh"
crun --nproc-per-node=2 --max-restarts=1 --events "$tmp/r.jsonl" --no-python "$tmp/w.sh" \
	>"$tmp/r.out" 2>"$tmp/r.err" || fail "restart run: $(cat "$tmp/r.err")"
check "$tmp/r.jsonl" '
order = [first("job_started"), first("round_formed", round=0),
         first("worker_started", round=0), first("worker_exited", exit_code=1),
         first("restart", cause="worker_failed", restart_count=1),
         first("round_formed", round=1), first("worker_started", round=1),
         first("worker_exited", round=1, exit_code=0), first("job_finished", exit_code=0)]
assert order == sorted(order), order
assert names().count("worker_started") == 4 and names().count("worker_exited") == 4, names()
assert names()[-1] == "job_finished" and names().count("restart") == 1, names()
assert ev[-1]["message"] == "succeeded", ev[-1]
assert all(e["run"] == "none" and "node_id" not in e for e in ev)
w = ev[first("worker_started")]
assert w["rank"] in (0, 1) and w["local_rank"] == w["rank"] and w["pid"] > 0, w
assert [e["ts"] for e in ev] == sorted(e["ts"] for e in ev)
'

# A job that fails: the closing line names the root cause, with the
# worker's last line.
crun --max-restarts=0 --events "$tmp/f.jsonl" --no-python "$tmp/w.sh" >/dev/null 2>&1
[ $? = 1 ] || fail "the failing run must exit 1"
check "$tmp/f.jsonl" '
e = ev[-1]
assert e["event"] == "job_finished" and e["exit_code"] == 1, e
assert e["message"].startswith("failed: rank 0 (local_rank 0) on ") and e["message"].endswith(" exited with code 1: boom in attempt 0"), e
'

# PET_EVENTS and the config key; the file is appended to.
n=$(wc -l <"$tmp/r.jsonl")
cp "$tmp/r.jsonl" "$tmp/r.jsonl.0"
PET_EVENTS="$tmp/r.jsonl" crun --max-restarts=1 --no-python "$tmp/w.sh" >/dev/null 2>&1 ||
	fail "PET_EVENTS run"
printf 'events: %s\nmax_restarts: 1\n' "$tmp/r.jsonl" >"$tmp/c.yaml"
crun -c "$tmp/c.yaml" --no-python "$tmp/w.sh" >/dev/null 2>&1 || fail "config run"
head -n "$n" "$tmp/r.jsonl" | cmp -s - <(head -n "$n" "$tmp/r.jsonl.0") ||
	fail "the earlier lines changed"
check "$tmp/r.jsonl" 'assert names().count("job_started") == 3 and names().count("job_finished") == 3'
[ "$(stat -c %a "$tmp/r.jsonl")" = "$(printf %o $((0644 & ~$(umask))))" ] ||
	fail "the events file's mode is $(stat -c %a "$tmp/r.jsonl"), umask $(umask)"

# A path that cannot be opened: one line, exit 2, no worker started.
crun --events "$tmp/no/such/dir/e.jsonl" sh -c "echo started >$tmp/started" \
	>"$tmp/b.out" 2>"$tmp/b.err"
[ $? = 2 ] || fail "a bad events path must exit 2: $(cat "$tmp/b.err")"
has "$tmp/b.err" "crun: cannot open the events file '$tmp/no/such/dir/e.jsonl': No such file or directory"
[ ! -e "$tmp/started" ] || fail "a worker started with a bad events path"
crun --events= true >/dev/null 2>"$tmp/b.err"
[ $? = 2 ] || fail "an empty events path must exit 2"

# --- a straggler (tests/helpers/step_worker.py: rank 1 at 3x the step time)
crun --standalone --nproc-per-node=2 --max-restarts=0 --straggler-window=3 \
	--events "$tmp/s.jsonl" "$CRUN_TEST_HELPERS_SRC/step_worker.py" 8 0.05 1 0.15 \
	>"$tmp/s.out" 2>"$tmp/s.err" || fail "straggler run: $(cat "$tmp/s.err")"
check "$tmp/s.jsonl" '
s = ev[first("straggler")]
assert s["rank"] == 1 and s["local_rank"] == 1 and s["pid"] > 0 and s["step"] >= 2, s
assert 1.5 <= s["ratio"] < 10 and 0.1 < s["seconds"] < 1, s
assert names().count("straggler") == 1, names()
r = ev[first("round_formed")]
assert r["nnodes"] == 1 and r["world_size"] == 2 and "members" not in r, r
assert ev[-1]["event"] == "job_finished" and ev[-1]["exit_code"] == 0, ev[-1]
'

# --- an eviction: the host goes on alone -----------------------------------
port=$(free_port)
common=(--nnodes=1:2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=ev
	--rdzv-conf=keep_alive_interval=200ms,keep_alive_max_attempt=3,last_call_timeout=10s,rejoin_timeout=1s)
export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 1 ]'
agent p0 "${common[@]}" --events "$tmp/p0.jsonl" sh -c "$worker" "$marker"
wait_for "$tmp/p0.err" "hosting the rendezvous store"
agent p1 "${common[@]}" --events "$tmp/p1.jsonl" sh -c "$worker" "$marker"
wait_for "$tmp/p1.out" "nodes=2" 1
kill -STOP "$pid_p1"
expect_rc p0 0 5
kill -CONT "$pid_p1"
finish p1 10
check "$tmp/p0.jsonl" '
host = ev[0]["node"]
r1 = first("round_formed", nnodes=2)
assert ev[r1]["members"] == [host, host] and ev[r1]["world_size"] == 2, ev[r1]
closed = first("round_closed")
assert " left: no keep-alive for 600ms" in ev[closed]["message"], ev[closed]
evicted = first("member_evicted")
assert ev[evicted]["member"] == host and ev[evicted]["message"] == ev[closed]["message"]
restart = first("restart", cause="node_left", restart_count=1)
left = first("member_left")
r2 = first("round_formed", nnodes=1)
assert ev[r2]["round"] > ev[r1]["round"] and ev[r2]["members"] == [host], ev[r2]
done = first("job_finished", exit_code=0)
assert r1 < closed < evicted < left < r2 < restart < done, (r1, closed, evicted, left, r2, restart, done)
assert names().count("restart") == 1, names()
assert all(e["run"] == "ev" and e["node_id"] == ev[0]["node_id"] for e in ev)
'
# The stopped agent: its guard killed its worker; running again, it finds
# the store dropped it, and (the host gone) the job ends for it.
check "$tmp/p1.jsonl" '
me = first("member_evicted")
assert ev[me]["member"] == ev[me]["node"] and "was stopped for" in ev[me]["message"], ev[me]
first("worker_exited", signal=9)
first("store_lost")
assert ev[-1]["event"] == "job_finished" and ev[-1]["exit_code"] == 1, ev[-1]
assert "restart" not in names(), names() # its rejoin failed: no attempt followed
'
wait_none "$marker"

# --- the pictures -----------------------------------------------------------
if command -v gnuplot >/dev/null; then
	cat "$tmp/p0.jsonl" "$tmp/p1.jsonl" >"$tmp/both.jsonl"
	"$CRUN_SOURCE_DIR/scripts/plot-job" "$tmp/both.jsonl" "$tmp/job.png" >"$tmp/plot.out" 2>&1 ||
		fail "plot-job: $(cat "$tmp/plot.out")"
	[ "$(head -c 4 "$tmp/job.png" | tail -c 3)" = PNG ] || fail "plot-job wrote no PNG"
	"$CRUN_SOURCE_DIR/scripts/plot-job" "$tmp/r.jsonl" "$tmp/r.png" >/dev/null 2>&1 ||
		fail "plot-job of the restarts"
	[ "$(head -c 4 "$tmp/r.png" | tail -c 3)" = PNG ] || fail "plot-job wrote no PNG"
	[ -z "${EVENTS_KEEP:-}" ] || cp "$tmp"/*.png "$tmp"/*.jsonl "$EVENTS_KEEP"/
	# plot-loss marks a restart of the events file at its step, and the
	# resume the CSV shows (step 3 after step 4).
	printf '%s\n' step,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss,val_bpb \
		1,3,1e-3,1,1,1,, 2,2.5,1e-3,1,1,1,, 3,2.4,1e-3,1,1,1,, 4,2.3,1e-3,1,1,1,2.5,3.6 \
		3,2.4,1e-3,1,1,1,, 4,2.3,1e-3,1,1,1,, 5,2.2,1e-3,1,1,1,, 5,,,,,,2.4,3.5 >"$tmp/m.csv"
	sed -n 's/"cause":"worker_failed"/&,"step":4/p' "$tmp/r.jsonl" >"$tmp/rs.jsonl"
	[ -s "$tmp/rs.jsonl" ] || fail "no restart in $tmp/r.jsonl"
	"$CRUN_SOURCE_DIR/scripts/plot-loss" --events "$tmp/rs.jsonl" "$tmp/m.csv" "$tmp/loss.png" \
		>"$tmp/plot.out" 2>&1 || fail "plot-loss --events: $(cat "$tmp/plot.out")"
	[ "$(head -c 4 "$tmp/loss.png" | tail -c 3)" = PNG ] || fail "plot-loss wrote no PNG"
	"$CRUN_SOURCE_DIR/scripts/plot-loss" --events "$tmp/none.jsonl" "$tmp/m.csv" >/dev/null 2>&1
	[ $? = 2 ] || fail "plot-loss --events of a missing file must exit 2"
	# a blank line is skipped; a line that is JSON but no object is one line
	{ echo; cat "$tmp/rs.jsonl"; echo; } >"$tmp/blank.jsonl"
	"$CRUN_SOURCE_DIR/scripts/plot-loss" --events "$tmp/blank.jsonl" "$tmp/m.csv" "$tmp/l2.png" \
		>"$tmp/plot.out" 2>&1 || fail "plot-loss --events with blank lines: $(cat "$tmp/plot.out")"
	echo 1 >"$tmp/num.jsonl"
	"$CRUN_SOURCE_DIR/scripts/plot-loss" --events "$tmp/num.jsonl" "$tmp/m.csv" "$tmp/l3.png" \
		>"$tmp/plot.out" 2>&1
	[ $? = 2 ] || fail "plot-loss --events of a number must exit 2"
	[ "$(wc -l <"$tmp/plot.out")" = 1 ] || fail "plot-loss --events of a number: $(cat "$tmp/plot.out")"
	for junk in x 1; do
		echo "$junk" >"$tmp/junk.jsonl"
		"$CRUN_SOURCE_DIR/scripts/plot-job" "$tmp/junk.jsonl" "$tmp/j.png" >"$tmp/plot.out" 2>&1
		[ $? = 2 ] || fail "plot-job of '$junk' must exit 2"
		[ "$(wc -l <"$tmp/plot.out")" = 1 ] || fail "plot-job of '$junk': $(cat "$tmp/plot.out")"
	done
else
	echo "gnuplot is not installed: plot-job not checked"
fi
echo "ok"
