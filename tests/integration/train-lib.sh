# Shared by the tests/integration/train-*.sh scripts (sourced, not a test).
#
# run_ranks N NAME [ARGS...] runs N ranks of crun-train with ARGS: one rank
# directly, several as a job of their own: a crun-rdzvd on an ephemeral
# loopback port (started once per script) and per rank the environment
# crun gives its workers (RANK, WORLD_SIZE, LOCAL_RANK, CRUN_STORE,
# CRUN_RUN_ID unique per run). Rank 0's output is in $tmp/NAME.out, rank
# r's in $tmp/NAME.r.out. Every process is bounded by timeout(1); the
# daemon and any rank still running are killed on exit.
set -u

: "${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must name the build directory}"
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must name the source directory}"
TRAIN=${CRUN_TRAIN:-$CRUN_BUILD_DIR/src/trainer/crun-train}
RDZVD=${CRUN_RDZVD:-$CRUN_BUILD_DIR/src/rendezvous/crun-rdzvd}
RANK_TIMEOUT=${RANK_TIMEOUT:-60}
[ -x "$TRAIN" ] || { echo "SKIP: no crun-train at '$TRAIN'"; exit 77; }
unset RANK WORLD_SIZE LOCAL_RANK CRUN_STORE CRUN_RUN_ID CRUN_TOKEN CRUN_TOKEN_FILE \
	TORCHELASTIC_RESTART_COUNT CRUN_ROUND
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-train-test.XXXXXX") || exit 1
# crun's temporary directories (error files, logs without --log-dir) go
# in $tmp too, where the cleanup removes them after a crun killed halfway.
mkdir "$tmp/tmp"
export TMPDIR=$tmp/tmp
# crun's job registry (crun status, crunctl) is the test's own too, not
# the user's: a crun that a test kills leaves its job file there.
mkdir -m 700 "$tmp/run"
export XDG_RUNTIME_DIR=$tmp/run
pids=""
rdzvd_pid=""
store_port=""
cleanup() {
	for p in $pids $rdzvd_pid; do
		kill "$p" 2>/dev/null
	done
	for p in $pids $rdzvd_pid; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/*.out; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
	done
	exit 1
}

start_store() {
	[ -n "$store_port" ] && return 0
	"$RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/rdzvd.port" -q \
		2>"$tmp/rdzvd.log" &
	rdzvd_pid=$!
	i=0
	while [ ! -s "$tmp/rdzvd.port" ]; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "crun-rdzvd did not start"
		sleep 0.1
	done
	store_port=$(cat "$tmp/rdzvd.port")
}

run_seq=0
# run_ranks N NAME [ARGS...]: 0 when every rank exited 0, else the first
# non-zero status.
run_ranks() {
	n=$1
	name=$2
	shift 2
	if [ "$n" -eq 1 ]; then
		timeout --foreground "$RANK_TIMEOUT" "$TRAIN" "$@" >"$tmp/$name.out" 2>&1
		return $?
	fi
	start_store
	run_seq=$((run_seq + 1))
	job_pids=""
	r=0
	while [ $r -lt "$n" ]; do
		RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
			CRUN_STORE=127.0.0.1:$store_port CRUN_RUN_ID="$name-$$-$run_seq" \
			timeout --foreground "$RANK_TIMEOUT" "$TRAIN" "$@" >"$tmp/$name.$r.out" 2>&1 &
		job_pids="$job_pids $!"
		r=$((r + 1))
	done
	pids="$pids $job_pids"
	status=0
	for p in $job_pids; do
		wait "$p"
		rc=$?
		[ $status -eq 0 ] && status=$rc
	done
	pids=""
	cp "$tmp/$name.0.out" "$tmp/$name.out"
	return $status
}

# field NAME KEY: the value of KEY= on the summary line of run NAME.
field() {
	sed -n 's/.*summary: //p' "$tmp/$1.out" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# rel_close A B TOL: |A-B| <= TOL*|A|
rel_close() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
		d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
		exit !(a != "" && b != "" && d <= t * m) }'
}

# A small model and run that trains in a few seconds.
SMALL="--set model.context=16 --set model.embed_dim=8 --set model.width=48 \
--set model.layers=2 --set data.generate_bytes=200000 --set train.batch_size=32 \
--set train.eval_samples=256 --set log.every=1000 --set optim.warmup_steps=2"
