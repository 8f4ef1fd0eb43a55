#!/bin/bash
# crun agents against an external crun-rdzvd, over loopback:
# - two jobs (different --rdzv-id) on one store at the same time; the
#   agents on the store's host find it served and join it as clients;
# - after a job succeeded its run is closed: a later join gets "closed";
# - a store with a job token: the right token_file works (and workers get
#   CRUN_TOKEN), a wrong one is a clear error, exit 1;
# - a configuration that differs from the run's is refused, exit 1.
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
wait_none "$marker"
echo "ok"
