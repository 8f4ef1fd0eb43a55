#!/bin/bash
# The table of attacks on the store, each against crun-rdzvd and against
# the store embedded in node 0's agent (crun --rdzv-backend c10d with a
# long-running worker), each on a fresh store with a 64 MiB buffer budget:
# garbage, huge announced lengths, partial frames over the budget from
# many connections, 5,000 unauthenticated connections churning while a
# token holder does 1,000 operations through libcrun (all must succeed;
# p99 printed), slowloris before and after the handshake, clients that
# never read, wrong and missing token. The attacker is
# store-attack.py, which checks what each refusal must look like; this
# script checks that the store's peak memory (VmHWM) grew by less than its
# budget plus 16 MiB (connections, keys, allocator slack), that a refusal
# line was logged, and prints the table.
#
# crun-rdzvd gets --max-total-buffer 64MiB; the agent has no such flag and
# takes a quarter of its cgroup's memory limit, so it runs in a memory
# cgroup of 256 MiB (skipped for the agent where no cgroup can be made).
# Short timeouts (2 s) make the slowloris rows quick: crun-rdzvd gets
# them as flags; the agent keeps its defaults and skips those two rows.
# fd exhaustion, downgrade and LIST of 200,000 keys have their own tests
# (rdzvd-fds, store-auth, rdzvd-list).
# pid_NAME come from agent (printf -v).
# shellcheck disable=SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
: "${CRUN_LIBCRUN:?CRUN_LIBCRUN must name libcrun}"
export CRUN_LIBCRUN
attack=(python3 "$CRUN_SOURCE_DIR/tests/integration/store-attack.py")
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 6000 ] || { echo "SKIP: open file limit $(ulimit -n) < 6000"; exit 77; }

budget_mib=64
slack_mib=16
# Under AddressSanitizer VmHWM measures its allocator (redzones, caches,
# a realloc that copies where glibc moves pages), not the store: the
# growth is printed but checked only in builds without it. Its quarantine
# is off all the same. The token holder is libcrun in Python: a sanitized
# libcrun needs the runtime preloaded, and Python's own allocations are
# not ours to check.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
check_hwm=1
ops_env=()
if ldd "$CRUN_RDZVD" 2>/dev/null | grep -q libasan; then
	check_hwm=0
	echo "note: AddressSanitizer build: VmHWM printed, not checked"
	ops_env=(env LD_PRELOAD="$(ldd "$CRUN_LIBCRUN" | awk '/libasan/ { print $3 }')"
		ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0")
fi
printf 'attack-token\n' >"$tmp/tok"
table="$tmp/table"
: >"$table"

hwm() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

# The store under attack: start_store TARGET NAME sets spid (the process
# holding the store), port and slog (its log). stop_store stops it.
start_store() {
	local target=$1 name=$2
	slog=$tmp/$name.log
	store_started=$SECONDS
	if [ "$target" = rdzvd ]; then
		"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/$name.port" \
			--token-file "$tmp/tok" --max-total-buffer ${budget_mib}MiB \
			--handshake-timeout 2s --request-timeout 2s 2>"$slog" &
		spid=$!
		stray_pids="$stray_pids $spid"
		for _ in $(seq 200); do
			[ -s "$tmp/$name.port" ] && break
			sleep 0.02
		done
		[ -s "$tmp/$name.port" ] || fail "crun-rdzvd did not start: $(cat "$slog")"
		port=$(cat "$tmp/$name.port")
		grep -q "buffer budget: $budget_mib MiB" "$slog" || fail "no budget line: $(cat "$slog")"
		return
	fi
	port=$(free_port)
	# The agent starts inside the cgroup: its store's budget is a quarter
	# of 256 MiB.
	sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
		"$CRUN" --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d \
		--rdzv-endpoint="127.0.0.1:$port" --rdzv-id=atk \
		--rdzv-conf="token_file=$tmp/tok,is_host=1" \
		sh -c "sleep 120 # $marker" >"$tmp/$name.out" 2>"$slog" &
	spid=$!
	stray_pids="$stray_pids $spid"
	for _ in $(seq 200); do
		"${attack[@]}" token "$port" "$tmp/tok" >/dev/null 2>&1 && return
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	fail "the agent's store did not come up: $(tail -5 "$slog")"
}
stop_store() {
	kill "$spid" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	kill -9 "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	wait_none "$marker"
}

# row TARGET ATTACK LOGTEXT ARGS...: a fresh store, the attack, the
# checks, one row of the table.
row() {
	local target=$1 what=$2 logtext=$3 h0 h1 out
	shift 3
	start_store "$target" "$target-$what"
	h0=$(hwm "$spid")
	out=$(timeout --foreground 60 "${attack[@]}" "$what" "$port" "$tmp/tok" "$@" 2>&1) ||
		fail "$target, $what: $out
$(tail -n 20 "$slog")"
	check_row "$target" "$what" "$logtext" "$h0" "${out#ok }"
}

# check_row TARGET ATTACK LOGTEXT HWM0 RESULT
check_row() {
	local h1 grown
	kill -0 "$spid" 2>/dev/null || fail "$1, $2: the store died: $(tail -5 "$slog")"
	h1=$(hwm "$spid")
	grown=$(((h1 - $4) / 1024))
	[ "$check_hwm" = 0 ] || [ "$grown" -le $((budget_mib + slack_mib)) ] ||
		fail "$1, $2: VmHWM grew by $grown MiB, budget $budget_mib MiB"
	if [ -n "$3" ]; then
		grep -q -- "$3" "$slog" || fail "$1, $2: no '$3' line: $(tail -5 "$slog")"
		# At most 10 lines of a kind per 10 s, then one saying how many
		# were held back (and one of the lifecycle lines' own limit).
		# Garbage is refused by two kinds that both say "protocol error":
		# crun's protocol (a first byte of 'C') and TCPStore's (any
		# other); each has its own limit.
		local limit=$((12 * (1 + (SECONDS - store_started) / 10)))
		[ "$(grep -- "$3" "$slog" | grep -vc 'TCPStore\|not a crun client')" -le "$limit" ] &&
			[ "$(grep -- "$3" "$slog" | grep -c 'TCPStore\|not a crun client')" -le "$limit" ] ||
			fail "$1, $2: '$3' lines not rate limited: $(grep -c -- "$3" "$slog") lines"
	fi
	printf '%-11s | %-14s | %-80s | %4d MiB (+%d) | %d MiB\n' "$1" "$2" "$5" \
		$((h1 / 1024)) "$grown" "$budget_mib" >>"$table"
	stop_store
}

# churn TARGET: 5,000 unauthenticated connections churning while a token
# holder does 1,000 operations (a fresh connection every 10).
churn_row() {
	local target=$1 h0 cpid ops churned
	start_store "$target" "$target-churn"
	h0=$(hwm "$spid")
	rm -f "$tmp/stop"
	timeout --foreground 60 "${attack[@]}" churn "$port" "$tmp/tok" 5000 40 "$tmp/stop" >"$tmp/churn.out" 2>&1 &
	cpid=$!
	stray_pids="$stray_pids $cpid"
	for _ in $(seq 100); do
		grep -q churning "$tmp/churn.out" && break
		sleep 0.05
	done
	sleep 0.5 # the churn at full speed before the first operation
	ops=$(timeout --foreground 60 "${ops_env[@]}" "${attack[@]}" ops "$port" "$tmp/tok" 1000 10 2>&1) || {
		touch "$tmp/stop"
		fail "$target, churn: $ops
$(tail -n 20 "$slog")"
	}
	touch "$tmp/stop"
	wait "$cpid" || fail "$target, churn: $(cat "$tmp/churn.out")"
	churned=$(tail -n 1 "$tmp/churn.out")
	check_row "$target" churn "unauthenticated connections" "$h0" \
		"${ops#ok } (${churned#ok })"
}

attacks() {
	local target=$1
	row "$target" garbage "protocol error"
	row "$target" huge "protocol error"
	row "$target" partial "server buffer budget exhausted" 10 60
	churn_row "$target"
	if [ "$target" = rdzvd ]; then
		row "$target" slowloris-pre "no handshake within" 50
		row "$target" slowloris-post "slow request" 20
	fi
	row "$target" noread "" 8
	row "$target" token "authentication failed"
}

attacks rdzvd

# The agent's embedded store, in a memory cgroup (v2 or v1) of 256 MiB.
cg=
self=$(awk -F: '$2 == "" { print $3 }' /proc/self/cgroup)
self1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
if [ -n "$self1" ] && [ -d "/sys/fs/cgroup/memory$self1" ] &&
	mkdir "/sys/fs/cgroup/memory$self1/crun-atk-$$" 2>/dev/null; then
	cg=/sys/fs/cgroup/memory$self1/crun-atk-$$
	echo $((4 * budget_mib << 20)) >"$cg/memory.limit_in_bytes" || cg=
elif [ -f "/sys/fs/cgroup$self/cgroup.controllers" ] &&
	mkdir "/sys/fs/cgroup$self/crun-atk-$$" 2>/dev/null; then
	cg=/sys/fs/cgroup$self/crun-atk-$$
	echo $((4 * budget_mib << 20)) >"$cg/memory.max" || cg=
fi
if [ -n "$cg" ]; then
	trap 'cleanup; rmdir "$cg" 2>/dev/null' EXIT
	attacks agent
else
	echo "note: no memory cgroup can be made here: the agent's rows are skipped"
fi

echo "attack table (store | attack | result | VmHWM, growth | budget):"
cat "$table"
