#!/usr/bin/env python3
"""Raw HTTP/1.1 probes of a metrics endpoint (tests/integration/metrics.sh).

  http-probe.py send HOST PORT TEXT   sends TEXT (Python escapes: \\r\\n)
      in one write, prints the status code of each reply until the server
      closes (or 3 s of silence), then "closed" or "open"
  http-probe.py split HOST PORT       one GET sent a byte at a time
  http-probe.py many HOST PORT N      opens N connections at once, reads
      the replies the server sends unasked, then sends a GET on each of the
      others; prints "200=A 503=B other=C"
  http-probe.py idle HOST PORT SECS   connects, sends nothing; prints
      "closed after S" when the server closes within SECS, else "open"
"""
import re
import select
import socket
import sys
import time


def replies(s, deadline=3.0, methods=()):
    """Status codes of the replies on s, and whether the server closed;
    methods: the requests' methods in order (a HEAD reply has no body)."""
    s.settimeout(deadline)
    buf = b""
    codes = []
    closed = False
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            code = int(lines[0].split(" ")[1])
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            head_only = len(codes) < len(methods) and methods[len(codes)] == b"HEAD"
            total = end + 4 + (0 if head_only else length)
            if len(buf) < total:
                break
            codes.append(code)
            buf = buf[total:]
    if buf:
        codes.append("junk")  # bytes that are no whole reply
    return codes, closed


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "send":
        text = sys.argv[4].encode("latin-1").decode("unicode_escape").encode("latin-1")
        s = socket.create_connection((host, port))
        s.sendall(text)
        methods = re.findall(rb"(?:^|\r\n\r\n)([A-Z]+) ", text)
        codes, closed = replies(s, 1.5, methods)
        print(" ".join(map(str, codes)), "closed" if closed else "open")
    elif mode == "split":
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n":
            s.send(bytes([b]))
            time.sleep(0.002)
        # the request asks to close: silence is only ever a slow server
        codes, closed = replies(s, deadline=15.0)
        print(" ".join(map(str, codes)), "closed" if closed else "open")
    elif mode == "many":
        # The endpoint answers a connection past its limit at once (503)
        # and closes it: read those first, then send a GET on the others.
        n = int(sys.argv[4])
        conns = [socket.create_connection((host, port)) for _ in range(n)]
        count = {200: 0, 503: 0, "other": 0}
        deadline = time.monotonic() + 1.0
        early = set()
        while time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in conns if s not in early], [], [], 0.1)
            early.update(ready)
        for s in conns:
            if s not in early:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        for s in conns:
            try:
                codes, _ = replies(s, 5.0)
            except OSError:
                codes = []
            code = codes[0] if codes else "other"
            count[code if code in count else "other"] += 1
            s.close()
        print("200=%d 503=%d other=%d" % (count[200], count[503], count["other"]))
    elif mode == "idle":
        secs = float(sys.argv[4])
        s = socket.create_connection((host, port))
        t0 = time.monotonic()
        s.settimeout(secs)
        try:
            data = s.recv(1)
            print("closed after %.0f" % (time.monotonic() - t0) if not data else "data")
        except socket.timeout:
            print("open")
    else:
        sys.exit("unknown mode " + mode)


main()
