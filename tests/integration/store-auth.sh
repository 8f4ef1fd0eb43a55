#!/bin/bash
# Mutual authentication against a real crun-rdzvd, over loopback: a client
# with a token refuses a store that does not prove it knows the token (a
# store without one: the downgrade), with one line naming the endpoint;
# crunctl exits 3, crun's agent (is_host=0) exits 1 and starts no worker. A
# wrong token is refused by the store. crun-rdzvd --require-token refuses
# an address that is not loopback without a token (exit 2, one line) and
# keeps the warning otherwise.
# pid_NAME come from agent (printf -v).
# shellcheck disable=SC2016,SC2154
set -u
. "$(dirname "$0")/multinode-lib.sh"
: "${CRUN_CTL:?CRUN_CTL must name the crunctl binary}"
unset CRUN_TOKEN CRUN_TOKEN_FILE

# start_rdzvd NAME ARGS...: a crun-rdzvd on 127.0.0.1 and a free port; sets
# ep.
start_rdzvd() {
	local name=$1
	shift
	"$CRUN_RDZVD" --host 127.0.0.1 --port 0 --port-file "$tmp/$name.port" "$@" \
		2>"$tmp/$name.log" &
	stray_pids="$stray_pids $!"
	for _ in $(seq 200); do
		[ -s "$tmp/$name.port" ] && break
		sleep 0.02
	done
	[ -s "$tmp/$name.port" ] || fail "crun-rdzvd did not start: $(cat "$tmp/$name.log")"
	ep="127.0.0.1:$(cat "$tmp/$name.port")"
}

printf 'right-token\n' >"$tmp/right"
printf 'wrong-token\n' >"$tmp/wrong"
refused() {
	echo "store at '$1' did not prove it knows the token: refusing it (a store without a token, or an impostor)"
}

# The downgrade: a store without a token.
start_rdzvd open
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/right" --run x set k v \
	>"$tmp/ctl.out" 2>"$tmp/ctl.err"
rc=$?
[ "$rc" = 3 ] || fail "crunctl against a store without a token: exit $rc, expected 3"
[ "$(cat "$tmp/ctl.err")" = "crunctl: $(refused "$ep")" ] ||
	fail "crunctl: unexpected message: $(cat "$tmp/ctl.err")"
# Nothing was set: the store never saw the request.
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --run x get k >/dev/null 2>&1
[ $? = 1 ] || fail "crunctl set reached the store without a token"

agent down --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$ep" --rdzv-id=x \
	--rdzv-conf="token_file=$tmp/right,is_host=0" sh -c 'touch "$1"' sh "$tmp/ran"
expect_rc down 1
grep -qF "$(refused "$ep")" "$tmp/down.err" || fail "agent: $(cat "$tmp/down.err")"
[ "$(wc -l <"$tmp/down.err")" = 1 ] || fail "agent: more than one line: $(cat "$tmp/down.err")"
[ ! -e "$tmp/ran" ] || fail "agent started a worker against a store without a token"

# A wrong token: the store refuses it; the right one works.
start_rdzvd tok --token-file "$tmp/right"
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/wrong" --run x set k v \
	2>"$tmp/ctl.err"
rc=$?
[ "$rc" = 3 ] || fail "crunctl with a wrong token: exit $rc, expected 3"
grep -q "authentication failed" "$tmp/ctl.err" || fail "wrong token: $(cat "$tmp/ctl.err")"
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/right" --run x set k v ||
	fail "crunctl with the right token failed"
[ "$(timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --token-file "$tmp/right" --run x get k)" = v ] ||
	fail "crunctl get with the right token"

# --require-token: an error on an address that is not loopback.
timeout --foreground 20 "$CRUN_RDZVD" --require-token --host 0.0.0.0 --port 0 >"$tmp/req.out" 2>"$tmp/req.err"
rc=$?
[ "$rc" = 2 ] || fail "--require-token without a token on 0.0.0.0: exit $rc, expected 2"
[ "$(wc -l <"$tmp/req.err")" = 1 ] || fail "--require-token: not one line: $(cat "$tmp/req.err")"
grep -q "^crun-rdzvd: refusing to listen on 0.0.0.0:[0-9]* without a token (--require-token)" \
	"$tmp/req.err" || fail "--require-token: $(cat "$tmp/req.err")"
# On loopback it serves, without the warning.
start_rdzvd reqlo --require-token
grep -q "without a token" "$tmp/reqlo.log" && fail "warning on loopback: $(cat "$tmp/reqlo.log")"
timeout --foreground 20 "$CRUN_CTL" --endpoint "$ep" --run x ping >/dev/null || fail "ping on loopback"
exit 0
