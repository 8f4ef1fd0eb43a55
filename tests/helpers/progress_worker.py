"""A worker that draws a progress bar the way tqdm does: '\r' redraws of one
line that never ends, while another rank logs ordinary lines.

Rank 0 writes about 400 KiB of '\r'-separated redraws to stderr with no
newline, then waits up to 8 s for rank 1's flag file (as it would wait in
an all-reduce). Rank 1 writes 10000 lines (more than a pipe holds) to stderr, then creates the flag.
A launcher that holds rank 1's output back until rank 0's line ends makes
rank 1 block in write(2) and rank 0 time out.
"""
import os
import sys
import time

flag = sys.argv[1]
rank = int(os.environ["LOCAL_RANK"])
if rank == 0:
    for i in range(20000):
        sys.stderr.write("\rstep %6d |%s|" % (i, "#" * (i % 20)))
    sys.stderr.flush()
    deadline = time.monotonic() + 8
    while not os.path.exists(flag):
        if time.monotonic() > deadline:
            sys.stderr.write("\nTIMEOUT waiting for rank 1\n")
            sys.exit(1)
        time.sleep(0.01)
    sys.stderr.write("\n")
else:
    for i in range(10000):
        sys.stderr.write("log line %d of rank 1\n" % i)
    sys.stderr.flush()
    open(flag, "w").close()
