# Workers for tests/integration/torch-launcher-cases.sh: the behaviours of
# the scripts and entrypoints in PyTorch's launcher and elastic-agent tests
# (test/distributed/launcher/bin/test_script.py, local_elastic_agent_test.py),
# written anew in plain Python so that they run without torch.
#
#   launcher_cases.py script [--fail] [--touch-file-dir DIR]
#       prints the torchelastic variables (each must be set), then raises
#       or touches DIR/RANK
#   launcher_cases.py env KEY[=VALUE]...   each KEY is set (to VALUE)
#   launcher_cases.py unset KEY            KEY is not set
#   launcher_cases.py sad                  raises
#   launcher_cases.py bipolar [SLEEP]      odd ranks raise, even ones sleep
#   launcher_cases.py kill-once            rank 1 SIGKILLs itself on restart 0
#   launcher_cases.py signal RANK SIG      RANK kills itself with SIG
#   launcher_cases.py sleep SECONDS        then prints its rank
#   launcher_cases.py rank-info DIR        writes its ranks to DIR/RANK
#   launcher_cases.py is-launched FILE     what torch.distributed's
#       is_torchelastic_launched() would say, into FILE
import argparse
import json
import os
import signal
import sys
import time
import traceback

TORCHELASTIC_VARS = [
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
    "TORCHELASTIC_ERROR_FILE",
]


def record(fn):
    """As torch.distributed.elastic.multiprocessing.errors.record."""
    def wrapper(*args):
        try:
            return fn(*args)
        except Exception as e:
            path = os.environ.get("TORCHELASTIC_ERROR_FILE")
            if path:
                with open(path, "w") as fp:
                    json.dump({"message": {"message": f"{type(e).__name__}: {e}",
                                           "extraInfo": {
                                               "py_callstack": traceback.format_exc(),
                                               "timestamp": str(int(time.time()))}}}, fp)
            raise
    return wrapper


def script(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--fail", action="store_true")
    p.add_argument("--touch-file-dir", "--touch_file_dir")
    args = p.parse_args(argv)
    print("Distributed env vars set by agent:")
    for var in TORCHELASTIC_VARS + ["TEST_SENTINEL_PARENT"]:
        print(f"{var} = {os.environ[var]}")
    if args.fail:
        raise RuntimeError("raising exception since --fail flag was set")
    path = os.path.join(args.touch_file_dir, os.environ["RANK"])
    open(path, "a").close()
    print(f"Success, created {path}")


def env(argv):
    for arg in argv:
        key, eq, want = arg.partition("=")
        if key not in os.environ:
            raise RuntimeError(f"Environment variable {key} not found in os.environ")
        if eq and os.environ[key] != want:
            raise RuntimeError(f"os.environ['{key}']={os.environ[key]} does not equal "
                               f"the expected value: {want}")


def unset(argv):
    if argv[0] in os.environ:
        raise RuntimeError(f"Environment variable {argv[0]} found in os.environ")


def sad(argv):
    raise RuntimeError("sad because i throw")


def bipolar(argv):
    if int(os.environ["RANK"]) % 2:
        raise RuntimeError("sad because i throw")
    time.sleep(float(argv[0]) if argv else 0)


def kill_once(argv):
    if os.environ["RANK"] == "1" and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        os.kill(os.getpid(), signal.SIGKILL)


def fatal_signal(argv):
    if os.environ["RANK"] == argv[0]:
        os.kill(os.getpid(), getattr(signal, argv[1]))


def sleep(argv):
    time.sleep(float(argv[0]))
    print(f"rank {os.environ['RANK']} slept")


def rank_info(argv):
    keys = ["RANK", "LOCAL_RANK", "ROLE_RANK", "GROUP_RANK", "ROLE_WORLD_SIZE", "WORLD_SIZE",
            "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"]
    with open(os.path.join(argv[0], os.environ["RANK"]), "w") as fp:
        fp.write(" ".join(os.environ[k] for k in keys) + "\n")


def is_launched(argv):
    # torch.distributed.is_torchelastic_launched(): TORCHELASTIC_RUN_ID is set
    with open(argv[0], "w") as fp:
        fp.write(str(os.getenv("TORCHELASTIC_RUN_ID") is not None))


CASES = {"script": script, "env": env, "unset": unset, "sad": sad, "bipolar": bipolar,
         "kill-once": kill_once, "signal": fatal_signal, "sleep": sleep,
         "rank-info": rank_info, "is-launched": is_launched}

if __name__ == "__main__":
    record(CASES[sys.argv[1]])(sys.argv[2:])
