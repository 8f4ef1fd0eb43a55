#!/bin/bash
# Multi-node crun over real distinct addresses: three nodes made by
# scripts/cluster (network namespaces joined by a bridge), one crun agent
# per node, the store hosted by node 0's agent on node 0's address with a
# job token.
# - a partition: node 2's bridge port drops every frame. Nodes 0 and 1
#   notice after keep_alive_interval x keep_alive_max_attempt (0.5s x 3),
#   restart with 2 nodes (--nnodes=2:3; a counted restart) and finish; the
#   cut node's agent kills its workers within its own keep-alive window,
#   naming the store it lost, and gives up after its rejoin_timeout (1s)
#   (multinode-rejoin.sh covers a node that comes back);
# - the store host dies (SIGKILL of node 0's agent): node 1's agent stops
#   its workers at once (the kernel closes the connection) and exits 1,
#   saying the job cannot go on without node 0's store;
# - the store host dies silently (cut off, then SIGKILL: its FIN never
#   arrives): node 1's agent kills its workers within the keep-alive window
#   and exits 1 after its rejoin_timeout;
# - MASTER_ADDR: every worker on every node sees the address of node 0
#   (the node of global rank 0), never 127.0.0.1, and one MASTER_PORT.
# Prints the measured detection times. Skips (77) where network namespaces
# are not available (not root, no iproute2). Every wait is bounded.
# pid_NAME come from nagent (printf -v); conditions are literal text.
# shellcheck disable=SC2016,SC2154 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/multinode-lib.sh"
. "$here/cluster-lib.sh"
cluster_skip_unless_available

# now: milliseconds since the epoch into $now (no fork: timings stay exact)
now() {
	now=${EPOCHREALTIME/./}
	now=$((now / 1000))
}
now
t_start=$now

# nagent NODE NAME ARGS...: "$CRUN ARGS..." in node NODE in the background;
# output in $tmp/NAME.out and $tmp/NAME.err, its pid in pid_NAME (for
# finish and expect_rc of multinode-lib.sh; the cluster's teardown kills it
# if left)
nagent() {
	local node=$1 name=$2
	shift 2
	cluster_bg "$node" "$CRUN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	printf -v "pid_$name" '%s' "$CLUSTER_LAST_PID"
}

# show NAME...: the agents' output, for a failure message
show() {
	local n
	for n in "$@"; do
		printf -- '--- %s.out\n%s\n--- %s.err\n%s\n' "$n" "$(tail -n 20 "$tmp/$n.out")" \
			"$n" "$(tail -n 30 "$tmp/$n.err")"
	done
}

# workers MARK: the pids of the workers (sh -c ...) whose command line has
# MARK, not the agent's
workers() {
	ps -eo pid=,stat=,args= | awk -v m="$1" 'index($0, m) && $2 !~ /^Z/ && $3 == "sh" {print $1}'
}

# one_line FILE TEXT: FILE has exactly one line that contains TEXT
one_line() {
	[ "$(grep -cF -- "$2" "$1")" = 1 ] || fail "want one line '$2' in $1:
$(tail -n 30 "$1")"
}

cluster_up 3
A=("${CLUSTER_ADDRS[@]}")
# Each node is a network namespace of its own that nothing else uses: a
# fixed store port cannot collide there.
port=29400
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
[ -s "$tmp/token" ] || fail "cannot write the job token"
ka="keep_alive_interval=0.5,keep_alive_max_attempt=3,token_file=$tmp/token"

# start_host NAME ARGS...: node 0's agent, the store's host; returns once
# it has joined its own store (the store logs each join), so that it is
# the first node of the run: group rank 0 and global rank 0.
start_host() {
	local name=$1
	shift
	nagent 0 "$name" "$@"
	wait_for "$tmp/$name.err" "hosting the rendezvous store of run"
	wait_for "$tmp/$name.err" "joins round 1"
}

# masters FILE...: the distinct MASTER_ADDR:MASTER_PORT of the worker lines
masters() {
	field "$@" master | sort -u
}

# --- 1. partition: node 2 cut off, 0 and 1 go on with 2 nodes -------------
ep="${A[0]}:$port"
common=(--nnodes=2:3 --nproc-per-node=2 --rdzv-endpoint="$ep" --rdzv-id=part
	--rdzv-conf="$ka,last_call_timeout=1")
export MN_UNTIL='[ "$GROUP_WORLD_SIZE" = 2 ]'
start_host p0 "${common[@]}" sh -c "$worker" "$marker.p0"
nagent 1 p1 "${common[@]}" sh -c "$worker" "$marker.p1"
nagent 2 p2 "${common[@]/last_call_timeout=1/last_call_timeout=1,rejoin_timeout=1s}" \
	sh -c "$worker" "$marker.p2"
for n in p0 p1 p2; do
	wait_for "$tmp/$n.out" "nodes=3 world=6 restart=0 round=1" 2
done
# Every rank once, and on every node the address of node 0 (global rank 0)
[ "$(field "$tmp"/p?.out rank | sort -n | tr '\n' ' ')" = "0 1 2 3 4 5 " ] ||
	fail "ranks of round 1: $(cat "$tmp"/p?.out)"
[ "$(field "$tmp/p0.out" rank | sort -n | tr '\n' ' ')" = "0 1 " ] ||
	fail "node 0 does not hold ranks 0 and 1: $(cat "$tmp/p0.out")"
m=$(masters "$tmp"/p?.out)
[[ $m == "$ep" ]] ||
	fail "round 1: want one MASTER_ADDR:PORT, node 0's store $ep (the agent store), got: $m"
g2=$(field "$tmp/p2.out" group | sort -u)
[[ $g2 == [12] ]] || fail "node 2's group rank: '$g2'"

cluster_cut 2 || fail "cannot cut node 2"
now
t_cut=$now
# Up to 5 s for: each of nodes 0 and 1 to say that round 1 ended (t_p0,
# t_p1), node 2's workers to be gone (t_p2), and both survivors' workers to
# run in round 2 (t_r2).
gone="left: no keep-alive for 1500ms; restarting (restart 1 of 3)"
t_p0="" t_p1="" t_p2="" t_r2=""
for _ in $(seq 250); do
	now
	[ -n "$t_p0" ] || ! grep -qF -- "$gone" "$tmp/p0.err" || t_p0=$((now - t_cut))
	[ -n "$t_p1" ] || ! grep -qF -- "$gone" "$tmp/p1.err" || t_p1=$((now - t_cut))
	[ -n "$t_p2" ] || [ -n "$(workers "$marker.p2")" ] || t_p2=$((now - t_cut))
	[ -n "$t_r2" ] || [ "$(cat "$tmp/p0.out" "$tmp/p1.out" |
		grep -cF 'nodes=2 world=4 restart=1 round=2')" != 4 ] || t_r2=$((now - t_cut))
	[ -n "$t_p0" ] && [ -n "$t_p1" ] && [ -n "$t_p2" ] && [ -n "$t_r2" ] && break
	sleep 0.02
done
[ -n "$t_p2" ] || fail "the cut node's workers still run 5 s after the cut: $(show p2)"
[ -n "$t_p0" ] || fail "node 0 did not notice the cut within 5 s: $(show p0)"
[ -n "$t_p1" ] || fail "node 1 did not notice the cut within 5 s: $(show p1)"
[ -n "$t_r2" ] || fail "nodes 0 and 1 did not run round 2 within 5 s: $(show p0 p1)"
# The window is 1.5 s from the last frame, which came at most 0.5 s before
# the cut: not before 1 s (it is the keep-alive, not a closed connection),
# and not much after 1.5 s.
for v in t_p0 t_p1 t_p2; do
	((${!v} >= 900 && ${!v} <= 2500)) ||
		fail "$v: noticed after ${!v} ms, want the keep-alive window (1 to 1.5 s): $(show p0 p1 p2)"
done
expect_rc p2 1 3
has "$tmp/p2.err" "crun: lost the rendezvous store at '$ep' (no reply for 1500ms); rejoining within 1s"
has "$tmp/p2.err" "crun: cannot rejoin run 'part' at '$ep' within 1s; giving up"
wait_none "$marker.p2"
for n in p0 p1; do
	expect_rc "$n" 0 10
	one_line "$tmp/$n.err" "round 1 ended: node $g2 ("
	one_line "$tmp/$n.err" "$gone"
	wait_for "$tmp/$n.out" "nodes=2 world=4 restart=1 round=2" 2 1
done
[ "$(grep -hF 'round=2' "$tmp/p0.out" "$tmp/p1.out" | grep -oE ' rank=[0-9]+' | cut -d= -f2 |
	sort -n | tr '\n' ' ')" = "0 1 2 3 " ] || fail "ranks of round 2: $(cat "$tmp"/p?.out)"
m2=$(grep -hF 'round=2' "$tmp/p0.out" "$tmp/p1.out" | grep -oE ' master=[^ ]*' | sort -u)
[[ $m2 == " master=${A[0]}:"* && $m2 != *$'\n'* ]] || fail "round 2's MASTER_ADDR:PORT: $m2"
wait_none "$marker.p"
cluster_heal 2 || fail "cannot heal node 2"

# --- 2. the store host killed: node 1 ends at once, naming it ---------------
# (also 3.: MASTER_ADDR on node 1 is node 0's address; one MASTER_PORT,
# the store's)
port=$((port + 1))
ep="${A[0]}:$port"
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="$ep" --rdzv-id=kill
	--rdzv-conf="$ka,rejoin_timeout=500ms")
export MN_UNTIL=false
start_host k0 "${common[@]}" sh -c "$worker" "$marker.k0"
nagent 1 k1 "${common[@]}" sh -c "$worker" "$marker.k1"
wait_for "$tmp/k0.out" "nodes=2 world=4 restart=0 round=1" 2
wait_for "$tmp/k1.out" "nodes=2 world=4 restart=0 round=1" 2
[ "$(field "$tmp/k1.out" rank | sort -n | tr '\n' ' ')" = "2 3 " ] ||
	fail "node 1's ranks: $(cat "$tmp/k1.out")"
m=$(masters "$tmp/k1.out")
[[ $m == "${A[0]}:"* && $m != *$'\n'* ]] ||
	fail "node 1's workers: want MASTER_ADDR ${A[0]} (node 0), got: $m"
[ "$(masters "$tmp/k0.out")" = "$m" ] ||
	fail "MASTER_ADDR:PORT differs: node 0 $(masters "$tmp/k0.out"), node 1 $m"
# The agent store: node 0 hosts the rendezvous store and holds group rank
# 0, so its workers' TCPStore is that very store, as torchrun's.
[ "${m##*:}" = "$port" ] || fail "MASTER_PORT is not node 0's store (the agent store): $m"
now
t0=$now
kill -KILL "$pid_k0"
t_k1=""
for _ in $(seq 150); do
	[ -n "$(workers "$marker.k1")" ] || { now; t_k1=$((now - t0)); break; }
	sleep 0.02
done
[ -n "$t_k1" ] || fail "node 1's workers still run 3 s after the store host died: $(show k1)"
((t_k1 <= 1500)) || fail "node 1 noticed the killed store host after $t_k1 ms (window 1.5 s)"
expect_rc k1 1 2
has "$tmp/k1.err" "crun: the rendezvous store hosted by node 0's agent at '$ep' is gone (connection closed): the job cannot go on without it; a job that must survive the loss of node 0 uses a standalone crun-rdzvd (crun-rdzvd(8))"
lacks "$tmp/k1.err" "rejoin"
finish k0 1
wait_none "$marker.k"

# --- 2b. the store host dies silently: node 1 ends within the window --------
port=$((port + 1))
ep="${A[0]}:$port"
common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="$ep" --rdzv-id=silent
	--rdzv-conf="$ka,rejoin_timeout=500ms")
start_host s0 "${common[@]}" sh -c "$worker" "$marker.s0"
nagent 1 s1 "${common[@]}" sh -c "$worker" "$marker.s1"
wait_for "$tmp/s0.out" "nodes=2 world=4 restart=0 round=1" 2
wait_for "$tmp/s1.out" "nodes=2 world=4 restart=0 round=1" 2
[ "$(masters "$tmp/s1.out")" = "$(masters "$tmp/s0.out")" ] ||
	fail "MASTER_ADDR:PORT differs: $(masters "$tmp/s0.out") and $(masters "$tmp/s1.out")"
cluster_cut 0 || fail "cannot cut node 0"
now
t0=$now
kill -KILL "$pid_s0"
t_s1=""
for _ in $(seq 200); do
	[ -n "$(workers "$marker.s1")" ] || { now; t_s1=$((now - t0)); break; }
	sleep 0.02
done
[ -n "$t_s1" ] || fail "node 1's workers still run 4 s after the store host went silent: $(show s1)"
((t_s1 >= 900 && t_s1 <= 2500)) ||
	fail "node 1 noticed the silent store host after $t_s1 ms, want the window (1 to 1.5 s)"
expect_rc s1 1 2
has "$tmp/s1.err" "crun: lost the rendezvous store at '$ep' (no reply for 1500ms); rejoining within 500ms"
has "$tmp/s1.err" "crun: cannot rejoin run 'silent' at '$ep' within 500ms; giving up"
finish s0 1
wait_none "$marker.s"

now
elapsed=$((now - t_start))
((elapsed < 40000)) || fail "took $elapsed ms, want < 40 s"
echo "partition of node 2: noticed by node 0 (the store) after $t_p0 ms, node 1 after $t_p1 ms;" \
	"the cut node's workers gone after $t_p2 ms; round 2 running after $t_r2 ms"
echo "store host killed: node 1's workers gone after $t_k1 ms; store host silent: after $t_s1 ms"
echo "ok: $elapsed ms"
