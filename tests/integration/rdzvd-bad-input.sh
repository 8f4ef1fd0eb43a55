#!/bin/bash
# crun-rdzvd against bad input: bad flags (exit 2, one line), a port in use
# (exit 1), garbage, huge lengths, floods of tiny frames and silent peers on
# the wire, a wrong token; after each the daemon must still answer a
# well-formed client, and SIGTERM must stop it with exit 0 within 2 s.
# Frames are built by hand in python3, so this does not depend on crunctl.
# The daemon serves crun's protocol only (--tcpstore off): a silent peer is
# closed at the handshake timeout (TCPStore's are tcpstore-wire's).
set -u

: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"
command -v python3 >/dev/null || { echo "python3 not found: skipping"; exit 77; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/*.log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
	done
	exit 1
}

# --- usage errors: exit 2 and exactly one line on stderr -------------------
usage_error() {
	local want=$1 out rc
	shift
	out=$("$CRUN_RDZVD" "$@" 2>&1 >/dev/null)
	rc=$?
	[ "$rc" = 2 ] || fail "crun-rdzvd $*: exit $rc, expected 2 ($out)"
	[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "crun-rdzvd $*: more than one line: $out"
	case "$out" in
	"crun-rdzvd: "*"$want"*) ;;
	*) fail "crun-rdzvd $*: '$out' does not say '$want'" ;;
	esac
}
usage_error "invalid value 'x' for --port" --port x
usage_error "invalid value '70000' for --port" --port 70000
usage_error "invalid value '-1' for --port" --port -1
usage_error "invalid value '+80' for --port" --port +80
usage_error "invalid value ' 80' for --metrics-port" --metrics-port " 80"
usage_error "invalid value '+80' for --metrics-port" --metrics-port +80
usage_error "invalid value '+4' for --max-connections" --max-connections +4
usage_error "unknown option '--bogus'" --bogus
usage_error "unknown option '-z'" -z
usage_error "'--port' needs a value" --port
usage_error "unexpected argument 'extra'" extra
usage_error "invalid value '12Q' for --max-key-size" --max-key-size 12Q
usage_error "invalid value '0' for --max-connections" --max-connections 0
usage_error "invalid value 'soon' for --handshake-timeout" --handshake-timeout soon
usage_error "invalid value '1K' for --max-buffer" --max-buffer 1K
usage_error "cannot read the token" --token-file "$tmp/no-such-file"
: >"$tmp/empty-token"
usage_error "is empty" --token-file "$tmp/empty-token"

"$CRUN_RDZVD" --help | grep -q -- '--max-connections' || fail "--help does not list the flags"
"$CRUN_RDZVD" --version | grep -q '^crun-rdzvd ' || fail "--version"

# --- start a daemon on a free port -----------------------------------------
# start NAME ARGS...: runs crun-rdzvd in the background with --port 0 and
# --port-file, waits (5 s at most) for the port; sets $pid and $port.
start() {
	local name=$1 i
	shift
	rm -f "$tmp/$name.port"
	"$CRUN_RDZVD" --port 0 --port-file "$tmp/$name.port" "$@" 2>"$tmp/$name.log" &
	pid=$!
	pids+=("$pid")
	for i in $(seq 100); do
		[ -s "$tmp/$name.port" ] && break
		kill -0 "$pid" 2>/dev/null || fail "$name: crun-rdzvd exited early"
		sleep 0.05
	done
	[ -s "$tmp/$name.port" ] || fail "$name: no port file after 5 s"
	port=$(cat "$tmp/$name.port")
}

# stop NAME PID: SIGTERM, exit 0 within 2 s.
stop() {
	local name=$1 p=$2 i rc
	kill -TERM "$p"
	for i in $(seq 40); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$p" 2>/dev/null && fail "$name: still running 2 s after SIGTERM"
	wait "$p"
	rc=$?
	[ "$rc" = 0 ] || fail "$name: exit $rc after SIGTERM, expected 0"
	grep -q "stopping on SIGTERM" "$tmp/$name.log" || fail "$name: no stop line in the log"
}

start main --host 127.0.0.1 --handshake-timeout 500ms --tcpstore off
main_pid=$pid main_port=$port
[ "$(grep -c "^crun-rdzvd: listening on 127.0.0.1:$port\$" "$tmp/main.log")" = 1 ] ||
	fail "no single 'listening on 127.0.0.1:$port' line"
grep -q "without a token" "$tmp/main.log" && fail "loopback listener warned about the token"

# A port in use: exit 1 with one line.
out=$("$CRUN_RDZVD" --host 127.0.0.1 --port "$main_port" 2>&1 >/dev/null)
rc=$?
[ "$rc" = 1 ] || fail "port in use: exit $rc, expected 1 ($out)"
[ "$out" = "crun-rdzvd: cannot listen on '127.0.0.1:$main_port': address already in use" ] ||
	fail "port in use: unexpected message '$out'"

# --- the wire ---------------------------------------------------------------
cat >"$tmp/wire.py" <<'EOF'
import hashlib, hmac, os, socket, struct, sys, time

HELLO, SET, GET, ADD, PING = 1, 2, 3, 6, 14
OK, ERROR, VALUE, INT = 0x80, 0x81, 0x82, 0x83
port = int(sys.argv[2])

def frame(t, i, num=0, items=(), flags=0):
    p = struct.pack(">qI", num, len(items))
    p += b"".join(struct.pack(">I", len(x)) + x for x in items)
    return struct.pack(">IBBHI", len(p), t, flags, 0, i) + p

def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("connection closed after %d of %d bytes" % (len(b), n))
        b += c
    return b

def read_frame(s):
    l, t, fl, z, i = struct.unpack(">IBBHI", recvn(s, 12))
    p = recvn(s, l)
    num, cnt = struct.unpack(">qI", p[:12])
    off, items = 12, []
    for _ in range(cnt):
        (n,) = struct.unpack(">I", p[off:off + 4])
        items.append(p[off + 4:off + 4 + n])
        off += 4 + n
    return t, i, num, items

def hello(s, run=b"it", token=None):
    s.sendall(b"CRUN\x00\x01\x00\x00")
    pre = recvn(s, 40)
    assert pre[:6] == b"CRUN\x00\x01", pre
    snonce, cnonce = pre[8:40], os.urandom(32)
    mac = b""
    if token is not None:
        mac = hmac.new(token, b"crun-auth-v2 client" + snonce + cnonce + struct.pack(">I", len(run)) + run,
                       hashlib.sha256).digest()
    s.sendall(frame(HELLO, 1, items=(run, cnonce, mac)))
    r = read_frame(s)
    if r[0] == OK and token is not None:
        want = hmac.new(token, b"crun-auth-v2 server" + cnonce + snonce + struct.pack(">I", len(run)) + run,
                        hashlib.sha256).digest()
        assert r[3] == [want], "bad server mac"
    return r

def closed(s):
    """True when the server closes s within 5 s (whatever it sends first)."""
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False

def well_formed(token=None):
    s = conn()
    r = hello(s, token=token)
    assert r[0] == OK, r
    s.sendall(frame(SET, 2, items=(b"k", b"v")) + frame(GET, 3, items=(b"k",)) +
              frame(PING, 4, items=(b"hi",)))
    assert read_frame(s)[:2] == (OK, 2)
    assert read_frame(s) == (VALUE, 3, 0, [b"v"])
    assert read_frame(s) == (VALUE, 4, 0, [b"hi"])
    s.close()

def expect_error_close(s, errno_, what):
    t, i, num, items = read_frame(s)
    assert t == ERROR and num == errno_, (what, t, num, items)
    assert closed(s), what + ": not closed"

def garbage():
    s = conn()
    s.sendall(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
    # not crun's first byte: closed without a word (nor crun's preamble)
    assert s.recv(64) == b"", "http request: answered"
    well_formed()
    s = conn()
    s.sendall(b"CRAP\0\1\0\0")                  # crun's first byte, bad magic
    recvn(s, 40)
    expect_error_close(s, 71, "bad magic")         # EPROTO
    well_formed()
    s = conn()
    s.sendall(os.urandom(4096))
    assert closed(s), "random bytes: not closed"
    well_formed()

def truncated():
    s = conn()
    assert hello(s)[0] == OK
    f = frame(SET, 2, items=(b"key", b"value"))
    s.sendall(f[:-4])
    time.sleep(0.05)
    s.close()
    s = conn()
    assert hello(s)[0] == OK
    s.sendall(f[:7])
    s.shutdown(socket.SHUT_WR)
    assert closed(s), "truncated frame: not closed"
    well_formed()

def huge():
    for ln in (0xFFFFFFFF, 0x80000000):
        s = conn()
        assert hello(s)[0] == OK
        s.sendall(struct.pack(">IBBHI", ln, SET, 0, 0, 9))   # the header alone
        expect_error_close(s, 71, "len %#x" % ln)
    # 2^63 as a number: GET with a negative timeout is refused
    s = conn()
    assert hello(s)[0] == OK
    s.sendall(frame(GET, 5, num=-(2**63), items=(b"k",)))
    expect_error_close(s, 71, "timeout -2^63")
    well_formed()

def tiny():
    s = conn()
    assert hello(s)[0] == OK
    n = 10000
    s.sendall(b"".join(frame(ADD, 100 + i, num=1, items=(b"ctr",)) for i in range(n)))
    for i in range(n):
        t, rid, num, _ = read_frame(s)
        assert (t, rid, num) == (INT, 100 + i, i + 1), (t, rid, num)
    s.close()
    well_formed()

def silent():
    s = conn()
    t0 = time.monotonic()
    recvn(s, 40)
    expect_error_close(s, 110, "silent peer")      # ETIMEDOUT
    assert time.monotonic() - t0 < 3, "handshake timeout too slow"
    well_formed()

def auth():
    token = open(sys.argv[3], "rb").read().strip()
    well_formed(token)
    s = conn()
    r = hello(s, token=b"not the token")
    assert r[0] == ERROR and r[2] == 13 and r[3] == [b"authentication failed"], r
    assert closed(s), "wrong token: not closed"
    s = conn()
    r = hello(s)
    assert r[0] == ERROR and r[2] == 13, r
    well_formed(token)

globals()[sys.argv[1]]()
EOF

for t in garbage truncated huge tiny silent; do
	python3 "$tmp/wire.py" "$t" "$main_port" || fail "wire test '$t'"
	kill -0 "$main_pid" 2>/dev/null || fail "crun-rdzvd died during '$t'"
done
grep -q "protocol error" "$tmp/main.log" || fail "no protocol error logged"
grep -q "no handshake within 500 ms" "$tmp/main.log" || fail "no handshake timeout logged"

# --- a token, and the warning for a non-loopback listener ------------------
printf 'it is a secret\n' >"$tmp/token"
start auth --host 127.0.0.1 --token-file "$tmp/token"
auth_pid=$pid
python3 "$tmp/wire.py" auth "$port" "$tmp/token" || fail "wire test 'auth'"
grep -q "authentication failed" "$tmp/auth.log" || fail "no authentication failure logged"
stop auth "$auth_pid"

start open --host 0.0.0.0
open_pid=$pid
grep -q "^crun-rdzvd: warning: listening on 0.0.0.0:$port without a token" "$tmp/open.log" ||
	fail "no warning for a tokenless listener on 0.0.0.0"
grep -q "^crun-rdzvd: warning: serving PyTorch TCPStore clients on 0.0.0.0:$port: they cannot authenticate" \
	"$tmp/open.log" || fail "no warning for TCPStore clients on 0.0.0.0"
stop open "$open_pid"

CRUN_TOKEN=from-env start envtok --host 0.0.0.0
envtok_pid=$pid
grep -q "without a token" "$tmp/envtok.log" && fail "CRUN_TOKEN was ignored"
stop envtok "$envtok_pid"

stop main "$main_pid"
pids=()
echo "ok"
