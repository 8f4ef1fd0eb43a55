"""A training loop's heartbeats without the training: beats 'step N' on
CRUN_HEARTBEAT_FD for steps 1..STEPS, one every SECONDS, or SLOW_SECONDS on
the global rank SLOW_RANK (RANK).

    step_worker.py STEPS SECONDS [SLOW_RANK SLOW_SECONDS]

Exits 3 without CRUN_HEARTBEAT_FD (crun gave it no heartbeat channel).
"""
import os
import sys
import time

steps = int(sys.argv[1])
period = float(sys.argv[2])
if len(sys.argv) > 4 and int(os.environ["RANK"]) == int(sys.argv[3]):
    period = float(sys.argv[4])
if "CRUN_HEARTBEAT_FD" not in os.environ:
    sys.stderr.write("no CRUN_HEARTBEAT_FD\n")
    sys.exit(3)
fd = int(os.environ["CRUN_HEARTBEAT_FD"])
# Each step ends at its own point of a fixed schedule, so that the time
# the interpreter takes does not add up.
start = time.monotonic()
for step in range(steps + 1):
    delay = start + step * period - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    os.write(fd, b"step %d\n" % step)
