#!/bin/sh
# libcrun's public surface: the shared library exports exactly the
# functions that include/crun/*.h declare with CRUN_EXPORT, every function
# those headers declare carries CRUN_EXPORT, and no internal name leaks.
set -u

: "${CRUN_LIBCRUN:?CRUN_LIBCRUN must name the built libcrun.so}"
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must name the source tree}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-exports.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

command -v nm >/dev/null 2>&1 || fail "nm (binutils) is not installed"
hdrs="$CRUN_SOURCE_DIR/include/crun"

# Function declarations: a line that starts a prototype of a crun_ name.
# Joined lines would hide a declaration split before its name, so the
# headers keep "type name(" on one line (clang-format does).
grep -hE '^(CRUN_EXPORT )?[A-Za-z_][A-Za-z0-9_ ]*[ *]crun_[a-z0-9_]+\(' "$hdrs"/*.h >"$tmp/decls" ||
	fail "no function declarations found in $hdrs"
grep -v '^CRUN_EXPORT ' "$tmp/decls" >"$tmp/unmarked"
[ ! -s "$tmp/unmarked" ] || fail "declared without CRUN_EXPORT: $(cat "$tmp/unmarked")"
sed -E 's/.*[ *](crun_[a-z0-9_]+)\(.*/\1/' "$tmp/decls" | sort -u >"$tmp/declared"

nm -D --defined-only "$CRUN_LIBCRUN" >"$tmp/nm" || fail "nm cannot read '$CRUN_LIBCRUN'"
# Only code and data symbols count; the linker adds no others here.
awk '$2 ~ /^[TtDdBbRrVvWwi]$/ {print $3}' "$tmp/nm" | sed 's/@.*//' | sort -u >"$tmp/exported"

if ! cmp -s "$tmp/declared" "$tmp/exported"; then
	echo "declared in include/crun but not exported:" >&2
	comm -23 "$tmp/declared" "$tmp/exported" | sed 's/^/  /' >&2
	echo "exported but not declared in include/crun:" >&2
	comm -13 "$tmp/declared" "$tmp/exported" | sed 's/^/  /' >&2
	fail "libcrun's exports differ from its public headers"
fi
n=$(wc -l <"$tmp/exported")
[ "$n" -gt 0 ] || fail "libcrun exports nothing"
echo "libcrun exports its $n public functions and nothing else"
