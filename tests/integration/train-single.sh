#!/bin/sh
# One rank: the same config gives the same bits twice (losses in the CSV,
# param_l2), another seed gives another run; the command line's help,
# version and subcommands behave as documented.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=20 --set log.every=5"
run_ranks 1 a $args --set log.csv="$tmp/a.csv" || fail "first run failed"
run_ranks 1 b $args --set log.csv="$tmp/b.csv" || fail "second run failed"
run_ranks 1 c $args --set train.seed=2 || fail "run with another seed failed"
[ "$(field a param_l2)" = "$(field b param_l2)" ] || fail "two runs differ in param_l2"
cut -d, -f1-4,7,8 "$tmp/a.csv" >"$tmp/a.cut"
cut -d, -f1-4,7,8 "$tmp/b.csv" >"$tmp/b.cut"
cmp -s "$tmp/a.cut" "$tmp/b.cut" || fail "two runs differ in their losses"
[ "$(wc -l <"$tmp/a.csv")" -eq 21 ] || fail "CSV: want a header and 20 steps"
# one row per step; the last holds the final validation, as does the summary
[ "$(cut -d, -f1 "$tmp/a.csv" | sed 1d | tr '\n' ' ')" = "$(seq 1 20 | tr '\n' ' ')" ] ||
	fail "CSV: the steps are not 1 to 20, once each"
[ "$(tail -n 1 "$tmp/a.csv" | cut -d, -f7)" = "$(field a val_loss)" ] ||
	fail "CSV: the last row's val_loss is not the summary's"
[ "$(field a param_l2)" != "$(field c param_l2)" ] || fail "train.seed changes nothing"
[ "$(grep -c '^step ' "$tmp/a.out")" -eq 4 ] || fail "want a progress line every 5 steps"
grep -q "^summary: steps=20 train_loss=[0-9.]* val_loss=[0-9.]* val_bpb=[0-9.]* .*param_l2=" \
	"$tmp/a.out" || fail "no summary line"

"$TRAIN" --help >"$tmp/help" 2>&1 || fail "--help did not exit 0"
grep -q -- "--set SECTION.KEY=VALUE" "$tmp/help" || fail "--help does not list --set"
"$TRAIN" --version | grep -q "^crun-train [0-9]" || fail "--version"
"$TRAIN" --bogus >/dev/null 2>&1
[ $? -eq 78 ] || fail "an unknown option must exit 78"
"$TRAIN" a.yaml b.yaml >"$tmp/err" 2>&1
[ $? -eq 78 ] || fail "two config files must exit 78"

"$TRAIN" export "$tmp/nothing" "$tmp/x.bin" >"$tmp/err" 2>&1
[ $? -eq 1 ] || fail "export of a missing checkpoint must exit 1"
grep -q "^crun-train: no complete checkpoint in '.*nothing'" "$tmp/err" || fail "export: $(cat "$tmp/err")"
"$TRAIN" export only-one >/dev/null 2>&1
[ $? -eq 78 ] || fail "export with one argument must exit 78"
echo "not a model" >"$tmp/junk.bin"
"$TRAIN" compare "$tmp/junk.bin" "$tmp/junk.bin" >"$tmp/err" 2>&1
[ $? -eq 78 ] || fail "compare of junk must exit 78"
grep -q "is not a crun-train model file" "$tmp/err" || fail "compare: $(cat "$tmp/err")"
if command -v gnuplot >/dev/null; then
	"$CRUN_SOURCE_DIR/scripts/plot-loss" "$tmp/a.csv" "$tmp/a.png" >/dev/null ||
		fail "scripts/plot-loss failed"
	[ "$(head -c 4 "$tmp/a.png" | tail -c 3)" = PNG ] || fail "plot-loss wrote no PNG"
	"$CRUN_SOURCE_DIR/scripts/plot-loss" "$tmp/junk.bin" >/dev/null 2>&1
	[ $? -eq 2 ] || fail "plot-loss of a file that is no metrics CSV must exit 2"
fi
echo "ok one rank is deterministic; CLI"
exit 0
