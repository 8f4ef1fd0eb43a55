#!/bin/bash
# Several crun agents on this machine form one job over loopback: 2x4 with
# the static backend, 2x4 with c10d (the agents race to host the store and
# one wins), heterogeneous nproc (2 + 3: world size 5, ranks contiguous per
# node), and an IPv6 endpoint [::1] (skipped without IPv6 loopback). Every
# worker's environment is checked: ranks, sizes, one MASTER_ADDR:PORT for
# the whole job (group rank 0's agent store), the store endpoint, the
# round and the restart count.
# pid_NAME come from agent (printf -v); conditions and --rdzv-conf values are
# literal text.
# shellcheck disable=SC2016,SC2046,SC2054,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"

# check_job WORLD NODES STORE FILES...: every rank once, one master, ...
check_job() {
	local world=$1 nodes=$2 store=$3
	shift 3
	local ranks masters
	ranks=$(field "$@" rank | sort -n | tr '\n' ' ')
	[ "$ranks" = "$(seq -s ' ' 0 $((world - 1))) " ] || fail "ranks: '$ranks' in $*"
	[ "$(field "$@" world | sort -u)" = "$world" ] || fail "world sizes: $(field "$@" world)"
	[ "$(field "$@" nodes | sort -u)" = "$nodes" ] || fail "group sizes: $(field "$@" nodes)"
	[ "$(field "$@" restart | sort -u)" = 0 ] || fail "restart counts: $(field "$@" restart)"
	[ "$(field "$@" round | sort -u)" = 1 ] || fail "rounds: $(field "$@" round)"
	[ "$(field "$@" store | sort -u)" = "$store" ] || fail "stores: $(field "$@" store)"
	masters=$(field "$@" master | sort -u)
	[ "$(printf '%s\n' "$masters" | wc -l)" = 1 ] || fail "masters: $masters"
	# The agent store: group rank 0's agent's store (the rendezvous store
	# itself when that agent hosts it), a port in any case.
	case $masters in
	*: | *:0) fail "MASTER_PORT '$masters' is not a port" ;;
	esac
}

# check_node FILE NPROC: one group rank per node, local ranks 0..NPROC-1,
# global ranks contiguous from GROUP's first rank
check_node() {
	local f=$1 nproc=$2 ranks first
	[ "$(field "$f" group | sort -u | wc -l)" = 1 ] || fail "group ranks in $f: $(cat "$f")"
	[ "$(field "$f" local | sort -n | tr '\n' ' ')" = "$(seq -s ' ' 0 $((nproc - 1))) " ] ||
		fail "local ranks in $f: $(cat "$f")"
	ranks=$(field "$f" rank | sort -n)
	first=$(printf '%s\n' "$ranks" | head -n 1)
	[ "$(printf '%s\n' "$ranks" | tr '\n' ' ')" = "$(seq -s ' ' "$first" $((first + nproc - 1))) " ] ||
		fail "ranks of $f are not contiguous: $ranks"
}

# Static: node ranks fixed, the store on master-addr:master-port, hosted by
# node rank 0. Node 1 starts first and waits for the store.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=4 --rdzv-backend=static --master-addr=127.0.0.1
	--master-port="$port" --rdzv-id=static1 --max-restarts=0)
agent s1 "${common[@]}" --node-rank=1 sh -c "$worker" "$marker"
sleep 0.2
agent s0 "${common[@]}" --node-rank=0 sh -c "$worker" "$marker"
expect_rc s0 0
expect_rc s1 0
check_job 8 2 "127.0.0.1:$port" "$tmp/s0.out" "$tmp/s1.out"
[ "$(field "$tmp/s0.out" group | sort -u)" = 0 ] || fail "node rank 0 is not group rank 0"
[ "$(field "$tmp/s1.out" rank | sort -n | head -n 1)" = 4 ] || fail "node 1's ranks: $(cat "$tmp/s1.out")"
check_node "$tmp/s0.out" 4
check_node "$tmp/s1.out" 4
grep -q "hosting the rendezvous store" "$tmp/s0.err" || fail "node rank 0 does not host: $(cat "$tmp/s0.err")"
lacks "$tmp/s1.err" "hosting the rendezvous store"
wait_none "$marker"

# The guides' torchrun command, unchanged: no --rdzv-backend, no
# --rdzv-endpoint, underscores. torchrun's default backend is static, so
# crun takes --master_addr/--master_port as the static store.
port=$(free_port)
common=(--nproc_per_node=2 --nnodes=2 --master_addr=127.0.0.1 --master_port="$port"
	--max_restarts=0)
agent t1 "${common[@]}" --node_rank=1 sh -c "$worker" "$marker"
agent t0 "${common[@]}" --node_rank=0 sh -c "$worker" "$marker"
expect_rc t0 0
expect_rc t1 0
[ "$(field "$tmp/t1.out" rank | sort -n | head -n 1)" = 2 ] || fail "torchrun-style node 1: $(cat "$tmp/t1.out" "$tmp/t1.err")"
check_node "$tmp/t0.out" 2
check_node "$tmp/t1.out" 2
wait_none "$marker"

# c10d: both agents qualify to host 127.0.0.1:PORT; one binds, the other
# joins it as a client. Both started together.
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=4 --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=dyn1
	--max-restarts=0)
agent d0 "${common[@]}" sh -c "$worker" "$marker"
agent d1 "${common[@]}" sh -c "$worker" "$marker"
expect_rc d0 0
expect_rc d1 0
check_job 8 2 "127.0.0.1:$port" "$tmp/d0.out" "$tmp/d1.out"
check_node "$tmp/d0.out" 4
check_node "$tmp/d1.out" 4
[ "$(cat "$tmp/d0.err" "$tmp/d1.err" | grep -c "hosting the rendezvous store")" = 1 ] ||
	fail "expected exactly one host: $(cat "$tmp/d0.err" "$tmp/d1.err")"
wait_none "$marker"

# The agent store is group rank 0's call for the whole round: nodes whose
# --agent-store differ (mixed images) give every worker the same
# TORCHELASTIC_USE_AGENT_STORE, that of node rank 0 (static).
for mode in off on; do
	other=$([ $mode = off ] && echo on || echo off)
	port=$(free_port)
	common=(--nnodes=2 --nproc-per-node=2 --rdzv-backend=static --master-addr=127.0.0.1
		--master-port="$port" --rdzv-id=as-$mode --max-restarts=0)
	agent a0 "${common[@]}" --node-rank=0 --agent-store=$mode sh -c 'echo "as rank=$RANK $TORCHELASTIC_USE_AGENT_STORE $MASTER_PORT"'
	agent a1 "${common[@]}" --node-rank=1 --agent-store="$other" sh -c 'echo "as rank=$RANK $TORCHELASTIC_USE_AGENT_STORE $MASTER_PORT"'
	expect_rc a0 0
	expect_rc a1 0
	want=$([ $mode = off ] && echo False || echo True)
	[ "$(cat "$tmp/a0.out" "$tmp/a1.out" | grep -c "as rank=[0-3] $want ")" = 4 ] ||
		fail "node 0 --agent-store=$mode: want $want on all 4 workers: $(cat "$tmp/a0.out" "$tmp/a1.out")"
	[ "$(cat "$tmp/a0.out" "$tmp/a1.out" | grep -oE '[0-9]+$' | sort -u | wc -l)" = 1 ] ||
		fail "MASTER_PORT differs: $(cat "$tmp/a0.out" "$tmp/a1.out")"
	if [ $mode = on ]; then
		grep -q " $port\$" "$tmp/a1.out" || fail "static with the agent store: MASTER_PORT is not the store's $port: $(cat "$tmp/a1.out")"
	fi
done

# Heterogeneous: 2 + 3 workers, world size 5.
port=$(free_port)
common=(--nnodes=2 --rdzv-endpoint="localhost:$port" --rdzv-id=het1 --max-restarts=0)
agent h0 "${common[@]}" --nproc-per-node=2 sh -c "$worker" "$marker"
agent h1 "${common[@]}" --nproc-per-node=3 sh -c "$worker" "$marker"
expect_rc h0 0
expect_rc h1 0
check_job 5 2 "localhost:$port" "$tmp/h0.out" "$tmp/h1.out"
check_node "$tmp/h0.out" 2
check_node "$tmp/h1.out" 3
wait_none "$marker"

# IPv6 loopback, where there is one: a crun-rdzvd that can listen on ::1.
"$CRUN_RDZVD" --host ::1 --port 0 --port-file "$tmp/v6port" -q 2>/dev/null &
p=$!
for _ in $(seq 50); do
	[ -s "$tmp/v6port" ] && break
	sleep 0.02
done
kill "$p" 2>/dev/null
wait "$p" 2>/dev/null
if [ -s "$tmp/v6port" ]; then
	port=$(cat "$tmp/v6port")
	common=(--nnodes=2 --nproc-per-node=2 --rdzv-endpoint="[::1]:$port" --rdzv-id=v6
		--max-restarts=0)
	agent v0 "${common[@]}" sh -c "$worker" "$marker"
	agent v1 "${common[@]}" sh -c "$worker" "$marker"
	expect_rc v0 0
	expect_rc v1 0
	check_job 4 2 "[::1]:$port" "$tmp/v0.out" "$tmp/v1.out"
	field "$tmp/v0.out" master | grep -q '^::1:[0-9]*$' || fail "v6 MASTER_ADDR: $(cat "$tmp/v0.out")"
	wait_none "$marker"
else
	echo "no IPv6 loopback: the [::1] case is skipped"
fi
echo "ok"
