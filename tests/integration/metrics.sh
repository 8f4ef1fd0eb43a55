#!/bin/bash
# The metrics endpoints of crun-rdzvd and crun (--metrics-port), over real
# HTTP: 200 with Prometheus's content type and a body promtool accepts, HEAD,
# 404 and 405, malformed and oversized requests, a request a byte at a
# time, pipelined requests on one kept-alive connection, more connections
# than the endpoint takes (503 for the rest, and it serves on), the idle
# timeout; bad and busy ports.
# shellcheck disable=SC2016,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
command -v curl >/dev/null || { echo "curl is not installed: skipping"; exit 77; }
command -v python3 >/dev/null || { echo "python3 is not installed: skipping"; exit 77; }
probe="$CRUN_SOURCE_DIR/tests/integration/http-probe.py"

"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --metrics-port 0 --metrics-host 127.0.0.1 \
	2>"$tmp/rdzvd.err" &
pid_rdzvd=$!
stray_pids="$stray_pids $pid_rdzvd"
agent job --standalone --metrics-port 0 --metrics-host 127.0.0.1 --no-python \
	sh -c "sleep 60 # $marker"

# check URL NAME: the endpoint at URL answers as it should.
check() {
	local url=$1 name=$2 hp host port
	hp=${url#http://}
	hp=${hp%%/*}
	host=${hp%:*}
	port=${hp##*:}

	curl -s -D "$tmp/$name.head" -o "$tmp/$name.body" "$url" || fail "$name: curl $url"
	head -n 1 "$tmp/$name.head" | grep -q '^HTTP/1.1 200 OK' || fail "$name: $(cat "$tmp/$name.head")"
	grep -qi '^Content-Type: text/plain; version=0.0.4' "$tmp/$name.head" ||
		fail "$name: content type: $(cat "$tmp/$name.head")"
	grep -q '^# TYPE crun_build_info gauge$' "$tmp/$name.body" || fail "$name: no crun_build_info"
	grep -qE '^process_resident_memory_bytes [1-9][0-9]*$' "$tmp/$name.body" ||
		fail "$name: no process_resident_memory_bytes"
	grep -qE '^process_open_fds [1-9][0-9]*$' "$tmp/$name.body" || fail "$name: no process_open_fds"
	if command -v promtool >/dev/null; then
		promtool check metrics <"$tmp/$name.body" >"$tmp/$name.lint" 2>&1 ||
			fail "$name: promtool check metrics: $(cat "$tmp/$name.lint")"
	fi

	# HEAD: the same head, no body.
	[ "$(curl -s -I "$url" | head -n 1 | tr -d '\r')" = "HTTP/1.1 200 OK" ] || fail "$name: HEAD"
	[ "$(python3 "$probe" send "$host" "$port" 'HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')" = "200 closed" ] ||
		fail "$name: HEAD with a body?"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$hp/nope")" = 404 ] || fail "$name: 404"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url")" = 405 ] || fail "$name: 405"
	curl -s -D - -o /dev/null -X DELETE "$url" | grep -qi '^Allow: GET, HEAD' || fail "$name: Allow"

	# Malformed, oversized, another version: the status, then closed.
	[ "$(python3 "$probe" send "$host" "$port" 'GARBAGE\r\n\r\n')" = "400 closed" ] ||
		fail "$name: garbage"
	[ "$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/1.1\r\n\r\n')" = "400 closed" ] ||
		fail "$name: no Host"
	[ "$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/3.0\r\nHost: x\r\n\r\n')" = "505 closed" ] ||
		fail "$name: HTTP/3.0"
	[ "$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc')" = "413 closed" ] ||
		fail "$name: a body"
	big=$(head -c 9000 /dev/zero | tr '\0' a)
	[ "$(python3 "$probe" send "$host" "$port" "GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nX: $big\\r\\n\\r\\n")" = "431 closed" ] ||
		fail "$name: a big head"
	r=$(python3 "$probe" split "$host" "$port")
	[ "$r" = "200 closed" ] || fail "$name: a byte at a time: $r"

	# Kept alive: three pipelined requests in one write, answered in
	# order; the connection stays open after them, closes after close.
	r=$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\n\r\nHEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
	[ "$r" = "200 404 200 open" ] || fail "$name: pipelined: $r"
	r=$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
	[ "$r" = "200 200 closed" ] || fail "$name: pipelined close: $r"
	r=$(python3 "$probe" send "$host" "$port" 'GET /metrics HTTP/1.0\r\n\r\n')
	[ "$r" = "200 closed" ] || fail "$name: HTTP/1.0: $r"

	# More connections than it takes: 64 at most served (one may be the
	# idle probe's, or one closing), the rest 503; then it still serves.
	r=$(python3 "$probe" many "$host" "$port" 80)
	case "$r" in
	"200=64 503=16 other=0" | "200=63 503=17 other=0" | "200=62 503=18 other=0") ;;
	*) fail "$name: 80 connections: $r" ;;
	esac
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$url")" = 200 ] || fail "$name: after the flood"
}

rdzvd_url=$(metrics_url "$tmp/rdzvd.err")
job_url=$(metrics_url "$tmp/job.err")
if [ -z "$rdzvd_url" ] || [ -z "$job_url" ]; then
	fail "no metrics URL: $(cat "$tmp/rdzvd.err" "$tmp/job.err")"
fi
# The idle timeout (15 s), meanwhile.
hp=${job_url#http://}
hp=${hp%%/*}
python3 "$probe" idle "${hp%:*}" "${hp##*:}" 20 >"$tmp/idle" &
idle_pid=$!

check "$rdzvd_url" rdzvd
check "$job_url" job
grep -q '^crun_store_connections ' "$tmp/rdzvd.body" || fail "rdzvd: no store metrics"
grep -q '^crun_job_info{run_id="' "$tmp/job.body" || fail "crun: no crun_job_info"
grep -q '^crun_workers{state="none"} ' "$tmp/job.body" || fail "crun: no crun_workers"
# --standalone: the agent hosts the store, so its metrics are there too.
grep -q '^crun_store_connections ' "$tmp/job.body" || fail "crun: no store metrics"

wait "$idle_pid"
grep -qE '^closed after 1[4-6]$' "$tmp/idle" || fail "idle connection: $(cat "$tmp/idle")"

# A bad port: one line, exit 2; a port in use: exit 1 at start.
busy=${rdzvd_url##*:}
busy=${busy%%/*}
"$CRUN" --metrics-port 65536 --no-python true 2>"$tmp/bad.err"
[ $? -eq 2 ] || fail "crun --metrics-port 65536 did not exit 2"
[ "$(wc -l <"$tmp/bad.err")" -eq 1 ] || fail "more than one line: $(cat "$tmp/bad.err")"
grep -q "metrics-port" "$tmp/bad.err" || fail "$(cat "$tmp/bad.err")"
PET_METRICS_PORT=x "$CRUN" --no-python true 2>"$tmp/bad.err"
[ $? -eq 2 ] || fail "PET_METRICS_PORT=x did not exit 2"
"$CRUN_RDZVD" --port 0 --metrics-port -1 2>"$tmp/bad.err"
[ $? -eq 2 ] || fail "crun-rdzvd --metrics-port -1 did not exit 2"
timeout --foreground 10 "$CRUN" --metrics-port "$busy" --metrics-host 127.0.0.1 --no-python true 2>"$tmp/busy.err"
[ $? -eq 1 ] || fail "crun on a busy metrics port did not exit 1: $(cat "$tmp/busy.err")"
grep -q "crun: metrics: .*$busy" "$tmp/busy.err" || fail "$(cat "$tmp/busy.err")"
timeout --foreground 10 "$CRUN_RDZVD" --host 127.0.0.1 --port 0 --metrics-port "$busy" \
	--metrics-host 127.0.0.1 2>"$tmp/busy.err"
[ $? -eq 1 ] || fail "crun-rdzvd on a busy metrics port did not exit 1: $(cat "$tmp/busy.err")"

kill -TERM "$pid_job" "$pid_rdzvd"
finish job 10
wait "$pid_rdzvd"
[ $? -eq 0 ] || fail "crun-rdzvd did not stop cleanly"
wait_none "$marker"
echo "metrics: both endpoints answer as they should"
