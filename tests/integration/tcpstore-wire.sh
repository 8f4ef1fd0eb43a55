#!/bin/sh
# PyTorch's TCPStore protocol on crun-rdzvd's port, frame by frame:
# tcpstore-wire.py builds every request of both dialects itself (no torch
# needed) and checks each reply, malformed input, CANCEL_WAIT racing
# STOP_WAITING, a WAIT on 1,000 keys, queues (blocking pops woken by a
# push), crun and TCPStore clients side by side unable to see each other's
# keys, and a daemon with --tcpstore off.
set -u
. "$(dirname "$0")/rdzvd-lib.sh"
rdzvd_test_init tcpstore-wire
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

start_daemon on --max-key-size 256 --max-value-size 1KiB
on_port=$port
start_daemon off --tcpstore off
off_port=$port
timeout --foreground 60 python3 "$CRUN_SOURCE_DIR/tests/integration/tcpstore-wire.py" "$on_port" "$off_port" \
	"$CRUN_CTL" || fail "tcpstore-wire.py"
grep -q 'TCPStore protocol error: unknown TCPStore opcode 99' "$tmp/on.log" ||
	fail "no line naming the unknown opcode"
grep -q 'not a crun client (first byte 0x00) and TCPStore clients are not served here' \
	"$tmp/off.log" || fail "no line for a TCPStore client of a daemon with --tcpstore off"
echo "ok log lines"

# A modern TCPStore greeting (VALIDATE, PING): prints the PING's echo as
# "served", or "closed".
greet() {
	python3 -c '
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"\0" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", 7))
try:
    got = s.recv(4)
except ConnectionResetError:
    got = b""
print("served" if got == struct.pack("<I", 7) else "closed")' "$1"
}
printf 'tok' >"$tmp/tok"
start_daemon req --require-token --token-file "$tmp/tok"
[ "$(greet "$port")" = closed ] || fail "--require-token: TCPStore served"
start_daemon reqon --require-token --token-file "$tmp/tok" --tcpstore on
[ "$(greet "$port")" = served ] || fail "--require-token --tcpstore on: TCPStore not served"
echo "ok --require-token turns TCPStore off unless --tcpstore on"
"$CRUN_RDZVD" --tcpstore maybe 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "--tcpstore maybe: exit $rc"
grep -q "invalid value 'maybe' for --tcpstore: expected on or off" "$tmp/err" ||
	fail "--tcpstore maybe: $(cat "$tmp/err")"
echo "ok --tcpstore takes on or off"
