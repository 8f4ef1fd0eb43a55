#!/bin/bash
# No orphans: when crun dies by SIGKILL, its guard kills every worker's
# process group, so neither the workers nor what they started survive:
# also when crun's whole process group is SIGKILLed, and also a grandchild
# whose worker had already exited. A normal end leaves nothing either.
set -u
. "$(dirname "$0")/crun-lib.sh"

marker=crun-orphan-$$-$RANDOM

# kill -9 of crun alone.
"$CRUN" --nproc-per-node=3 "$H/crun-test-fork" "$marker-a" >"$tmp/out-a" 2>&1 &
pid=$!
wait_lines "$tmp/out-a" ':grandchild ' 3
[ "$(live "--sleeper $marker-a" | wc -l)" = 3 ] || fail "expected 3 grandchildren"
kill -9 "$pid"
wait "$pid" 2>/dev/null
wait_none "$marker-a"
wait_lines "$tmp/out-a" "crun: agent exited unexpectedly; killed 3 worker process groups" 1

# kill -9 of crun's whole process group (crun leads it through setsid):
# the guard has a group of its own.
setsid "$CRUN" --nproc-per-node=2 "$H/crun-test-fork" "$marker-b" >"$tmp/out-b" 2>&1 &
pid=$!
wait_lines "$tmp/out-b" ':grandchild ' 2
kill -9 -- "-$pid"
wait "$pid" 2>/dev/null
wait_none "$marker-b"

# A grandchild whose worker exited 0 while the other worker runs on.
"$CRUN" --nproc-per-node=2 sh -c 'if [ "$LOCAL_RANK" = 0 ]; then
	exec "$0" "$1" --exit 0; else exec "$0" "$1"; fi' "$H/crun-test-fork" "$marker-c" \
	>"$tmp/out-c" 2>&1 &
pid=$!
wait_lines "$tmp/out-c" ':grandchild ' 2
sleep 0.1
[ "$(live "--sleeper $marker-c" | wc -l)" = 2 ] || fail "expected 2 grandchildren"
kill -9 "$pid"
wait "$pid" 2>/dev/null
wait_none "$marker-c"

# A normal end: what workers left in their groups is killed too.
crun --nproc-per-node=2 "$H/crun-test-fork" "$marker-d" --exit 0 >"$tmp/out-d" 2>&1 ||
	fail "job failed: $(cat "$tmp/out-d")"
# (the guard, a fork of crun, carries the marker in its command line too)
wait_none "$marker-d"
echo "ok"
