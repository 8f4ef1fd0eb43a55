#!/bin/bash
# crun's own programs as commands when PATH lacks them: the build tree's
# crun runs the build tree's crun-train and crunctl; a crun copied into
# T/bin runs T/bin/crun-train, T/sbin/crun-rdzvd and T/bin/crun-plot-*,
# with the full path as the workers' argv[0], and says which it took. A
# command in PATH wins; other programs beside crun, and the build tree for a
# crun outside it, are never used.
set -u
. "$(dirname "$0")/crun-lib.sh"
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must name the source tree}"
: "${CRUN_TRAIN:?CRUN_TRAIN must name the built crun-train}"

build=$(cd "$(dirname "$CRUN")/../.." && pwd -P)
[ "$(cd "$(dirname "$CRUN")" && pwd -P)" = "$build/src/launcher" ] ||
	fail "CRUN '$CRUN' is not the build tree's src/launcher/crun"
mkdir "$tmp/empty" "$tmp/run"
# with_path DIR PROGRAM ARGS...: PROGRAM (a path) with PATH=DIR, 30 s at most
with_path() {
	local dir=$1
	shift
	timeout --foreground -s KILL 30 env PATH="$dir" "$@"
}
cd "$tmp/run" || fail "cd"
train=(crun-train --set train.steps=2 "$CRUN_SOURCE_DIR/configs/tiny.yaml")

# The build tree's crun, PATH without any of crun's directories.
with_path "$tmp/empty" "$CRUN" --nproc-per-node=2 "${train[@]}" >"$tmp/out" 2>"$tmp/err" ||
	fail "build tree: crun crun-train exited $?: $(tail -5 "$tmp/err")"
has "$tmp/err" "crun: 'crun-train' is not in PATH; running crun's own '$build/src/trainer/crun-train' (in crun's build tree)"
grep -q '^\[0\]:summary: steps=2 ' "$tmp/out" || fail "no summary: $(tail -5 "$tmp/out")"
with_path "$tmp/empty" "$CRUN" --dry-run "${train[@]}" >"$tmp/out" 2>"$tmp/err" || fail "dry run"
grep -qxF "command=$build/src/trainer/crun-train --set train.steps=2 $CRUN_SOURCE_DIR/configs/tiny.yaml" \
	"$tmp/out" || fail "dry run: $(grep command= "$tmp/out")"
with_path "$tmp/empty" "$CRUN" crunctl --version >"$tmp/out" 2>"$tmp/err" || fail "build tree: crunctl"
grep -q '^\[0\]:crunctl ' "$tmp/out" || fail "crunctl: $(cat "$tmp/out")"

# A copy: T/bin/crun, T/bin/crun-train, T/sbin/crun-rdzvd (shared libraries
# from the system only, as ldd says).
T=$tmp/T
mkdir -p "$T/bin" "$T/sbin"
cp "$CRUN" "$CRUN_TRAIN" "$T/bin/"
cp "$build/src/rendezvous/crun-rdzvd" "$T/sbin/"
for b in "$T/bin/crun" "$T/bin/crun-train" "$T/sbin/crun-rdzvd"; do
	! ldd "$b" | grep -q "not found" || fail "$b: $(ldd "$b")"
done
printf '#!/bin/sh\necho "argv0=$0 $*"\n' >"$T/bin/crun-plot-echo"
chmod +x "$T/bin/crun-plot-echo"
cp "$T/bin/crun-plot-echo" "$T/bin/not-crun-echo"
with_path "$tmp/empty" "$T/bin/crun" --nproc-per-node=2 "${train[@]}" \
	>"$tmp/out" 2>"$tmp/err" || fail "copy: crun crun-train exited $?: $(tail -5 "$tmp/err")"
has "$tmp/err" "crun: 'crun-train' is not in PATH; running crun's own '$T/bin/crun-train' (next to crun)"
grep -q '^\[0\]:summary: steps=2 ' "$tmp/out" ||
	fail "copy: no summary: $(tail -5 "$tmp/out")"
with_path "$tmp/empty" "$T/bin/crun" crun-plot-echo a b >"$tmp/out" 2>"$tmp/err" ||
	fail "copy: crun-plot-echo: $(cat "$tmp/err")"
has "$tmp/out" "[0]:argv0=$T/bin/crun-plot-echo a b"
with_path "$tmp/empty" "$T/bin/crun" crun-rdzvd --version >"$tmp/out" 2>"$tmp/err" ||
	fail "copy: crun-rdzvd: $(cat "$tmp/err")"
has "$tmp/err" "crun: 'crun-rdzvd' is not in PATH; running crun's own '$T/sbin/crun-rdzvd' (next to crun)"
grep -q '^\[0\]:crun-rdzvd ' "$tmp/out" || fail "crun-rdzvd: $(cat "$tmp/out")"

# Not crun's own: exec's "not found", though it lies beside crun.
with_path "$tmp/empty" "$T/bin/crun" not-crun-echo >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 127 ] || fail "not-crun-echo: exit $rc: $(cat "$tmp/err")"
# The copy lies outside the build tree: no crunctl from there.
with_path "$tmp/empty" "$T/bin/crun" crunctl --version >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 127 ] || fail "copy found crunctl: exit $rc: $(cat "$tmp/err")"
lacks "$tmp/err" "$build"
# PATH wins.
mkdir "$tmp/pathbin"
printf '#!/bin/sh\necho "from PATH"\n' >"$tmp/pathbin/crun-train"
chmod +x "$tmp/pathbin/crun-train"
with_path "$tmp/pathbin" "$T/bin/crun" crun-train >"$tmp/out" 2>"$tmp/err" ||
	fail "PATH's crun-train: $(cat "$tmp/err")"
has "$tmp/out" "[0]:from PATH"
lacks "$tmp/err" "not in PATH"
echo "crun's own programs found beside crun and in the build tree: ok"
