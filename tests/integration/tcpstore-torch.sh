#!/bin/sh
# torch's own TCPStore client, then two unmodified torchrun agents
# (python -m torch.distributed.run, --rdzv_backend c10d, is_host=0),
# against crun-rdzvd: every store call the installed torch has (queues
# with 2.x's queue_push, a blocking pop woken by a push), and a gloo
# all_reduce across the two agents' workers, both agents exit 0. The torch
# is the first of python3, /usr/bin/python3 that has it (CI: Debian's
# python3-torch 1.13); none: skipped. TCPSTORE_PYTHON picks another
# (scripts/compat-torch runs this with pip's torch 2.x).
set -u
. "$(dirname "$0")/rdzvd-lib.sh"
rdzvd_test_init tcpstore-torch

py=
for p in ${TCPSTORE_PYTHON:-python3 /usr/bin/python3}; do
	if ver=$("$p" "$CRUN_TEST_HELPERS_SRC/torch_probe.py" torch.distributed.run 2>/dev/null); then
		py=$p
		break
	fi
done
[ -n "$py" ] || { echo "SKIP: no python with torch"; exit 77; }
echo "torch $ver ($py)"
# torchrun keeps its logs in a fresh torchelastic_* directory in TMPDIR.
export TORCH_CPP_LOG_LEVEL=ERROR PYTHONWARNINGS=ignore TMPDIR="$tmp"

# A short handshake timeout: 1.13's silent callback connections outlive
# it and must be kept (server.h).
start_daemon d --handshake-timeout 1s
timeout --foreground 60 "$py" "$CRUN_SOURCE_DIR/tests/integration/tcpstore-torch.py" "$port" \
	>"$tmp/client.out" 2>&1 || { cat "$tmp/client.out" >&2; fail "torch's client (torch $ver)"; }
grep -q '^done$' "$tmp/client.out" || fail "torch's client did not finish"
echo "ok torch $ver TCPStore client: $(grep -c '^ok' "$tmp/client.out") calls"

# Two torchrun agents, one node each. Underscored flags: what both 1.13 and
# 2.x take. --redirects/--tee given as maps: 1.13's "0" default breaks
# on Python 3.11 (iterating its Std IntFlag skips NONE, 0, so "0" maps to None).
cat >"$tmp/job.py" <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank %d of %d: sum %g" % (dist.get_rank(), dist.get_world_size(), t.item()), flush=True)
dist.destroy_process_group()
PY
apids=
for n in 0 1; do
	timeout --foreground 90 "$py" -m torch.distributed.run --nnodes=2 --nproc_per_node=1 \
		--rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=tcpstore-torch \
		--rdzv_conf=is_host=0 --monitor_interval=0.2 --redirects=0:1 --tee=0:1 \
		"$tmp/job.py" >"$tmp/agent$n.log" 2>&1 &
	apids="$apids $!"
done
n=0
for p in $apids; do
	wait "$p" || fail "torchrun agent $n exited $?"
	n=$((n + 1))
done
for r in 0 1; do
	grep -q "rank $r of 2: sum 3" "$tmp/agent0.log" "$tmp/agent1.log" ||
		fail "no all_reduce result of rank $r"
done
echo "ok two torchrun agents (torch $ver) rendezvoused through crun-rdzvd"
