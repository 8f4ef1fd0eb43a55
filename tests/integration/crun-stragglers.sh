#!/bin/bash
# Stragglers on one node: four workers beat 'step N' on their heartbeat
# channel (tests/helpers/step_worker.py). With rank 2 at twice the others'
# step time, crun names it in one warning line before the 25th step (the
# workers stop beating there); with every rank at the same pace, with
# --straggler-factor=0, or with the slow rank just under the factor, it
# says nothing. Bad values of the flags are refused with exit 2.
set -u
. "$(dirname "$0")/crun-lib.sh"
command -v python3 >/dev/null || { echo "no python3: skipping"; exit 77; }

w=$CRUN_TEST_HELPERS_SRC/step_worker.py
host=$(hostname)

# 25 steps of 40 ms; rank 2 at 80 ms.
crun --standalone --nproc-per-node=4 --max-restarts=0 "$w" 25 0.04 2 0.08 \
	>"$tmp/out" 2>"$tmp/err" || fail "slow job exited $?: $(cat "$tmp/err")"
n=$(grep -c "is a straggler" "$tmp/err")
[ "$n" = 1 ] || fail "$n straggler lines, expected 1: $(cat "$tmp/err")"
grep -qE "^crun: warning: rank 2 on $host is a straggler: 0\.[0-9]+ s/step, [0-9.]+x the job's median 0\.0[0-9]+ s over the last 20 steps$" \
	"$tmp/err" || fail "straggler line: $(cat "$tmp/err")"
lacks "$tmp/err" "no longer a straggler"

# An even job, and a slow rank under a factor of 3, and a disabled detector.
crun --standalone --nproc-per-node=4 --max-restarts=0 "$w" 25 0.04 \
	>"$tmp/out" 2>"$tmp/err" || fail "even job exited $?: $(cat "$tmp/err")"
lacks "$tmp/err" "straggler"
crun --standalone --nproc-per-node=4 --max-restarts=0 --straggler-factor=3 "$w" 25 0.04 2 0.08 \
	>"$tmp/out" 2>"$tmp/err" || fail "factor 3 exited $?: $(cat "$tmp/err")"
lacks "$tmp/err" "straggler"
crun --standalone --nproc-per-node=4 --max-restarts=0 --straggler-factor=0 "$w" 25 0.04 2 0.08 \
	>"$tmp/out" 2>"$tmp/err" || fail "factor 0 exited $?: $(cat "$tmp/err")"
lacks "$tmp/err" "straggler"

# A shorter window names it sooner: 8 steps of 4 beats in all.
crun --standalone --nproc-per-node=2 --max-restarts=0 --straggler-window=3 "$w" 8 0.05 1 0.15 \
	>"$tmp/out" 2>"$tmp/err" || fail "window 3 exited $?: $(cat "$tmp/err")"
grep -qE "^crun: warning: rank 1 on $host is a straggler: .* over the last 3 steps$" "$tmp/err" ||
	fail "window 3: $(cat "$tmp/err")"

# Bad values: one line, exit 2, nothing started.
for bad in --straggler-factor=1 --straggler-factor=0.5 --straggler-factor=x \
	--straggler-factor=-2 --straggler-window=1 --straggler-window=10001 --straggler-window=; do
	crun --standalone "$bad" true >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc = 2 ] || fail "$bad: exit $rc, expected 2"
	[ "$(wc -l <"$tmp/err")" = 1 ] || fail "$bad: $(cat "$tmp/err")"
	grep -q "^crun: invalid value '.*' for --straggler-" "$tmp/err" || fail "$bad: $(cat "$tmp/err")"
done
# The YAML config takes the same keys.
printf 'straggler_factor: 2.5\nstraggler_window: 7\n' >"$tmp/c.yaml"
crun -c "$tmp/c.yaml" --dry-run true >"$tmp/out" 2>"$tmp/err" || fail "dry run: $(cat "$tmp/err")"
has "$tmp/out" "straggler_factor=2.5"
has "$tmp/out" "straggler_window=7"
printf 'straggler_window: 1\n' >"$tmp/c.yaml"
crun -c "$tmp/c.yaml" true >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] || fail "straggler_window: 1 was accepted"
grep -q "straggler_window" "$tmp/err" || fail "config error: $(cat "$tmp/err")"
echo "ok"
