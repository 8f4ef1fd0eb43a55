#!/bin/sh
# Documentation contract: every long flag that a binary's --help prints is
# in its man page, and every tunable of the environment table
# (src/common/env.c) is listed in at least one man page.
set -u
: "${CRUN_SOURCE_DIR:?}" "${CRUN_RDZVD:?}" "${CRUN_CTL:?}"
man="$CRUN_SOURCE_DIR/man"
status=0

# check_flags BINARY PAGE
check_flags() {
	bin=$1
	page=$2
	[ -x "$bin" ] || return 0
	flags=$("$bin" --help 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
	[ -n "$flags" ] || { echo "FAIL: $bin --help lists no flags"; status=1; return; }
	for f in $flags; do
		# scdoc escapes nothing in flags; accept *--flag* and --flag.
		if ! grep -q -- "$f" "$man/$page.scd"; then
			echo "FAIL: $(basename "$bin") flag $f is not in man/$page.scd"
			status=1
		fi
	done
}

check_flags "$CRUN_RDZVD" crun-rdzvd.8
check_flags "$CRUN_CTL" crunctl.1
[ -n "${CRUN:-}" ] && check_flags "$CRUN" crun.1
[ -n "${CRUN_TRAIN:-}" ] && check_flags "$CRUN_TRAIN" crun-train.1

for name in $(grep -o '{ "CRUN_[A-Z_]*"' "$CRUN_SOURCE_DIR/src/common/env.c" | tr -d '{ "'); do
	if ! grep -q -- "$name" "$man"/*.scd; then
		echo "FAIL: environment variable $name (src/common/env.c) is in no man page"
		status=1
	fi
done
[ $status -eq 0 ] && echo "man pages: every flag and tunable documented"
exit $status
