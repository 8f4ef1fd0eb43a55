# A Python worker that fails the way a PyTorch script decorated with
# torch.distributed.elastic.multiprocessing.errors.record does: it writes
# the exception as JSON to TORCHELASTIC_ERROR_FILE and exits 1. torch is
# not needed. Rank FAIL_RANK (default 0) fails; the others exit 0.
import json
import os
import sys
import time
import traceback


def record(fn):
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            path = os.environ.get("TORCHELASTIC_ERROR_FILE")
            if path:
                data = {
                    "message": {
                        "message": f"{type(e).__name__}: {e}",
                        "extraInfo": {
                            "py_callstack": traceback.format_exc(),
                            "timestamp": str(int(time.time())),
                        },
                    }
                }
                with open(path, "w") as fp:
                    json.dump(data, fp)
            raise
    return wrapper


def load_batch(rank):
    raise RuntimeError(f"boom in load_batch on rank {rank}")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == int(os.environ.get("FAIL_RANK", "0")):
        load_batch(rank)
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
