#!/bin/bash
# crun agents against an external crun-rdzvd, over loopback:
# - two jobs (different --rdzv-id) on one store at the same time; the
#   agents on the store's host find it served and join it as clients;
# - after a job succeeded its run is closed: a later join gets "closed";
# - a store with a job token: the right token_file works (and workers get
#   CRUN_TOKEN), a wrong one is a clear error, exit 1;
# - a configuration that differs from the run's is refused, exit 1;
# - a store older than the node-exclusion settings still serves new agents.
# pid_NAME come from agent (printf -v); conditions and --rdzv-conf values are
# literal text.
# shellcheck disable=SC2016,SC2046,SC2054,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

# start_rdzvd NAME ARGS...: a crun-rdzvd on 127.0.0.1 and a free port; sets
# rdzvd_port.
start_rdzvd() {
	local name=$1
	shift
	"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/$name.port" "$@" \
		2>"$tmp/$name.log" &
	stray_pids="$stray_pids $!"
	for _ in $(seq 200); do
		[ -s "$tmp/$name.port" ] && break
		sleep 0.02
	done
	[ -s "$tmp/$name.port" ] || fail "crun-rdzvd did not start: $(cat "$tmp/$name.log")"
	rdzvd_port=$(cat "$tmp/$name.port")
}

# Two jobs on one store.
start_rdzvd store
ep="127.0.0.1:$rdzvd_port"
for job in ja jb; do
	for n in 0 1; do
		agent "$job$n" --nnodes=2 --nproc-per-node=2 --rdzv-endpoint="$ep" \
			--rdzv-id="$job" sh -c "$worker" "$marker"
	done
done
for a in ja0 ja1 jb0 jb1; do
	expect_rc "$a" 0
	lacks "$tmp/$a.err" "hosting the rendezvous store"
done
for job in ja jb; do
	[ "$(cat "$tmp/${job}0.out" "$tmp/${job}1.out" | grep -oE ' rank=[0-9]+' | cut -d= -f2 |
		sort -n | tr '\n' ' ')" = "0 1 2 3 " ] || fail "job $job: $(cat "$tmp/$job"?.out)"
	[ "$(field "$tmp/${job}0.out" "$tmp/${job}1.out" master | sort -u | wc -l)" = 1 ] ||
		fail "job $job has more than one master"
done
[ "$(field "$tmp/ja0.out" master | sort -u)" != "$(field "$tmp/jb0.out" master | sort -u)" ] ||
	fail "two jobs share MASTER_ADDR:MASTER_PORT"

# The run of job ja is closed now.
agent late --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=ja /bin/true
expect_rc late 1
grep -q "run 'ja' is closed: the job has finished" "$tmp/late.err" ||
	fail "late join: $(cat "$tmp/late.err")"
[ "$(wc -l <"$tmp/late.err")" = 1 ] || fail "more than one line: $(cat "$tmp/late.err")"

# A configuration that differs from the run's (one agent joined with 2:3,
# the other with 2).
agent m0 --nnodes=2:3 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=mism \
	--rdzv-conf=join_timeout=5s sh -c "$worker" "$marker"
wait_for "$tmp/store.log" "run 'mism': node"
agent m1 --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=mism /bin/true
expect_rc m1 1
grep -q "cannot join run 'mism' at '$ep': --nnodes 2 differs from the run's 2:3" "$tmp/m1.err" ||
	fail "mismatch: $(cat "$tmp/m1.err")"
kill "$pid_m0"
finish m0

# A store with a token.
printf 'right-token\n' >"$tmp/right"
printf 'wrong-token\n' >"$tmp/wrong"
start_rdzvd tokstore --token-file "$tmp/right"
ep="127.0.0.1:$rdzvd_port"
agent bad --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=tok \
	--rdzv-conf="token_file=$tmp/wrong" /bin/true
expect_rc bad 1
grep -q "the rendezvous store at '$ep' refused this node: authentication failed" \
	"$tmp/bad.err" || fail "wrong token: $(cat "$tmp/bad.err")"
[ "$(wc -l <"$tmp/bad.err")" = 1 ] || fail "more than one line: $(cat "$tmp/bad.err")"
agent none --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=tok /bin/true
expect_rc none 1
grep -q "refused this node" "$tmp/none.err" || fail "no token: $(cat "$tmp/none.err")"
for n in 0 1; do
	agent "t$n" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=tok \
		--rdzv-conf="token_file=$tmp/right" "$H/crun-test-env" "$marker"
done
expect_rc t0 0
expect_rc t1 0
grep -qx '\[[01]\]:CRUN_TOKEN=right-token' "$tmp/t0.out" || fail "CRUN_TOKEN: $(cat "$tmp/t0.out")"
grep -qx "\[[01]\]:CRUN_STORE=$ep" "$tmp/t1.out" || fail "CRUN_STORE: $(cat "$tmp/t1.out")"

# A store older than the exclusion settings and "stop" (crun-rdzvd's test
# hook CRUN_TEST_RDZV_OLD_STORE: no capability, and the long JOIN or FAIL
# is a protocol error there): agents still work with it, without exclusion.
CRUN_TEST_RDZV_OLD_STORE=1 start_rdzvd oldstore
ep="127.0.0.1:$rdzvd_port"
for n in 0 1; do
	agent "o$n" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=old \
		--rdzv-conf=blacklist_failures=2 sh -c "$worker" "$marker"
done
expect_rc o0 0
expect_rc o1 0
# A configuration error ("stop") reaches an old store as a plain failure:
# the run restarts until --max-restarts, and the store never sees a
# protocol error.
for n in 0 1; do
	agent "s$n" --nnodes=2 --nproc-per-node=1 --max-restarts=1 --rdzv-endpoint="$ep" \
		--rdzv-id=oldstop sh -c 'echo "w restart=$TORCHELASTIC_RESTART_COUNT"; exit 78'
done
expect_rc s0 1
expect_rc s1 1
grep -q "round 2 of run 'oldstop' ended (exhausted)" "$tmp/oldstore.log" ||
	fail "old store, stop: $(cat "$tmp/oldstore.log")"
lacks "$tmp/oldstore.log" "protocol error"
lacks "$tmp/s0.err" "protocol error"
wait_none "$marker"
echo "ok"
