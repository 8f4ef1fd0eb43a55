#!/bin/bash
# crun --hostfile without ssh: --dry-run prints each node's host, slots
# and the exact ssh command (user options before crun's, BatchMode first,
# the hostfile options left out of what each host runs, the variables
# forwarded, PET_SSH_OPTIONS not), and every misuse is one line with exit status 2 and nothing
# started. hostfile-ssh.sh runs the real thing.
# shellcheck disable=SC2016
set -u
: "${CRUN:?CRUN must name the crun binary}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-hostfile-plan.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	exit 1
}
cd "$tmp" || fail "cd $tmp"
printf '# hosts\nnode-a slots=2\nnode-b:4 # gpu box\n\nnode-c\n' >hosts

env -i PATH="$PATH" PET_MAX_RESTARTS=1 PET_SSH_OPTIONS=Port=1 NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=3 HOME=/nowhere \
	"$CRUN" --hostfile hosts --exclude node-b:1,3@node-c --ssh-options Port=2222,User=t \
	--rdzv-id=job7 --dry-run --tee 3 sh -c 'echo "$RANK"' >plan 2>err ||
	fail "--dry-run exited $?: $(cat err)"
want="hostfile=hosts
hostfile.nodes=2
hostfile.node.0=node-a slots=2
hostfile.ssh.0=ssh -T -o BatchMode=yes -o Port=2222 -o User=t -o ConnectTimeout=10 -o ServerAliveInterval=15 -o LogLevel=ERROR -o ControlMaster=no -o ControlPath=none node-a 'cd $tmp && exec env PET_MAX_RESTARTS=1 NCCL_DEBUG=INFO CRUN_REMOTE_AGENT=1 $CRUN --rdzv-id=job7 --tee 3 --nnodes=2 --node-rank=0 --nproc-per-node=2 --rdzv-endpoint=node-a:29465 -- sh -c '\\''echo \"\$RANK\"'\\'''
hostfile.node.1=node-b slots=2 cuda_visible_devices=0,2
hostfile.ssh.1=ssh -T -o BatchMode=yes -o Port=2222 -o User=t -o ConnectTimeout=10 -o ServerAliveInterval=15 -o LogLevel=ERROR -o ControlMaster=no -o ControlPath=none node-b 'cd $tmp && exec env PET_MAX_RESTARTS=1 NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,2 CRUN_REMOTE_AGENT=1 $CRUN --rdzv-id=job7 --tee 3 --nnodes=2 --node-rank=1 --nproc-per-node=2 --rdzv-endpoint=node-a:29465 -- sh -c '\\''echo \"\$RANK\"'\\'''"
[ "$(cat plan)" = "$want" ] || fail "the plan differs:
$(diff <(echo "$want") plan)"
echo "ok --dry-run: two nodes, their ssh commands"

# A generated run id when none is given, the same for every host.
"$CRUN" --hostfile hosts --dry-run true >plan2 || fail "--dry-run without --rdzv-id"
ids=$(grep -o -- '--rdzv-id=hostfile-[0-9a-f]*' plan2 | sort -u | wc -l)
[ "$ids" = 1 ] || fail "not one generated run id for the three hosts: $ids"
# Its store's port comes from the run id: 29400 to 30399.
port=$(grep -o -- '--rdzv-endpoint=node-a:[0-9]*' plan2 | sort -u)
[ "$(echo "$port" | wc -l)" = 1 ] || fail "not one endpoint for the three hosts: $port"
if [ "${port##*:}" -lt 29400 ] || [ "${port##*:}" -gt 30399 ]; then
	fail "the store's port: $port"
fi

# expect_error ARGS... -- LINE: crun ARGS exits 2 with LINE on stderr only
expect_error() {
	local args=() line rc
	while [ "$1" != -- ]; do
		args+=("$1")
		shift
	done
	line=$2
	"$CRUN" "${args[@]}" >out 2>err
	rc=$?
	[ "$rc" = 2 ] || fail "crun ${args[*]}: exit $rc, not 2"
	[ -s out ] && fail "crun ${args[*]}: wrote to stdout"
	[ "$(cat err)" = "$line" ] || fail "crun ${args[*]}: '$(cat err)', want '$line'"
}
printf 'a\nb\na slots=2\n' >twice
expect_error --hostfile twice true -- \
	"crun: hostfile 'twice' line 3: host 'a' is listed twice (first on line 1)"
printf 'a slots=two\n' >bad
expect_error --hostfile bad true -- \
	"crun: hostfile 'bad' line 1: invalid slots 'two': expected 1 to 4096"
expect_error --hostfile missing true -- \
	"crun: cannot read hostfile 'missing': No such file or directory"
expect_error --hostfile hosts --include node-z true -- \
	"crun: invalid value for --include: host 'node-z' is not in the hostfile"
expect_error --hostfile hosts --include node-a:2 true -- \
	"crun: invalid value for --include: host 'node-a' has no slot 2 (slots 0 to 1)"
expect_error --hostfile hosts --include node-a --exclude node-b true -- \
	"crun: --include and --exclude cannot be used together"
expect_error --include 'node-a@' true -- \
	"crun: invalid value 'node-a@' for --include: expected HOST[:SLOT,...]@HOST..., e.g. node1@node2:0,2"
expect_error --exclude node-a true -- "crun: --exclude needs --hostfile"
expect_error --hostfile hosts --nnodes=2 true -- \
	"crun: --nnodes cannot be used with --hostfile: the hostfile gives the nodes and their workers"
PET_NPROC_PER_NODE=4 expect_error --hostfile hosts true -- \
	"crun: PET_NPROC_PER_NODE cannot be used with --hostfile: the hostfile gives the nodes and their workers"
expect_error --hostfile hosts --ssh-options Port true -- \
	"crun: invalid value 'Port' for --ssh-options: expected ssh options as Key=Value,... like Port=2222,IdentityFile=/path/key"
echo "ok misuse: one line, exit 2"
exit 0
