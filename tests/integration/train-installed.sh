#!/bin/sh
# crun-train as installed: a config named on the command line is found in
# the working directory first, then in the data directory beside the
# executable (CRUN_DATADIR_FROM_BINDIR from the directory of
# /proc/self/exe), then in CRUN_DATADIR; both "tiny.yaml" and
# "configs/tiny.yaml" find DATADIR/configs/tiny.yaml. The build installs
# the example configs there, --version names the build's features, and
# the man pages' examples are commands that run as printed.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

conf="$CRUN_BUILD_DIR/crun-config.h"
define() {
	sed -n "s/^#define $1 \"\\(.*\\)\"\$/\\1/p" "$conf"
}
datadir=$(define CRUN_DATADIR)
from_bindir=$(define CRUN_DATADIR_FROM_BINDIR)
[ -n "$datadir" ] || fail "no CRUN_DATADIR in $conf"

# the build installs configs/ as DATADIR/configs
meson introspect "$CRUN_BUILD_DIR" --installed >"$tmp/installed.json" ||
	fail "meson introspect --installed failed"
python3 - "$tmp/installed.json" "$CRUN_SOURCE_DIR/configs" "$datadir/configs" <<'PY' ||
import json, os, sys
installed = json.load(open(sys.argv[1]))
src, dest = (os.path.normpath(p) for p in sys.argv[2:])
assert any(os.path.normpath(s) == src and os.path.normpath(d) == dest
           for s, d in installed.items()), f"{src} is not installed as {dest}"
PY
	fail "configs/ is not installed as $datadir/configs"

# --version: the version and what this build computes with
"$TRAIN" --version >"$tmp/version" || fail "--version failed"
grep -Eq '^crun-train [0-9][^ ]* \(cpu: openblas [^;]*; (cuda: no|cuda: [0-9]+\.[0-9]+, nccl ([0-9]+\.[0-9]+\.[0-9]+|unknown)|gpu path on cudasim: a test build)\)$' \
	"$tmp/version" || fail "--version: '$(cat "$tmp/version")'"
echo "ok $(cat "$tmp/version")"

# The man pages as installed: examples run as shown (each line of a command
# but the last ends with \ in the rendered page) with installed programs
# (never scripts/...), and nothing meant as markup renders literally.
for page in crun-train.1 crun-train.yaml.5; do
	[ -f "$CRUN_BUILD_DIR/man/$page" ] && command -v groff >/dev/null || continue
	awk -v f="$page" '
	/^```/ { code = !code; next }
	code && /^scripts\// { print f ".scd line " NR ": not an installed program: " $0; bad = 1 }
	END { exit bad }' "$CRUN_SOURCE_DIR/man/$page.scd" >"$tmp/man.err" ||
		fail "$(cat "$tmp/man.err")"
	groff -man -Tascii -P-cbou -rLL=200n "$CRUN_BUILD_DIR/man/$page" 2>/dev/null |
		awk -v f="$page" '
	{ match($0, /^ */); ind = RLENGTH; line = $0; sub(/ +$/, "", line) }
	/_N_|torchrun\(1\)/ { print f ": renders literally: " line; bad = 1 }
	ind > 0 && substr(line, ind + 1) ~ /^crun(-[a-z-]+)? / { cmd = 1; base = ind; prev = line; next }
	cmd && ind > base { if (prev !~ /\\$/) { print f ": no \\ before: " line; bad = 1 }; prev = line; next }
	{ cmd = 0 }
	END { exit bad }' >"$tmp/man.err" || fail "$(cat "$tmp/man.err")"
	echo "ok $page: examples with \\ and installed programs"
done

if [ -z "$from_bindir" ]; then
	echo "SKIP: the data directory is not under the prefix (CRUN_DATADIR_FROM_BINDIR is empty)"
	exit 77
fi

# an installed tree somewhere else: T/bin/crun-train, T/bin/REL/configs
inst="$tmp/inst"
mkdir -p "$inst/bin" "$tmp/elsewhere" || fail "mkdir failed"
cp "$TRAIN" "$inst/bin/crun-train" || fail "cannot copy crun-train"
mkdir -p "$inst/bin/$from_bindir/configs" || fail "mkdir failed"
share=$(cd "$inst/bin/$from_bindir" && pwd -P)
cp "$CRUN_SOURCE_DIR/configs/tiny.yaml" "$share/configs/" || fail "cannot copy tiny.yaml"
# a libcrun built shared is found where the build put it
LD_LIBRARY_PATH=$(dirname "$CRUN_LIBCRUN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
"$TRAIN" --print-config "$CRUN_SOURCE_DIR/configs/tiny.yaml" >"$tmp/want.yaml" ||
	fail "--print-config of configs/tiny.yaml failed"

cd "$tmp/elsewhere" || fail "cd failed"
for name in tiny.yaml configs/tiny.yaml; do
	"$inst/bin/crun-train" --print-config "$name" >"$tmp/got.yaml" 2>"$tmp/err" ||
		fail "crun-train $name from elsewhere: exit $?: $(cat "$tmp/err")"
	cmp -s "$tmp/want.yaml" "$tmp/got.yaml" || fail "crun-train $name: another config was read"
	[ "$(cat "$tmp/err")" = "crun-train: config '$name' is not in the working directory: using '$share/configs/tiny.yaml'" ] ||
		fail "crun-train $name: stderr '$(cat "$tmp/err")'"
	# one line per job: ranks other than 0 say nothing
	RANK=1 "$inst/bin/crun-train" --print-config "$name" >/dev/null 2>"$tmp/err" ||
		fail "RANK=1 crun-train $name failed"
	[ ! -s "$tmp/err" ] || fail "RANK=1 crun-train $name: stderr '$(cat "$tmp/err")'"
done
echo "ok tiny.yaml and configs/tiny.yaml found in '$share/configs'"

# a file in the working directory comes first, silently
printf 'model:\n  width: 48\n' >tiny.yaml
"$inst/bin/crun-train" --print-config tiny.yaml >"$tmp/got.yaml" 2>"$tmp/err" ||
	fail "crun-train tiny.yaml (local): exit $?"
grep -q '^  width: 48$' "$tmp/got.yaml" || fail "the local tiny.yaml was not read"
[ ! -s "$tmp/err" ] || fail "local tiny.yaml: stderr '$(cat "$tmp/err")'"
echo "ok a config in the working directory comes first"

# nowhere: one line naming every place searched, exit 78
"$inst/bin/crun-train" --print-config none.yaml >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 78 ] || fail "crun-train none.yaml: exit $rc, want 78"
want="crun-train: cannot read config 'none.yaml': not in the working directory"
[ "$share" = "$datadir" ] || want="$want, '$share/configs', '$share'"
want="$want, '$datadir/configs' or '$datadir'"
[ "$(cat "$tmp/err")" = "$want" ] || fail "none.yaml: got '$(cat "$tmp/err")', want '$want'"
echo "ok a config found nowhere names the places searched"
exit 0
