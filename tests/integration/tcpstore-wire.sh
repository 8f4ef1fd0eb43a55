#!/bin/sh
# PyTorch's TCPStore protocol on crun-rdzvd's port, frame by frame:
# tcpstore-wire.py builds every request of both dialects itself (no torch
# needed) and checks each reply, malformed input, CANCEL_WAIT racing
# STOP_WAITING, a WAIT on 1,000 keys, crun and TCPStore clients side by
# side unable to see each other's keys, and a daemon with --tcpstore off.
set -u
. "$(dirname "$0")/rdzvd-lib.sh"
rdzvd_test_init tcpstore-wire
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

start_daemon on --max-key-size 256 --max-value-size 1KiB
on_port=$port
start_daemon off --tcpstore off
off_port=$port
timeout 60 python3 "$CRUN_SOURCE_DIR/tests/integration/tcpstore-wire.py" "$on_port" "$off_port" \
	"$CRUN_CTL" || fail "tcpstore-wire.py"
grep -q 'TCPStore protocol error: unknown TCPStore opcode 99' "$tmp/on.log" ||
	fail "no line naming the unknown opcode"
grep -q 'not a crun client (first byte 0x00) and TCPStore clients are not served here' \
	"$tmp/off.log" || fail "no line for a TCPStore client of a daemon with --tcpstore off"
echo "ok log lines"
