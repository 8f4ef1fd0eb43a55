#!/usr/bin/env python3
"""Writes the seed corpus of the wire fuzzer (tests/fuzz/corpus/).

One file per request type, the replies, whole client streams that start
with the preamble, and malformed frames that the decoder must refuse. The
frames follow src/rendezvous/wire.h: big-endian, a 12-byte header
(u32 len, u8 type, u8 flags, u16 zero, u32 id), then i64 num, u32 count and
count items of (u32 n, n bytes).

Run it from anywhere: ./tests/fuzz/gen-corpus.py [OUTDIR]
The output is deterministic, so rerunning it leaves the corpus unchanged."""
import os
import struct
import sys

HELLO, SET, GET, CHECK, WAIT, ADD, CAS, DELETE = range(1, 9)
APPEND, COUNT, MGET, MSET, LIST, PING, WATCH, UNWATCH = range(9, 17)
RDZV_JOIN, RDZV_FAIL, RDZV_DONE = range(17, 20)
OK, ERROR, VALUE, INT, VALUES, NOTIFY, RDZV_EVENT = range(0x80, 0x87)
FL_EPHEMERAL, FL_EXPECT_ABSENT = 1, 2
EACCES, ETIMEDOUT = 13, 110

NONCE = bytes(range(32))
MAC = bytes(range(0xA0, 0xC0))
BIN = b"v\x00al\x00\xff"


def join(node_id=b"host-a:4242:0badf00d", host=b"host-a", addr=b"", nproc=b"8",
         rank=b"-1", nmin=b"2", nmax=b"4", last_call=b"30000", keepalive=b"15000",
         restarts=b"3", timeout=600000, fid=1):
    """An RDZV_JOIN request (src/rendezvous/rdzv.h)."""
    return frame(RDZV_JOIN, [node_id, host, addr, nproc, rank, nmin, nmax, last_call,
                             keepalive, restarts], num=timeout, fid=fid)


def assignment(rnd, restarts, rank, nodes, fid=1):
    """A JOIN's VALUES reply: nodes are (node_id, host, addr, nproc)."""
    items = [str(rnd).encode(), str(restarts).encode(), str(rank).encode(),
             str(len(nodes)).encode()]
    for n in nodes:
        items += list(n)
    return frame(VALUES, items, fid=fid)


NODES = [(b"host-a:1:00000001", b"host-a", b"10.0.0.1", b"8"),
         (b"host-b:2:00000002", b"host-b", b"fd00::2", b"4")]


def payload(num, items):
    body = struct.pack(">qI", num, len(items))
    for it in items:
        body += struct.pack(">I", len(it)) + it
    return body


def frame(ftype, items=(), num=0, flags=0, fid=1, reserved=0, body=None):
    if body is None:
        body = payload(num, items)
    return struct.pack(">IBBHI", len(body), ftype, flags, reserved, fid) + body


def raw_header(length, ftype, flags=0, reserved=0, fid=1):
    return struct.pack(">IBBHI", length, ftype, flags, reserved, fid)


PREAMBLE = b"CRUN" + struct.pack(">HH", 1, 0)

CORPUS = {
    # one request of each type
    "req-hello": frame(HELLO, [b"job-1", NONCE, MAC]),
    "req-hello-noauth": frame(HELLO, [b"job-1", NONCE, b""]),
    "req-set": frame(SET, [b"key", BIN], fid=2),
    "req-set-ephemeral": frame(SET, [b"agent/0", b"alive"], flags=FL_EPHEMERAL),
    "req-get-wait": frame(GET, [b"key"], num=30000),
    "req-check": frame(CHECK, [b"a", b"b"]),
    "req-wait": frame(WAIT, [b"a", b"b", b"c"], num=1000),
    "req-add": frame(ADD, [b"counter"], num=-3),
    "req-cas-absent": frame(CAS, [b"k", b"", b"new"], flags=FL_EXPECT_ABSENT),
    "req-delete": frame(DELETE, [b"key"]),
    "req-append": frame(APPEND, [b"log", b"line\n"]),
    "req-count": frame(COUNT),
    "req-mget": frame(MGET, [b"a", b"b"], num=0),
    "req-mset": frame(MSET, [b"a", b"1", b"b", b""]),
    "req-list": frame(LIST),
    "req-ping": frame(PING, [BIN]),
    "req-watch-unwatch": frame(WATCH, [b"k"], fid=7) + frame(UNWATCH, [b"k"], fid=8),
    # rendezvous (rdzv.h): joins the parser accepts and refuses
    "req-rdzv-join": join(),
    "req-rdzv-join-static": join(addr=b"10.0.0.2", nproc=b"1", rank=b"1", nmin=b"2",
                                 nmax=b"2", last_call=b"0", keepalive=b"0", restarts=b"0"),
    "req-rdzv-join-bad": b"".join([
        join(nproc=b"0"), join(nproc=b"+8"), join(nproc=b"8x"), join(rank=b"4"),
        join(rank=b"-2"), join(nmin=b"5"), join(nmin=b"0"), join(last_call=b"-1"),
        join(keepalive=b"99999999999999999999"), join(restarts=b"2147483648"),
        join(host=b""), join(node_id=b"a\x00b"), join(host=b"h\n"), join(timeout=0),
    ]),
    "req-rdzv-fail-done": frame(RDZV_FAIL, [b"rank 5 (local 1) on host-b exited with status 1"],
                                num=3, fid=9) + frame(RDZV_DONE, num=3, fid=10),
    "rdzv-assignments": b"".join([
        assignment(1, 0, 0, NODES), assignment(7, 2, 1, NODES),
        assignment(1, 0, 2, NODES), assignment(1, 0, 0, NODES[:1] + [NODES[1][:3]]),
        assignment(1, 0, 0, [(b"n", b"h", b"", b"1")]),
        assignment(1, 0, 0, [(b"n", b"h", b"a", b"0")]),
    ]),
    "rdzv-session": PREAMBLE + frame(HELLO, [b"job7", NONCE, b""]) + join(fid=2) +
    frame(PING, fid=3) + frame(RDZV_FAIL, [b"boom"], num=1, fid=4) + join(fid=5) +
    frame(RDZV_DONE, num=2, fid=6),
    # every reply type back to back
    "replies": b"".join([
        frame(OK, [MAC]),
        frame(ERROR, [b"authentication failed"], num=EACCES),
        frame(VALUE, [BIN]),
        frame(INT, num=-(2**63)),
        frame(VALUES, [b"x", b"", b"z"]),
        frame(NOTIFY, [b"k", b"v"], num=1, fid=7),
        frame(NOTIFY, [b"k", b""], num=2, fid=7),
        frame(RDZV_EVENT, [b"left", b"node 1 (host-b) left: connection closed", b"1"], num=1,
              fid=2),
        frame(RDZV_EVENT, [b"exhausted", b"no restarts left", b"4"], num=5, fid=2),
    ]),
    # what a client sends on a connection
    "stream-client": PREAMBLE + frame(HELLO, [b"job", NONCE, b""]) +
    frame(SET, [b"k", b"v"], fid=2) + frame(GET, [b"k"], fid=3) + frame(ADD, [b"n"], num=1, fid=4),
    "stream-truncated": PREAMBLE + frame(HELLO, [b"job", NONCE, MAC]) +
    frame(SET, [b"key", b"value"])[:-3],
    "preamble-server": b"CRUN" + struct.pack(">HH", 1, 1) + NONCE,
    "preamble-bad-version": b"CRUN" + struct.pack(">HH", 2, 0) + frame(PING),
    # malformed frames
    "bad-len-2g": raw_header(1 << 31, SET),
    "bad-len-max": raw_header(0xFFFFFFFF, GET),
    "bad-type": raw_header(12, 0x7F) + payload(0, []),
    "bad-reserved": raw_header(12, PING, reserved=1) + payload(0, []),
    "bad-short-payload": raw_header(8, PING) + bytes(8),
    "bad-count": frame(SET, body=struct.pack(">qI", 0, 1000) + struct.pack(">I", 0)),
    "bad-item-past-end": frame(SET, body=struct.pack(">qII", 0, 1, 50) + b"short"),
    "bad-trailing": frame(GET, body=payload(0, [b"k"]) + b"junk"),
    "bad-validate": frame(WAIT, [b"k", b""], num=0) + frame(MSET, [b"a"], flags=0x80) +
    frame(ERROR, [b"x"], num=0),
    "bad-validate-rdzv": frame(RDZV_DONE, num=-1) + frame(RDZV_FAIL, [], num=1) +
    frame(RDZV_EVENT, [b"", b"m", b"0"]) + frame(RDZV_JOIN, [b""] * 10, num=1) +
    frame(RDZV_JOIN, [b"x"] * 9, num=1),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(CORPUS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"gen-corpus: wrote {len(CORPUS)} files to {out}")


if __name__ == "__main__":
    main()
