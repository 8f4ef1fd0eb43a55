#!/bin/bash
# libcrun's worker API from real processes: the example program
# (tests/examples/ncclid_example.c, also in libcrun(3)) as 4 ranks against
# crun-rdzvd with a token and the environment set by hand, its one-line
# errors, and, when crun is built, under the real crun (which hosts the
# store and sets every variable), also across a restart, where the second
# round must not read the first round's id. Every process is bounded by
# timeout(1); the daemon is killed on exit.
set -u
: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"
: "${CRUN_TEST_HELPERS:?CRUN_TEST_HELPERS must name the built test helpers}"
EX=$CRUN_TEST_HELPERS/ncclid_example
[ -x "$EX" ] || { echo "FAIL: $EX is not built"; exit 1; }
for v in $(compgen -e | grep -E '^(PET_|TORCHELASTIC_|CRUN_)'); do
	case $v in CRUN_RDZVD | CRUN_TEST_HELPERS* | CRUN_BUILD_DIR | CRUN_SOURCE_DIR | CRUN | \
		CRUN_CTL | CRUN_TRAIN) ;;
	*) unset "$v" ;;
	esac
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-worker-api.XXXXXX") || exit 1
daemon=""
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	exit 1
}

# check_hashes FILE PREFIX N: N lines "PREFIXrank r: id hash H" with one H;
# sets $hash.
check_hashes() {
	local n
	n=$(grep -cE "^$2rank [0-9]+: id hash [0-9a-f]{16}\$" "$1")
	[ "$n" = "$3" ] || fail "expected $3 hash lines in $1, got $n: $(cat "$1")"
	hash=$(grep -oE "^$2rank [0-9]+: id hash [0-9a-f]{16}\$" "$1" | awk '{print $NF}' |
		sort -u)
	[ "$(echo "$hash" | wc -l)" = 1 ] || fail "ranks got different ids: $(cat "$1")"
}

# The man page shows the example as it is (scdoc doubles backslashes).
if [ -n "${CRUN_SOURCE_DIR:-}" ]; then
	awk '/^\/\* libcrun.s worker API in a native worker/ {on = 1} on && /^```$/ {exit}
		on {print}' "$CRUN_SOURCE_DIR/man/libcrun.3.scd" | sed 's/\\\\/\\/g' >"$tmp/man.c"
	diff -u "$CRUN_SOURCE_DIR/tests/examples/ncclid_example.c" "$tmp/man.c" >"$tmp/man.diff" ||
		fail "libcrun(3)'s EXAMPLES differ from tests/examples/ncclid_example.c:
$(head -40 "$tmp/man.diff")"
fi

# --- against crun-rdzvd, environment by hand ---------------------------
printf 'worker-api-token\n' >"$tmp/token"
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/port" --token-file "$tmp/token" \
	2>"$tmp/rdzvd.log" &
daemon=$!
for _ in $(seq 100); do
	[ -s "$tmp/port" ] && break
	kill -0 "$daemon" 2>/dev/null || fail "crun-rdzvd exited: $(cat "$tmp/rdzvd.log")"
	sleep 0.1
done
[ -s "$tmp/port" ] || fail "crun-rdzvd wrote no port file in 10 s"
port=$(cat "$tmp/port")

# run_ranks RUN ROUND N FIRST LAST: ranks FIRST..LAST of N, all waited for.
run_ranks() {
	local pids="" r st=0
	for r in $(seq "$4" "$5"); do
		CRUN_STORE=127.0.0.1:$port CRUN_RUN_ID=$1 CRUN_ROUND=$2 CRUN_TOKEN_FILE=$tmp/token \
			RANK=$r WORLD_SIZE=$3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=$3 GROUP_RANK=0 \
			CRUN_TIMEOUT=${TIMEOUT:-10s} timeout --foreground -s KILL 20 "$EX" \
			>"$tmp/out.$r" 2>"$tmp/err.$r" &
		pids="$pids $!"
	done
	for p in $pids; do
		wait "$p" || st=1
	done
	return $st
}

run_ranks job1 0 4 0 3 || fail "4 ranks by hand: $(cat "$tmp"/err.*)"
cat "$tmp"/out.[0-3] >"$tmp/all"
check_hashes "$tmp/all" "" 4
for r in 0 1 2 3; do
	grep -qE "^rank $r of 4 on .+ \\(local rank $r\\): id hash $hash\$" "$tmp/out.0" ||
		fail "rank 0 lacks the line of rank $r: $(cat "$tmp/out.0")"
done
[ "$(wc -l <"$tmp/out.1")" = 1 ] || fail "rank 1 printed more than its hash"
first=$hash

# The same run and round again: new handles, a new id, nothing mixed up.
run_ranks job1 0 4 0 3 || fail "second job in the same round: $(cat "$tmp"/err.*)"
cat "$tmp"/out.[0-3] >"$tmp/all"
check_hashes "$tmp/all" "" 4
[ "$hash" != "$first" ] || fail "the second job got the first one's id"

# Rank 0 never comes: rank 1 fails with one line, within CRUN_TIMEOUT.
rm -f "$tmp"/err.*
start=$(date +%s%N)
TIMEOUT=1s run_ranks job2 0 2 1 1 && fail "rank 1 succeeded without rank 0"
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 5000 ] || fail "rank 1 took $ms ms to time out"
grep -qx "ncclid_example: broadcast of the id failed: broadcast 1.1 from rank 0: timed out after 1000 ms waiting for rank 0" \
	"$tmp/err.1" || fail "timeout message: $(cat "$tmp/err.1")"

# Not under crun at all; a wrong token.
env -u RANK WORLD_SIZE=2 timeout --foreground -s KILL 20 "$EX" >/dev/null 2>"$tmp/err" && fail "ran without RANK"
grep -qx "ncclid_example: RANK is not set (is this program running under crun?)" "$tmp/err" ||
	fail "no-RANK message: $(cat "$tmp/err")"
RANK=0 WORLD_SIZE=1 CRUN_STORE=127.0.0.1:$port CRUN_TOKEN=wrong timeout --foreground -s KILL 20 "$EX" \
	>/dev/null 2>"$tmp/err" && fail "ran with a wrong token"
grep -q "^ncclid_example: cannot reach the store: .*authentication failed" "$tmp/err" ||
	fail "wrong-token message: $(cat "$tmp/err")"

# --- under crun -------------------------------------------------------
if [ -z "${CRUN:-}" ]; then
	echo "worker-api: crun is not built; checked against crun-rdzvd only"
	exit 0
fi
timeout --foreground -s KILL 30 "$CRUN" --standalone --nproc-per-node=4 --max-restarts=0 "$EX" \
	>"$tmp/crun.out" 2>"$tmp/crun.err" || fail "under crun: $(cat "$tmp/crun.err")"
check_hashes "$tmp/crun.out" '\[[0-3]\]:' 4
for r in 0 1 2 3; do
	grep -qE "^\\[0\\]:rank $r of 4 on .+ \\(local rank $r\\): id hash $hash\$" \
		"$tmp/crun.out" || fail "under crun, no line for rank $r: $(cat "$tmp/crun.out")"
done

# A restart: in round 0 rank 3 fails before it calls anything, while rank
# 0 has already stored round 0's id; round 1 must agree on a new id.
cat >"$tmp/flaky.sh" <<EOF
#!/bin/sh
[ "\$CRUN_ROUND" = 0 ] && [ "\$RANK" = 3 ] && { sleep 0.2; exit 3; }
exec "$EX"
EOF
chmod +x "$tmp/flaky.sh"
timeout --foreground -s KILL 30 "$CRUN" --standalone --nproc-per-node=4 --max-restarts=1 \
	--shutdown-timeout=2s "$tmp/flaky.sh" >"$tmp/crun.out" 2>"$tmp/crun.err" ||
	fail "restarted job: $(cat "$tmp/crun.err")"
grep -q "restarting" "$tmp/crun.err" || fail "no restart: $(cat "$tmp/crun.err")"
[ "$(grep -c '^\[0\]:rank [0-3] of 4 on ' "$tmp/crun.out")" = 4 ] ||
	fail "round 1 did not finish: $(cat "$tmp/crun.out")"
grep '^\[3\]:rank 3: id hash' "$tmp/crun.out" >"$tmp/r3"
hash3=$(awk '{print $NF}' "$tmp/r3")
grep -qE "^\\[0\\]:rank 3 of 4 on .+: id hash $hash3\$" "$tmp/crun.out" ||
	fail "rank 3's id differs from rank 0's in round 1: $(cat "$tmp/crun.out")"
echo "worker-api: example ok by hand, under crun, and across a restart"
