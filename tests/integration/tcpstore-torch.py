"""torch's own TCPStore client against crun-rdzvd (tcpstore-torch.sh).

Usage: tcpstore-torch.py PORT. Runs every store call this torch has and
checks each answer; prints one line per call and exits 1 on the first
wrong one."""
import datetime
import sys
import threading

import torch.distributed as dist

port = int(sys.argv[1])
T = datetime.timedelta


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def same(what, got, want):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))
    print("ok", what, flush=True)


# world_size given: the client ADDs 1 to "init/" on connect
s = dist.TCPStore("127.0.0.1", port, 1, False, T(seconds=10))
s.set("k", b"v1")
same("get", s.get("k"), b"v1")
s.set("k", "v2")
same("set again", s.get("k"), b"v2")
same("add", s.add("n", 5), 5)
same("add negative", s.add("n", -7), -2)
same("add's value", s.get("n"), b"-2")
same("compare_set missing", s.compare_set("c", b"x", b"y"), b"x")
same("compare_set create", s.compare_set("c", b"", b"y"), b"y")
same("compare_set swap", s.compare_set("c", b"y", b"z"), b"z")
same("compare_set mismatch", s.compare_set("c", b"nope", b"w"), b"z")
same("num_keys", s.num_keys(), 4)  # init/, k, n, c
same("delete_key", s.delete_key("k"), True)
same("delete_key missing", s.delete_key("k"), False)
s.wait(["n", "c"])
print("ok wait present", flush=True)

# a wait answered by another client's set, no polling
other = dist.TCPStore("127.0.0.1", port, None, False, T(seconds=10))
threading.Timer(0.3, lambda: other.set("late", b"1")).start()
s.wait(["late"], T(seconds=5))
print("ok wait woken", flush=True)

# a wait that times out leaves the connection usable
try:
    s.wait(["never"], T(milliseconds=300))
    fail("wait on a missing key returned")
except RuntimeError as e:  # DistStoreError is one
    print("ok wait timeout:", str(e).splitlines()[0], flush=True)
same("get after a timed-out wait", s.get("n"), b"-2")

if hasattr(s, "check"):
    same("check", s.check(["n", "c"]), True)
    same("check missing", s.check(["n", "absent"]), False)
if hasattr(s, "append"):
    s.append("a", b"x")
    s.append("a", b"y")
    same("append", s.get("a"), b"xy")
if hasattr(s, "multi_set"):
    s.multi_set(["p", "q"], [b"1", b"22"])
    same("multi_get", s.multi_get(["p", "q"]), [b"1", b"22"])
if hasattr(s, "queue_push"):
    # queues (torch 2.x's queue_push/pop/len): a blocking pop here (it lets
    # go of the GIL), woken by pushes of the other client, which come later
    import time

    keys_before = s.num_keys()

    def push():
        other.queue_push("jobs", b"first")
        other.queue_push("jobs", "second")

    threading.Timer(0.3, push).start()
    t0 = time.monotonic()
    got = s.queue_pop("jobs")
    waited = time.monotonic() - t0
    same("blocking queue_pop woken by another client's push", got, b"first")
    print("  (after %.2f s)" % waited, flush=True)
    same("blocking queue_pop, the next value", s.queue_pop("jobs"), b"second")
    # "queue": no key of that name ("q" is one, from multi_set)
    for v in (b"a", b"", b"c"):
        s.queue_push("queue", v)
    same("queue_len", s.queue_len("queue"), 3)
    same("num_keys does not count queues", s.num_keys(), keys_before)
    same("check sees a queue", s.check(["queue"]), True)
    same("queue_pop FIFO", [s.queue_pop("queue", False) for _ in range(3)], [b"a", b"", b"c"])
    same("queue_len emptied", s.queue_len("queue"), 0)
    same("check of an emptied queue", s.check(["queue"]), False)
    try:
        s.queue_pop("queue", False)
        fail("queue_pop of an empty queue returned")
    except Exception as e:  # torch.distributed.QueueEmptyError
        same("queue_pop of an empty queue raises", type(e).__name__, "QueueEmptyError")
print("done", flush=True)
