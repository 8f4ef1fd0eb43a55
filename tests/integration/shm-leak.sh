#!/bin/bash
# No shared memory outlives a job, however its processes die. Workers of
# crun-test-comm set up crun-train's communicator over and over (shared-
# memory rings between the ranks of this host), and are SIGKILLed at
# random moments: one rank (crun then stops the others and restarts the
# group), every rank at once, crun alone (its guard kills the workers), or
# crun and every rank at once. Afterwards no /dev/shm/crun-* object made
# by one of the test's processes may be left, and nothing of crun's in its
# TMPDIR (the private directory of error files).
#
# CRUN_SHM_LEAK_TRIALS sets the number of kills: 30 by default, 100 with
# CRUN_TEST_LONG=1 (scripts/test --long; each kill costs the CPU of three
# workers that set up over and over). Other jobs
# may use /dev/shm meanwhile: only names that carry the pid of one of this
# test's workers, or its run ids, count as this test's leaks.
set -u
. "$(dirname "$0")/crun-lib.sh"

if [ "${CRUN_TEST_LONG:-0}" = 1 ]; then
	trials=${CRUN_SHM_LEAK_TRIALS:-100}
else
	trials=${CRUN_SHM_LEAK_TRIALS:-30}
fi
nproc=3
per_run=5 # kills per crun: rank kills, then crun's own

pids_seen=" "
run_ids=shm-leak-$$-
cleanup() {
	for p in $stray_pids; do
		kill -9 "$p" 2>/dev/null
	done
	for f in $(mine); do
		rm -f "/dev/shm/$f"
	done
	rm -rf "$tmp"
}

# mine: crun-* objects in /dev/shm whose name has one of our pids or run
# ids in it
mine() {
	local f p
	for f in $(ls /dev/shm 2>/dev/null | grep '^crun-'); do
		case $f in *"$run_ids"*)
			echo "$f"
			continue
			;;
		esac
		for p in $(echo "$f" | tr -c '0-9\n' ' '); do
			case $pids_seen in *" $p "*)
				echo "$f"
				break
				;;
			esac
		done
	done
}

# current_pids: the pids of the group now running, once every rank of it
# wrote one that was not there when the previous group was killed
current_pids() {
	local old=$1 cur
	for _ in $(seq 400); do
		cur=""
		for r in $(seq 0 $((nproc - 1))); do
			p=$(cat "$dir/$r.pid" 2>/dev/null) || break
			case " $old " in *" $p "*) break ;; esac
			cur="$cur $p"
		done
		if [ "$(echo $cur | wc -w)" = "$nproc" ]; then
			echo $cur
			return 0
		fi
		sleep 0.02
	done
	fail "no new group of $nproc workers within 8 s: $(tail -n 20 "$tmp/out")"
}

# gone PIDS: up to 5 s for every one of PIDS to be gone (or a zombie: the
# workers of a killed crun wait for whoever reaps orphans)
gone() {
	for _ in $(seq 250); do
		local alive="" state
		for p in "$@"; do
			state=$(cut -d ')' -f 2 "/proc/$p/stat" 2>/dev/null | cut -d ' ' -f 2)
			[ -n "$state" ] && [ "$state" != Z ] && alive="$alive $p"
		done
		[ -z "$alive" ] && return 0
		sleep 0.02
	done
	fail "processes outlived the kill: $alive"
}

# random_pause: 0 to 29 ms, where a set-up is most likely under way
random_pause() {
	sleep "0.0$(printf '%02d' $((RANDOM % 30)))"
}

# empty DIR: up to 5 s for DIR to hold nothing
empty() {
	for _ in $(seq 250); do
		[ -z "$(ls -A "$1")" ] && return 0
		sleep 0.02
	done
	fail "left in $1: $(ls -A "$1")"
}

dir=$tmp/pids
mkdir -p "$dir" "$tmp/tmpdir"
kills=0
run=0
while [ $kills -lt "$trials" ]; do
	run=$((run + 1))
	rm -f "$dir"/*.pid
	# the kills repeat the same failure on purpose: --min-attempt-time=0
	# turns off the rule that would stop restarting it
	TMPDIR=$tmp/tmpdir CRUN_COMM_TIMEOUT=5s "$CRUN" --nproc-per-node=$nproc --max-restarts=$per_run --min-attempt-time=0 \
		--shutdown-timeout=2s --rdzv-id="$run_ids$run" --no-python \
		"$H/crun-test-comm" "$dir" >"$tmp/out" 2>&1 &
	crun_pid=$!
	stray_pids="$crun_pid"
	old=""
	for k in $(seq $per_run); do
		[ $kills -lt "$trials" ] || break
		pids=$(current_pids "$old")
		pids_seen="$pids_seen$(echo $pids) "
		random_pause
		kills=$((kills + 1))
		if [ "$k" -lt $per_run ] && [ $kills -lt "$trials" ]; then
			if [ $((RANDOM % 2)) = 0 ]; then
				set -- $pids
				shift $((RANDOM % nproc))
				kill -9 "$1" 2>/dev/null
			else
				kill -9 $pids 2>/dev/null
			fi
			old=$pids
			continue
		fi
		# crun alone and crun with its ranks take turns, so that even a
		# short run has both
		if [ $((run % 2)) = 1 ]; then
			kill -9 "$crun_pid"
		else
			kill -9 "$crun_pid" $pids 2>/dev/null
		fi
		break
	done
	kill -9 "$crun_pid" 2>/dev/null
	wait "$crun_pid" 2>/dev/null
	stray_pids=""
	gone $pids
	empty "$tmp/tmpdir"
done
[ -e "$dir/shm-seen" ] ||
	fail "no worker ever mapped a shared-memory ring: the test proves nothing
$(tail -n 20 "$tmp/out")"
left=$(mine)
n=$(echo $left | wc -w)
echo "$n object(s) left in /dev/shm after $kills kills in $run runs of crun"
[ "$n" = 0 ] || fail "left in /dev/shm: $(echo $left)"
echo "ok"
