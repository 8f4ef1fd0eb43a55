#!/bin/bash
# GPUs through NVML (crun(1), GPUS), with no GPU here:
# - without NVML (CRUN_NVML_LIBRARY naming no file, a library whose
#   nvmlInit fails, and the default library, absent on most test hosts) a
#   job runs as ever: exit 0, no error or warning, one debug line;
# - with the test double of NVML (tests/nvml_fake.c, loaded through
#   CRUN_NVML_LIBRARY), the GPUs are read (their uuids, each rank's GPU by
#   CUDA_VISIBLE_DEVICES, an XID as a warning), and a 2-worker job whose
#   worker fails once waits before its restart until the double stops
#   listing the dead workers (1 s after their death), then restarts;
# - when a dead worker's pid never leaves, --gpu-release-timeout=1s waits
#   about 1 s, says so, and restarts anyway, each GPU's processes listed
#   once a poll; 0 does not wait; a SIGTERM
#   during the wait ends crun at once (143), no worker of the next attempt
#   started; where NVML cannot list a GPU's processes, its used memory
#   back to the start's decides;
# - with rendezvous (one node on loopback) the wait comes between the
#   round and the workers' start;
# - the flags' bad values, PET_ names and config keys.
# Each worker lists itself on its GPU in the double's file, as a CUDA
# context would appear in NVML.
set -u
. "$(dirname "$0")/multinode-lib.sh"
: "${CRUN_NVML_FAKE_LIB:?CRUN_NVML_FAKE_LIB must name the NVML test double}"
unset CRUN_NVML_LIBRARY CRUN_NVML_FAKE

u0=GPU-0c6b6a6e-0000-4a4a-8d8d-000000000000
u1=GPU-0c6b6a6e-1111-4a4a-8d8d-111111111111

# A worker: lists its pid on its GPU in the double's file (when there is
# one): GPU $LOCAL_RANK, or the entry of CUDA_VISIBLE_DEVICES by uuid;
# prints its attempt; local rank 1 fails the first attempt, when local
# rank 0 waits to be stopped.
cat >"$tmp/worker.sh" <<'EOF'
#!/bin/bash
gpu=$LOCAL_RANK
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
	IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
	case ${visible[$LOCAL_RANK]} in
	GPU-*-0000-4a4a-*) gpu=0 ;;
	GPU-*-1111-4a4a-*) gpu=1 ;;
	esac
fi
[ -n "${CRUN_NVML_FAKE:-}" ] && echo "proc $gpu $$ 2147483648" >>"$CRUN_NVML_FAKE"
echo "attempt $TORCHELASTIC_RESTART_COUNT"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
	[ "$LOCAL_RANK" = 1 ] && { sleep 0.2; exit 3; }
	exec sleep 20
fi
exit 0
EOF
chmod +x "$tmp/worker.sh"

# fake_conf FILE LINGER_MS: two GPUs, the dead listed LINGER_MS
fake_conf() {
	cat >"$1" <<EOF
gpu 0 $u0 37 1073741824 150754820096 41 123456 0 0 NVIDIA Fake H200
gpu 1 $u1 0 1073741824 150754820096 39 98000 2 0 NVIDIA Fake H200
linger_ms $2
EOF
}
# secs FILE PATTERN: the seconds N of the first "... after N.NNs" line
secs() {
	grep -m1 -- "$2" "$1" | sed -E 's/.* after ([0-9]+\.[0-9]+)s.*/\1/'
}
# between X LO HI: LO <= X <= HI (decimals)
between() {
	awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x != "" && x >= lo && x <= hi) }'
}

# 1. No NVML: nothing changes, not a word above debug level.
for lib in "$tmp/no-such-libnvidia-ml.so.1" default; do
	if [ "$lib" = default ]; then
		CRUN_LOG_LEVEL=debug crun --nproc-per-node=2 --max-restarts=1 \
			--min-attempt-time=50ms "$tmp/worker.sh" >"$tmp/none.out" 2>"$tmp/none.err"
	else
		CRUN_NVML_LIBRARY=$lib CRUN_LOG_LEVEL=debug crun --nproc-per-node=2 \
			--max-restarts=1 --min-attempt-time=50ms "$tmp/worker.sh" \
			>"$tmp/none.out" 2>"$tmp/none.err"
	fi
	rc=$?
	[ "$rc" = 0 ] || fail "no NVML ($lib): exit $rc: $(cat "$tmp/none.err")"
	has "$tmp/none.out" "[0]:attempt 1"
	lacks "$tmp/none.err" "warning: GPU"
	lacks "$tmp/none.err" "waiting up to"
	lacks "$tmp/none.err" "GPU monitor"
	if [ "$lib" != default ]; then
		grep -q "^crun: no NVML, GPUs not monitored: .*no-such-libnvidia-ml" \
			"$tmp/none.err" || fail "no debug line on the missing NVML: $(cat "$tmp/none.err")"
	fi
	CRUN_NVML_LIBRARY=$lib crun --nproc-per-node=1 sh -c 'exit 0' >"$tmp/none.out" \
		2>"$tmp/none.err" || fail "no NVML ($lib): a plain job failed"
	# crun's own start and closing lines only (crun(1), STATUS)
	grep -v -e "^crun: run 'none' store on " -e "^crun: run 'none' ended: succeeded " \
		"$tmp/none.err" >"$tmp/none.other"
	[ -s "$tmp/none.other" ] && fail "no NVML ($lib): crun said: $(cat "$tmp/none.other")"
done
# nvmlInit failing (no driver) is no NVML either.
echo init_fails >"$tmp/fails.conf"
CRUN_NVML_LIBRARY=$CRUN_NVML_FAKE_LIB CRUN_NVML_FAKE=$tmp/fails.conf CRUN_LOG_LEVEL=debug \
	crun --nproc-per-node=1 sh -c 'exit 0' >"$tmp/none.out" 2>"$tmp/none.err" ||
	fail "nvmlInit failing: the job failed: $(cat "$tmp/none.err")"
grep -q "^crun: no NVML, GPUs not monitored: nvmlInit: Driver Not Loaded$" "$tmp/none.err" ||
	fail "no debug line on nvmlInit failing: $(cat "$tmp/none.err")"
echo "ok without NVML the job runs as ever, one debug line says why"

# 2. The double: the GPUs, each rank's GPU by uuid, an XID, and the wait
# for the dead workers before the restart.
export CRUN_NVML_LIBRARY=$CRUN_NVML_FAKE_LIB
export CRUN_NVML_FAKE=$tmp/nvml.conf
fake_conf "$CRUN_NVML_FAKE" 1000
echo "xid 1 79" >>"$CRUN_NVML_FAKE"
start=$(date +%s%N)
CUDA_VISIBLE_DEVICES=$u1,$u0 CRUN_LOG_LEVEL=debug crun --nproc-per-node=2 --max-restarts=1 \
	--min-attempt-time=50ms --shutdown-timeout=5s "$tmp/worker.sh" >"$tmp/wait.log" 2>&1
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
[ "$rc" = 0 ] || fail "with the double: exit $rc: $(cat "$tmp/wait.log")"
has "$tmp/wait.log" "crun: GPU 0: $u0 'NVIDIA Fake H200', 1073741824 of 150754820096 bytes used"
has "$tmp/wait.log" "crun: local rank 0 uses GPU 1 ($u1)"
has "$tmp/wait.log" "crun: local rank 1 uses GPU 0 ($u0)"
has "$tmp/wait.log" "crun: warning: GPU 1 ($u1) reported XID 79 (1 so far)"
grep -qE "^crun: waiting up to 50\.0s for GPU 1 \(pid [0-9]+\), GPU 0 \(pid [0-9]+\) to release the dead workers' memory$" \
	"$tmp/wait.log" || fail "no line on the wait: $(cat "$tmp/wait.log")"
s=$(secs "$tmp/wait.log" "the GPUs released the dead workers' memory after")
between "$s" 0.7 5 || fail "waited '$s' s for a 1 s linger: $(cat "$tmp/wait.log")"
# The restart's workers start after the wait's end, not before.
awk '/the GPUs released the dead workers/ { r = NR } /attempt 1$/ && !a { a = NR }
	END { exit !(r && a && r < a) }' "$tmp/wait.log" ||
	fail "the restart did not follow the wait: $(cat "$tmp/wait.log")"
[ "$took" -lt 15000 ] || fail "the job took $took ms"
echo "ok the GPUs are read, and the restart waits ${s}s for the dead workers' GPUs"

# 3. A pid that never leaves: --gpu-release-timeout bounds the wait (which
# needs no sampling).
fake_conf "$CRUN_NVML_FAKE" -1
CRUN_NVML_FAKE_CALLS="$tmp/calls" crun --nproc-per-node=2 --max-restarts=1 \
	--min-attempt-time=50ms --gpu-release-timeout=1s --gpu-sample-interval=0 \
	"$tmp/worker.sh" >"$tmp/stuck.log" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "a pid that stays: exit $rc: $(cat "$tmp/stuck.log")"
grep -qE "^crun: waiting up to 1\.0s for GPU 0 \(pid [0-9]+\), GPU 1 \(pid [0-9]+\)" \
	"$tmp/stuck.log" || fail "no line on the wait: $(cat "$tmp/stuck.log")"
line=$(grep -m1 "still held after" "$tmp/stuck.log")
echo "$line" | grep -qE "^crun: warning: GPU 0 \(pid [0-9]+\), GPU 1 \(pid [0-9]+\) still held after [0-9.]+s \(--gpu-release-timeout\); restarting anyway$" ||
	fail "no warning on the timeout: $(cat "$tmp/stuck.log")"
s=$(secs "$tmp/stuck.log" "still held after")
between "$s" 0.9 3 || fail "waited '$s' s with --gpu-release-timeout=1s"
has "$tmp/stuck.log" "[1]:attempt 1"
# Each GPU's processes are listed once a poll (every 200 ms), and the
# wait's end lists nothing again.
awk '{ n[$1]++; if ($1 in last && $2 - last[$1] < 100) bad = bad " GPU " $1 " at " $2
	last[$1] = $2 } END { if (bad || n[0] < 3 || n[1] < 3) { print "listed" bad; exit 1 } }' \
	"$tmp/calls" || fail "a GPU's processes listed twice in a poll: $(cat "$tmp/calls")"
echo "ok a GPU that keeps a dead worker: ${s}s, then the restart"

# 3b. A GPU whose processes NVML cannot list: its used memory decides.
fake_conf "$CRUN_NVML_FAKE" 800
echo no_processes >>"$CRUN_NVML_FAKE"
crun --nproc-per-node=2 --max-restarts=1 --min-attempt-time=50ms "$tmp/worker.sh" \
	>"$tmp/mem.log" 2>&1 || fail "no process listing: exit $?: $(cat "$tmp/mem.log")"
grep -qE "^crun: waiting up to 50\.0s for GPU 0 \(pid [0-9]+\), GPU 1 \(pid [0-9]+\)" \
	"$tmp/mem.log" || fail "no line on the wait: $(cat "$tmp/mem.log")"
s=$(secs "$tmp/mem.log" "the GPUs released the dead workers' memory after")
between "$s" 0.5 5 || fail "waited '$s' s for memory back after 0.8 s: $(cat "$tmp/mem.log")"
echo "ok without a process listing, the wait lasts until the memory is back (${s}s)"

# 4. --gpu-release-timeout=0: no wait at all.
fake_conf "$CRUN_NVML_FAKE" -1
crun --nproc-per-node=2 --max-restarts=1 --min-attempt-time=50ms --gpu-release-timeout=0 \
	"$tmp/worker.sh" >"$tmp/off.log" 2>&1 || fail "--gpu-release-timeout=0: $(cat "$tmp/off.log")"
lacks "$tmp/off.log" "waiting up to"
has "$tmp/off.log" "[1]:attempt 1"
echo "ok --gpu-release-timeout=0 does not wait"

# 5. A signal during the wait: it ends, and so does crun, at once, and no
#    worker of the next attempt starts.
fake_conf "$CRUN_NVML_FAKE" -1
"$CRUN" --nproc-per-node=2 --max-restarts=1 --min-attempt-time=50ms "$tmp/worker.sh" \
	>"$tmp/sig.log" 2>&1 &
pid=$!
stray_pids="$stray_pids $pid"
wait_lines "$tmp/sig.log" "waiting up to 50.0s" 1
kill -TERM "$pid"
for _ in $(seq 100); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.05
done
kill -0 "$pid" 2>/dev/null && fail "crun still runs 5 s after SIGTERM: $(cat "$tmp/sig.log")"
wait "$pid"
rc=$?
[ "$rc" = 143 ] || fail "SIGTERM during the wait: exit $rc: $(cat "$tmp/sig.log")"
has "$tmp/sig.log" "crun: got SIGTERM; stopping"
grep -qE "^crun: stopped waiting for the GPUs after [0-9.]+s: crun got SIGTERM$" "$tmp/sig.log" ||
	fail "no line on the wait's end: $(cat "$tmp/sig.log")"
lacks "$tmp/sig.log" "attempt 1"
echo "ok a signal ends the wait and crun"

# 6. Rendezvous: the next round is formed, then the wait, then the workers.
fake_conf "$CRUN_NVML_FAKE" 500
port=$(free_port)
crun --nnodes=1 --nproc-per-node=2 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=gpu-nvml \
	--max-restarts=1 --min-attempt-time=50ms "$tmp/worker.sh" >"$tmp/rdzv.log" 2>&1 ||
	fail "with rendezvous: exit $?: $(cat "$tmp/rdzv.log")"
awk '/round 2 of run .gpu-nvml. closed/ { c = NR } /^crun: waiting up to 50.0s for GPU 0/ { w = NR }
	/the GPUs released the dead workers. memory after/ { r = NR } /attempt 1$/ && !a { a = NR }
	END { exit !(c && w && r && a && c < w && w < r && r < a) }' "$tmp/rdzv.log" ||
	fail "with rendezvous, not round, wait, workers: $(cat "$tmp/rdzv.log")"
echo "ok with rendezvous the wait comes between the round and the workers"

# 7. The flags: a bad value is one line and exit 2; PET_ and config keys.
"$CRUN" --gpu-release-timeout=soon true >"$tmp/bad.out" 2>"$tmp/bad.err"
[ $? = 2 ] || fail "--gpu-release-timeout=soon did not exit 2"
has "$tmp/bad.err" "crun: invalid value 'soon' for --gpu-release-timeout: expected a duration up to 24h like 5, 2.5s, 500ms or 1m"
PET_GPU_RELEASE_TIMEOUT=1.5s "$CRUN" --dry-run true >"$tmp/dry" || fail "dry run"
has "$tmp/dry" "gpu_release_timeout_ms=1500"
has "$tmp/dry" "gpu_sample_interval_ms=5000"
printf 'gpu_sample_interval: 0\ngpu_release_timeout: 2m\n' >"$tmp/c.yaml"
"$CRUN" -c "$tmp/c.yaml" --dry-run true >"$tmp/dry" || fail "dry run with a config"
has "$tmp/dry" "gpu_sample_interval_ms=0"
has "$tmp/dry" "gpu_release_timeout_ms=120000"
echo "ok --gpu-sample-interval and --gpu-release-timeout from flags, PET_ and config"
