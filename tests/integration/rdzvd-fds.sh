#!/bin/sh
# crun-rdzvd out of file descriptors: the daemon under a limit of 64
# descriptors, 120 connections held open at once. The ones past the limit
# get the error EMFILE "out of file descriptors (limit 64)" and are closed,
# the log says so (rate limited), the daemon does not spin (its CPU time
# over 3 s of held connections stays low), and once they close a client
# with the right token is served again. Bounded by timeout(1) and polls.
set -u

. "$(dirname "$0")/rdzvd-lib.sh"
command -v prlimit >/dev/null 2>&1 || { echo "SKIP: no prlimit"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
rdzvd_test_init rdzvd-fds

# CPU time (user + system) of a process, in clock ticks.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

printf 'fd-secret\n' >"$tmp/token"
# The pre-authentication quotas would close the oldest of these unanswered
# connections long before the descriptors run out: raised out of the way.
rdzvd_wrap="prlimit --nofile=64:64 --" start_daemon daemon --token-file "$tmp/token" \
	--max-preauth 1000 --max-preauth-per-source 1000
ep=127.0.0.1:$port
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/token" set k v 2>"$tmp/err" ||
	fail "set before the flood"

# 120 connections held open; prints how many were refused with the reason,
# then holds them until its stdin closes.
cat >"$tmp/flood.py" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks, refused = [], 0
for _ in range(120):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"CRUN\0\1\0\0")
    socks.append(s)
deadline = time.monotonic() + 2
for s in socks:
    data = b""
    s.settimeout(max(0.05, deadline - time.monotonic()))
    try:
        while b"out of file descriptors" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    if b"out of file descriptors (limit 64)" in data:
        refused += 1
print(refused, flush=True)
sys.stdin.read()
PY
mkfifo "$tmp/hold"
timeout --foreground 30 python3 "$tmp/flood.py" "$port" <"$tmp/hold" >"$tmp/flood.out" 2>"$tmp/flood.err" &
flood=$!
exec 3>"$tmp/hold"
i=0
while [ ! -s "$tmp/flood.out" ]; do
	i=$((i + 1))
	[ $i -le 150 ] || fail "the flood did not report in 15 s ($(cat "$tmp/flood.err"))"
	sleep 0.1
done
refused=$(cat "$tmp/flood.out")
[ "$refused" -ge 50 ] || fail "only $refused of 120 connections got the out-of-descriptors error"
before=$(cpu_ticks "$pid")
sleep 3
after=$(cpu_ticks "$pid")
# 3 s of a spinning loop would be ~300 ticks; an idle daemon uses ~0.
[ $((after - before)) -le 30 ] || fail "daemon used $((after - before)) ticks of CPU in 3 s"
grep -q "refused a connection from 127.0.0.1:[0-9]*: out of file descriptors (limit 64)" \
	"$tmp/daemon.log" || fail "no 'out of file descriptors' line in the log"
lines=$(grep -c "out of file descriptors" "$tmp/daemon.log")
[ "$lines" -le 10 ] || fail "$lines lines for refused connections, the limit is 10 per 10 s"
exec 3>&-
wait "$flood"

i=0
until timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/token" get k >"$tmp/out" \
	2>"$tmp/err"; do
	i=$((i + 1))
	[ $i -le 50 ] || fail "the token holder is not served after the flood closed"
	sleep 0.1
done
[ "$(cat "$tmp/out")" = v ] || fail "get printed '$(cat "$tmp/out")'"
kill -0 "$pid" 2>/dev/null || fail "crun-rdzvd died"
grep "out of file descriptors" "$tmp/daemon.log" | tail -n 2
echo "ok: $refused of 120 connections refused for descriptors, daemon $((after - before)) ticks in 3 s"
