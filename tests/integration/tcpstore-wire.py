"""PyTorch's TCPStore protocol against crun-rdzvd, frame by frame
(tcpstore-wire.sh). Standard library only: the frames are built here.

Usage: tcpstore-wire.py ON_PORT OFF_PORT CRUNCTL. ON_PORT serves TCPStore
(keys up to 256 bytes, values up to 1 KiB); OFF_PORT runs --tcpstore off.
Prints one line per check; exits 1 on the first failure."""
import socket
import struct
import subprocess
import sys
import threading
import time

ON, OFF, CRUNCTL = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
MAGIC = 0x3C85F7CE
LEGACY = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
              WATCH_KEY=7, DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11,
              CANCEL_WAIT=12)
MODERN = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6,
              GETNUMKEYS=7, DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11,
              CANCEL_WAIT=12, PING=13, QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16)


class Fail(Exception):
    pass


def s_(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(s_(k) for k in ks)


class Client:
    def __init__(self, dialect, port=ON, greet=True):
        self.ops = MODERN if dialect == "modern" else LEGACY
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if dialect == "modern" and greet:
            self.send("VALIDATE", struct.pack("<I", MAGIC))
            self.send("PING", struct.pack("<I", 0x1234ABCD))
            if self.recv(4) != struct.pack("<I", 0x1234ABCD):
                raise Fail("PING: no echo")

    def send(self, op, args=b""):
        self.s.sendall(bytes([self.ops[op]]) + args)

    def recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise Fail("connection closed after %d of %d bytes" % (len(b), n))
            b += c
        return b

    def u8(self):
        return self.recv(1)[0]

    def i64(self):
        return struct.unpack("<q", self.recv(8))[0]

    def value(self):
        return self.recv(struct.unpack("<Q", self.recv(8))[0])

    def closed(self, within=3.0):
        """True when the server closes without sending anything more."""
        self.s.settimeout(within)
        try:
            while True:
                c = self.s.recv(4096)
                if not c:
                    return True
                raise Fail("got %r where a close was due" % c[:32])
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def same(what, got, want):
    if got != want:
        raise Fail("%s: got %r, want %r" % (what, got, want))


def ok(msg):
    print("ok", msg, flush=True)


def every_op(dialect):
    c = Client(dialect)
    p = "/%s-" % dialect
    k = lambda name: p + name  # noqa: E731
    c.send("SET", s_(k("k")) + s_(b"v1"))
    c.send("GET", s_(k("k")))
    same("GET", c.value(), b"v1")
    c.send("ADD", s_(k("n")) + struct.pack("<q", 5))
    same("ADD", c.i64(), 5)
    c.send("ADD", s_(k("n")) + struct.pack("<q", -7))
    same("ADD negative", c.i64(), -2)
    c.send("COMPARE_SET", s_(k("c")) + s_(b"x") + s_(b"y"))
    same("COMPARE_SET missing key", c.value(), b"x")
    c.send("COMPARE_SET", s_(k("c")) + s_(b"") + s_(b"y"))
    same("COMPARE_SET create", c.value(), b"y")
    c.send("COMPARE_SET", s_(k("c")) + s_(b"y") + s_(b"z"))
    same("COMPARE_SET swap", c.value(), b"z")
    c.send("COMPARE_SET", s_(k("c")) + s_(b"no") + s_(b"w"))
    same("COMPARE_SET mismatch", c.value(), b"z")
    c.send("CHECK", keys(k("k"), k("n")))
    same("CHECK", c.u8(), 0)
    c.send("CHECK", keys(k("k"), k("absent")))
    same("CHECK missing", c.u8(), 1)
    c.send("WAIT", keys(k("k")))
    same("WAIT present", c.u8(), 0)
    c.send("DELETE_KEY", s_(k("k")))
    same("DELETE_KEY", c.i64(), 1)
    c.send("DELETE_KEY", s_(k("k")))
    same("DELETE_KEY missing", c.i64(), 0)
    c.send("APPEND", s_(k("a")) + s_(b"x"))
    c.send("APPEND", s_(k("a")) + s_(b"y"))
    c.send("MULTI_SET", struct.pack("<Q", 2) + s_(k("p")) + s_(b"1") + s_(k("q")) + s_(b"22"))
    c.send("MULTI_GET", keys(k("p"), k("q"), k("a")))
    same("MULTI_GET", [c.value() for _ in range(3)], [b"1", b"22", b"xy"])
    # pipelined: SET, WAIT, GET in one write, as torch's get() sends them
    a = bytes([c.ops["SET"]]) + s_(k("pipe")) + s_(b"P")
    b = bytes([c.ops["WAIT"]]) + keys(k("pipe"))
    g = bytes([c.ops["GET"]]) + s_(k("pipe"))
    c.s.sendall(a + b + g)
    same("pipelined WAIT", c.u8(), 0)
    same("pipelined GET", c.value(), b"P")
    c.send("GET", s_(k("missing")))
    if dialect == "modern":  # as 2.15's libuv server: an empty value
        same("GET missing", c.value(), b"")
    elif not c.closed():  # as 1.13's server: closed
        raise Fail("legacy GET of a missing key: connection still open")
    else:
        c = Client(dialect)
    c.send("GETNUMKEYS")
    n = c.i64()
    if n < 6:
        raise Fail("GETNUMKEYS: %d" % n)
    c.close()
    ok("%s dialect: every request answered as torch's server does" % dialect)


def wait_and_cancel(dialect):
    c = Client(dialect)
    w = Client(dialect)
    p = "/wc-%s-" % dialect
    # a WAIT answered by another client's SET, on the store's wake-up
    c.send("WAIT", keys(p + "late"))
    time.sleep(0.05)
    t0 = time.monotonic()
    w.send("SET", s_(p + "late") + s_(b"1"))
    same("WAIT woken", c.u8(), 0)
    if time.monotonic() - t0 > 0.5:
        raise Fail("WAIT woken late")
    # CANCEL_WAIT before the keys come: WAIT_CANCELED, and no late answer
    c.send("WAIT", keys(p + "never"))
    c.send("CANCEL_WAIT")
    same("CANCEL_WAIT", c.u8(), 1)
    w.send("SET", s_(p + "never") + s_(b"1"))
    c.send("GET", s_(p + "late"))
    same("no STOP_WAITING after a cancel", c.value(), b"1")
    # CANCEL_WAIT crossing STOP_WAITING: 0 then 1, as torch's client reads
    c.send("WAIT", keys(p + "race"))
    w.send("SET", s_(p + "race") + s_(b"1"))
    w.send("GET", s_(p + "race"))  # w's reply: the SET was applied
    same("race SET", w.value(), b"1")
    c.send("CANCEL_WAIT")
    same("race: STOP_WAITING first", c.u8(), 0)
    same("race: then WAIT_CANCELED", c.u8(), 1)
    # and the two sent in one write, many times, as a timing race
    crossed = 0
    for i in range(200):
        key = "%srace%d" % (p, i)
        c.send("WAIT", keys(key))
        t = threading.Thread(target=w.send, args=("SET", s_(key) + s_(b"1")))
        t.start()
        c.send("CANCEL_WAIT")
        r = c.u8()
        if r == 0:
            crossed += 1
            r = c.u8()
        same("race %d" % i, r, 1)
        t.join()
        w.send("GET", s_(key))
        w.value()
    # a CANCEL_WAIT with nothing waiting: WAIT_CANCELED all the same
    c.send("CANCEL_WAIT")
    same("CANCEL_WAIT idle", c.u8(), 1)
    # a client that vanishes mid-wait: nothing left behind, others served
    v = Client(dialect)
    v.send("WAIT", keys(*[p + "gone%d" % i for i in range(100)]))
    v.close()
    time.sleep(0.1)
    w.send("SET", s_(p + "gone0") + s_(b"1"))
    w.send("GET", s_(p + "gone0"))
    same("after a vanished waiter", w.value(), b"1")
    c.close()
    w.close()
    ok("%s dialect: WAIT woken, CANCEL_WAIT alone and racing STOP_WAITING (200 races, "
       "%d crossed)" % (dialect, crossed))


def wait_1000():
    c = Client("modern")
    w = Client("legacy")
    ks = ["/k1000-%d" % i for i in range(1000)]
    c.send("WAIT", keys(*ks))
    for i, key in enumerate(ks):
        w.send("SET", s_(key) + s_(b"%d" % i))
        if i == 998:
            c.s.settimeout(0.2)
            try:
                got = c.s.recv(1)
                raise Fail("WAIT on 1,000 keys answered with one missing: %r" % got)
            except socket.timeout:
                pass
            c.s.settimeout(5)
    same("WAIT on 1,000 keys", c.u8(), 0)
    c.send("CHECK", keys(*ks))
    same("CHECK of 1,000 keys", c.u8(), 0)
    ok("one WAIT across 1,000 keys, answered by the last of them")


def malformed():
    cases = [
        ("huge key length", "legacy", bytes([0]) + struct.pack("<Q", 1 << 62)),
        ("huge value length", "legacy", bytes([0]) + s_("/k") + struct.pack("<Q", 1 << 40)),
        ("huge list", "legacy", bytes([5]) + struct.pack("<Q", 1 << 50)),
        ("empty key", "legacy", bytes([2]) + s_("")),
        ("unknown opcode", "legacy", bytes([99])),
        ("WATCH_KEY", "legacy", bytes([7]) + s_("/w")),
        ("bad magic", "modern", None),
        ("QUEUE_PUSH in the legacy dialect", "legacy", bytes([14]) + s_("/q") + s_("x")),
        ("a queued value over the limit", "modern", bytes([14]) + s_("/q") + s_("x" * 1025)),
        ("newer opcode", "modern", bytes([40])),
    ]
    for name, dialect, data in cases:
        c = Client(dialect, greet=name != "bad magic")
        if data is None:
            # VALIDATE then a VALIDATE with a wrong magic
            c.s.sendall(bytes([0]) + struct.pack("<I", MAGIC) + bytes([0]) + b"\x01\x02\x03\x04")
        else:
            c.s.sendall(data)
        if not c.closed():
            raise Fail("%s: connection still open" % name)
        c.close()
    # lists of no keys are answered as torch's servers do: CHECK READY,
    # WAIT STOP_WAITING, MULTI_GET and MULTI_SET nothing
    for dialect in ("legacy", "modern"):
        c = Client(dialect)
        c.send("CHECK", struct.pack("<Q", 0))
        same(dialect + " CHECK of no keys", c.u8(), 0)
        c.send("WAIT", struct.pack("<Q", 0))
        same(dialect + " WAIT on no keys", c.u8(), 0)
        c.send("MULTI_SET", struct.pack("<Q", 0))
        c.send("MULTI_GET", struct.pack("<Q", 0))
        c.send("ADD", s_("/after-empty-" + dialect) + struct.pack("<q", 7))
        same(dialect + " served after empty lists", c.i64(), 7)
        c.close()
    ok("lists of no keys answered as torch's servers do")
    # a truncated request: no reply, the connection stays for the rest
    c = Client("legacy")
    c.s.sendall(bytes([2]) + struct.pack("<Q", 5) + b"/tr")
    c.s.settimeout(0.3)
    try:
        c.s.recv(1)
        raise Fail("truncated request answered")
    except socket.timeout:
        pass
    c.s.settimeout(5)
    c.s.sendall(b"un")  # "/trun": missing, and GET without WAIT fails
    if not c.closed():
        raise Fail("GET of a missing key: connection still open")
    c.close()
    # the server is still fine
    c = Client("modern")
    c.send("ADD", s_("/alive") + struct.pack("<q", 1))
    same("served after the attacks", c.i64(), 1)
    # a value over --max-value-size (1 KiB) closes, one at it is served
    c.send("SET", s_("/big") + s_(b"x" * 1024))
    c.send("GET", s_("/big"))
    same("a value at the limit", len(c.value()), 1024)
    c.send("SET", s_("/big") + s_(b"x" * 1025))
    if not c.closed():
        raise Fail("a value over the limit: connection still open")
    # ADD on a value that is not a number: closed, as torch's server does
    c = Client("modern")
    c.send("SET", s_("/text") + s_(b"abc"))
    c.send("ADD", s_("/text") + struct.pack("<q", 1))
    if not c.closed():
        raise Fail("ADD on text: connection still open")
    ok("malformed input closes the connection (%d cases), a truncated one waits" % len(cases))


def queues():
    a = Client("modern")
    b = Client("modern")
    a.send("GETNUMKEYS")
    nkeys = a.i64()
    a.send("QUEUE_LEN", s_("/q"))
    same("QUEUE_LEN of no queue", a.i64(), 0)
    a.send("QUEUE_POP", s_("/q"))
    same("QUEUE_POP of no queue", a.i64(), 0)
    for v in (b"one", b"", b"three"):
        a.send("QUEUE_PUSH", s_("/q") + s_(v))
    b.send("QUEUE_LEN", s_("/q"))
    same("QUEUE_LEN", b.i64(), 3)
    # apart from the keys, but CHECK and WAIT see a non-empty queue
    b.send("GET", s_("/q"))
    same("GET of a queue", b.value(), b"")
    b.send("GETNUMKEYS")
    same("GETNUMKEYS with queues", b.i64(), nkeys)
    b.send("DELETE_KEY", s_("/q"))
    same("DELETE_KEY of a queue", b.i64(), 0)
    b.send("CHECK", keys("/q"))
    same("CHECK of a queue", b.u8(), 0)
    b.send("WAIT", keys("/q"))
    same("WAIT on a queue", b.u8(), 0)
    # FIFO; i64 the length before the pop, then the value
    for n, v in ((3, b"one"), (2, b""), (1, b"three")):
        b.send("QUEUE_POP", s_("/q"))
        same("QUEUE_POP length", b.i64(), n)
        same("QUEUE_POP value", b.value(), v)
    b.send("QUEUE_POP", s_("/q"))
    same("QUEUE_POP of an emptied queue", b.i64(), 0)
    b.send("CHECK", keys("/q"))
    same("CHECK of an emptied queue", b.u8(), 1)
    # blocking pops, as torch's client does them (WAIT, then QUEUE_POP):
    # a push wakes one of two waiting clients, the next push the other
    c = Client("modern")
    b.send("WAIT", keys("/bq"))
    time.sleep(0.05)
    c.send("WAIT", keys("/bq"))
    time.sleep(0.05)
    a.send("QUEUE_PUSH", s_("/bq") + s_(b"first"))
    same("blocking pop woken", b.u8(), 0)
    c.s.settimeout(0.3)
    try:
        got = c.s.recv(1)
        raise Fail("one push woke two waiting clients: %r" % got)
    except socket.timeout:
        pass
    c.s.settimeout(5)
    b.send("QUEUE_POP", s_("/bq"))
    same("blocking pop length", b.i64(), 1)
    same("blocking pop value", b.value(), b"first")
    a.send("QUEUE_PUSH", s_("/bq") + s_(b"second"))
    same("second blocking pop woken", c.u8(), 0)
    c.send("QUEUE_POP", s_("/bq"))
    same("second blocking pop", (c.i64(), c.value()), (1, b"second"))
    # a value at --max-value-size (1 KiB) is queued
    a.send("QUEUE_PUSH", s_("/big") + s_(b"x" * 1024))
    a.send("QUEUE_POP", s_("/big"))
    same("a queued value at the limit", (a.i64(), len(a.value())), (1, 1024))
    for x in (a, b, c):
        x.close()
    ok("queues: FIFO, apart from the keys, a blocking pop woken by a push (one per value)")


def crun_frame(ftype, num, items, fid=1):
    payload = struct.pack(">qI", num, len(items))
    payload += b"".join(struct.pack(">I", len(i)) + i for i in items)
    return struct.pack(">IBBHI", len(payload), ftype, 0, 0, fid) + payload


def crun_queue_refused():
    """The store's queue requests are the TCPStore edge's own: a crun
    client that sends one gets an ERROR and is closed."""
    s = socket.create_connection(("127.0.0.1", ON), timeout=5)
    s.sendall(b"CRUN" + struct.pack(">HH", 1, 0))
    s.sendall(crun_frame(1, 0, [b"r1", b"\0" * 32, b""]))

    def recv(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise Fail("crun connection closed after %d of %d bytes" % (len(b), n))
            b += c
        return b

    def frame():
        ln, ftype, _, _, _ = struct.unpack(">IBBHI", recv(12))
        num, count = struct.unpack(">qI", recv(12))
        items = []
        for _ in range(count):
            items.append(recv(struct.unpack(">I", recv(4))[0]))
        return ftype, num, items

    recv(40)
    same("HELLO", frame()[0], 0x80)
    s.sendall(crun_frame(0x40, 0, [b"/q", b"x"], 2))
    ftype, num, items = frame()
    same("a crun QUEUE_PUSH: ERROR", ftype, 0x81)
    if b"unknown frame type 64" not in items[0]:
        raise Fail("a crun QUEUE_PUSH: %r" % items[0])
    s.settimeout(3)
    try:
        if s.recv(1):
            raise Fail("a crun QUEUE_PUSH: connection still open")
    except ConnectionResetError:
        pass
    s.close()
    ok("a crun client's queue request: ERROR unknown frame type, closed")


def crunctl(*args):
    r = subprocess.run([CRUNCTL, "--endpoint", "127.0.0.1:%d" % ON, "--run", "r1",
                        "--timeout", "5s"] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


def namespaces():
    same("crunctl set", crunctl("set", "/shared", "crun")[0], 0)
    c = Client("modern")
    c.send("CHECK", keys("/shared"))
    same("a crun key seen by TCPStore", c.u8(), 1)
    c.send("SET", s_("/shared") + s_(b"torch"))
    c.send("GET", s_("/shared"))
    same("TCPStore's own key", c.value(), b"torch")
    same("crunctl get", crunctl("get", "/shared"), (0, "crun"))
    rc, out = crunctl("ls")
    same("crun's keys", out, "/shared")
    # an empty run id and the namespace's printable part name nothing
    for run in ("torch-tcpstore", ""):
        r = subprocess.run([CRUNCTL, "--endpoint", "127.0.0.1:%d" % ON, "--run", run,
                            "--timeout", "5s", "ls"], capture_output=True, text=True)
        if "/shared" in r.stdout:
            raise Fail("run '%s' sees TCPStore's keys" % run)
    # both kinds at once on the port
    ts = [Client("legacy") for _ in range(5)]
    for i, t in enumerate(ts):
        t.send("ADD", s_("/both") + struct.pack("<q", 1))
        crunctl("add", "both", "1")
        same("ADD beside crun clients", t.i64(), i + 1)
    same("crun's count", crunctl("get", "both"), (0, "5"))
    ok("crun and TCPStore clients on one port, each blind to the other's keys")


def off():
    c = Client("modern", port=OFF, greet=False)
    c.s.sendall(bytes([0]) + struct.pack("<I", MAGIC) + bytes([13]) + struct.pack("<I", 1))
    if not c.closed():
        raise Fail("--tcpstore off: a TCPStore client is served")
    r = subprocess.run([CRUNCTL, "--endpoint", "127.0.0.1:%d" % OFF, "--timeout", "5s",
                        "set", "k", "v"], capture_output=True, text=True)
    same("crunctl with --tcpstore off", r.returncode, 0)
    ok("--tcpstore off: TCPStore clients closed, crun clients served")


try:
    for d in ("legacy", "modern"):
        every_op(d)
        wait_and_cancel(d)
    wait_1000()
    queues()
    crun_queue_refused()
    malformed()
    namespaces()
    off()
except Fail as e:
    print("FAIL:", e, flush=True)
    sys.exit(1)
