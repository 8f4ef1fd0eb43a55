# Prints what a script run by crun --run-path sees (sys.argv, __name__,
# __file__, sys.path[0]); with RUN_PATH_FAIL set, the rank named there
# raises an exception that nobody catches.
import os
import sys

rank = os.environ["RANK"]
print(f"argv={sys.argv!r}")
print(f"name={__name__}")
print(f"file={__file__}")
print(f"path0={sys.path[0]}")
if os.environ.get("RUN_PATH_FAIL") == rank:
    raise KeyError(f"no such key on rank {rank}")
