#!/bin/bash
# The GPUs an operator sees, through the NVML test double (tests/nvml_fake.c,
# loaded by CRUN_NVML_LIBRARY; no GPU here): a --standalone job of two
# workers on GPUs given by CUDA_VISIBLE_DEVICES as uuids, in reverse order:
# - its metrics (--metrics-port=0) carry every GPU series of crun(1),
#   METRICS, with the double's values, and each rank's GPU, and pass
#   promtool where it is installed;
# - `crun status --json` gives each rank its GPU with the same values, and
#   the table shows them;
# - a second sample sees the double's new values (the sampler runs on).
# shellcheck disable=SC2016 source-path=SCRIPTDIR
set -u
. "$(dirname "$0")/crun-lib.sh"
: "${CRUN_NVML_FAKE_LIB:?CRUN_NVML_FAKE_LIB must name the NVML test double}"

u0=GPU-0c6b6a6e-0000-4a4a-8d8d-000000000000
u1=GPU-0c6b6a6e-1111-4a4a-8d8d-111111111111
# gpu INDEX UUID UTIL% USED TOTAL TEMP POWER_mW ECC_CORR ECC_UNCORR NAME
conf() {
	cat >"$tmp/nvml.conf.new" <<CONF
gpu 0 $u0 $1 1073741824 150754820096 41 123456 0 0 NVIDIA Fake H200
gpu 1 $u1 0 2147483648 150754820096 39 98000 2 1 NVIDIA Fake H200
CONF
	mv "$tmp/nvml.conf.new" "$tmp/nvml.conf"
}
conf 37
echo "xid 1 79" >>"$tmp/nvml.conf"
marker="gpu-observe-$$"
# The workers wait for $tmp/stop, 30 s at most. crun itself is the
# background job (no wrapper), so that a failed check's cleanup kills crun
# and with it, through its guard, the workers.
CRUN_NVML_LIBRARY=$CRUN_NVML_FAKE_LIB CRUN_NVML_FAKE=$tmp/nvml.conf CUDA_VISIBLE_DEVICES=$u1,$u0 \
	"$CRUN" --standalone --nproc-per-node=2 --metrics-port=0 \
	--metrics-host=127.0.0.1 --gpu-sample-interval=200ms \
	sh -c 'i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do i=$((i + 1)); sleep 0.05; done' \
	"$marker" "$tmp/stop" >"$tmp/out" 2>"$tmp/err" &
crun_pid=$!
stray_pids=$crun_pid
wait_lines "$tmp/err" "^crun: metrics at http://127.0.0.1:[0-9]*/metrics$" 1
url=$(sed -n 's|^crun: metrics at \(http://.*/metrics\)$|\1|p' "$tmp/err")

# scrape: the metrics text into $tmp/m (bounded)
scrape() {
	curl -sf --max-time 5 "$url" >"$tmp/m" || fail "cannot scrape $url: $(cat "$tmp/err")"
}
# metric SERIES: its value in $tmp/m
metric() {
	awk -v s="$1" '{ v = $NF; sub(/ [^ ]*$/, "") } $0 == s { print v }' "$tmp/m"
}
want() {
	[ "$(metric "$1")" = "$2" ] || fail "$1 is '$(metric "$1")', want $2:
$(grep '^crun_\(gpu\|worker_gpu\)' "$tmp/m")"
}
# Poll until both workers run on their GPUs (bounded).
for _ in $(seq 100); do
	scrape
	[ "$(metric 'crun_workers{state="running"}')" = 2 ] &&
		[ -n "$(metric "crun_worker_gpu_info{rank=\"1\",local_rank=\"1\",gpu=\"0\",uuid=\"$u0\"}")" ] && break
	sleep 0.1
done
g0="gpu=\"0\",uuid=\"$u0\""
g1="gpu=\"1\",uuid=\"$u1\""
want "crun_worker_gpu_info{rank=\"0\",local_rank=\"0\",gpu=\"1\",uuid=\"$u1\"}" 1
want "crun_worker_gpu_info{rank=\"1\",local_rank=\"1\",gpu=\"0\",uuid=\"$u0\"}" 1
want "crun_gpu_info{$g0,name=\"NVIDIA Fake H200\"}" 1
want "crun_gpu_utilization_ratio{$g0}" 0.37
want "crun_gpu_utilization_ratio{$g1}" 0
want "crun_gpu_memory_used_bytes{$g1}" 2147483648
want "crun_gpu_memory_total_bytes{$g0}" 150754820096
want "crun_gpu_temperature_celsius{$g0}" 41
want "crun_gpu_power_watts{$g0}" 123.456
want "crun_gpu_ecc_corrected_errors_total{$g1}" 2
want "crun_gpu_ecc_uncorrected_errors_total{$g1}" 1
want "crun_gpu_xid_errors_total{$g1}" 1
want "crun_gpu_xid_errors_total{$g0}" 0
if command -v promtool >/dev/null; then
	promtool check metrics <"$tmp/m" >"$tmp/promtool" 2>&1 || fail "promtool: $(cat "$tmp/promtool")"
fi

# crun status: each rank with its GPU.
timeout --foreground 10 "$CRUN" status --json >"$tmp/st.json" 2>"$tmp/st.err" || fail "crun status: $(cat "$tmp/st.err")"
python3 - "$tmp/st.json" "$u0" "$u1" <<'PY' || fail "status json: $(cat "$tmp/st.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
u0, u1 = sys.argv[2], sys.argv[3]
ranks = sorted(doc["ranks"], key=lambda r: r["rank"])
g = [r["gpu"] for r in ranks]
assert [x["index"] for x in g] == [1, 0] and [x["uuid"] for x in g] == [u1, u0], g
assert g[1]["util"] == 0.37 and g[1]["temp_c"] == 41 and g[1]["power_w"] == 123.456, g
assert g[0]["mem_used"] == 2147483648 and g[0]["mem_total"] == 150754820096, g
assert g[0]["name"] == "NVIDIA Fake H200" and g[0]["sampled_ms"] > 0, g
PY
timeout --foreground 10 "$CRUN" status >"$tmp/st.out" 2>"$tmp/st.err" || fail "crun status: $(cat "$tmp/st.err")"
grep -qE '^1 +[^ ]+ +1 +[0-9]+ +running .* 0 37% 1\.0/140\.4GiB$' "$tmp/st.out" ||
	fail "status table: $(cat "$tmp/st.out")"

# The sampler runs on: new values reach the metrics.
conf 91
for _ in $(seq 100); do
	scrape
	[ "$(metric "crun_gpu_utilization_ratio{$g0}")" = 0.91 ] && break
	sleep 0.1
done
want "crun_gpu_utilization_ratio{$g0}" 0.91

touch "$tmp/stop"
wait "$crun_pid"
rc=$?
stray_pids=""
[ "$rc" = 0 ] || fail "the job: exit $rc: $(cat "$tmp/err")"
wait_none "$marker"
echo "ok"
