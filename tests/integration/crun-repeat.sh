#!/bin/bash
# Failures that would only repeat are not restarted (crun(1), RESTARTS),
# counted from crun's own lines ("...; restarting (restart N of M)", one per
# restart; "round N ended: ...; restarting", one per restart on every node):
# - a configuration error of crun-train (3 ranks, a batch of 256): exit 78,
#   one attempt, and the summary shows crun-train's message and why;
# - a full disk under checkpoint.dir (a 64 KiB tmpfs; as root only): two
#   attempts, then the summary says it failed the same way twice;
# - a script that does not exist (python3 exits 2): two attempts;
# - a worker that fails once and then succeeds: restarted as before;
# - the same failure after the minimum attempt time, and a different
#   failure each time: restarted up to --max-restarts;
# - with rendezvous (two agents on loopback), a node's exit 78 and a
#   node's failure that repeats end the run on both nodes.
# pid_NAME and rc_NAME come from multinode-lib.sh (printf -v).
# shellcheck disable=SC2016,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
: "${CRUN_TRAIN:?CRUN_TRAIN must name crun-train}"

mnt=""
trap 'if [ -n "$mnt" ]; then umount "$mnt"; fi; cleanup' EXIT

# restarts FILE: the restarts crun announced in FILE (attempts - 1)
restarts() {
	grep -c -- '; restarting (restart [0-9]* of [0-9]*)$' "$1"
}
# run NAME ARGS...: crun ARGS, output in $tmp/NAME.{out,err}, status in rc
run() {
	local name=$1
	shift
	crun "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
}
# want NAME RC RESTARTS: crun exited RC after exactly RESTARTS restarts
want() {
	[ "$rc" = "$2" ] || fail "$1: exit $rc, want $2: $(tail -n 30 "$tmp/$1.err")"
	[ "$(restarts "$tmp/$1.err")" = "$3" ] ||
		fail "$1: $(restarts "$tmp/$1.err") restarts, want $3: $(cat "$tmp/$1.err")"
}
# has_re FILE REGEX: a line of FILE matches REGEX (grep -E)
has_re() {
	grep -qE -- "$2" "$1" || fail "no line matching '$2' in $1:
$(head -c 4000 "$1")"
}

# A configuration error: one attempt; the message is crun-train's.
run config --standalone --nproc-per-node=3 "$CRUN_TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml"
want config 1 0
has_re "$tmp/config.err" "crun-train FAILED$"
has_re "$tmp/config.err" "^not restarting: rank [0-2] exited with code 78: a configuration error, which every attempt would meet$"
has_re "$tmp/config.err" "^  exitcode  : 78 \(pid: [0-9]+\)$"
has_re "$tmp/config.err" "^  message   : crun-train: config '.*/configs/tiny.yaml': train.batch_size 256 does not split evenly over 3 ranks x 1 micro-steps \(parallel.grad_accum\)$"
has_re "$tmp/config.err" "^  traceback : rank [0-2] \(local rank [0-2], pid [0-9]+\): main\(\) at src/trainer/main.c:[0-9]+$"
lacks "$tmp/config.err" "  message   : <N/A>"
echo "ok a configuration error: one attempt, crun-train's message in the summary"

# A full disk under checkpoint.dir: the same error twice, then no more.
if [ "$(id -u)" = 0 ] && mkdir "$tmp/ckpt" && mount -t tmpfs -o size=64k tmpfs "$tmp/ckpt"; then
	mnt=$tmp/ckpt
	run disk --standalone --nproc-per-node=2 "$CRUN_TRAIN" "$CRUN_SOURCE_DIR/configs/tiny.yaml" \
		--set checkpoint.dir="$mnt" --set checkpoint.every=5 --set train.steps=20 \
		--set data.generate_bytes=200000 --set train.eval_samples=64
	umount "$mnt" && mnt=""
	want disk 1 1
	has_re "$tmp/disk.err" "crun-train FAILED \(after 1 restart\)$"
	has_re "$tmp/disk.err" "^not restarting: rank [01] failed the same way twice without progress: exited with code 1 after [0-9.]+s \(no heartbeat step beyond the last attempt's; --min-attempt-time 60s\)$"
	has_re "$tmp/disk.err" "^  message   : crun-train: checkpoint of step 5 failed: .*No space left on device$"
	echo "ok a full disk: two attempts"
else
	echo "ok # SKIP full disk: needs root to mount a tmpfs"
fi

# A script that does not exist: python3 says so and exits 2, twice.
if command -v python3 >/dev/null; then
	run script "$tmp/nosuch.py"
	want script 1 1
	[ "$(grep -c "^\[0\]:.*can't open file '$tmp/nosuch.py'" "$tmp/script.err")" = 2 ] ||
		fail "script: python3's message is not there twice: $(cat "$tmp/script.err")"
	has_re "$tmp/script.err" "nosuch.py FAILED \(after 1 restart\)$"
	has_re "$tmp/script.err" "^not restarting: rank 0 failed the same way twice without progress: exited with code 2 after "
	# no error file: the summary's message is the worker's last line
	has_re "$tmp/script.err" "^  message   : .*can't open file '$tmp/nosuch.py'"
	echo "ok a missing script: two attempts, python3's line in the summary"
else
	echo "ok # SKIP missing script: no python3"
fi

# A rank that hangs at the same step in every attempt: found hung twice,
# then not restarted.
if command -v python3 >/dev/null; then
	cat >"$tmp/hang.py" <<'PY'
import os, time
fd = int(os.environ["CRUN_HEARTBEAT_FD"])
for step in range(1, 4):
    os.write(fd, b"step %d\n" % step)
    time.sleep(0.05)
while os.environ["RANK"] == "1":
    time.sleep(1)
PY
	run hang --nproc-per-node=2 --max-restarts=3 --heartbeat-timeout=1s --shutdown-timeout=2s \
		"$tmp/hang.py"
	want hang 1 1
	has_re "$tmp/hang.err" "^not restarting: rank 1 failed the same way twice without progress: hung after "
	echo "ok a rank that hangs the same way twice: two attempts"
else
	echo "ok # SKIP hang: no python3"
fi

# A worker that fails once and then succeeds is restarted as before.
run once --nproc-per-node=2 "$H/crun-test-exit" --fail-rank 1 --fail-below 1
want once 0 1
lacks "$tmp/once.err" "FAILED"
echo "ok a worker that fails once: one restart, then success"

# The same failure, but each attempt longer than --min-attempt-time: up to
# --max-restarts.
run slow --max-restarts=2 --min-attempt-time=200ms "$H/crun-test-exit" --code 3 --delay-ms 400
want slow 1 2
has_re "$tmp/slow.err" "crun-test-exit FAILED \(after 2 restarts\)$"
lacks "$tmp/slow.err" "not restarting"
# A different failure each time: up to --max-restarts however quick.
run differ --max-restarts=2 /bin/sh -c 'exit $((3 + TORCHELASTIC_RESTART_COUNT))'
want differ 1 2
lacks "$tmp/differ.err" "not restarting"
echo "ok failures with progress or of another kind: restarted up to --max-restarts"

# Rendezvous: a node's exit 78 ends the run on both nodes, at once.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --max-restarts=3)
agent c0 "${common[@]}" --rdzv-id=repeat78 "$H/crun-test-exit" --fail-rank 1 --code 78 \
	--delay-ms 100 --others-ms 20000 "$marker"
wait_for "$tmp/c0.err" "hosting the rendezvous store"
agent c1 "${common[@]}" --rdzv-id=repeat78 "$H/crun-test-exit" --fail-rank 1 --code 78 \
	--delay-ms 100 --others-ms 20000 "$marker"
expect_rc c0 1 10
expect_rc c1 1 10
for f in c0 c1; do
	has_re "$tmp/$f.err" "round 1 ended: rank 1 \(local rank 0\) on .* exited with code 78; not restarting: a configuration error$"
	lacks "$tmp/$f.out" "restart=1"
done
has_re "$tmp/c1.err" "^not restarting: rank 1 exited with code 78: a configuration error"
wait_none "$marker"
echo "ok rendezvous: exit 78 on one node ends the run on both"

# Rendezvous: the same failure twice without progress, on one node.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint="127.0.0.1:$port" --max-restarts=3)
agent r0 "${common[@]}" --rdzv-id=repeat2 "$H/crun-test-exit" --fail-rank 1 --code 5 \
	--delay-ms 100 --others-ms 20000 "$marker"
wait_for "$tmp/r0.err" "hosting the rendezvous store"
agent r1 "${common[@]}" --rdzv-id=repeat2 "$H/crun-test-exit" --fail-rank 1 --code 5 \
	--delay-ms 100 --others-ms 20000 "$marker"
expect_rc r0 1 15
expect_rc r1 1 15
for f in r0 r1; do
	[ "$(grep -c 'round 1 ended: .*; restarting (restart 1 of 3)$' "$tmp/$f.err")" = 1 ] ||
		fail "$f: round 1 did not restart once: $(cat "$tmp/$f.err")"
	has_re "$tmp/$f.err" "round 2 ended: rank 1 \(local rank 0\) on .* exited with code 5; not restarting: it failed the same way twice without progress$"
	grep -q "restart=1" "$tmp/$f.out" || fail "$f: no second attempt: $(cat "$tmp/$f.out")"
	lacks "$tmp/$f.out" "restart=2"
done
wait_none "$marker"
echo "ok rendezvous: a failure that repeats on one node ends the run on both"
