#!/bin/bash
# The cases of PyTorch's launcher tests (test/distributed/launcher/
# test_run.py) that need torch itself, ported to crun as
# torch-launcher-cases.sh ports the others: test_init_method_tcp_with_
# torchelastic and test_init_method_env_with_torchelastic, each a gloo
# group of two --run-path workers and an all_reduce. They run with a
# python that has torch (python3, else /usr/bin/python3: Debian's
# python3-torch), else the test skips.
set -u
. "$(dirname "$0")/multinode-lib.sh"

torch_py=""
for py in python3 /usr/bin/python3; do
	if "$py" "$CRUN_TEST_HELPERS_SRC/torch_probe.py" torch.distributed >/dev/null 2>&1; then
		torch_py=$(command -v "$py")
		break
	fi
done
[ -n "$torch_py" ] || { echo "no python with torch: skipping"; exit 77; }
PYTHON_EXEC=$torch_py
export PYTHON_EXEC

cat >"$tmp/init_method.py" <<'PY'
import argparse, os
import torch, torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--init-method")
a = p.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method=a.init_method, rank=rank, world_size=world)
t = torch.tensor(rank)
dist.all_reduce(t)
assert t.item() == sum(range(world)), t.item()
dist.destroy_process_group()
print("sum ok")
PY

# init_case NAME INIT_METHOD: the workers, on --master-port=PORT, join
# INIT_METHOD (PORT in it replaced)
init_case() {
	local port
	port=$(free_port)
	crun --run-path --nnodes=1 --nproc-per-node=2 --master-addr=localhost \
		--master-port="$port" --monitor-interval=1 "$tmp/init_method.py" \
		--init-method="${2//PORT/$port}" >"$tmp/out" 2>"$tmp/err" ||
		fail "$1: $(tail -n 30 "$tmp/err")"
	has "$tmp/out" "[0]:sum ok"
	has "$tmp/out" "[1]:sum ok"
}
init_case test_init_method_tcp_with_torchelastic tcp://localhost:PORT
init_case test_init_method_env_with_torchelastic env://
echo "ok ($("$torch_py" -c 'import importlib.metadata as m; print("torch", m.version("torch"))' 2>/dev/null || echo "$torch_py"))"
