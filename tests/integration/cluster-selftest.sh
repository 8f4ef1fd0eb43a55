#!/usr/bin/env bash
# The multi-host harness itself (scripts/cluster, cluster-lib.sh): three
# nodes with distinct addresses reach each other's store daemons and share
# keys; node loopbacks are their own; a cut node fails to connect within
# crunctl's timeout (exit 3) both ways while the others still talk, and
# talks again once healed; the teardown leaves no namespace, no process and
# no change in this namespace's links, also when the test is killed with
# SIGTERM (to its process group, as meson does, or to its pid alone) or
# SIGKILL (its watchdog removes it); 'gc' removes the cluster of an owner
# that has gone. Skips (77) where the harness cannot
# work (not root, no network namespaces). Every wait is bounded.
set -u -o pipefail

: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"
: "${CRUN_CTL:?CRUN_CTL must name the crunctl binary}"
unset CRUN_STORE CRUN_RUN_ID CRUN_TOKEN CRUN_TOKEN_FILE CRUN_TIMEOUT CRUN_CONNECT_TIMEOUT

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=cluster-lib.sh
source "$here/cluster-lib.sh"
cluster_skip_unless_available

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-cluster-test.XXXXXX") || exit 1
victim=""
cleanup() {
	[[ -z $victim ]] || kill -KILL -- "-$victim" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	local f
	echo "FAIL: $*"
	for f in "$tmp"/*.log; do
		[[ -f $f ]] && { echo "--- $f"; tail -n 20 "$f"; }
	done
	exit 1
}

# ctl I ENDPOINT ARGS...: crunctl in node I with short limits (connection
# attempts for $connect_timeout, default 1 s); sets rc, out
ctl() {
	local node=$1 ep=$2
	shift 2
	out=$(cluster_exec "$node" timeout --foreground -s KILL 10 "$CRUN_CTL" --endpoint "$ep" \
		--connect-timeout "${connect_timeout:-1s}" --timeout 1s "$@" 2>"$tmp/ctl.err")
	rc=$?
}
# listed LINE: 'scripts/cluster list' prints LINE
listed() {
	local l
	l=$("$CLUSTER_SCRIPT" list 2>&1) || fail "list failed: $l"
	grep -qxF -- "$1" <<<"$l" || fail "list: no line '$1' in:
$l"
}
ms() {
	date +%s%3N
}
# netns_of PREFIX: the namespaces named PREFIX-*. (The pipes here never
# end in grep -q: with pipefail, the writer's SIGPIPE would fail them.)
netns_of() {
	ip netns list 2>/dev/null | awk -v p="$1-" 'index($1, p) == 1 {print $1}'
}
no_netns() {
	[[ -z $(netns_of "$1") ]]
}
# running PID: PID is a process that has not ended (a zombie has)
running() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}
# wait_gone PID...: up to 5 s for every PID to have ended
wait_gone() {
	local i p alive
	for ((i = 0; i < 100; i++)); do
		alive=""
		for p in "$@"; do
			running "$p" && alive="$alive $p"
		done
		[[ -z $alive ]] && return 0
		sleep 0.05
	done
	echo "$alive"
	return 1
}

start=$(ms)
# ("ip link" looks up the names of every namespace: quiet about those that
# other tests are making or removing meanwhile)
links() {
	ip -o link 2>/dev/null | awk -F': ' '{print $2}' | sort
}
addrs() {
	ip -o addr 2>/dev/null | awk '{print $2, $4}' | sort
}
links_before=$(links)
addrs_before=$(addrs)

# --- three nodes with distinct addresses in one /24 -----------------------
cluster_up 3
name=$CLUSTER_NAME
[[ $name == crun-$$-* ]] || fail "cluster name '$name' lacks the prefix crun-$$-"
((${#CLUSTER_ADDRS[@]} == 3)) || fail "want 3 addresses, got '${CLUSTER_ADDRS[*]}'"
net=${CLUSTER_ADDRS[0]%.*}
for i in 0 1 2; do
	[[ ${CLUSTER_ADDRS[i]} == "$net.$((i + 1))" ]] ||
		fail "node $i has address '${CLUSTER_ADDRS[i]}', want $net.$((i + 1))"
	l=$(cluster_exec "$i" ip -4 -o addr show dev eth0 2>&1)
	[[ $l == *" ${CLUSTER_ADDRS[i]}/24 "* ]] || fail "node $i's eth0 lacks ${CLUSTER_ADDRS[i]}/24: $l"
	l=$(cluster_exec "$i" ip -o link show dev lo 2>&1)
	[[ $l == *"<LOOPBACK,UP"* ]] || fail "node $i's loopback is down: $l"
done
listed "$name nodes=3 subnet=$net.0/24 cut=-"
# up again: the same addresses; another size: refused
again=$("$CLUSTER_SCRIPT" up "$name" 3) || fail "second up of '$name' failed"
[[ $again == "$(printf '%s\n' "${CLUSTER_ADDRS[@]}")" ]] || fail "second up printed '$again'"
"$CLUSTER_SCRIPT" up "$name" 2 2>/dev/null && fail "up of '$name' with 2 nodes succeeded"
cluster_exec 1 sh -c 'exit 7'
(($? == 7)) || fail "cluster_exec does not pass the command's exit status"
cluster_exec 3 true 2>/dev/null && fail "cluster_exec ran in node 3 of 3"

# --- a store daemon in each node, on the node's address --------------------
declare -a ep
for i in 0 1 2; do
	cluster_bg "$i" "$CRUN_RDZVD" --host "${CLUSTER_ADDRS[i]}" --port 0 \
		--port-file "$tmp/$i.port" 2>"$tmp/rdzvd$i.log"
done
for i in 0 1 2; do
	cluster_wait_file "$tmp/$i.port" 5 || fail "node $i: no port file after 5 s"
	ep[i]=${CLUSTER_ADDRS[i]}:$(cat "$tmp/$i.port")
done
# every node reaches every other node's daemon
for i in 0 1 2; do
	for j in 0 1 2; do
		((i != j)) || continue
		ctl "$i" "${ep[j]}" ping
		((rc == 0)) || fail "node $i cannot ping node $j (${ep[j]}): $(cat "$tmp/ctl.err")"
	done
done
# ... from its own address
for i in 1 2; do
	grep -q "accepted connection from ${CLUSTER_ADDRS[i]}:" "$tmp/rdzvd0.log" ||
		fail "node 0's daemon saw no connection from ${CLUSTER_ADDRS[i]}"
done
# keys set from node 1 are read from node 2
ctl 1 "${ep[0]}" set greeting "from node 1"
((rc == 0)) || fail "set from node 1: exit $rc: $(cat "$tmp/ctl.err")"
ctl 2 "${ep[0]}" get greeting
[[ $rc == 0 && $out == "from node 1" ]] || fail "get from node 2: exit $rc, '$out'"
# a node's loopback is its own
cluster_bg 1 "$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/lo.port" \
	2>"$tmp/rdzvd-lo.log"
cluster_wait_file "$tmp/lo.port" 5 || fail "node 1 loopback daemon: no port file after 5 s"
lo=127.0.0.1:$(cat "$tmp/lo.port")
ctl 1 "$lo" ping
((rc == 0)) || fail "node 1 cannot ping its own loopback daemon: $(cat "$tmp/ctl.err")"
connect_timeout=200ms ctl 2 "$lo" ping
((rc == 3)) || fail "node 2 reached node 1's loopback daemon (exit $rc)"

# --- partition: cut node 2 ------------------------------------------------
cluster_cut 2 || fail "cluster_cut 2 failed"
listed "$name nodes=3 subnet=$net.0/24 cut=2"
t=$(ms)
ctl 2 "${ep[0]}" ping
t=$(($(ms) - t))
((rc == 3)) || fail "cut node 2 pinged node 0: exit $rc, want 3"
grep -q "timed out" "$tmp/ctl.err" || fail "cut node 2: '$(cat "$tmp/ctl.err")', want a time-out"
((t >= 900 && t < 3000)) || fail "cut node 2's ping took $t ms, want its 1 s timeout"
ctl 0 "${ep[2]}" ping
((rc == 3)) || fail "node 0 pinged cut node 2: exit $rc, want 3"
ctl 1 "${ep[0]}" ping
((rc == 0)) || fail "node 1 cannot ping node 0 while node 2 is cut: $(cat "$tmp/ctl.err")"
cluster_heal 2 || fail "cluster_heal 2 failed"
listed "$name nodes=3 subnet=$net.0/24 cut=-"
ctl 2 "${ep[0]}" get greeting
[[ $rc == 0 && $out == "from node 1" ]] ||
	fail "healed node 2: exit $rc, '$out': $(cat "$tmp/ctl.err")"
ctl 0 "${ep[2]}" ping
((rc == 0)) || fail "node 0 cannot ping healed node 2: $(cat "$tmp/ctl.err")"

# --- the cable out: cut node 1 --link -------------------------------------
cluster_cut 1 --link || fail "cluster_cut 1 --link failed"
l=$(cluster_exec 1 ip -o link show dev eth0 2>&1)
[[ $l == *NO-CARRIER* ]] || fail "node 1's eth0 kept its carrier: $l"
ctl 1 "${ep[0]}" ping
((rc == 3)) || fail "node 1 with its link down pinged node 0: exit $rc, want 3"
ctl 2 "${ep[0]}" ping
((rc == 0)) || fail "node 2 cannot ping node 0 while node 1 is cut: $(cat "$tmp/ctl.err")"
cluster_heal 1 || fail "cluster_heal 1 failed"
ctl 1 "${ep[0]}" ping
((rc == 0)) || fail "node 1 cannot ping node 0 after heal: $(cat "$tmp/ctl.err")"

# --- teardown: nothing left -----------------------------------------------
pids=("${CLUSTER_PIDS[@]}")
cluster_teardown || fail "cluster_teardown failed"
[[ -z $CLUSTER_NAME ]] || fail "CLUSTER_NAME still set after teardown"
no_netns "$name" || fail "namespaces left: $(netns_of "$name")"
left=$(wait_gone "${pids[@]}") || fail "processes left after teardown:$left"
[[ -z $(cluster_exec 0 true 2>&1 >/dev/null) ]] && fail "cluster_exec worked after teardown"

# --- a test killed with SIGTERM or SIGKILL --------------------------------
# victim MODE: a test that brings up 2 nodes with a daemon and sleeps; it
# writes its cluster name and the daemon's pid, then waits in MODE: 'fg'
# (sleep in the foreground) or 'wait' (wait on a background sleep).
cat >"$tmp/victim.sh" <<EOF
source "$here/cluster-lib.sh"
cluster_up 2
cluster_bg 1 "$CRUN_RDZVD" --host "\${CLUSTER_ADDRS[1]}" --port 0 \\
	--port-file "$tmp/victim-\$1.port" 2>/dev/null
echo "\$CLUSTER_NAME \$CLUSTER_LAST_PID" >"$tmp/victim-\$1.name.tmp"
mv "$tmp/victim-\$1.name.tmp" "$tmp/victim-\$1.name"
if [[ \$1 == fg ]]; then
	sleep 30
else
	sleep 30 &
	wait \$!
fi
EOF
# killed SIGNAL MODE TARGET: starts a victim in a session of its own,
# signals TARGET (group: its process group; pid: its pid), checks the exit
# status and that nothing is left
killed() {
	local sig=$1 mode=$2 target=$3 v vname vpid status i
	rm -f "$tmp/victim-$mode.name"
	setsid bash "$tmp/victim.sh" "$mode" >"$tmp/victim.log" 2>&1 &
	v=$!
	victim=$v
	cluster_wait_file "$tmp/victim-$mode.name" 5 || {
		kill -KILL -- "-$v" 2>/dev/null
		fail "victim ($mode) did not bring up its cluster"
	}
	read -r vname vpid <"$tmp/victim-$mode.name"
	cluster_wait_file "$tmp/victim-$mode.port" 5
	[[ $(netns_of "$vname") == *"$vname-1"* ]] || fail "victim's namespaces not there"
	if [[ $target == group ]]; then
		kill "-$sig" -- "-$v"
	else
		kill "-$sig" "$v"
	fi
	for ((i = 0; i < 100; i++)); do
		kill -0 "$v" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$v" 2>/dev/null; then
		kill -KILL -- "-$v" 2>/dev/null
		fail "victim ($sig to $target, $mode) still running 5 s after the signal"
	fi
	wait "$v" 2>/dev/null
	status=$?
	if [[ $sig == KILL ]]; then
		# no trap ran: the watchdog takes the cluster down
		((status == 137)) || fail "victim killed with SIGKILL exited $status"
	else
		((status == 143)) || fail "victim ($sig to $target, $mode) exited $status, want 143:
$(cat "$tmp/victim.log")"
	fi
	for ((i = 0; i < 100; i++)); do
		no_netns "$vname" && break
		sleep 0.05
	done
	no_netns "$vname" || fail "$sig to $target ($mode): namespaces left: $(ip netns list)"
	left=$(wait_gone "$vpid") || fail "$sig to $target ($mode): daemon $vpid left"
	# what the victim left outside the nodes (its background sleep)
	kill -KILL -- "-$v" 2>/dev/null
	victim=""
}
killed TERM fg group
killed TERM wait pid
killed KILL fg group

# --- gc: the cluster of an owner that has gone, without a watchdog ---------
sleep 30 &
owner=$!
disown "$owner" # no "Killed" notice
gname=crun-$$-gc
"$CLUSTER_SCRIPT" up "$gname" 1 --owner "$owner" >/dev/null || fail "up $gname failed"
"$CLUSTER_SCRIPT" gc 2>/dev/null || fail "gc failed"
no_netns "$gname" && fail "gc removed '$gname' while its owner lives"
kill -KILL "$owner"
wait_gone "$owner" >/dev/null || fail "sleep $owner outlived SIGKILL"
"$CLUSTER_SCRIPT" gc 2>/dev/null || fail "gc failed"
no_netns "$gname" || fail "gc left '$gname' after its owner had gone: $(netns_of "$gname")"

# --- this namespace is as it was -----------------------------------------
[[ $(links) == "$links_before" ]] || fail "links changed in the test's namespace:
$links_before
now:
$(links)"
[[ $(addrs) == "$addrs_before" ]] || fail "addresses changed in the test's namespace"
elapsed=$(($(ms) - start))
((elapsed < 15000)) || fail "took $elapsed ms, want < 15 s"
echo "ok: cluster harness, $elapsed ms"
