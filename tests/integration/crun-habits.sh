#!/bin/bash
# Habits of torchrun users, with real crun and workers: --redirects and
# --tee together (tee adds the console to a redirected stream, per local
# rank and stream, in either order).
set -u
. "$(dirname "$0")/crun-lib.sh"

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
echo "ok"
