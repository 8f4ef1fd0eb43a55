"""A PyTorch worker: a gloo process group through env://, one all_reduce,
one barrier. Prints one line:

  torch rank=R world=W attempt=A master=ADDR:PORT agent_store=X sum=S

where S is the all_reduce of rank + 1 over the world. With FAIL_RANK and
FAIL_ATTEMPT set, that rank exits 1 after the all_reduce in that attempt
(TORCHELASTIC_RESTART_COUNT), so that the group restarts."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
world = dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
print(
    f"torch rank={rank} world={world} attempt={attempt} "
    f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
    f"agent_store={os.environ['TORCHELASTIC_USE_AGENT_STORE']} sum={int(t.item())}",
    flush=True,
)
if os.environ.get("FAIL_RANK") == str(rank) and os.environ.get("FAIL_ATTEMPT") == attempt:
    sys.exit(1)
dist.barrier()
dist.destroy_process_group()
