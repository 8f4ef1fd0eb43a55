#!/bin/bash
# crun-rdzvd --state-dir: its journal of rounds survives a SIGKILL. Real
# crun agents over loopback against one daemon, killed and restarted on the
# same port with the same state directory:
# - a run that finished before the kill (two agents, a trivial worker) is
#   still closed after the restart: a late agent gets "run 'done' is
#   closed: the job has finished", exit 1;
# - a run in round 1 when the daemon was killed is restored as that round:
#   its agents resume it, their workers untouched, and finish in round 1;
# - a run whose agents gave up resuming (reconnect_timeout shorter than the
#   outage) and join again as new nodes: the restored round ends, counted,
#   and they finish in round 2 with restart count 1 (a daemon without the
#   journal would start the run afresh, round 1, restart 0);
# - a second daemon on the same state directory exits 2 naming the first;
# - a daemon stopped by SIGTERM keeps the journal as it was;
# - a truncated journal stops the daemon at start with one line naming the
#   file, exit 2; so does a --state-dir that is missing or not a directory.
# shellcheck disable=SC2015,SC2016,SC2034,SC2154 source-path=SCRIPTDIR
set -u
. "$(dirname "$0")/multinode-lib.sh"

state=$tmp/state
mkdir "$state"
journal=$state/rdzv-journal.json

# start_rdzvd NAME PORT: a crun-rdzvd on 127.0.0.1:PORT (0: a free one)
# with the state directory; sets rdzvd_port and rdzvd_pid.
start_rdzvd() {
	rm -f "$tmp/$1.port"
	"$CRUN_RDZVD" --host 127.0.0.1 --port "$2" --port-file "$tmp/$1.port" \
		--state-dir "$state" 2>"$tmp/$1.log" &
	rdzvd_pid=$!
	stray_pids="$stray_pids $rdzvd_pid"
	for _ in $(seq 200); do
		[ -s "$tmp/$1.port" ] && break
		kill -0 "$rdzvd_pid" 2>/dev/null || break
		sleep 0.05
	done
	[ -s "$tmp/$1.port" ] || fail "crun-rdzvd did not start: $(cat "$tmp/$1.log")"
	rdzvd_port=$(cat "$tmp/$1.port")
}

# run_state HEX: the state the journal records for the run whose id is HEX
run_state() {
	python3 - "$journal" "$1" <<'PY'
import json, sys
for run in json.load(open(sys.argv[1]))["runs"]:
    if run["run"] == sys.argv[2]:
        print(run["state"], run["round"], run["restart_count"], len(run["members"]))
PY
}

start_rdzvd first 0
ep=127.0.0.1:$rdzvd_port
ka=keep_alive_interval=0.5,keep_alive_max_attempt=3

# A run that finishes before the kill.
for n in 0 1; do
	agent "done$n" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=done \
		--rdzv-conf="$ka" sh -c "$worker" "$marker"
done
expect_rc done0 0
expect_rc done1 0
[ "$(run_state 646f6e65)" = "finished 1 0 0" ] ||
	fail "journal of run 'done': '$(run_state 646f6e65)': $(cat "$journal")"

# Two runs in their first round; their workers wait for $tmp/go. The
# agents of 'gave' stop resuming after 300 ms, well before the store is back.
MN_UNTIL="[ -e $tmp/go ]"
for n in 0 1; do
	agent "live$n" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=live \
		--rdzv-conf="$ka" sh -c "$worker" "$marker"
	agent "gave$n" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=gave \
		--rdzv-conf="$ka,reconnect_timeout=300ms,rejoin_timeout=20s" sh -c "$worker" "$marker"
done
for name in live0 live1 gave0 gave1; do
	wait_for "$tmp/$name.out" " round=1 "
done
[ "$(run_state 6c697665)" = "running 1 0 2" ] ||
	fail "journal of run 'live': '$(run_state 6c697665)': $(cat "$journal")"

kill -KILL "$rdzvd_pid"
wait "$rdzvd_pid" 2>/dev/null
sleep 1
start_rdzvd second "$rdzvd_port"
grep -q "journal '$journal': 3 runs" "$tmp/second.log" ||
	fail "no journal line: $(cat "$tmp/second.log")"

# One daemon per state directory.
rc=0
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --state-dir "$state" 2>"$tmp/twice.log" || rc=$?
[ "$rc" = 2 ] && grep -q "is in use by another crun-rdzvd (pid $rdzvd_pid)" "$tmp/twice.log" ||
	fail "a second daemon on the state directory: exit $rc: $(cat "$tmp/twice.log")"

agent late --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=done /bin/true
expect_rc late 1
grep -q "run 'done' is closed: the job has finished" "$tmp/late.err" ||
	fail "late join after the restart: $(cat "$tmp/late.err")"

for n in 0 1; do
	wait_for "$tmp/live$n.err" "resumed round 1 with the store at '$ep'" 1 20
	wait_for "$tmp/gave$n.out" " round=2 " 1 20
done
wait_for "$tmp/second.log" "round 1 of run 'live' resumed: all 2 nodes came back" 1 10
[ "$(run_state 6c697665)" = "running 1 0 2" ] ||
	fail "journal of run 'live' after the resume: '$(run_state 6c697665)'"
touch "$tmp/go"
for name in live0 live1 gave0 gave1; do
	expect_rc "$name" 0
done
# One worker line each: the workers of round 1 were never restarted.
for n in 0 1; do
	[ "$(grep -c ' round=' "$tmp/live$n.out")" = 1 ] || fail "live$n restarted: $(cat "$tmp/live$n.out")"
done
for n in 0 1; do
	[ "$(grep ' round=2 ' "$tmp/gave$n.out" | grep -oE ' restart=[0-9]+')" = " restart=1" ] ||
		fail "gave$n: $(cat "$tmp/gave$n.out")"
done
grep -q "run 'live': restored from the journal: round 1, 0 restarts, running" \
	"$tmp/second.log" || fail "no restore line: $(cat "$tmp/second.log")"
[ "$(run_state 6c697665)" = "finished 1 0 0" ] ||
	fail "journal of run 'live' at the end: '$(run_state 6c697665)'"
[ "$(run_state 67617665)" = "finished 2 1 0" ] ||
	fail "journal of run 'gave' at the end: '$(run_state 67617665)'"
echo "ok: across SIGKILL, a finished run stays closed, a running one resumes its round,"
echo "ok: and one whose agents joined again goes on in round 2, counted"

# SIGTERM: the daemon frees its runs, and the journal keeps them.
kill -TERM "$rdzvd_pid"
rc=0
wait "$rdzvd_pid" || rc=$?
[ "$rc" = 0 ] || fail "crun-rdzvd exited $rc on SIGTERM: $(cat "$tmp/second.log")"
[ "$(run_state 646f6e65)" = "finished 1 0 0" ] && [ "$(run_state 6c697665)" = "finished 1 0 0" ] ||
	fail "journal after SIGTERM: $(cat "$journal")"

# A truncated journal: one line naming the file, exit 2.
truncate -s 40 "$journal"
rc=0
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --state-dir "$state" 2>"$tmp/corrupt.log" || rc=$?
[ "$rc" = 2 ] || fail "corrupt journal: exit $rc: $(cat "$tmp/corrupt.log")"
[ "$(wc -l <"$tmp/corrupt.log")" = 1 ] && grep -qE \
	"^crun-rdzvd: cannot load the journal: $journal: line [0-9]+, column [0-9]+: .*move the file away" \
	"$tmp/corrupt.log" || fail "corrupt journal: $(cat "$tmp/corrupt.log")"

# Bad state directories.
rc=0
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --state-dir "$tmp/missing" 2>"$tmp/bad.log" || rc=$?
[ "$rc" = 2 ] && [ "$(cat "$tmp/bad.log")" = \
	"crun-rdzvd: --state-dir '$tmp/missing': No such file or directory" ] ||
	fail "missing --state-dir: exit $rc: $(cat "$tmp/bad.log")"
rc=0
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --state-dir "$journal" 2>"$tmp/bad.log" || rc=$?
[ "$rc" = 2 ] && [ "$(cat "$tmp/bad.log")" = \
	"crun-rdzvd: --state-dir '$journal': not a directory" ] ||
	fail "--state-dir of a file: exit $rc: $(cat "$tmp/bad.log")"
echo "ok: a corrupt journal and bad --state-dir values give one line and exit 2"
