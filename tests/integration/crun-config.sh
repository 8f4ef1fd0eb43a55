#!/bin/bash
# crun's config file and PET_ variables: precedence (command line > PET_ >
# config file > default) as --dry-run resolves it, both spellings of keys,
# the example config of configs/, and the values reaching real workers
# (WORLD_SIZE, LOCAL_WORLD_SIZE, ROLE_NAME, TORCHELASTIC_MAX_RESTARTS,
# TORCHELASTIC_RUN_ID).
set -u

[ -n "${CRUN:-}" ] || { echo "crun is not built: skipping"; exit 77; }
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must name the source tree}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	exit 1
}
# Nothing of the caller's environment may take part.
for v in $(compgen -e | grep -E '^PET_'); do
	unset "$v"
done
unset TORCH_ELASTIC_SHUTDOWN_TIMEOUT PYTHON_EXEC CRUN_LOG_LEVEL
crun_clean() {
	timeout --foreground 20 "$CRUN" "$@"
}
# expect KEY=VALUE FILE: the dry-run output in FILE has that line.
expect() {
	grep -qxF -- "$1" "$2" || fail "expected '$1' in: $(tr '\n' ' ' <"$2")"
}

cat >"$tmp/c.yaml" <<'EOF'
# precedence test
nproc_per_node: 5
max-restarts: 2
role: fromconfig
rdzv_id: cfgjob
shutdown_timeout: 12s
min_attempt_time: 2m
rdzv_conf: {join_timeout: 60, is_host: false, blacklist_failures: 2, blacklist_window: 5m,
  blacklist_cooldown_range: "10s:100s", reconnect_timeout: 90s}
signals_to_handle: [SIGTERM, SIGUSR1]
tee: {0: 3, 1: 1}
local_ranks_filter: [0, 1]
virtual_local_rank: true
EOF

# Defaults.
crun_clean --dry-run /bin/true >"$tmp/d" 2>"$tmp/err" || fail "dry run: $(cat "$tmp/err")"
[ -s "$tmp/err" ] && fail "dry run wrote to stderr: $(cat "$tmp/err")"
expect nproc_per_node=1 "$tmp/d"
expect max_restarts=3 "$tmp/d"
expect shutdown_timeout_ms=30000 "$tmp/d"
expect min_attempt_time_ms=60000 "$tmp/d"
expect signals_to_handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT "$tmp/d"
expect run_id=none "$tmp/d"
expect role=default "$tmp/d"
expect master_addr=127.0.0.1 "$tmp/d"
expect rdzv_backend=c10d "$tmp/d"
expect command=/bin/true "$tmp/d"
expect rdzv_conf.rejoin_timeout_ms=600000 "$tmp/d"
expect rdzv_conf.blacklist_failures=3 "$tmp/d"
expect rdzv_conf.blacklist_window_ms=600000 "$tmp/d"
expect rdzv_conf.blacklist_cooldown_range_ms=30000:300000 "$tmp/d"
expect rdzv_conf.reconnect_timeout_ms=60000 "$tmp/d"

# The config file alone.
crun_clean -c "$tmp/c.yaml" --dry-run /bin/true >"$tmp/d" || fail "config dry run"
expect nproc_per_node=5 "$tmp/d"
expect max_restarts=2 "$tmp/d"
expect role=fromconfig "$tmp/d"
expect run_id=cfgjob "$tmp/d"
expect shutdown_timeout_ms=12000 "$tmp/d"
expect min_attempt_time_ms=120000 "$tmp/d"
expect rdzv_conf.join_timeout_ms=60000 "$tmp/d"
expect rdzv_conf.is_host=0 "$tmp/d"
expect rdzv_conf.rejoin_timeout_ms=60000 "$tmp/d"
expect rdzv_conf.blacklist_failures=2 "$tmp/d"
expect rdzv_conf.blacklist_window_ms=300000 "$tmp/d"
expect rdzv_conf.blacklist_cooldown_range_ms=10000:100000 "$tmp/d"
expect rdzv_conf.reconnect_timeout_ms=90000 "$tmp/d"
expect signals_to_handle=SIGTERM,SIGUSR1 "$tmp/d"
expect tee=0:3,1:1 "$tmp/d"
expect local_ranks_filter=0,1 "$tmp/d"
expect virtual_local_rank=1 "$tmp/d"
expect "config=$tmp/c.yaml" "$tmp/d"

# PET_ variables win over the config file.
env PET_NPROC_PER_NODE=3 PET_ROLE=fromenv PET_RDZV_CONF=join_timeout=7 \
	PET_VIRTUAL_LOCAL_RANK=0 PET_MAX_RESTARTS=4 PET_SHUTDOWN_TIMEOUT=1 \
	timeout --foreground 20 "$CRUN" -c "$tmp/c.yaml" --dry-run /bin/true >"$tmp/d" || fail "PET dry run"
expect nproc_per_node=3 "$tmp/d"
expect role=fromenv "$tmp/d"
expect rdzv_conf.join_timeout_ms=7000 "$tmp/d"
expect virtual_local_rank=0 "$tmp/d"
expect max_restarts=4 "$tmp/d"
expect shutdown_timeout_ms=1000 "$tmp/d"
expect run_id=cfgjob "$tmp/d" # not in the environment: the file's

# The command line wins over both; both spellings, = and space forms.
env PET_NPROC_PER_NODE=3 PET_MAX_RESTARTS=4 timeout --foreground 20 "$CRUN" -c "$tmp/c.yaml" \
	--nproc_per_node 2 --max-restarts=1 --role cli --rdzv_id=clijob --min-attempt-time 500ms \
	--dry-run /bin/true >"$tmp/d" || fail "command line dry run"
expect nproc_per_node=2 "$tmp/d"
expect min_attempt_time_ms=500 "$tmp/d"
expect max_restarts=1 "$tmp/d"
expect role=cli "$tmp/d"
expect run_id=clijob "$tmp/d"

# TORCH_ELASTIC_SHUTDOWN_TIMEOUT below PET_SHUTDOWN_TIMEOUT, above the file.
env TORCH_ELASTIC_SHUTDOWN_TIMEOUT=5 timeout --foreground 20 "$CRUN" -c "$tmp/c.yaml" --dry-run /bin/true \
	>"$tmp/d" || fail "torch env dry run"
expect shutdown_timeout_ms=5000 "$tmp/d"

# Standalone: a fresh UUID for the run id, as torchrun.
crun_clean --standalone --rdzv-id=ignored --dry-run /bin/true >"$tmp/d" || fail "standalone"
grep -qE '^run_id=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' "$tmp/d" ||
	fail "standalone run id: $(grep run_id "$tmp/d")"

# Command resolution.
crun_clean --dry-run train.py --lr 3e-4 >"$tmp/d" || fail "script dry run"
expect "command=python3 -u train.py --lr 3e-4" "$tmp/d"
env PYTHON_EXEC=/opt/py/python timeout --foreground 20 "$CRUN" -m --dry-run pkg.mod a --dry-run >"$tmp/d" ||
	fail "module dry run"
expect "command=/opt/py/python -u -m pkg.mod a --dry-run" "$tmp/d"
crun_clean --no-python --dry-run ./tool.py 'a b' >"$tmp/d" || fail "no-python dry run"
expect "command=./tool.py 'a b'" "$tmp/d"

# The example config of configs/ is valid.
crun_clean -c "$CRUN_SOURCE_DIR/configs/crun-example.yaml" --dry-run train.py >"$tmp/d" ||
	fail "configs/crun-example.yaml: $(cat "$tmp/d")"
expect nproc_per_node=2 "$tmp/d"
expect role=trainer "$tmp/d"

# The values reach real workers.
cat >"$tmp/w.sh" <<'EOF'
#!/bin/sh
echo "env $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $ROLE_NAME $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID"
EOF
chmod +x "$tmp/w.sh"
cat >"$tmp/run.yaml" <<'EOF'
nproc_per_node: 4
role: cfgrole
max_restarts: 0
rdzv_id: cfgrun
EOF
env PET_NPROC_PER_NODE=3 PET_MAX_RESTARTS=1 timeout --foreground 30 "$CRUN" -c "$tmp/run.yaml" "$tmp/w.sh" \
	>"$tmp/o" 2>"$tmp/e" || fail "crun with workers exited $?: $(cat "$tmp/e")"
n=$(grep -c 'env [0-2] 3 3 cfgrole 1 cfgrun$' "$tmp/o")
[ "$n" = 3 ] || fail "workers saw: $(cat "$tmp/o")"
echo "config precedence and PET_ variables: ok"
