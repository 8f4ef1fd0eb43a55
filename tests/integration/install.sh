#!/bin/sh
# The installed product, as a user meets it: meson install into a DESTDIR,
# then, from a directory outside the source tree and with an environment
# of only PATH (the DESTDIR's bin and sbin, then /usr/bin:/bin),
# LD_LIBRARY_PATH (its libdir) and PKG_CONFIG_PATH (its pkgconfig), run
# the installed programs: the versions, crun-train on the installed
# tiny.yaml by its bare name under crun, libcrun's installed example
# compiled with pkg-config's flags and run under crun; then the man
# pages, the documents, the scripts and the shell completions (through
# completions/check-completions) must be where crun(1) and README.md say.
# Skips (77) only in a cudasim build, which must never be installed.
set -u
: "${CRUN_BUILD_DIR:?}" "${CRUN_SOURCE_DIR:?}"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# The build's configuration: its options and version, as shell variables.
bindir='' sbindir='' libdir='' datadir='' mandir='' sanitize='' cudasim='' version=''
vars=$(python3 - "$CRUN_BUILD_DIR/meson-info" <<'EOF'
import json, shlex, sys
info = sys.argv[1]
opts = {o['name']: o['value'] for o in json.load(open(info + '/intro-buildoptions.json'))}
prefix = opts['prefix']
for key in ('bindir', 'sbindir', 'libdir', 'datadir', 'mandir'):
    v = opts[key]
    print('%s=%s' % (key, shlex.quote(v if v.startswith('/') else prefix + '/' + v)))
print('sanitize=%s' % shlex.quote(opts['b_sanitize']))
print('cudasim=%s' % ('true' if opts['cudasim'] else 'false'))
print('version=%s' % shlex.quote(json.load(open(info + '/intro-projectinfo.json'))['version']))
EOF
) || fail "cannot read the build's options in $CRUN_BUILD_DIR/meson-info"
eval "$vars"
if [ "$cudasim" = true ]; then
	echo "SKIP: a cudasim build (-Dcudasim=true) is never installed"
	exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-install-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
D=$tmp/d
meson install -C "$CRUN_BUILD_DIR" --no-rebuild --quiet --destdir "$D" >"$tmp/install.log" 2>&1 ||
	fail "meson install --destdir failed: $(tail -20 "$tmp/install.log")"

# Runs a command in the installed tree's environment, from $tmp/work.
mkdir "$tmp/work"
run() {
	(cd "$tmp/work" && env -i PATH="$D$bindir:$D$sbindir:/usr/bin:/bin" \
		LD_LIBRARY_PATH="$D$libdir" PKG_CONFIG_PATH="$D$libdir/pkgconfig" "$@")
}

# --- versions ------------------------------------------------------------
out=$(run crun --version 2>&1) || fail "crun --version: $out"
[ "$out" = "crun $version" ] || fail "crun --version says '$out', expected 'crun $version'"
out=$(run crun-train --version 2>&1) || fail "crun-train --version: $out"
echo "$out" | grep -q "^crun-train $version (.*cpu" ||
	fail "crun-train --version says '$out', expected 'crun-train $version (cpu: ...)'"
echo "ok: $out"

# --- crun-train on the installed config, by its bare name ---------------
run timeout --foreground 120 crun --standalone --nproc-per-node=2 crun-train tiny.yaml \
	--set train.steps=3 --set train.eval_every=0 --set log.every=1 >"$tmp/train.out" 2>&1 ||
	fail "crun ... crun-train tiny.yaml failed: $(tail -20 "$tmp/train.out")"
grep -q 'summary: .*steps=3 ' "$tmp/train.out" ||
	fail "no summary of 3 steps: $(tail -20 "$tmp/train.out")"
grep -q 'summary: .*world_size=2 ' "$tmp/train.out" || fail "the run had not 2 ranks"
# crun finds crun-train next to itself, also when PATH does not hold it.
out=$(cd "$tmp/work" && env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$D$libdir" \
	timeout --foreground 60 "$D$bindir/crun" --standalone --nproc-per-node=1 crun-train --version 2>&1) ||
	fail "$D$bindir/crun does not find crun-train next to itself: $out"

# --- pkg-config and libcrun's example -----------------------------------
flags=$(run pkg-config --cflags --libs crun 2>&1) || fail "pkg-config --cflags --libs crun: $flags"
n=0
for f in $flags; do
	case $f in
	-I* | -L*)
		dir=$(realpath -m "${f#-?}")
		case $dir in
		"$D"/*) ;;
		*) fail "pkg-config gives $f, outside the DESTDIR $D ($flags)" ;;
		esac
		[ -d "$dir" ] || fail "pkg-config gives $f, which does not exist"
		n=$((n + 1))
		;;
	esac
done
[ "$n" -ge 2 ] || fail "pkg-config gives no -I and -L: $flags"
[ -f "$(realpath -m "$(run pkg-config --variable=includedir crun)")/crun/worker.h" ] ||
	fail "crun/worker.h is not in pkg-config's includedir"
example=$D$datadir/doc/crun/examples/ncclid_example.c
[ -f "$example" ] || fail "libcrun's example is not installed at $example"
cp "$example" "$tmp/work/"
# A sanitized libcrun needs the sanitizers' runtime in the program too.
cflags=
[ "$sanitize" = none ] || cflags="-fsanitize=$sanitize"
# The command of libcrun(3), EXAMPLES.
out=$(run sh -c "cc $cflags ncclid_example.c \$(pkg-config --cflags --libs crun) -o ncclid_example" 2>&1) ||
	fail "the installed example does not compile: $out"
run timeout --foreground 60 crun --standalone --nproc-per-node=2 ./ncclid_example >"$tmp/example.out" 2>&1 ||
	fail "the example under crun failed: $(tail -20 "$tmp/example.out")"
for r in 0 1; do
	grep -q "rank $r of 2 on .*: id hash [0-9a-f]\{16\}" "$tmp/example.out" ||
		fail "the example's rank 0 did not list rank $r: $(cat "$tmp/example.out")"
done
echo "ok: the installed example built with '$flags' and ran on 2 ranks"

# --- man pages, documents, scripts --------------------------------------
if [ -f "$CRUN_BUILD_DIR/man/crun.1" ]; then
	for page in crun.1 crunctl.1 crun-rdzvd.8 libcrun.3 crun-train.1 crun-train.yaml.5; do
		[ -s "$D$mandir/man${page##*.}/$page" ] || fail "man page $page is not installed"
	done
	if command -v man >/dev/null; then
		out=$(man -M "$D$mandir" -w crun 2>&1) || fail "man -M ... -w crun: $out"
		[ "$out" = "$D$mandir/man1/crun.1" ] || fail "man -w crun finds '$out'"
	fi
else
	echo "note: this build has no man pages (no scdoc); not checked"
fi
for f in README.md docs/DESIGN.md LICENSE; do
	cmp -s "$D$datadir/doc/crun/${f#docs/}" "$CRUN_SOURCE_DIR/$f" ||
		fail "$f is not installed in $datadir/doc/crun"
done
for s in crun-plot-loss crun-plot-job crun-trace-merge; do
	[ -x "$D$bindir/$s" ] || fail "$s is not installed in $bindir"
done
[ -f "$D$datadir/crun/configs/tiny.yaml" ] || fail "tiny.yaml is not installed"

# --- shell completions ---------------------------------------------------
out=$(run "$CRUN_SOURCE_DIR/completions/check-completions" \
	"$D$datadir/bash-completion/completions" "$D$datadir/zsh/site-functions" 2>&1) ||
	fail "the installed completions: $out"
echo "ok: installed in $D and run from there"
exit 0
