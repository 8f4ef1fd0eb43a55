#!/bin/bash
# crun --help against man/crun.1.scd: every long flag that --help lists is
# documented in the man page (with a PET_ name where it has one), --help
# fits 80 columns and shows a default for every option with a value, and
# --version and --help exit 0 with nothing on stderr.
set -u

[ -n "${CRUN:-}" ] || { echo "crun is not built: skipping"; exit 77; }
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must name the source tree}"
man="$CRUN_SOURCE_DIR/man/crun.1.scd"
[ -f "$man" ] || { echo "FAIL: $man is missing"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	exit 1
}

"$CRUN" --help >"$tmp/help" 2>"$tmp/err" || fail "crun --help exited $?"
[ -s "$tmp/err" ] && fail "crun --help wrote to stderr: $(cat "$tmp/err")"
"$CRUN" -h | cmp -s - "$tmp/help" || fail "crun -h differs from crun --help"
"$CRUN" --version 2>"$tmp/err" | grep -q '^crun [0-9]' || fail "crun --version"
[ -s "$tmp/err" ] && fail "crun --version wrote to stderr"

awk 'length($0) > 80 { print; bad = 1 } END { exit bad }' "$tmp/help" ||
	fail "--help has lines longer than 80 columns"

# The option lines of --help: "  -x, --name METAVAR" or "      --name ...".
flags=$(grep -oE '^  (-[a-z], |    )--[a-z][a-z-]*' "$tmp/help" | grep -oE -- '--[a-z-]+$' | sort -u)
n=$(printf '%s\n' "$flags" | wc -l)
[ "$n" -ge 25 ] || fail "only $n flags found in --help"
missing=0
for f in $flags; do
	if ! grep -qF -- "*$f*" "$man"; then
		echo "FAIL: $f is in --help but not in man/crun.1.scd"
		missing=$((missing + 1))
	fi
	case "$f" in
	--config | --dry-run | --help | --version) continue ;;
	esac
	pet=PET_$(printf '%s' "${f#--}" | tr 'a-z-' 'A-Z_')
	if ! grep -qF -- "$pet" "$man"; then
		echo "FAIL: $pet is not in man/crun.1.scd"
		missing=$((missing + 1))
	fi
done
# Every man page option entry has its default (or says it is unsupported,
# unused or a command-line action).
awk '
	/^\*-/ { if (entry && !ok) { print "FAIL: no default in man for " entry; bad = 1 }
		 entry = $0; ok = 0; next }
	entry && /Default:|Not supported|Print the|exit 0 without/ { ok = 1 }
	/^# / { if (entry && !ok) { print "FAIL: no default in man for " entry; bad = 1 }
		entry = "" }
	END { exit bad }' "$man" || missing=$((missing + 1))

# Every option in --help that takes a value shows its default.
awk '
	function check() {
		if (opt != "" && needs && text !~ /\(default: /) {
			print "FAIL: no default in --help for " opt
			bad = 1
		}
		opt = ""
	}
	/^  (-[a-z], |    )--[a-z]/ {
		check(); opt = $0; needs = ($0 ~ /--[a-z-]+ [^ ]/); text = $0; next
	}
	/^ / { text = text " " $0; next }
	{ check() }
	END { check(); exit bad }' "$tmp/help" || missing=$((missing + 1))

# The sections crun(1) promises.
for s in NAME SYNOPSIS DESCRIPTION OPTIONS "CONFIGURATION FILE" "WORKER ENVIRONMENT" \
	"EXIT STATUS" SIGNALS FILES ENVIRONMENT EXAMPLES "SEE ALSO"; do
	grep -qx "# $s" "$man" || { echo "FAIL: section $s missing"; missing=$((missing + 1)); }
done
# The worker environment of docs/DESIGN.md.
for v in LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME ROLE_WORLD_SIZE LOCAL_WORLD_SIZE \
	WORLD_SIZE GROUP_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT \
	TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE \
	TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING OMP_NUM_THREADS CRUN_STORE \
	CRUN_RUN_ID CRUN_ROUND CRUN_TOKEN PYTHON_EXEC; do
	grep -qE "^\|  $v\$|\*$v\*" "$man" || { echo "FAIL: $v is not documented"; missing=$((missing + 1)); }
done
[ "$missing" = 0 ] || exit 1
echo "$n flags of --help are documented in crun(1)"
