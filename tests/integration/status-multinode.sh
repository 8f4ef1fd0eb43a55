#!/bin/bash
# crun status of a 2-node job over real distinct addresses (scripts/cluster
# namespaces, node 0's agent hosting the store with a job token):
# - from node 1's namespace, `crun status --endpoint --run --token-file`
#   shows both members and every rank, as a table and as JSON; with the
#   monitor's recording calls in the agent, the round, the members'
#   addresses and each rank's pid and state too;
# - on each node, `crun status` alone finds the job by its job file;
# - the start line names the run's store and the token file; after the
#   job the store's host says the run is closed, node 1 says how it
#   ended, and both agents' job files are gone.
# Skips (77) where network namespaces are not available.
# shellcheck disable=SC2015,SC2016,SC2154 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/multinode-lib.sh"
. "$here/cluster-lib.sh"
cluster_skip_unless_available

cluster_up 2
A=("${CLUSTER_ADDRS[@]}")
port=29400
ep="${A[0]}:$port"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
# One job directory per node: the nodes share this machine's files.
mkdir -m 700 "$tmp/x0" "$tmp/x1"
export MN_UNTIL="[ -e $tmp/stop ]"
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="$ep" --rdzv-id=st
	--rdzv-conf="token_file=$tmp/token")
cluster_bg 0 env XDG_RUNTIME_DIR="$tmp/x0" "$CRUN" "${common[@]}" sh -c "$worker" "$marker" \
	>"$tmp/n0.out" 2>"$tmp/n0.err"
pid0=$CLUSTER_LAST_PID
wait_for "$tmp/n0.err" "joins round 1"
cluster_bg 1 env XDG_RUNTIME_DIR="$tmp/x1" "$CRUN" "${common[@]}" sh -c "$worker" "$marker" \
	>"$tmp/n1.out" 2>"$tmp/n1.err"
pid1=$CLUSTER_LAST_PID
wait_for "$tmp/n0.out" "nodes=2 world=4" 2
wait_for "$tmp/n1.out" "nodes=2 world=4" 2
has "$tmp/n1.err" "crun: run 'st' store on $ep (token file '$tmp/token'); status: crun status --run st"
lacks "$tmp/n1.err" "$(cat "$tmp/token")"

# check FILE: the job document of run st
check() {
	python3 - "$1" "$ep" "${A[0]}" "${A[1]}" <<'PY' || fail "json of $1: $(cat "$1")"
import json, sys
doc = json.load(open(sys.argv[1]))
ep, a0, a1 = sys.argv[2], sys.argv[3], sys.argv[4]
assert doc["run_id"] == "st" and doc["endpoint"] == ep, doc
assert len(doc["nodes"]) == 2, doc["nodes"]
assert len({n["node_id"] for n in doc["nodes"]}) == 2, doc["nodes"]
assert len(doc["members"]) == 2, doc["members"]
assert all(m["local_world_size"] == 2 for m in doc["members"]), doc["members"]
ranks = doc["ranks"]
assert sorted(r["local_rank"] for r in ranks) == [0, 0, 1, 1], ranks
assert doc["round"] == 1 and doc["restart_count"] == 0, doc
assert [r["rank"] for r in ranks] == [0, 1, 2, 3], ranks
assert all(r["state"] == "running" and r["pid"] > 0 for r in ranks), ranks
assert [m["addr"] for m in doc["members"]] == [a0, a1], doc["members"]
assert all(m["state"] == "running" for m in doc["members"]), doc["members"]
PY
}
# From node 1, with the endpoint and the token file: poll (bounded) until
# both nodes have published and every rank runs.
rc=1
for _ in $(seq 50); do
	cluster_exec 1 env XDG_RUNTIME_DIR="$tmp/x1" timeout --foreground 10 "$CRUN" status --endpoint "$ep" \
		--run st --token-file "$tmp/token" --json >"$tmp/st.json" 2>"$tmp/st.err"
	rc=$?
	[ $rc = 0 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
sys.exit(0 if len(d["nodes"]) == 2 and
	all(r["state"] == "running" for r in d["ranks"]) else 1)' "$tmp/st.json" && break
	sleep 0.1
done
[ $rc = 0 ] || fail "crun status from node 1: $(cat "$tmp/st.err")"
check "$tmp/st.json"
cluster_exec 1 timeout --foreground 10 "$CRUN" status --endpoint "$ep" --run st --token-file "$tmp/token" \
	>"$tmp/st.out" 2>"$tmp/st.err" || fail "table from node 1: $(cat "$tmp/st.err")"
grep -q "^run st  store $ep  round " "$tmp/st.out" || fail "table: $(cat "$tmp/st.out")"
[ "$(grep -cE '^[-0-9]+ +[^ ]+ +[01] +' "$tmp/st.out")" = 4 ] || fail "rank rows: $(cat "$tmp/st.out")"
# The same through crunctl, and on each node by its job file alone.
cluster_exec 1 timeout --foreground 10 "$CRUN_CTL" --endpoint "$ep" --run st --token-file "$tmp/token" \
	status --json >"$tmp/ctl.json" 2>"$tmp/ctl.err" || fail "crunctl from node 1: $(cat "$tmp/ctl.err")"
check "$tmp/ctl.json"
for n in 0 1; do
	cluster_exec $n env XDG_RUNTIME_DIR="$tmp/x$n" timeout --foreground 10 "$CRUN" status --json \
		>"$tmp/jf$n.json" 2>"$tmp/jf$n.err" || fail "crun status on node $n: $(cat "$tmp/jf$n.err")"
	check "$tmp/jf$n.json"
done

touch "$tmp/stop"
for p in $pid0 $pid1; do
	for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$p" 2>/dev/null && fail "agent $p did not end: $(tail "$tmp"/n?.err)"
done
wait_for "$tmp/n0.err" "run 'st' is closed: the job has finished (round 1, 0 restarts)"
grep -qE "^crun: run 'st' ended: succeeded \(0 restarts, [0-9.]+s\)$" "$tmp/n1.err" ||
	fail "node 1's closing line: $(cat "$tmp/n1.err")"
for n in 0 1; do
	[ -z "$(ls -A "$tmp/x$n/crun/jobs")" ] || fail "node $n's job file left: $(ls "$tmp/x$n/crun/jobs")"
done
echo "ok"
