#!/bin/bash
# Stragglers in lock-step training: four ranks of crun-train (DDP) wait for
# each other at every step's collectives, so they all beat at the slowest
# one's pace; crun-train's beats carry each step's own work (its time less
# what it waited in collectives), and crun names the slow rank from those.
# Rank 2 slowed by train.slow_rank/train.slow_delay is named once, and
# before rank 0 logs its 30th step; an even job of 60 steps gets no
# warning.
set -u
. "$(dirname "$0")/crun-lib.sh"
: "${CRUN_TRAIN:?CRUN_TRAIN must name crun-train}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
host=$(hostname)
cfg=$CRUN_SOURCE_DIR/configs/tiny.yaml

# A narrow model and a small batch (8 samples a rank) keep a step's work
# a small fraction of the delay, even in a sanitized build on a busy
# 2-core machine, so rank 2's ratio stays far above the factor of 1.5
# however loaded it is. The other ranks' steps are then a few ms of work,
# which a busy machine's scheduling alone can stretch past 1.5x: only
# rank 2's lines are checked here, and the even job below (steps of real
# length) must get none at all.
crun --standalone --nproc-per-node=4 --max-restarts=0 "$CRUN_TRAIN" "$cfg" \
	--set train.steps=32 --set model.width=48 --set train.batch_size=32 \
	--set log.every=1 --set train.eval_every=0 \
	--set train.eval_samples=256 --set train.slow_rank=2 --set train.slow_delay=100ms \
	>"$tmp/slow" 2>&1 || fail "slow job exited $?: $(tail -n 20 "$tmp/slow")"
n=$(grep -c "rank 2 on $host is a straggler" "$tmp/slow")
[ "$n" = 1 ] || fail "rank 2 named $n times, expected once: $(cat "$tmp/slow")"
grep -qE "^crun: warning: rank 2 on $host is a straggler: [0-9.]+ s of work/step, [0-9.]+x the job's median [0-9.e-]+ s over the last 20 steps$" \
	"$tmp/slow" || fail "straggler line: $(cat "$tmp/slow")"
lacks "$tmp/slow" "rank 2 on $host is no longer a straggler"
# crun's lines and the workers' share one stream, in the order crun
# handled them: the warning comes before rank 0's step 30.
warned=$(grep -n "rank 2 on $host is a straggler" "$tmp/slow" | cut -d: -f1)
step30=$(grep -n "^\[0\]:step 30/32 " "$tmp/slow" | cut -d: -f1)
[ -n "$step30" ] || fail "no step 30 in the log: $(cat "$tmp/slow")"
[ "$warned" -lt "$step30" ] || fail "named after step 30: $(cat "$tmp/slow")"

# An even job of 60 steps, each long enough that a busy machine's
# scheduling evens out over the 20 steps the median covers.
crun --standalone --nproc-per-node=4 --max-restarts=0 "$CRUN_TRAIN" "$cfg" \
	--set train.steps=60 --set log.every=20 --set train.eval_every=0 \
	--set train.eval_samples=256 >"$tmp/even" 2>&1 ||
	fail "even job exited $?: $(tail -n 20 "$tmp/even")"
grep -q "^\[0\]:step 60/60 " "$tmp/even" || fail "even job: $(cat "$tmp/even")"
lacks "$tmp/even" "straggler"
echo "ok"
