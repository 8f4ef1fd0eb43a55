#!/bin/sh
# The step timeline: a 2-rank job of configs/tiny.yaml under crun with
# trace.path writes one Chrome trace per rank; scripts/trace-merge merges
# them; the merged file is valid JSON with both ranks, each with forward
# and backward per unit, the optimizer, the collectives and the
# checkpoints of its traced steps, and the collectives of the two ranks
# line up (the k-th of each overlap, and end together: a collective
# finishes on every rank at once). crun-train prints a line per checkpoint
# (path, step, size, seconds). trace-merge refuses bad input with one line
# and exit 2; an unwritable trace.path is a config error (exit 78).
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

[ -n "${CRUN:-}" ] && [ -x "$CRUN" ] || { echo "SKIP: no crun"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
MERGE="$CRUN_SOURCE_DIR/scripts/trace-merge"
cfg="$CRUN_SOURCE_DIR/configs/tiny.yaml"
args="--set train.steps=12 --set train.eval_every=0 --set train.eval_samples=256 \
--set log.every=4 --set checkpoint.dir=$tmp/ckpt --set checkpoint.every=6 \
--set trace.path=$tmp/trace.json --set trace.warmup=1 --set trace.steps=8"

timeout --foreground 60 "$CRUN" --standalone --nproc-per-node=2 --max-restarts=0 "$TRAIN" "$cfg" $args \
	>"$tmp/job.out" 2>&1 || fail "crun --nproc-per-node=2 with trace.path failed"
for r in 0 1; do
	[ -s "$tmp/trace.json.rank$r" ] || fail "no trace of rank $r: $(ls "$tmp")"
done
[ ! -e "$tmp/trace.json" ] || fail "a job of 2 ranks wrote trace.json itself"

# the checkpoint lines: path, step, size, seconds
for s in 6 12; do
	grep -Eq "checkpoint of step $s saved to '$tmp/ckpt/step-0*$s' \([0-9]+ bytes, [0-9.]+ (KiB|MiB), [0-9.]+ s\)$" \
		"$tmp/job.out" || fail "no checkpoint line of step $s: $(grep checkpoint "$tmp/job.out")"
done
bytes=$(sed -n "s/.*checkpoint of step 12 saved to .* (\([0-9]*\) bytes.*/\1/p" "$tmp/job.out")
shards=$(cat "$tmp"/ckpt/step-*12/shard-* | wc -c)
[ "$bytes" = "$shards" ] || fail "checkpoint line says $bytes bytes, the shards hold $shards"
echo "ok checkpoint lines: $(grep -o "checkpoint of step 12 saved.*" "$tmp/job.out")"

"$MERGE" "$tmp/merged.json" "$tmp/trace.json.rank1" "$tmp/trace.json.rank0" >"$tmp/merge.out" 2>&1 ||
	fail "trace-merge failed: $(cat "$tmp/merge.out")"

python3 - "$tmp/merged.json" "$tmp/ckpt" <<'PY' || fail "the merged trace is wrong"
import json, sys
from collections import defaultdict

doc = json.load(open(sys.argv[1]))
assert doc["displayTimeUnit"] == "ms", doc.get("displayTimeUnit")
evs = doc["traceEvents"]
names = {(e["pid"], e["args"]["name"]) for e in evs
         if e["ph"] == "M" and e["name"] == "process_name"}
assert names == {(0, "rank 0"), (1, "rank 1")}, names
tracks = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
assert {"compute", "comm", "optimizer", "checkpoint", "step"} <= tracks, tracks
x = [e for e in evs if e["ph"] == "X"]
ts = [e["ts"] for e in x]
assert ts == sorted(ts), "events are not sorted by time"
by = defaultdict(list)
for e in x:
    assert e["dur"] >= 0 and isinstance(e["ts"], int), e
    by[e["pid"]].append(e)
assert set(by) == {0, 1}, set(by)
traced = set(range(2, 10))  # trace.warmup 1, trace.steps 8
comm = {}
for pid, es in by.items():
    steps = {e["args"]["step"] for e in es if e["cat"] != "checkpoint"}
    assert steps == traced, (pid, sorted(steps))
    for s in traced:
        fw = sorted(e["args"]["unit"] for e in es if e["name"] == "forward" and e["args"]["step"] == s)
        bw = sorted(e["args"]["unit"] for e in es if e["name"] == "backward" and e["args"]["step"] == s)
        assert fw == bw == list(range(len(fw))) and len(fw) >= 3, (pid, s, fw, bw)
        for name, cat in (("adamw", "optimizer"), ("grad norm", "optimizer"),
                          ("all-reduce", "comm"), ("all-reduce loss", "comm"), ("step", "step")):
            got = [e for e in es if e["name"] == name and e["args"]["step"] == s]
            assert len(got) == 1 and got[0]["cat"] == cat, (pid, s, name, got)
    for e in es:
        if e["name"] == "all-reduce":
            assert e["args"]["bytes"] == 4 * e["args"]["elements"] > 0, e
    ck = sorted(e["args"]["step"] for e in es if e["cat"] == "checkpoint")
    assert ck == [6, 12], (pid, ck)
    for e in es:
        if e["cat"] == "checkpoint":
            assert e["args"]["text"].startswith(sys.argv[2] + "/step-"), e
            assert e["args"]["bytes"] > 0, e
    comm[pid] = sorted((e for e in es if e["cat"] == "comm"), key=lambda e: e["ts"])

# the k-th collective of rank 0 and of rank 1: the same one, overlapping
# in time, ending together (the same host's clock)
a, b = comm[0], comm[1]
assert len(a) == len(b) >= 16, (len(a), len(b))
worst = 0
for k, (p, q) in enumerate(zip(a, b)):
    assert p["name"] == q["name"] and p["args"]["step"] == q["args"]["step"], (k, p, q)
    pe, qe = p["ts"] + p["dur"], q["ts"] + q["dur"]
    assert p["ts"] <= qe and q["ts"] <= pe, ("collective %d does not overlap" % k, p, q)
    worst = max(worst, abs(pe - qe))
assert worst <= 100000, "collectives end %d us apart" % worst
print("ok merged trace: %d events of 2 ranks, %d collectives each line up "
      "(ends at most %d us apart)" % (len(x), len(a), worst))
PY

# trace.path with {rank}, on one rank: that name; one that cannot be
# written: one line, exit 78
timeout --foreground 60 "$TRAIN" --set train.steps=3 --set model.width=32 --set data.generate_bytes=100000 \
	--set train.eval_samples=64 --set trace.path="$tmp/one-{rank}.json" >"$tmp/one.out" 2>&1 ||
	fail "one rank with trace.path failed"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(e["name"]=="forward" for e in d["traceEvents"])' \
	"$tmp/one-0.json" || fail "one-0.json is not the trace of rank 0"
timeout --foreground 20 "$TRAIN" --set train.steps=1 --set trace.path="$tmp/no/such/t.json" \
	>"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[ $rc -eq 78 ] || fail "unwritable trace.path: exit $rc, want 78"
[ "$(cat "$tmp/bad.err")" = "crun-train: cannot write trace '$tmp/no/such/t.json': No such file or directory" ] ||
	fail "unwritable trace.path: '$(cat "$tmp/bad.err")'"
echo "ok trace.path {rank} and an unwritable path"

# trace-merge on bad input: one line, exit 2
printf '{"traceEvents": [' >"$tmp/cut.json"
printf '[1, 2]' >"$tmp/list.json"
for bad in "cut.json:is not JSON" "list.json:is not a trace" \
	"trace.json.rank0 $tmp/trace.json.rank0:both hold pid 0" "none.json:cannot read"; do
	files=${bad%%:*}
	want=${bad#*:}
	# shellcheck disable=SC2086
	(cd "$tmp" && "$MERGE" "$tmp/m.json" $files) >"$tmp/m.out" 2>"$tmp/m.err"
	rc=$?
	[ $rc -eq 2 ] || fail "trace-merge $files: exit $rc, want 2"
	[ "$(wc -l <"$tmp/m.err")" -eq 1 ] && grep -q "^trace-merge: .*$want" "$tmp/m.err" ||
		fail "trace-merge $files: '$(cat "$tmp/m.err")'"
done
"$MERGE" "$tmp/m.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "trace-merge without inputs: not exit 2"
[ ! -e "$tmp/m.json" ] || fail "trace-merge wrote a file from bad input"
echo "ok trace-merge refuses bad input"
exit 0
