#!/bin/sh
# LIST and COUNT past one frame's 65,536 items: 200,000 keys set through
# libcrun (crun-test-mset), then crunctl count and crunctl ls against
# crun-rdzvd, which pages; every key printed once, sorted. A store that
# does not page (CRUN_TEST_OLD_LIST) still lists a run that fits one
# reply. Every command is bounded by timeout(1); the daemons are killed on
# exit.
set -u

. "$(dirname "$0")/rdzvd-lib.sh"
: "${CRUN_TEST_HELPERS:?CRUN_TEST_HELPERS must name the directory of the test helpers}"
rdzvd_test_init rdzvd-list

N=200000

start_daemon paged
export CRUN_STORE=127.0.0.1:$port
timeout --foreground 20 "$CRUN_TEST_HELPERS/crun-test-mset" $N 2>"$tmp/err" || fail "setting $N keys"
out=$(timeout --foreground 20 "$CRUN_CTL" --endpoint "$CRUN_STORE" count 2>"$tmp/err") || fail "count"
[ "$out" = "$N" ] || fail "count printed '$out', expected $N"
timeout --foreground 20 "$CRUN_CTL" --endpoint "$CRUN_STORE" ls >"$tmp/keys" 2>"$tmp/err" ||
	fail "ls of $N keys failed"
got=$(wc -l <"$tmp/keys")
[ "$got" -eq $N ] || fail "ls printed $got keys, expected $N"
LC_ALL=C sort -c -u "$tmp/keys" 2>"$tmp/err" || fail "ls is not sorted, or repeats a key"
[ "$(head -n 1 "$tmp/keys")" = k0000000 ] || fail "first key '$(head -n 1 "$tmp/keys")'"
[ "$(tail -n 1 "$tmp/keys")" = k0199999 ] || fail "last key '$(tail -n 1 "$tmp/keys")'"

# A store without paged LIST: one reply, as before, when the run fits it.
CRUN_TEST_OLD_LIST=1 start_daemon old
export CRUN_STORE=127.0.0.1:$port
timeout --foreground 20 "$CRUN_TEST_HELPERS/crun-test-mset" 1000 2>"$tmp/err" || fail "setting 1000 keys"
got=$(timeout --foreground 20 "$CRUN_CTL" --endpoint "$CRUN_STORE" ls 2>"$tmp/err" | wc -l)
[ "$got" -eq 1000 ] || fail "ls against a store that does not page printed $got keys"
echo "ok: $N keys counted and listed in pages"
