#!/usr/bin/env python3
"""Attacks on the crun store, for tests/integration/store-attacks.sh and
scripts/bench/store: each one a real client on loopback against a store
(crun-rdzvd or an agent's embedded one).

    store-attack.py ATTACK PORT TOKEN_FILE [ARGS]

Each attack checks what the store must do and prints one line,
"ok DETAILS", exit 0; or "FAIL WHY", exit 1. Every loop and wait is
bounded. The token holder in "ops" is libcrun itself (CRUN_LIBCRUN names
the shared library), so its retries are the real client's.
"""
import ctypes, errno, hashlib, hmac, os, selectors, socket, struct, sys, time

HELLO, SET, GET, PING = 1, 2, 3, 14
OK, ERROR, VALUE = 0x80, 0x81, 0x82
PREAMBLE = b"CRUN\x00\x01\x00\x00"
RUN = b"atk"


class Fail(Exception):
    pass


def frame(t, i, num=0, items=(), flags=0):
    p = struct.pack(">qI", num, len(items))
    p += b"".join(struct.pack(">I", len(x)) + x for x in items)
    return struct.pack(">IBBHI", len(p), t, flags, 0, i) + p


def conn(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += c
    return b


def read_frame(s):
    ln, t, _, _, i = struct.unpack(">IBBHI", recvn(s, 12))
    p = recvn(s, ln)
    num, cnt = struct.unpack(">qI", p[:12])
    off, items = 12, []
    for _ in range(cnt):
        (n,) = struct.unpack(">I", p[off:off + 4])
        items.append(p[off + 4:off + 4 + n])
        off += 4 + n
    return t, i, num, items


def hello(s, token):
    """The handshake; returns the reply frame (OK checked for its mac)."""
    s.sendall(PREAMBLE)
    pre = recvn(s, 40)
    snonce, cnonce, mac = pre[8:40], os.urandom(32), b""
    bound = struct.pack(">I", len(RUN)) + RUN
    if token is not None:
        mac = hmac.new(token, b"crun-auth-v2 client" + snonce + cnonce + bound,
                       hashlib.sha256).digest()
    s.sendall(frame(HELLO, 1, items=(RUN, cnonce, mac)))
    r = read_frame(s)
    if r[0] == OK and token is not None:
        want = hmac.new(token, b"crun-auth-v2 server" + cnonce + snonce + bound,
                        hashlib.sha256).digest()
        if r[3] != [want]:
            raise Fail("the store's mac is wrong")
    return r


def authed(port, token, timeout=5):
    s = conn(port, timeout)
    r = hello(s, token)
    if r[0] != OK:
        raise Fail("handshake refused: %r" % (r,))
    return s


def outcome(s, wait=5.0):
    """(errnum of the first ERROR frame seen or None, closed?) within wait s."""
    buf, closed = b"", False
    end = time.monotonic() + wait
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            c = s.recv(65536)
            if not c:
                closed = True
                break
            buf += c
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    except socket.timeout:
        pass
    return parse_err(buf), closed


def parse_err(buf):
    """The errnum of the first ERROR frame in buf (after a 40-byte server
    preamble when there is one)."""
    for start in (0, 40):
        b = buf[start:]
        while len(b) >= 24:
            ln, t = struct.unpack(">IB", b[:5])
            if t == ERROR:
                return struct.unpack(">q", b[12:20])[0]
            if ln > len(b):
                break
            b = b[12 + ln:]
    return None


def served(port, token):
    """A token holder is served: SET, GET and PING on a fresh connection."""
    s = authed(port, token)
    s.sendall(frame(SET, 2, items=(b"probe", b"v")) + frame(GET, 3, items=(b"probe",)))
    if read_frame(s)[:2] != (OK, 2) or read_frame(s)[:2] != (VALUE, 3):
        raise Fail("a token holder was not served")
    s.close()


# ---- the attacks -------------------------------------------------------------

def garbage(port, token, n="200"):
    n = int(n)
    socks = []
    for i in range(n):
        s = conn(port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" if i % 2 else os.urandom(4096))
        socks.append(s)
    closed = sum(1 for s in socks if outcome(s)[1])
    if closed != n:
        raise Fail("%d of %d garbage connections still open" % (n - closed, n))
    served(port, token)
    return "%d connections of garbage closed" % n


def huge(port, token):
    got = []
    for ln in (0xFFFFFFFF, 0x80000000):
        for auth in (False, True):
            s = authed(port, token) if auth else conn(port)
            if not auth:
                s.sendall(PREAMBLE)
            s.sendall(struct.pack(">IBBHI", ln, SET, 0, 0, 9))
            err, closed = outcome(s)
            if err != errno.EPROTO or not closed:
                raise Fail("length %#x (%s): error %r, closed %r" %
                           (ln, "after HELLO" if auth else "before", err, closed))
            got.append(err)
    served(port, token)
    return "4 frames of 2-4 GiB announced: EPROTO and closed"


def partial(port, token, n="10", mib="60"):
    """n authenticated connections each send mib MiB of a frame that
    announces 64 MiB - 64 KiB, round robin; the store's budget refuses
    those it cannot hold."""
    n, mib = int(n), int(mib)
    total = (64 << 20) - (64 << 10)
    socks = [authed(port, token) for _ in range(n)]
    chunk = os.urandom(1 << 20)
    sent = [0] * n
    dead = [False] * n
    for s in socks:
        s.settimeout(10)
        s.sendall(struct.pack(">IBBHI", total, SET, 0, 0, 9))
    for _ in range(mib):
        for i, s in enumerate(socks):
            if dead[i]:
                continue
            try:
                s.sendall(chunk)
                sent[i] += 1
            except (OSError, socket.timeout):
                dead[i] = True
    refused = enobufs = 0
    for s in socks:
        err, closed = outcome(s, 3)
        refused += closed
        enobufs += err == errno.ENOBUFS
    if refused < n - 1:
        raise Fail("only %d of %d connections refused" % (refused, n))
    if not enobufs:
        raise Fail("%d connections refused, none with ENOBUFS" % refused)
    served(port, token)
    return "%d of %d refused (%d saw ENOBUFS), %d MiB sent in all" % (
        refused, n, enobufs, sum(sent))


def slowloris_pre(port, token, n="50"):
    """n connections dribble the preamble a byte at a time: all closed by
    the handshake timeout (the caller sets it low), a token holder served
    meanwhile."""
    n = int(n)
    socks = [conn(port) for _ in range(n)]
    t0 = time.monotonic()
    alive = list(socks)
    for k in range(40):
        for s in list(alive):
            try:
                s.send(PREAMBLE[k % 8:k % 8 + 1])
            except OSError:
                alive.remove(s)
        if k == 2:
            served(port, token)
        time.sleep(0.25)
        alive = [s for s in alive if not outcome(s, 0.001)[1]]
        if not alive:
            break
    if alive:
        raise Fail("%d slow handshakes still open after %.0f s" % (len(alive), time.monotonic() - t0))
    return "%d slow handshakes closed in %.1f s" % (n, time.monotonic() - t0)


def slowloris_post(port, token, n="20"):
    """n authenticated connections dribble a frame a byte at a time:
    refused ETIMEDOUT by the request timeout (the caller sets it low)."""
    n = int(n)
    socks = [authed(port, token) for _ in range(n)]
    f = frame(SET, 2, items=(b"slow", b"x" * 1000))
    t0 = time.monotonic()
    alive, errs = list(socks), {}
    for k in range(60):
        for s in list(alive):
            try:
                s.send(f[k:k + 1])
            except OSError:
                alive.remove(s)
        if k == 2:
            served(port, token)
        time.sleep(0.25)
        for s in list(alive):
            err, closed = outcome(s, 0.001)
            if closed or err is not None:
                errs[s] = err
                alive.remove(s)
        if not alive:
            break
    if alive:
        raise Fail("%d slow requests still open after %.0f s" % (len(alive), time.monotonic() - t0))
    timedout = sum(1 for e in errs.values() if e == errno.ETIMEDOUT)
    if not timedout:
        raise Fail("%d slow requests closed, none with ETIMEDOUT" % n)
    return "%d slow requests refused in %.1f s (%d saw ETIMEDOUT)" % (
        n, time.monotonic() - t0, timedout)


def noread(port, token, n="8"):
    """n authenticated clients set a 1 MiB value and ask for it 200 times
    each without reading a reply: each is dropped (its own cap or the
    budget), a token holder is served."""
    n = int(n)
    s0 = authed(port, token)
    s0.sendall(frame(SET, 2, items=(b"big", b"b" * (1 << 20))))
    if read_frame(s0)[:2] != (OK, 2):
        raise Fail("SET of 1 MiB failed")
    s0.close()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        if hello(s, token)[0] != OK:
            raise Fail("handshake refused")
        socks.append(s)
    req = frame(GET, 7, items=(b"big",)) * 200
    for s in socks:
        try:
            s.sendall(req)
        except OSError:
            pass
    served(port, token)
    # Dropped: the connection is closed, which a reader sees once it drains
    # what the kernel holds. Read it all, bounded.
    dropped = 0
    for s in socks:
        s.settimeout(5)
        end = time.monotonic() + 10
        try:
            while time.monotonic() < end and s.recv(1 << 20):
                pass
            dropped += time.monotonic() < end
        except OSError:
            dropped += 1
    if dropped != n:
        raise Fail("%d of %d clients that never read were not dropped" % (n - dropped, n))
    return "%d clients asking 200 MiB each without reading: dropped" % n


def token_attack(port, token):
    s = conn(port)
    r = hello(s, b"not the token")
    if r[0] != ERROR or r[2] != errno.EACCES:
        raise Fail("wrong token: %r" % (r,))
    s = conn(port)
    r = hello(s, None)
    if r[0] != ERROR or r[2] != errno.EACCES:
        raise Fail("missing token: %r" % (r,))
    served(port, token)
    return "wrong and missing token: EACCES and closed"


def churn(port, token, total="5000", seconds="20", stop_file="", rate="0"):
    """Opens total connections that never authenticate, holding them (each
    sends the preamble only) and reopening each one the store closes,
    until stop_file exists or seconds pass, with at least total opened; at
    most rate new connections a second (0: as fast as it can). Prints how
    many it opened and how many the store closed."""
    total, seconds, rate = int(total), float(seconds), float(rate)
    t0 = time.monotonic()
    sel = selectors.DefaultSelector()
    opened = closed = 0
    end = time.monotonic() + seconds
    print("churning", flush=True)

    def open_one():
        nonlocal opened
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_WRITE, "connecting")
        opened += 1

    while time.monotonic() < end:
        if stop_file and os.path.exists(stop_file) and opened >= total:
            break
        while len(sel.get_map()) < total and (
                not rate or opened < rate * (time.monotonic() - t0)):
            open_one()
            if len(sel.get_map()) % 64 == 0:
                break
        for key, ev in sel.select(0.01):
            s = key.fileobj
            if key.data == "connecting":
                try:
                    s.send(PREAMBLE)
                    sel.modify(s, selectors.EVENT_READ, "open")
                except OSError:
                    sel.unregister(s)
                    s.close()
                    closed += 1
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()
                closed += 1
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return "opened %d unauthenticated connections in %.1f s, the store closed %d" % (
        opened, time.monotonic() - t0, closed)


def ops(port, token, count="1000", every="10"):
    """A token holder through libcrun: count SETs, on a fresh connection
    every `every` operations; each must succeed. Prints the p50 and p99 of
    one operation (connecting included when it connects)."""
    count, every = int(count), int(every)
    lib = ctypes.CDLL(os.environ["CRUN_LIBCRUN"])

    class Opts(ctypes.Structure):
        _fields_ = [("host", ctypes.c_char_p), ("port", ctypes.c_int),
                    ("run_id", ctypes.c_char_p), ("token", ctypes.c_char_p),
                    ("token_len", ctypes.c_size_t), ("connect_timeout_ms", ctypes.c_int),
                    ("timeout_ms", ctypes.c_int), ("max_event_bytes", ctypes.c_size_t)]

    lib.crun_store_create.restype = ctypes.c_void_p
    lib.crun_store_create.argtypes = [ctypes.POINTER(Opts)]
    lib.crun_store_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.c_size_t, ctypes.c_int]
    lib.crun_store_destroy.argtypes = [ctypes.c_void_p]
    lib.crun_store_errmsg.restype = ctypes.c_char_p
    lib.crun_store_errmsg.argtypes = [ctypes.c_void_p]
    o = Opts(b"127.0.0.1", port, RUN, token, len(token), 10000, 10000, 0)
    lat, h = [], None
    for i in range(count):
        t0 = time.monotonic()
        if i % every == 0:
            if h:
                lib.crun_store_destroy(h)
            h = lib.crun_store_create(ctypes.byref(o))
        rc = lib.crun_store_set(h, b"op%d" % i, b"v", 1, 0)
        lat.append(time.monotonic() - t0)
        if rc != 0:
            raise Fail("operation %d of %d failed: %s" % (i + 1, count,
                                                         lib.crun_store_errmsg(h).decode()))
    lib.crun_store_destroy(h)
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
    return "%d operations, all succeeded; p50 %.2f ms, p99 %.2f ms, max %.1f ms" % (
        count, p(0.50), p(0.99), lat[-1] * 1000)


ATTACKS = {"garbage": garbage, "huge": huge, "partial": partial, "slowloris-pre": slowloris_pre,
           "slowloris-post": slowloris_post, "noread": noread, "token": token_attack,
           "churn": churn, "ops": ops}

if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ATTACKS:
        sys.stderr.write(__doc__)
        sys.exit(2)
    tok = open(sys.argv[3], "rb").read().strip()
    try:
        print("ok " + ATTACKS[sys.argv[1]](int(sys.argv[2]), tok, *sys.argv[4:]), flush=True)
    except (Fail, OSError, EOFError, AssertionError) as e:
        print("FAIL %s: %s" % (type(e).__name__, e), flush=True)
        sys.exit(1)
