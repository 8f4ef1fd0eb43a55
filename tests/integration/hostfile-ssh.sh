#!/bin/bash
# crun --hostfile over Debian's real sshd: three "hosts" made by
# scripts/cluster (network namespaces joined by a bridge), each running
# sshd with a config, a host key and an authorized key generated for this
# test under a temp dir (root by key only; sshd runs in a mount namespace
# of its own whose /run is a tmpfs, for its privilege separation
# directory). The client trusts exactly those host keys: a known_hosts file
# written here, StrictHostKeyChecking=yes, no global file, no ~/.ssh. The
# controller runs in node 0.
# - a crun-train job (configs/tiny.yaml, shortened) from a hostfile with 2,
#   1 and 1 slots in both formats: rank 0's lines come back prefixed with
#   node 0's host, the world is 4, crun exits 0; a shell job shows each
#   rank's line prefixed with the host it ran on (ranks 0-1 on node 0, 2
#   on node 1, 3 on node 2);
# - SIGINT to the controller mid-run: it exits 130 and within 15 s no
#   crun or crun-train process is left in any node;
# - SIGINT with workers that save on it: every host's workers save;
# - a crun started by a worker runs its own job;
# - SIGUSR1 to the controller reaches every worker, crun exits 0;
# - a process that holds an ssh's output open does not keep crun waiting;
# - SIGKILL of the controller: within 15 s nothing is left either;
# - a host where nothing answers: "is unreachable", exit 1, and the other
#   host's agent is torn down;
# - a key that the hosts do not accept: "refused the login", exit 1;
# - a host listed twice: one line naming both lines, exit 2.
# Skips (77) where network namespaces or sshd are not available.
# shellcheck disable=SC2016 source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/cluster-lib.sh"
: "${CRUN:?CRUN must name the crun binary}"
: "${CRUN_TRAIN:?CRUN_TRAIN must name the crun-train binary}"
: "${CRUN_SOURCE_DIR:=$(cd "$here/../.." && pwd)}"
cluster_skip_unless_available
for p in /usr/sbin/sshd ssh ssh-keygen unshare; do
	command -v "$p" >/dev/null || {
		echo "no $p (Debian's openssh-server, openssh-client): skipping"
		exit 77
	}
done

unshare --mount true 2>/dev/null || {
	echo "no mount namespaces (unshare --mount) for sshd's /run: skipping"
	exit 77
}
# Without PAM, sshd refuses every login to an account whose password is
# locked ('!'), keys included; with PAM it asks PAM's account stack.
use_pam=no
case $(getent shadow root | cut -d: -f2) in !*) use_pam=yes ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-hostfile.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
cluster_up 3

fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err "$tmp"/sshd*.log; do
		[ -s "$f" ] && printf -- '--- %s\n%s\n' "${f##*/}" "$(tail -n 25 "$f")"
	done
	exit 1
}

# Keys: one host key per node, the user's key, and a key no host accepts.
ssh-keygen -q -t ed25519 -N '' -C crun-test -f "$tmp/id" || fail "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -C crun-test -f "$tmp/other" || fail "ssh-keygen"
cp "$tmp/id.pub" "$tmp/authorized_keys"
: >"$tmp/known_hosts"
for i in 0 1 2; do
	addr=${CLUSTER_ADDRS[$i]}
	ssh-keygen -q -t ed25519 -N '' -C "node$i" -f "$tmp/host$i" || fail "ssh-keygen"
	echo "$addr $(cut -d' ' -f1,2 "$tmp/host$i.pub")" >>"$tmp/known_hosts"
	cat >"$tmp/sshd$i.conf" <<EOF
ListenAddress $addr
Port 22
HostKey $tmp/host$i
PidFile none
AuthorizedKeysFile $tmp/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM $use_pam
StrictModes no
PrintMotd no
LogLevel ERROR
EOF
	cluster_bg "$i" unshare --mount sh -c \
		'mount -t tmpfs -o mode=755 crun-test /run && mkdir -m 755 /run/sshd &&
		 exec /usr/sbin/sshd -D -e -f "$1"' sh "$tmp/sshd$i.conf" 2>"$tmp/sshd$i.log"
done

sshopts="IdentityFile=$tmp/id,IdentitiesOnly=yes,User=root,UserKnownHostsFile=$tmp/known_hosts"
sshopts="$sshopts,GlobalKnownHostsFile=/dev/null,StrictHostKeyChecking=yes"
ssh_args=()
IFS=, read -ra items <<<"$sshopts"
for o in "${items[@]}"; do ssh_args+=(-o "$o"); done

# Every sshd answers (bounded: 10 s each).
for i in 0 1 2; do
	ok=""
	for _ in $(seq 100); do
		if cluster_exec 0 ssh -o BatchMode=yes -o ConnectTimeout=2 "${ssh_args[@]}" \
			"${CLUSTER_ADDRS[$i]}" true 2>"$tmp/probe.err"; then
			ok=1
			break
		fi
		sleep 0.1
	done
	[ -n "$ok" ] || fail "sshd on node $i does not answer: $(cat "$tmp/probe.err")"
done

# crun_left: the crun, crun-train and ssh processes in any node
crun_left() {
	local i pid comm
	for i in 0 1 2; do
		for pid in $(ip netns pids "$CLUSTER_NAME-$i" 2>/dev/null); do
			comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
			case $comm in crun | crun-train | ssh) echo "node $i: $pid $comm" ;; esac
		done
	done
}

a0=${CLUSTER_ADDRS[0]} a1=${CLUSTER_ADDRS[1]} a2=${CLUSTER_ADDRS[2]}
printf '# three test hosts\n%s slots=2\n%s:1  # horovodrun -H'\''s form\n\n%s\n' \
	"$a0" "$a1" "$a2" >"$tmp/hosts"
cfg="$CRUN_SOURCE_DIR/configs/tiny.yaml"
short=(--set train.steps=20 --set optim.warmup_steps=5 --set train.eval_every=0
	--set log.every=5 --set data.generate_bytes=200000)

# 1. A job over three hosts.
cd "$tmp" || fail "cd $tmp"
timeout --foreground 90 ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" \
	--ssh-options "$sshopts" --max-restarts=0 "$CRUN_TRAIN" "$cfg" "${short[@]}" \
	>"$tmp/job.out" 2>"$tmp/job.err"
rc=$?
[ "$rc" = 0 ] || fail "the hostfile job exited $rc, not 0"
grep -q "^$a0: \[0\]:.*step 20/20" "$tmp/job.out" ||
	fail "no last step from rank 0 on node 0"
grep -q "^$a0: \[0\]:summary: .*world_size=4" "$tmp/job.out" ||
	fail "the summary does not say world_size=4"
# Where each rank ran: every worker says its rank and group rank.
timeout --foreground 60 ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" \
	--ssh-options "$sshopts" --max-restarts=0 sh -c 'echo "rank=$RANK group=$GROUP_RANK"' \
	>"$tmp/ranks.out" 2>"$tmp/ranks.err"
rc=$?
[ "$rc" = 0 ] || fail "the rank job exited $rc, not 0"
for want in "$a0: [0]:rank=0 group=0" "$a0: [1]:rank=1 group=0" "$a1: [2]:rank=2 group=1" \
	"$a2: [3]:rank=3 group=2"; do
	grep -qxF "$want" "$tmp/ranks.out" || fail "no line '$want'"
done
left=$(crun_left)
[ -z "$left" ] || fail "left after a finished job: $left"
echo "ok a crun-train job over 3 hosts (2+1+1 slots)"

# 2. SIGINT to the controller mid-run leaves nothing on any host.
long=(--set train.steps=100000 --set optim.warmup_steps=5 --set train.eval_every=0
	--set log.every=5 --set data.generate_bytes=200000)
ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" --ssh-options "$sshopts" \
	--max-restarts=0 --shutdown-timeout=5s "$CRUN_TRAIN" "$cfg" "${long[@]}" \
	>"$tmp/int.out" 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 300); do
	grep -q "^$a0: \[0\]:.*step 10/" "$tmp/int.out" && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
grep -q "^$a0: \[0\]:.*step 10/" "$tmp/int.out" || { kill -9 "$pid"; fail "the long job did not reach step 10"; }
kill -INT "$pid"
for _ in $(seq 300); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "crun did not end within 30 s of SIGINT"; }
wait "$pid"
rc=$?
[ "$rc" = 130 ] || fail "crun exited $rc after SIGINT, not 130"
left=$(crun_left)
for _ in $(seq 150); do
	[ -z "$left" ] && break
	sleep 0.1
	left=$(crun_left)
done
[ -z "$left" ] || fail "left running 15 s after SIGINT: $left"
grep -q "^crun: SIGINT: forwarding it to every host" "$tmp/int.err" ||
	fail "crun did not say it forwarded SIGINT"
for a in "$a0" "$a1" "$a2"; do # SIGINT reached each agent: 128+2
	grep -q "^crun: host '$a' (node [0-2]) ended with status 130$" "$tmp/int.err" ||
		fail "the agent on $a did not end with 130"
done
echo "ok SIGINT: exit 130, nothing left on any host"

# 2b. SIGINT gives every host its grace: workers that save on SIGINT all
# save (no host takes the end of its input as a second signal).
ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" --ssh-options "$sshopts" \
	--max-restarts=0 --shutdown-timeout=10s sh -c \
	'trap "sleep 1; echo saved; exit 0" INT; echo ready; while :; do sleep 0.1; done' \
	>"$tmp/grace.out" 2>"$tmp/grace.err" &
pid=$!
for _ in $(seq 300); do
	[ "$(grep -c ':ready$' "$tmp/grace.out")" = 4 ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
[ "$(grep -c ':ready$' "$tmp/grace.out")" = 4 ] || { kill -9 "$pid"; fail "not every worker started"; }
kill -INT "$pid"
for _ in $(seq 300); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "crun did not end within 30 s of SIGINT"; }
wait "$pid"
for want in "$a0: [0]:saved" "$a0: [1]:saved" "$a1: [2]:saved" "$a2: [3]:saved"; do
	grep -qxF "$want" "$tmp/grace.out" || fail "no line '$want': a host's workers lost their grace"
done
grep -q "again" "$tmp/grace.err" && fail "a host took a second signal: $(grep again "$tmp/grace.err")"
# The hint is the controller's, once; the hosts' agents keep theirs.
[ "$(grep -c "a second Ctrl-C kills them at once" "$tmp/grace.err")" = 1 ] ||
	fail "the Ctrl-C hint not once: $(cat "$tmp/grace.err")"
grep -q "^crun: got SIGINT; stopping the workers on every host (SIGKILL after 10s" "$tmp/grace.err" ||
	fail "no Ctrl-C hint: $(cat "$tmp/grace.err")"
echo "ok SIGINT: every host's workers get their grace"

# 2c. A worker's own crun is not a remote agent: it runs its job.
timeout --foreground 60 ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" \
	--ssh-options "$sshopts" --max-restarts=0 --include "$a1" \
	sh -c '"$1" --standalone --nproc-per-node=1 sh -c "echo inner=\$RANK"' sh "$CRUN" \
	>"$tmp/nested.out" 2>"$tmp/nested.err"
rc=$?
[ "$rc" = 0 ] || fail "a crun inside a hostfile worker: exit $rc, not 0"
grep -q "^$a1: \[0\]:\[0\]:inner=0$" "$tmp/nested.out" || fail "no line from the inner crun's worker"
echo "ok a crun inside a hostfile worker runs its job"

# 2d. SIGUSR1 (--signals-to-forward) reaches every worker; the job goes on.
ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" --ssh-options "$sshopts" \
	--max-restarts=0 sh -c \
	'trap "echo warned; exit 0" USR1; echo ready; while :; do sleep 0.1; done' \
	>"$tmp/usr1.out" 2>"$tmp/usr1.err" &
pid=$!
for _ in $(seq 300); do
	[ "$(grep -c ':ready$' "$tmp/usr1.out")" = 4 ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
[ "$(grep -c ':ready$' "$tmp/usr1.out")" = 4 ] || { kill -9 "$pid"; fail "not every worker started"; }
kill -USR1 "$pid"
for _ in $(seq 300); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "crun did not end within 30 s of SIGUSR1"; }
wait "$pid"
rc=$?
[ "$rc" = 0 ] || fail "crun exited $rc after SIGUSR1 reached the workers, not 0"
for want in "$a0: [0]:warned" "$a0: [1]:warned" "$a1: [2]:warned" "$a2: [3]:warned"; do
	grep -qxF "$want" "$tmp/usr1.out" || fail "no line '$want'"
done
echo "ok SIGUSR1: forwarded to every worker, the job goes on"

# 2e. A process that outlives its ssh and holds its output open (as a
# connection master of ControlPersist does) does not keep crun waiting.
mkdir "$tmp/bin" || fail "mkdir"
printf '#!/bin/sh\nsleep 20 &\necho $! >>"%s/sleepers"\nexec %s "$@"\n' "$tmp" \
	"$(command -v ssh)" >"$tmp/bin/ssh"
chmod +x "$tmp/bin/ssh"
PATH="$tmp/bin:$PATH" timeout --foreground 15 ip netns exec "$CLUSTER_NAME-0" "$CRUN" \
	--hostfile "$tmp/hosts" --ssh-options "$sshopts" --max-restarts=0 true \
	>"$tmp/held.out" 2>"$tmp/held.err"
rc=$?
xargs kill <"$tmp/sleepers" 2>/dev/null
[ "$rc" = 0 ] || fail "a job whose ssh leaves its output held open: exit $rc, not 0"
echo "ok an ssh whose output stays held: crun ends with its hosts"

# 3. SIGKILL of the controller: each ssh's stdin closes, each remote crun
# stops its agent.
ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" --ssh-options "$sshopts" \
	--max-restarts=0 --shutdown-timeout=5s "$CRUN_TRAIN" "$cfg" "${long[@]}" \
	>"$tmp/kill.out" 2>"$tmp/kill.err" &
pid=$!
for _ in $(seq 300); do
	grep -q "^$a0: \[0\]:.*step 10/" "$tmp/kill.out" && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
grep -q "^$a0: \[0\]:.*step 10/" "$tmp/kill.out" || { kill -9 "$pid"; fail "the job to kill did not reach step 10"; }
kill -KILL "$pid"
wait "$pid" 2>/dev/null
left=$(crun_left)
for _ in $(seq 150); do
	[ -z "$left" ] && break
	sleep 0.1
	left=$(crun_left)
done
[ -z "$left" ] || fail "left running 15 s after SIGKILL of crun: $left"
echo "ok SIGKILL of crun: nothing left on any host"

# 4. A host where nothing answers (an address of the subnet without a node).
dead=${a0%.*}.250
printf '%s\n%s\n' "$a1" "$dead" >"$tmp/dead-hosts"
timeout --foreground 60 ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/dead-hosts" \
	--ssh-options "ConnectTimeout=3,$sshopts" "$CRUN_TRAIN" "$cfg" "${short[@]}" \
	>"$tmp/dead.out" 2>"$tmp/dead.err"
rc=$?
[ "$rc" = 1 ] || fail "an unreachable host: exit $rc, not 1"
grep -q "^crun: host '$dead' (node 1) is unreachable: ssh exited 255: " "$tmp/dead.err" ||
	fail "no one-line error for the unreachable host"
grep -q "^crun: host '$a1' (node 0) ended with status 143$" "$tmp/dead.err" ||
	fail "the agent on $a1 was not stopped (SIGTERM) when $dead failed"
left=$(crun_left)
[ -z "$left" ] || fail "left after the unreachable host: $left"
echo "ok an unreachable host: $(grep "^crun: host '$dead'" "$tmp/dead.err")"

# 5. A key the hosts do not accept.
timeout --foreground 30 ip netns exec "$CLUSTER_NAME-0" "$CRUN" --hostfile "$tmp/hosts" \
	--ssh-options "${sshopts/IdentityFile=$tmp\/id/IdentityFile=$tmp/other}" \
	"$CRUN_TRAIN" "$cfg" >"$tmp/key.out" 2>"$tmp/key.err"
rc=$?
[ "$rc" = 1 ] || fail "a wrong key: exit $rc, not 1"
grep -q "^crun: host '$a0' (node 0) refused the login (authentication failed): ssh exited 255: .*Permission denied" \
	"$tmp/key.err" || fail "no one-line error for the refused key"
echo "ok a wrong key: $(grep "^crun: host '$a0'" "$tmp/key.err")"

# 6. A host listed twice: nothing is started.
printf '%s slots=1\n%s:2\n' "$a1" "$a1" >"$tmp/twice"
"$CRUN" --hostfile "$tmp/twice" true >"$tmp/twice.out" 2>"$tmp/twice.err"
rc=$?
[ "$rc" = 2 ] || fail "a host listed twice: exit $rc, not 2"
[ "$(cat "$tmp/twice.err")" = "crun: hostfile '$tmp/twice' line 2: host '$a1' is listed twice (first on line 1)" ] ||
	fail "a host listed twice: $(cat "$tmp/twice.err")"
echo "ok a host listed twice"
exit 0
