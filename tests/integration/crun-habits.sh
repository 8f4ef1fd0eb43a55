#!/bin/bash
# Habits of torchrun users, with real crun and workers: --redirects and
# --tee together (tee adds the console to a redirected stream, per local
# rank and stream, in either order); the failure summary names the error
# file a worker wrote as PyTorch's @record does; --run-path runs the script
# with runpy.run_path; --log-line-prefix-template and its variable;
# torchrun's --rdzv-conf keys.
set -u
. "$(dirname "$0")/crun-lib.sh"

# --rdzv-conf: torchrun's timeout is static's join timeout; c10d's
# backend does not read it (nor does crun); its other keys are taken.
crun --dry-run --nnodes=2 --node-rank=0 --master-addr=127.0.0.1 --master-port=29500 \
	--rdzv-conf=timeout=5 x >"$tmp/out" 2>"$tmp/err" || fail "static timeout: $(cat "$tmp/err")"
has "$tmp/out" "rdzv_backend=static"
has "$tmp/out" "rdzv_conf.join_timeout_ms=5000"
crun --dry-run --nnodes=2 --rdzv-endpoint=127.0.0.1:29400 \
	--rdzv-conf=timeout=5,use_libuv=1,store_type=tcp,heartbeat_timeout=5,is_host=0 x \
	>"$tmp/out" 2>"$tmp/err" || fail "c10d keys: $(cat "$tmp/err")"
has "$tmp/out" "rdzv_conf.join_timeout_ms=600000"
has "$tmp/out" "rdzv_conf.is_host=0"

# tee_case NAME CONSOLE_OUT CONSOLE_ERR ARGS...: two workers each write
# "out" and "err"; CONSOLE_OUT / CONSOLE_ERR list the ranks whose line
# reaches crun's stdout / stderr; every log file holds its stream.
tee_case() {
	local name=$1 want_out=$2 want_err=$3 logs=$tmp/logs-$1
	shift 3
	crun --nproc-per-node=2 --log-dir="$logs" --rdzv-id="$name" "$@" \
		"$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" || fail "$name: $(cat "$tmp/err")"
	for r in 0 1; do
		if [[ " $want_out " == *" $r "* ]]; then
			has "$tmp/out" "[$r]:out"
		else
			lacks "$tmp/out" "[$r]:out"
		fi
		if [[ " $want_err " == *" $r "* ]]; then
			has "$tmp/err" "[$r]:err"
		else
			lacks "$tmp/err" "[$r]:err"
		fi
	done
	for f in "$logs/$name"/attempt_0/*/*.log; do
		[ -s "$f" ] || fail "$name: empty $f"
	done
}
tee_case both "0 1" "0 1" --redirects=3 --tee=3
tee_case order "0 1" "0 1" --tee=3 --redirects=3
tee_case short "0 1" "0 1" -r 3 -t 3
tee_case tee-out "0 1" "" --redirects=3 --tee=1
tee_case tee-err "" "0 1" --tee=2 --redirects=3
tee_case redirect-only "" "" --redirects=3
tee_case per-rank "1" "0" --redirects=0:3,1:3 --tee=0:2,1:1
tee_case mixed "0 1" "1" --redirects=0:2 --tee=1:3,0:1
for s in out err; do
	for r in 0 1; do
		[ "$(cat "$tmp/logs-per-rank/per-rank/attempt_0/$r/std$s.log")" = "$s" ] ||
			fail "per-rank: rank $r std$s.log"
	done
done

# The failure summary names the error file it read. Without --log-dir it
# lives in crun's temporary directory, gone when crun exits (and says so);
# with --log-dir it stays under the attempt's directory.
rec=$CRUN_TEST_HELPERS_SRC/record_worker.py
crun --nproc-per-node=2 --max-restarts=0 "$rec" >"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] || fail "record worker: expected exit 1: $(cat "$tmp/err")"
line=$(grep -E '^  error_file: ' "$tmp/err") || fail "no error_file line: $(cat "$tmp/err")"
path=$(sed -E 's/^  error_file: (.*) \(removed when crun exits; --log-dir keeps it\)$/\1/' <<<"$line")
[ "$path" != "$line" ] && [ "${path#/}" != "$path" ] || fail "error_file line: $line"
[ ! -e "$path" ] || fail "$path outlived crun"
grep -qxF "  message   : RuntimeError: boom in load_batch on rank 0" "$tmp/err" ||
	fail "no message: $(cat "$tmp/err")"
crun --nproc-per-node=2 --max-restarts=0 --log-dir="$tmp/reclogs" --rdzv-id=rec "$rec" \
	>"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] || fail "record worker with --log-dir: $(cat "$tmp/err")"
has "$tmp/err" "  error_file: $tmp/reclogs/rec/attempt_0/0/error.json"
grep -q '"message": "RuntimeError: boom in load_batch on rank 0"' \
	"$tmp/reclogs/rec/attempt_0/0/error.json" || fail "error.json lacks the message"

# --run-path: the script runs as __main__ with sys.argv = [SCRIPT, ARGS...]
# and __file__ as given; sys.path[0] is the current directory, not the
# script's; PYTHON_EXEC runs it.
rp=$CRUN_TEST_HELPERS_SRC/run_path_worker.py
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && crun --nproc-per-node=2 --run-path "$rp" --lr 0.1 "two words") \
	>"$tmp/out" 2>"$tmp/err" || fail "run-path: $(cat "$tmp/err")"
for r in 0 1; do
	has "$tmp/out" "[$r]:argv=['$rp', '--lr', '0.1', 'two words']"
	has "$tmp/out" "[$r]:name=__main__"
	has "$tmp/out" "[$r]:file=$rp"
	has "$tmp/out" "[$r]:path0=$tmp/cwd"
done
printf '#!/bin/sh\necho "via PYTHON_EXEC" >&2\nexec python3 "$@"\n' >"$tmp/py"
chmod +x "$tmp/py"
PYTHON_EXEC=$tmp/py crun --run-path --no-python "$rp" x >"$tmp/out" 2>"$tmp/err" ||
	fail "run-path with PYTHON_EXEC: $(cat "$tmp/err")"
has "$tmp/err" "[0]:via PYTHON_EXEC"
has "$tmp/out" "[0]:argv=['$rp', 'x']"
# An exception that ends the script: the error file as @record writes it,
# and the summary names the script.
RUN_PATH_FAIL=1 crun --nproc-per-node=2 --max-restarts=0 --run-path "$rp" \
	>"$tmp/out" 2>"$tmp/err"
[ $? = 1 ] || fail "run-path failure: expected exit 1: $(cat "$tmp/err")"
has "$tmp/err" "$rp FAILED"
has "$tmp/err" "  rank      : 1 (local_rank: 1)"
has "$tmp/err" "  message   : KeyError: 'no such key on rank 1'"
grep -qE '^  error_file: /.*\(removed when crun exits' "$tmp/err" || fail "no error file read"

# --log-line-prefix-template: torchrun's placeholders on every console
# line, unknown ones and a lone '$' kept; the log files stay raw.
host=$(python3 -c 'import socket; print(socket.gethostname())')
crun --nproc-per-node=2 --role trainer --log-dir="$tmp/pfx" --rdzv-id=pfx --tee=3 \
	--log-line-prefix-template '${role_name}-${rank}:${local_rank}@$hostname ${node}$$ ' \
	"$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" || fail "template: $(cat "$tmp/err")"
for r in 0 1; do
	has "$tmp/out" "trainer-$r:$r@$host \${node}\$ out"
	has "$tmp/err" "trainer-$r:$r@$host \${node}\$ err"
	[ "$(cat "$tmp/pfx/pfx/attempt_0/$r/stdout.log")" = out ] || fail "prefix in stdout.log"
done
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<$rank> ' crun --nproc-per-node=2 \
	"$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" || fail "variable: $(cat "$tmp/err")"
has "$tmp/out" "<1> out"
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<$rank> ' crun --nproc-per-node=2 \
	--log-line-prefix-template='${local_rank}| ' "$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" ||
	fail "flag and variable: $(cat "$tmp/err")"
has "$tmp/out" "1| out"
lacks "$tmp/out" "<1>"
# An empty template is crun's default, as in torchrun.
crun --log-line-prefix-template= "$H/crun-test-lines" both >"$tmp/out" 2>"$tmp/err" ||
	fail "empty template: $(cat "$tmp/err")"
has "$tmp/out" "[0]:out"
echo "ok"
