#!/bin/bash
# A Python worker that fails like a PyTorch script decorated with @record
# (tests/helpers/record_worker.py; torch is not needed): its exception and
# traceback reach crun's failure summary, and crun's own
# TORCHELASTIC_ERROR_FILE gets the root cause in the same JSON format.
set -u
. "$(dirname "$0")/crun-lib.sh"
command -v python3 >/dev/null || { echo "no python3: skipping"; exit 77; }

script=$CRUN_TEST_HELPERS_SRC/record_worker.py
FAIL_RANK=1 TORCHELASTIC_ERROR_FILE=$tmp/crun-error.json crun --nproc-per-node=2 \
	--max-restarts=0 "$script" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] || fail "exit $rc: $(cat "$tmp/err")"
has "$tmp/err" "$script FAILED"
has "$tmp/err" "  rank      : 1 (local_rank: 1)"
has "$tmp/err" "  message   : RuntimeError: boom in load_batch on rank 1"
has "$tmp/err" "  traceback : Traceback (most recent call last):"
grep -q '^                  raise RuntimeError(f"boom in load_batch on rank {rank}")$' \
	"$tmp/err" || fail "traceback lines: $(cat "$tmp/err")"
python3 - "$tmp/crun-error.json" <<'PY' || fail "crun's error file: $(cat "$tmp/crun-error.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
m = doc["message"]
assert m["message"] == "RuntimeError: boom in load_batch on rank 1", m["message"]
assert "Traceback" in m["extraInfo"]["py_callstack"]
assert m["errorCode"] == 1
PY
echo "ok"
