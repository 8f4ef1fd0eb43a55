#!/bin/sh
# crun-rdzvd and crunctl as a user runs them: a daemon on an ephemeral
# loopback port, every crunctl command, the exit statuses 0/1/2/3 with
# their one-line messages, tokens, run isolation, and a watch that sees a
# change. Every command is bounded by timeout(1); the daemons are killed
# on exit.
set -u

. "$(dirname "$0")/rdzvd-lib.sh"
rdzvd_test_init rdzvd-test

# run CMD...: runs a command bounded in time; sets $rc, $out, $err.
# "run ctl ARGS" runs crunctl against the open daemon ($ep).
run() {
	if [ "$1" = ctl ]; then
		shift
		set -- "$CRUN_CTL" --endpoint "$ep" "$@"
	fi
	timeout --foreground 20 "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	out=$(cat "$tmp/out")
	err=$(cat "$tmp/err")
}

# ok WHAT WANT_RC WANT_OUT: checks the last run.
ok() {
	[ "$rc" -eq "$2" ] || fail "$1: exit status $rc, expected $2 (stderr: $err)"
	[ "$out" = "$3" ] || fail "$1: printed '$out', expected '$3'"
}

# err_is WHAT LINE: stderr's first line is exactly LINE.
err_is() {
	first=$(printf '%s\n' "$err" | head -n 1)
	[ "$first" = "$2" ] || fail "$1: stderr '$first', expected '$2'"
}

# wait_for FILE PATTERN WHAT: until grep finds PATTERN in FILE, 10 s at most.
wait_for() {
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le 100 ] || fail "$3: '$2' did not show up in 10 s"
		sleep 0.1
	done
}

start_daemon open
open_port=$port
open_pid=$pid
ep=127.0.0.1:$open_port

# --- commands ---------------------------------------------------------------
run ctl set greeting "hello world"; ok "set" 0 ""
run ctl get greeting;               ok "get" 0 "hello world"
run ctl add counter 5;              ok "add" 0 "5"
run ctl add counter -2;             ok "add negative" 0 "3"
run ctl get counter;                ok "get counter" 0 "3"
run ctl append log ab;              ok "append" 0 ""
run ctl append log cd;              ok "append again" 0 ""
run ctl get log;                    ok "get appended" 0 "abcd"
run ctl cas log abcd swapped;       ok "cas" 0 "swapped"
run ctl cas log abcd again;         ok "cas mismatch" 1 "swapped"
run ctl ls;                         ok "ls" 0 "$(printf 'counter\ngreeting\nlog')"
run ctl count;                      ok "count" 0 "3"
run ctl wait greeting counter;      ok "wait for present keys" 0 ""
run ctl del log;                    ok "del" 0 ""
run ctl get log;                    ok "get deleted" 1 ""
err_is "get deleted" "crunctl: key 'log' not found"
run ctl del log;                    ok "del missing" 1 ""
err_is "del missing" "crunctl: key 'log' not found"
run ctl ping
[ "$rc" -eq 0 ] || fail "ping: exit status $rc ($err)"
case $out in *" ms") ;; *) fail "ping: printed '$out', expected a time in ms" ;; esac

# wait with a timeout: exit 1, bounded
start=$(date +%s)
run ctl wait greeting missing --timeout 0.3
ok "wait timeout" 1 ""
err_is "wait timeout" "crunctl: timed out after 300ms waiting for key 'missing'"
[ $(($(date +%s) - start)) -le 5 ] || fail "wait --timeout 0.3 took more than 5 s"
run ctl --timeout 1 get missing --wait; ok "get --wait timeout" 1 ""

# get --wait answered by a later set
(sleep 0.3; timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" set late yes) &
setter=$!
run ctl get late --wait --timeout 10; ok "get --wait" 0 "yes"
wait $setter || fail "the delayed set failed"

# CRUN_STORE names the endpoint when --endpoint is not given
run env CRUN_STORE="$ep" "$CRUN_CTL" get greeting; ok "CRUN_STORE" 0 "hello world"

# --- watch --------------------------------------------------------------------
# bounded by its own --timeout: the signal below goes to crunctl alone
# (timeout(1) would follow it with a SIGCONT, which can catch
# LeakSanitizer's exit-time check stopping the process and hang it)
"$CRUN_CTL" -v --endpoint "$ep" --timeout 30 watch w1 w2 >"$tmp/watch.out" 2>"$tmp/watch.log" &
watcher=$!
pids="$pids $watcher"
wait_for "$tmp/watch.log" "watching 2 keys" "watch"
run ctl set w1 first;  ok "set watched" 0 ""
run ctl set other x;   ok "set unwatched" 0 ""
run ctl del w1;        ok "del watched" 0 ""
run ctl set w2 second; ok "set watched 2" 0 ""
wait_for "$tmp/watch.out" "^set w2 second$" "watch"
kill -TERM "$watcher"
wait "$watcher"
wrc=$?
[ "$wrc" -eq 0 ] || fail "watch: exit status $wrc after SIGTERM, expected 0"
want=$(printf 'set w1 first\ndel w1\nset w2 second')
[ "$(cat "$tmp/watch.out")" = "$want" ] || fail "watch printed '$(cat "$tmp/watch.out")'"
run ctl watch w1 --timeout 0.2; ok "watch --timeout" 0 ""

# --- runs ---------------------------------------------------------------------
run ctl --run job-a set shared a;  ok "set in run a" 0 ""
run ctl --run job-b get shared;    ok "other run" 1 ""
run env CRUN_RUN_ID=job-a "$CRUN_CTL" --endpoint "$ep" get shared; ok "CRUN_RUN_ID" 0 "a"
run ctl get shared;                ok "default run" 1 ""
run ctl --run job-b count;         ok "count other run" 0 "0"

# --- usage errors: exit 2, one line and a hint -------------------------------
for args in "bogus" "get" "set k" "add k x" "wait" "--timeout soon ping" "--bogus ping" \
	"get k extra" "--endpoint"; do
	# shellcheck disable=SC2086
	run ctl $args
	[ "$rc" -eq 2 ] || fail "'crunctl $args': exit status $rc, expected 2"
	[ "$(printf '%s\n' "$err" | sed -n 2p)" = "try 'crunctl --help'" ] ||
		fail "'crunctl $args': no hint in '$err'"
	[ "$(printf '%s\n' "$err" | wc -l)" -eq 2 ] || fail "'crunctl $args': stderr '$err'"
done
run "$CRUN_CTL" --help
[ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q -- "--connect-timeout" || fail "--help"
run "$CRUN_CTL" --version
[ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "^crunctl " || fail "--version"

# --- cannot connect: exit 3 -----------------------------------------------------
# Port 1 needs root to listen on; nothing does.
run "$CRUN_CTL" --endpoint 127.0.0.1:1 --connect-timeout 200ms ping
ok "connection refused" 3 ""
err_is "connection refused" "crunctl: cannot connect to '127.0.0.1:1': connection refused"

# --- tokens -------------------------------------------------------------------
printf 'job-secret\n' >"$tmp/token"
printf 'not-it\n' >"$tmp/wrong"
start_daemon auth --token-file "$tmp/token"
aep=127.0.0.1:$port
run "$CRUN_CTL" --endpoint "$aep" --token-file "$tmp/token" set k v; ok "right token" 0 ""
run "$CRUN_CTL" --endpoint "$aep" --token-file "$tmp/wrong" get k; ok "wrong token" 3 ""
err_is "wrong token" "crunctl: authentication failed"
run "$CRUN_CTL" --endpoint "$aep" get k; ok "no token" 3 ""
case $err in "crunctl: authentication failed"*) ;; *) fail "no token: stderr '$err'" ;; esac
run env CRUN_TOKEN=job-secret "$CRUN_CTL" --endpoint "$aep" get k; ok "CRUN_TOKEN" 0 "v"
run env CRUN_TOKEN_FILE="$tmp/token" "$CRUN_CTL" --endpoint "$aep" get k
ok "CRUN_TOKEN_FILE" 0 "v"
run "$CRUN_CTL" --endpoint "$aep" --token-file "$tmp/nonexistent" get k
ok "missing token file" 2 ""
grep -q "authentication failed\|refused" "$tmp/auth.log" || fail "the daemon did not log the refusal"

# --- IPv6, where the machine has a loopback for it ----------------------------------
"$CRUN_RDZVD" --host ::1 --port 0 --port-file "$tmp/v6.port" 2>"$tmp/v6.log" &
v6pid=$!
pids="$pids $v6pid"
i=0
while [ ! -s "$tmp/v6.port" ] && kill -0 "$v6pid" 2>/dev/null && [ $i -lt 100 ]; do
	i=$((i + 1))
	sleep 0.1
done
if [ -s "$tmp/v6.port" ]; then
	v6ep="[::1]:$(cat "$tmp/v6.port")"
	run "$CRUN_CTL" --endpoint "$v6ep" set six 6; ok "IPv6 set" 0 ""
	run "$CRUN_CTL" --endpoint "$v6ep" get six;   ok "IPv6 get" 0 "6"
else
	echo "rdzvd: no IPv6 loopback here, IPv6 checks skipped"
fi

# --- the daemon stops cleanly ---------------------------------------------------
kill -TERM "$open_pid"
wait "$open_pid"
drc=$?
[ "$drc" -eq 0 ] || fail "crun-rdzvd exited with $drc after SIGTERM"
run ctl --connect-timeout 100ms ping; ok "after the daemon stopped" 3 ""

echo "rdzvd: all checks passed"
