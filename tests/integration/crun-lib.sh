# Shared by the crun-*.sh supervision tests (sourced, not run): checks the
# environment, clears what the caller's environment could add, and gives
# helpers with bounded waits.
[ -n "${CRUN:-}" ] || { echo "crun is not built: skipping"; exit 77; }
: "${CRUN_TEST_HELPERS:?CRUN_TEST_HELPERS must name the built test helpers}"
: "${CRUN_TEST_HELPERS_SRC:?CRUN_TEST_HELPERS_SRC must name tests/helpers}"
H=$CRUN_TEST_HELPERS

tmp=$(mktemp -d)
# The temporary directories of crun (logs without --log-dir, error files)
# and of the workers go in $tmp too, so that a crun killed halfway leaves
# them where the cleanup removes them.
mkdir "$tmp/tmp"
export TMPDIR=$tmp/tmp
# crun's job registry (crun status, crunctl) is the test's own too, not
# the user's: a crun that a test kills leaves its job file there.
mkdir -m 700 "$tmp/run"
export XDG_RUNTIME_DIR=$tmp/run
trap 'cleanup' EXIT
# A signal ends the test through its EXIT trap, which bash skips otherwise.
trap 'exit 1' INT TERM
# Processes a test started on purpose outside crun's reach, by pid.
stray_pids=""
cleanup() {
	for p in $stray_pids; do
		kill -9 "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
fail() {
	echo "FAIL: $*"
	exit 1
}
for v in $(compgen -e | grep -E '^(PET_|TORCHELASTIC_)'); do
	unset "$v"
done
unset PYTHON_EXEC CRUN_LOG_LEVEL OMP_NUM_THREADS TORCH_NCCL_ASYNC_ERROR_HANDLING \
	CUDA_VISIBLE_DEVICES CRUN_STORE CRUN_RUN_ID CRUN_ROUND CRUN_TOKEN CRUN_TOKEN_FILE

# crun with a hard limit, so that a hang fails the test instead of the suite
# (60 s: a job that takes seconds alone took 30 beside other tests).
# --foreground, as everywhere in the tests: it keeps crun in the test's
# process group, which meson signals when it stops the test; without it
# timeout(1) moves crun to a group of its own, which would outlive the test.
crun() {
	timeout --foreground -s KILL 60 "$CRUN" "$@"
}
# has FILE LINE: FILE has exactly this line
has() {
	grep -qxF -- "$2" "$1" || fail "expected line '$2' in $1:
$(head -c 4000 "$1")"
}
# lacks FILE TEXT: FILE does not contain TEXT
lacks() {
	! grep -qF -- "$2" "$1" || fail "did not expect '$2' in $1:
$(head -c 4000 "$1")"
}
# wait_lines FILE PATTERN N: up to 10 s for N lines matching PATTERN
wait_lines() {
	for _ in $(seq 200); do
		[ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
		sleep 0.05
	done
	fail "timed out waiting for $3 lines '$2' in $1: $(cat "$1")"
}
# live MARKER: processes (not zombies) whose command line has MARKER
live() {
	ps -eo pid=,stat=,args= | awk -v m="$1" 'index($0, m) && $2 !~ /^Z/ && !/awk/ {print $1}'
}
# wait_none MARKER: up to 5 s for every process with MARKER to be gone
wait_none() {
	for _ in $(seq 100); do
		[ -z "$(live "$1")" ] && return 0
		sleep 0.05
	done
	local left
	left=$(live "$1")
	ps -o pid,pgid,stat,args -p "$(echo $left | tr ' ' ',')" || true
	for p in $left; do kill -9 "$p" 2>/dev/null; done
	fail "processes outlived crun: $left"
}
