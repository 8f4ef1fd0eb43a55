"""torch_probe.py [MODULE...]: whether this python has torch, without
importing it (an import of torch costs seconds of CPU).

Prints torch's version and exits 0 when the python running it finds the
torch package and each MODULE given (dotted names under torch, such as
torch.distributed.run) as a file of it; exits 1 otherwise, printing
nothing. The version is read from torch/version.py, as torch.__version__
gives it.
"""

import importlib.util
import os
import sys


def main():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return 1
    top = os.path.dirname(spec.origin)
    for name in sys.argv[1:]:
        parts = name.split(".")
        if parts[0] != "torch":
            return 1
        base = os.path.join(top, *parts[1:])
        if not (os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))):
            return 1
    found = {}
    try:
        with open(os.path.join(top, "version.py")) as f:
            exec(f.read(), found)
    except OSError:
        pass
    print(found.get("__version__", "unknown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
