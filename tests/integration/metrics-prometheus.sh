#!/bin/bash
# A real Prometheus (Debian's prometheus) scrapes crun-rdzvd and a crun job
# against it (one node, --rdzv-endpoint on the daemon, both with
# --metrics-port), and its HTTP API shows the series: crun_restarts_total
# goes from 0 to 1 when the job's worker fails once and the group restarts,
# and the daemon's store requests and rounds grow with it. Everything it
# starts is stopped; no prometheus is left behind.
# shellcheck disable=SC2016,SC2086,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
command -v prometheus || { echo "prometheus is not installed: skipping"; exit 77; }
command -v curl || { echo "curl is not installed: skipping"; exit 77; }
command -v python3 || { echo "python3 is not installed: skipping"; exit 77; }

pid_prom=
stop_prom() {
	[ -n "$pid_prom" ] || return 0
	kill -TERM "$pid_prom" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$pid_prom" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$pid_prom" 2>/dev/null
	wait "$pid_prom" 2>/dev/null
	pid_prom=
}
trap 'stop_prom; cleanup' EXIT

# metrics_port FILE: the port of the URL of FILE's "metrics at" line
# (multinode-lib.sh's metrics_url; empty when there is none)
metrics_port() {
	local u
	u=$(metrics_url "$1")
	u=${u%/metrics}
	[ -z "$u" ] || echo "${u##*:}"
}

# The daemon, and one node against it whose worker fails in its first
# attempt once $tmp/go exists, and runs on in the next.
"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/rdzvd.port" --metrics-port 0 \
	--metrics-host 127.0.0.1 2>"$tmp/rdzvd.err" &
pid_rdzvd=$!
stray_pids="$stray_pids $pid_rdzvd"
wait_for "$tmp/rdzvd.err" "listening on"
# the port file can come a moment after that line
for _ in $(seq 200); do
	[ -s "$tmp/rdzvd.port" ] && break
	sleep 0.05
done
store_port=$(cat "$tmp/rdzvd.port")
rdzvd_mport=$(metrics_port "$tmp/rdzvd.err")
[ -n "$rdzvd_mport" ] || fail "crun-rdzvd named no metrics port: $(cat "$tmp/rdzvd.err")"
agent job --nnodes=1 --rdzv-endpoint="127.0.0.1:$store_port" --rdzv-id=prom-$$ \
	--rdzv-conf is_host=0 --max-restarts=2 --metrics-port 0 --metrics-host 127.0.0.1 \
	--no-python sh -c '
	i=0
	if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
		until [ -e "$0/go" ]; do
			i=$((i + 1)); [ $i -le 400 ] || exit 3; sleep 0.05
		done
		exit 1
	fi
	until [ -e "$0/stop" ]; do
		i=$((i + 1)); [ $i -le 600 ] || exit 3; sleep 0.05
	done' "$tmp" "$marker"
job_mport=$(metrics_port "$tmp/job.err")
[ -n "$job_mport" ] || fail "the job named no metrics port: $(cat "$tmp/job.err")"

prom_port=$(free_port)
cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: crun
    static_configs:
      - targets: ['127.0.0.1:$job_mport']
  - job_name: rdzvd
    static_configs:
      - targets: ['127.0.0.1:$rdzvd_mport']
YAML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prom.out" 2>&1 &
pid_prom=$!

# query EXPR: the value of EXPR's one sample in Prometheus now, or nothing
query() {
	curl -s --max-time 2 "http://127.0.0.1:$prom_port/api/v1/query" \
		--data-urlencode "query=$1" | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
res = r.get("data", {}).get("result", [])
if r.get("status") == "success" and len(res) == 1:
    print(res[0]["value"][1])'
}
# wait_query EXPR TEST SECS: until query EXPR gives a value v for which
# the awk expression TEST holds; sets qv to it
wait_query() {
	local v
	for _ in $(seq $(($3 * 4))); do
		v=$(query "$1")
		if [ -n "$v" ] && awk -v v="$v" "BEGIN { exit !($2) }"; then
			qv=$v
			return 0
		fi
		kill -0 "$pid_prom" 2>/dev/null || fail "prometheus exited: $(cat "$tmp/prom.out")"
		sleep 0.25
	done
	fail "no '$1' with $2 in Prometheus within $3 s (last: '$v'); targets:
$(curl -s "http://127.0.0.1:$prom_port/api/v1/targets" | head -c 2000)
--- crun
$(tail -n 20 "$tmp/job.err")"
}

# Both targets up, the series there before the restart.
wait_query 'up{job="crun"}' 'v == 1' 20
wait_query 'up{job="rdzvd"}' 'v == 1' 10
wait_query 'crun_restarts_total{job="crun",cause="worker_failed"}' 'v == 0' 10
wait_query 'crun_rdzv_rounds_formed_total{job="rdzvd"}' 'v == 1' 10
wait_query 'crun_store_requests_total{job="rdzvd",protocol="crun",op="rdzv_join"}' 'v >= 1' 10
joins=$qv
wait_query 'sum(crun_store_requests_total{job="rdzvd"})' 'v > 0' 10
ops=$qv
wait_query 'process_resident_memory_bytes{job="crun"}' 'v > 0' 5
wait_query 'process_open_fds{job="rdzvd"}' 'v > 0' 5
wait_query 'crun_job_info{job="crun",run_id="prom-'$$'"}' 'v == 1' 5

# The worker fails once; the job restarts and runs on.
touch "$tmp/go"
wait_for "$tmp/job.err" "restarting" 1 15
wait_query 'crun_restarts_total{job="crun",cause="worker_failed"}' 'v == 1' 10
wait_query 'sum(increase(crun_restarts_total{job="crun"}[1m]))' 'v > 0' 10
wait_query 'sum(crun_restarts_total{job="crun"})' 'v == 1' 5
wait_query 'crun_rdzv_rounds_formed_total{job="rdzvd"}' 'v == 2' 10
wait_query 'crun_store_requests_total{job="rdzvd",protocol="crun",op="rdzv_join"}' \
	"v > $joins" 10
wait_query 'sum(crun_store_requests_total{job="rdzvd"})' "v > $ops" 10
wait_query 'crun_rdzv_round_formation_seconds_count{job="rdzvd"}' 'v == 2' 5

touch "$tmp/stop"
expect_rc job 0
kill -TERM "$pid_rdzvd"
wait "$pid_rdzvd" || fail "crun-rdzvd did not stop cleanly"
p=$pid_prom
stop_prom
! kill -0 "$p" 2>/dev/null || fail "prometheus $p is still running"
[ -z "$(live "$tmp/prometheus.yml")" ] || fail "a prometheus is left: $(live "$tmp/prometheus.yml")"
wait_none "$marker"
echo "metrics-prometheus: Prometheus scraped crun and crun-rdzvd and saw the restart"
