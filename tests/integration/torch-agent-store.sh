#!/bin/bash
# Real PyTorch workers (gloo through env://) with crun's agent store:
# TORCHELASTIC_USE_AGENT_STORE=True, every worker a TCPStore client of the
# store at MASTER_ADDR:MASTER_PORT, no worker hosting one. One node with 2
# workers; a restart after a worker fails, on the same port (the store
# outlives the attempt and drops its keys between attempts); two agents on
# loopback (c10d), with the endpoint's host holding group rank 0 and with
# crun-rdzvd as the store (group rank 0's agent opens one); and
# --agent-store=off, where rank 0 hosts its own TCPStore. Uses the first of
# python3 and /usr/bin/python3 that has torch (TORCH_PY overrides);
# skipped without one.
# shellcheck disable=SC2016
set -u
. "$(dirname "$0")/multinode-lib.sh"

py=""
for p in ${TORCH_PY:-python3 /usr/bin/python3}; do
	if version=$("$p" "$CRUN_TEST_HELPERS_SRC/torch_probe.py" torch.distributed 2>/dev/null); then
		py=$(command -v "$p")
		break
	fi
done
[ -n "$py" ] || { echo "no python with torch: skipping"; exit 77; }
echo "torch $version ($py)"
export PYTHON_EXEC=$py
W=$CRUN_TEST_HELPERS_SRC/torch_gloo_worker.py

# check FILE WORLD ATTEMPT STORE: every rank's line, the right sum, one
# master, the agent store as given (True/False)
check() {
	local file=$1 world=$2 attempt=$3 store=$4 sum=$(($2 * ($2 + 1) / 2))
	for r in $(seq 0 $(($2 - 1))); do
		grep -qE "torch rank=$r world=$world attempt=$attempt master=[^ ]+ agent_store=$store sum=$sum\$" \
			"$file" || fail "rank $r of attempt $attempt: $(cat "$file")"
	done
}

# --- one node, a restart on the same store ----------------------------------
FAIL_RANK=1 FAIL_ATTEMPT=0 timeout --foreground -s KILL 120 "$CRUN" --standalone --nproc-per-node=2 \
	--max-restarts=1 --min-attempt-time=0 "$W" >"$tmp/one.out" 2>"$tmp/one.err" ||
	fail "one node: exit $?: $(tail -n 30 "$tmp/one.err")"
check "$tmp/one.out" 2 0 True
check "$tmp/one.out" 2 1 True
[ "$(grep -oE 'master=[^ ]+' "$tmp/one.out" | sort -u | wc -l)" = 1 ] ||
	fail "the restart changed MASTER_ADDR:MASTER_PORT: $(cat "$tmp/one.out")"
echo "ok one node: 2 workers on the agent store, a restart on the same port"

# --- two agents, the endpoint's host (group rank 0) hosting -----------------
port=$(free_port)
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port --rdzv-id=ts
	--max-restarts=1 --min-attempt-time=0)
agent a0 "${common[@]}" --node-rank=0 --rdzv-conf=is_host=1 "$W"
agent a1 "${common[@]}" --node-rank=1 --rdzv-conf=is_host=0 "$W"
expect_rc a0 0 120
expect_rc a1 0 120
cat "$tmp/a0.out" "$tmp/a1.out" >"$tmp/a.out"
check "$tmp/a.out" 2 0 True
[ "$(grep -oE 'master=[^ ]+' "$tmp/a.out" | sort -u)" = "master=127.0.0.1:$port" ] ||
	fail "want MASTER_ADDR:MASTER_PORT 127.0.0.1:$port (the hosted store): $(cat "$tmp/a.out")"
echo "ok two agents: the workers share the hosted rendezvous store"

# --- two agents through crun-rdzvd, a failure restarting both ---------------
port=$(free_port)
"$CRUN_RDZVD" --host 127.0.0.1 --port "$port" -q 2>"$tmp/rdzvd.err" &
rdzvd=$!
stray_pids="$stray_pids $rdzvd"
for _ in $(seq 100); do
	"$CRUN_CTL" --endpoint "127.0.0.1:$port" --run-id probe count >/dev/null 2>&1 && break
	sleep 0.05
done
common=(--nnodes=2 --nproc-per-node=1 --rdzv-endpoint=127.0.0.1:$port --rdzv-id=td
	--max-restarts=1 --min-attempt-time=0)
FAIL_RANK=1 FAIL_ATTEMPT=0 agent d0 "${common[@]}" "$W"
FAIL_RANK=1 FAIL_ATTEMPT=0 agent d1 "${common[@]}" "$W"
expect_rc d0 0 120
expect_rc d1 0 120
cat "$tmp/d0.out" "$tmp/d1.out" >"$tmp/d.out"
check "$tmp/d.out" 2 0 True
check "$tmp/d.out" 2 1 True
m=$(grep -oE 'master=[^ ]+' "$tmp/d.out" | sort -u)
[[ $m != *$'\n'* && $m != "master=127.0.0.1:$port" ]] ||
	fail "want one MASTER_ADDR:MASTER_PORT of group rank 0's agent, not crun-rdzvd's: $m"
echo "ok two agents through crun-rdzvd: group rank 0's agent store, a restart on both nodes"
kill "$rdzvd"

# --- the agent store off: rank 0 hosts ---------------------------------------
timeout --foreground -s KILL 120 "$CRUN" --standalone --nproc-per-node=2 --agent-store=off "$W" \
	>"$tmp/off.out" 2>"$tmp/off.err" || fail "--agent-store=off: exit $?: $(tail -n 30 "$tmp/off.err")"
check "$tmp/off.out" 2 0 False
echo "ok --agent-store=off: rank 0 hosts its TCPStore"
