#!/bin/sh
# bench/tcpstore-storm, the init storm's load generator, in a few seconds:
# 256 ranks against torch's own TCPStore server (the first python of
# python3, /usr/bin/python3 that imports torch, in its dialect) are all
# released, with 256 distinct barrier indices; a second storm on the same
# keys is answered indices past 256 and must fail, so a generator that
# miscounts cannot pass. Then 256 ranks against crun-rdzvd: released, or,
# while crun-rdzvd does not speak the TCPStore protocol, its refusal (exit
# 3) is accepted. Skipped (77) when neither store can be tried.
set -u
. "$(dirname "$0")/rdzvd-lib.sh"
: "${CRUN_TCPSTORE_STORM:?CRUN_TCPSTORE_STORM must name the generator}"
rdzvd_test_init tcpstore-storm
G=$CRUN_TCPSTORE_STORM
tried=0

# summary FILE KEY: a key's value on the generator's summary line
summary() {
	sed -n "s/.*[ :]$2=\([^ ]*\).*/\1/p" "$1" | head -n 1
}

# released OUT RC WHO: the storm of OUT released all 256 ranks
released() {
	[ "$2" = 0 ] || fail "$3: exit $2: $(cat "$1")"
	[ "$(summary "$1" released)" = 256 ] || fail "$3: not 256 released: $(cat "$1")"
	[ "$(summary "$1" connections)" -ge 256 ] || fail "$3: connections: $(cat "$1")"
	[ "$(summary "$1" failures)" = 0 ] || fail "$3: failures: $(cat "$1")"
	[ "$(summary "$1" status)" = ok ] || fail "$3: status: $(cat "$1")"
}

# torch's server, from the first python that imports torch; the port file
# says the port and the dialect of that torch.
cat >"$tmp/server.py" <<'PY'
import os, re, sys
try:
    import torch
    from torch.distributed import TCPStore
except ImportError:
    sys.exit(77)
from datetime import timedelta
m = re.match(r"(\d+)\.(\d+)", torch.__version__)
dialect = "legacy" if (int(m.group(1)), int(m.group(2))) < (2, 1) else "modern"
s = TCPStore("127.0.0.1", 0, 256, True, timedelta(seconds=60), wait_for_workers=False)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d %s %s\n" % (s.port, dialect, torch.__version__))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
sys.stdin.read()
PY
# torch's server looks up every client's name: where a private mount
# namespace can be had, its resolv.conf names 127.0.0.1, so the lookup
# fails at once rather than waiting on the machine's resolver.
printf 'nameserver 127.0.0.1\n' >"$tmp/resolv.conf"
# shellcheck disable=SC2016 # expanded by the inner sh
bind='mount --bind "$0" /etc/resolv.conf && exec "$@"'
ns=""
unshare -m sh -c "$bind" "$tmp/resolv.conf" true 2>/dev/null && ns=1
mkfifo "$tmp/hold"
py=""
for p in python3 /usr/bin/python3; do
	command -v "$p" >/dev/null || continue
	if [ -n "$ns" ]; then
		unshare -m sh -c "$bind" "$tmp/resolv.conf" "$p" "$tmp/server.py" "$tmp/torch.port" \
			<"$tmp/hold" 2>"$tmp/torch.log" &
	else
		"$p" "$tmp/server.py" "$tmp/torch.port" <"$tmp/hold" 2>"$tmp/torch.log" &
	fi
	spid=$!
	pids="$pids $spid"
	exec 9>"$tmp/hold"
	i=0
	while [ ! -s "$tmp/torch.port" ] && kill -0 "$spid" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "torch's TCPStore server ($p): no port after 60 s"
		sleep 0.1
	done
	if [ -s "$tmp/torch.port" ]; then
		py=$p # fd 9 holds its stdin open: it serves until fd 9 closes
		break
	fi
	exec 9>&-
	wait "$spid"
	[ $? = 77 ] || fail "torch's TCPStore server ($p) exited: $(cat "$tmp/torch.log")"
done
if [ -n "$py" ]; then
	tried=1
	read -r tport dialect version <"$tmp/torch.port"
	timeout --foreground 60 "$G" --port "$tport" --ranks 256 --dialect "$dialect" --tag smoke \
		--timeout 30 >"$tmp/t1.out" 2>&1
	released "$tmp/t1.out" $? "torch $dialect"
	echo "ok torch $version's server ($py, $dialect): 256 ranks released"

	# The same keys again: the counter answers 257.. and the storm fails.
	timeout --foreground 60 "$G" --port "$tport" --ranks 256 --dialect "$dialect" --tag smoke \
		--timeout 10 >"$tmp/t2.out" 2>&1
	rc=$?
	[ $rc = 1 ] || fail "a storm on used keys: exit $rc: $(cat "$tmp/t2.out")"
	grep -q 'barrier ADD answered an index out of range' "$tmp/t2.out" ||
		fail "a storm on used keys: $(cat "$tmp/t2.out")"
	echo "ok a storm on used barrier keys fails"
	exec 9>&-
else
	echo "no python imports torch: torch's server not tried"
fi

start_daemon d
timeout --foreground 60 "$G" --port "$port" --ranks 256 --timeout 30 >"$tmp/c.out" 2>&1
rc=$?
if [ $rc = 3 ] && [ "$(summary "$tmp/c.out" status)" = refused ]; then
	echo "crun-rdzvd does not speak the TCPStore protocol: its storm not tried"
else
	tried=1
	released "$tmp/c.out" $rc crun-rdzvd
	echo "ok crun-rdzvd: 256 ranks released"
fi
[ $tried = 1 ] || exit 77
