#!/bin/sh
# Config errors are one line naming the key (and the file's line) with exit
# status 78, before any rank connects anywhere; and man/crun-train.yaml.5.scd
# documents every key with its default (the table in config.c, as printed
# by --print-config).
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

# expect STATUS MESSAGE ARGS...: crun-train ARGS exits STATUS and prints
# exactly MESSAGE on stderr.
expect() {
	want_rc=$1
	want=$2
	shift 2
	timeout --foreground 20 "$TRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc -eq "$want_rc" ] || fail "crun-train $*: exit $rc, want $want_rc"
	[ "$(cat "$tmp/err")" = "$want" ] || fail "crun-train $*: got '$(cat "$tmp/err")', want '$want'"
}

f="$tmp/bad.yaml"
printf 'model:\n  context: 8\n  # typo below\n  widht: 3\n' >"$f"
expect 78 "crun-train: config '$f' line 4: unknown key 'model.widht'" "$f"
printf 'train:\n  steps: many\n' >"$f"
expect 78 "crun-train: config '$f' line 2: key 'train.steps' expects an integer from 1 to 1000000000000, got 'many'" "$f"
printf 'parallel:\n  strategy: zero9\n' >"$f"
expect 78 "crun-train: config '$f' line 2: key 'parallel.strategy' expects one of ddp|zero1|zero2|zero3|fsdp, got 'zero9'" "$f"
printf 'optimizer:\n  lr: 1\n' >"$f"
expect 78 "crun-train: config '$f' line 1: unknown key 'optimizer'" "$f"
expect 78 "crun-train: --set 'model.widht=3': unknown key 'model.widht'" --set model.widht=3
expect 78 "crun-train: --set 'optim.lr=fast': key 'optim.lr' expects a number above 0 and at most 10, got 'fast'" \
	--set optim.lr=fast
expect 78 "crun-train: cannot read config '$tmp/none.yaml': No such file or directory" "$tmp/none.yaml"
# an empty config, one of only comments, a directory, an unreadable file
: >"$f"
expect 78 "crun-train: config '$f' is empty: it sets nothing (no content, only comments)" "$f"
printf '# model:\n#   width: 64\n\n' >"$f"
expect 78 "crun-train: config '$f' is empty: it sets nothing (no content, only comments)" "$f"
expect 78 "crun-train: config '$tmp' is a directory, not a file" "$tmp"
printf 'model:\n  width: 64\n' >"$f"
chmod 000 "$f"
if ! cat "$f" >/dev/null 2>&1; then # root reads it anyway
	expect 78 "crun-train: cannot read config '$f': Permission denied" "$f"
fi
chmod 600 "$f"
RANK=0 WORLD_SIZE=3 expect 78 "crun-train: config: train.batch_size 64 does not split evenly over 3 ranks x 1 micro-steps (parallel.grad_accum)"
expect 78 "crun-train: cannot read data '$tmp/none.txt': No such file or directory" \
	--set data.path="$tmp/none.txt"
RANK=0 WORLD_SIZE=2 expect 78 "crun-train: config: train.slow_rank 2 is not a rank of 2" \
	--set train.batch_size=2 --set train.slow_rank=2
expect 78 "crun-train: --set 'train.slow_rank=-2': key 'train.slow_rank' expects an integer from -1 to 16777216, got '-2'" \
	--set train.slow_rank=-2
expect 78 "crun-train: --set 'train.slow_delay=-5ms': key 'train.slow_delay' expects a duration like 30s, 500ms or 5m, got '-5ms'" \
	--set train.slow_delay=-5ms

# TORCHELASTIC_ERROR_FILE: the printed line and where it happened, as
# PyTorch's @record writes them; one that cannot be written is a warning
# and the exit status stays 78
TORCHELASTIC_ERROR_FILE="$tmp/error.json" RANK=2 LOCAL_RANK=2 WORLD_SIZE=3 timeout --foreground 20 "$TRAIN" \
	>"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 78 ] || fail "error file: exit $rc, want 78"
python3 - "$tmp/error.json" "$(cat "$tmp/err")" <<'PY' || fail "error file: $(cat "$tmp/error.json")"
import json, re, sys
doc = json.load(open(sys.argv[1]))
m = doc["message"]
assert m["message"] == sys.argv[2], m["message"]
assert re.fullmatch(r"rank 2 \(local rank 2, pid \d+\): main\(\) at src/trainer/main\.c:\d+",
                    m["extraInfo"]["py_callstack"]), m["extraInfo"]["py_callstack"]
assert m["extraInfo"]["timestamp"].isdigit()
PY
TORCHELASTIC_ERROR_FILE="$tmp/no/such/dir/error.json" timeout --foreground 20 "$TRAIN" --set train.steps=0 \
	>"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 78 ] || fail "unwritable error file: exit $rc, want 78"
[ "$(sed -n 2p "$tmp/err")" = "crun-train: warning: cannot write error file '$tmp/no/such/dir/error.json': No such file or directory" ] ||
	fail "unwritable error file: '$(cat "$tmp/err")'"
echo "ok the error file holds the message and its site"

# the man page lists every key with its default
man="$CRUN_SOURCE_DIR/man/crun-train.yaml.5.scd"
[ -f "$man" ] || fail "no $man"
"$TRAIN" --print-config >"$tmp/defaults.yaml" || fail "--print-config failed"
n=0
section=""
while IFS= read -r line; do
	case "$line" in
	"  "*)
		key=${line#  }
		name=${key%%:*}
		def=${key#*: }
		[ "$def" = '""' ] && def='""'
		grep -Fq "*$section.$name* (" "$man" || fail "man page does not document $section.$name"
		grep -F "*$section.$name* (" "$man" | grep -Fq "default: $def)" ||
			fail "man page: $section.$name's default is not $def"
		n=$((n + 1))
		;;
	*:) section=${line%:} ;;
	esac
done <"$tmp/defaults.yaml"
[ $n -gt 30 ] || fail "only $n keys in --print-config"
# --print-config output reads back unchanged
"$TRAIN" --print-config "$tmp/defaults.yaml" >"$tmp/again.yaml" || fail "reading back failed"
cmp -s "$tmp/defaults.yaml" "$tmp/again.yaml" || fail "--print-config does not read back"
echo "ok config errors; $n keys documented with their defaults"
exit 0
