#!/bin/bash
# crun against bad input: a table of wrong flags, values, PET_ variables and
# config files. Each must exit 2 with exactly one line on stderr that names
# the flag, variable or key, print nothing on stdout, and start no worker
# (the worker would create a marker file).
set -u

[ -n "${CRUN:-}" ] || { echo "crun is not built: skipping"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
marker="$tmp/marker"
worker="$tmp/worker.sh"
printf '#!/bin/sh\ntouch "%s"\n' "$marker" >"$worker"
chmod +x "$worker"

cfg() { # cfg NAME TEXT: writes a config file, prints its path
	printf '%b' "$2" >"$tmp/$1"
	printf '%s' "$tmp/$1"
}
unknown_key=$(cfg unknown.yaml 'max_restarts: 1\n\nnproc: 4\n')
wrong_type=$(cfg type.yaml 'nproc_per_node: [1, 2]\n')
bad_value=$(cfg value.yaml 'role: ok\nnproc_per_node: -2\n')
bad_yaml=$(cfg syntax.yaml 'role: a: b\n')
dup_key=$(cfg dup.yaml 'max_restarts: 1\nmax-restarts: 2\n')
bad_bool=$(cfg bool.yaml 'standalone: maybe\n')
not_map=$(cfg list.yaml '- a\n- b\n')
bad_rdzv=$(cfg rdzv.yaml 'rdzv_conf: {join_timeout: 60, bogus: 1}\n')
empty=$(cfg empty.yaml '')
only_comments=$(cfg comments.yaml '# crun options\n\n  # none yet\n')
unreadable=$(cfg unreadable.yaml 'max_restarts: 1\n')
chmod 000 "$unreadable"

failures=0
cases=0
# bad NEEDLE ENV ARGS...: runs crun with ARGS and then the worker (unless
# the last of ARGS is NOCMD), with ENV ("" or "NAME=value ...") added.
bad() {
	local needle=$1 envs=$2 out err rc lines
	shift 2
	local args=("$@")
	if [ "${#args[@]}" -gt 0 ] && [ "${args[${#args[@]}-1]}" = NOCMD ]; then
		unset 'args[${#args[@]}-1]'
	else
		args+=("$worker")
	fi
	cases=$((cases + 1))
	rm -f "$marker"
	# shellcheck disable=SC2086
	env $envs timeout --foreground 10 "$CRUN" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	out=$(cat "$tmp/out")
	err=$(cat "$tmp/err")
	lines=$(wc -l <"$tmp/err")
	local what="crun ${args[*]} (env: ${envs:-none})"
	if [ "$rc" != 2 ]; then
		echo "FAIL: $what: exit $rc, expected 2; stderr: $err"
		failures=$((failures + 1))
	elif [ "$lines" != 1 ]; then
		echo "FAIL: $what: $lines lines on stderr, expected 1: $err"
		failures=$((failures + 1))
	elif [[ "$err" != "crun: "*"$needle"* ]]; then
		echo "FAIL: $what: '$err' does not say '$needle'"
		failures=$((failures + 1))
	elif [ -n "$out" ]; then
		echo "FAIL: $what: wrote to stdout: $out"
		failures=$((failures + 1))
	elif [ -e "$marker" ]; then
		echo "FAIL: $what: a worker was started"
		failures=$((failures + 1))
	fi
}

# Counts and ranges.
bad "invalid value '-2' for --nproc-per-node: expected a positive number" "" --nproc-per-node -2
bad "invalid value '0' for --nproc-per-node" "" --nproc-per-node=0
bad "invalid value 'many' for --nproc-per-node" "" --nproc_per_node many
bad "invalid value 'gpu' for --nproc-per-node: no NVIDIA GPU" "CUDA_VISIBLE_DEVICES=-1" \
	--nproc-per-node=gpu
bad "invalid value '3:2' for --nnodes: expected N or MIN:MAX" "" --nnodes 3:2
bad "invalid value '0' for --nnodes" "" --nnodes=0
bad "invalid value '2' for --nnodes: more than one node needs --rdzv-endpoint" "" --nnodes 2
bad "invalid value '2:3' for --nnodes: --rdzv-backend=static needs a fixed number of nodes" "" \
	--nnodes 2:3 --rdzv-backend static
bad "invalid value 'node0:0' for --rdzv-endpoint: a store of several nodes needs a port" "" \
	--nnodes 2 --rdzv-endpoint node0:0
bad "invalid value '1' for --node-rank: expected a node rank below --nnodes (1)" "" \
	--node-rank 1
bad "invalid value '-1' for --max-restarts" "" --max-restarts=-1
bad "invalid value 'lots' for --max-restarts" "" --max_restarts lots
bad "invalid value '0' for --master-port: expected a port from 1 to 65535" "" --master-port 0
bad "invalid value '70000' for --master-port" "" --master_port=70000
# Rendezvous.
bad "invalid value 'etcd' for --rdzv-backend: expected c10d or static" "" --rdzv-backend etcd
bad "invalid value 'join_timeout' for --rdzv-conf: 'join_timeout' is not KEY=VALUE" "" \
	--rdzv-conf join_timeout
bad "unknown key 'bogus' (crun(1) lists the keys under --rdzv-conf)" "" --rdzv-conf bogus=1
bad "unknown key 'join_timout'; did you mean 'join_timeout'?" "" --rdzv-conf join_timout=5
bad "store_type 'file': crun's store is a TCP store: only tcp is supported" "" \
	--rdzv-conf store_type=file
bad "invalid value 'join_timeout=soon' for --rdzv-conf" "" --rdzv-conf=join_timeout=soon
bad "invalid value 'is_host=2' for --rdzv-conf" "" --rdzv_conf is_host=2
bad "rejoin_timeout '0': expected a positive duration" "" --rdzv-conf rejoin_timeout=0
bad "reconnect_timeout 'soon': expected a positive duration" "" --rdzv-conf reconnect_timeout=soon
bad "blacklist_failures '-1': expected a whole number from 0 (never) to 1000" "" \
	--rdzv-conf blacklist_failures=-1
bad "blacklist_cooldown_range '5m:1m': expected MIN:MAX" "" \
	--rdzv-conf blacklist_cooldown_range=5m:1m
bad "invalid value 'node0:99999' for --rdzv-endpoint" "" --rdzv-endpoint node0:99999
bad "invalid value 'a/b' for --rdzv-id" "" --rdzv-id a/b
# Durations and signals.
bad "invalid value '10q' for --shutdown-timeout: expected a duration" "" --shutdown-timeout 10q
bad "invalid value '-5' for --shutdown-timeout" "" --shutdown-timeout=-5
bad "invalid value 'soon' for --min-attempt-time: expected a duration" "" --min-attempt-time soon
bad "invalid value 'fast' for --monitor-interval" "" --monitor-interval fast
bad "invalid value 'SIGFOO' for --signals-to-handle: unknown signal 'SIGFOO'" "" \
	--signals-to-handle SIGFOO
bad "invalid value 'SIGTERM,SIGKILL' for --signals-to-handle: SIGKILL cannot be handled" "" \
	--signals-to-handle SIGTERM,SIGKILL
bad "invalid value 'thread' for --start-method: expected spawn, fork or forkserver" "" \
	--start-method thread
# Output.
bad "invalid value '4' for --redirects" "" --redirects 4
bad "invalid value '0:9' for --tee" "" -t 0:9
bad "invalid value '5' for --local-ranks-filter: local rank 5 is not below" "" \
	--nproc-per-node 2 --local-ranks-filter 0,5
bad "invalid value 'x' for --local-ranks-filter" "" --local-ranks-filter x
bad "invalid value '' for --log-dir" "" --log-dir=
bad "invalid value '' for --role" "" --role ""
# Flags and usage.
bad "unknown option '--bogus-flag' (see crun --help)" "" --bogus-flag 1
bad "unknown option '-z'" "" -z
bad "unknown option '--nproc_per_nod3'; did you mean '--nproc-per-node'?" "" --nproc_per_nod3=2
bad "ambiguous option '--rdzv' could match --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf" "" \
	--rdzv c10d
bad "option '--nproc-per-node' needs a value" "" --nproc-per-node NOCMD
bad "option '--standalone' takes no value" "" --standalone=yes
bad "invalid value '2' for --nnodes: --standalone runs one node" "" --standalone --nnodes 2
bad "no command given" "" --nproc-per-node 2 NOCMD
bad "no command given" "" --run-path NOCMD
bad "--module and --no-python cannot be used together" "" -m --no-python
# Environment.
bad "invalid value 'abc' for PET_NNODES: expected N or MIN:MAX" "PET_NNODES=abc"
bad "invalid value 'yes' for PET_STANDALONE: expected 1 or 0" "PET_STANDALONE=yes"
bad "invalid value '-3' for PET_NPROC_PER_NODE" "PET_NPROC_PER_NODE=-3"
bad "invalid value 'yes' for PET_RUN_PATH: expected 1 or 0" "PET_RUN_PATH=yes"
bad "invalid value 'x' for TORCH_ELASTIC_SHUTDOWN_TIMEOUT" "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=x"
bad "invalid value 'loud' for CRUN_LOG_LEVEL" "CRUN_LOG_LEVEL=loud"
# Config files.
bad "cannot read config '$tmp/missing.yaml': No such file or directory" "" -c "$tmp/missing.yaml"
bad "config '$tmp' is a directory, not a file" "" --config "$tmp"
bad "config '$empty' is empty: it sets nothing (no content, only comments)" "" -c "$empty"
bad "config '$only_comments' is empty: it sets nothing (no content, only comments)" "" \
	--config="$only_comments"
if [ "$(id -u)" != 0 ]; then # root reads mode 000 files
	bad "cannot read config '$unreadable': Permission denied" "" -c "$unreadable"
fi
bad "config '$unknown_key' line 3: unknown key 'nproc'" "" -c "$unknown_key"
bad "config '$wrong_type' line 1: wrong type for 'nproc_per_node': expected a single value" "" \
	-c "$wrong_type"
bad "config '$bad_value' line 2: invalid value '-2' for 'nproc_per_node'" "" \
	--config="$bad_value" --nproc-per-node 2
bad "config '$bad_yaml' line 1:" "" -c "$bad_yaml"
bad "config '$dup_key' line 2: key 'max_restarts' is given twice (first on line 1)" "" \
	-c "$dup_key"
bad "config '$bad_bool' line 1: invalid value 'maybe' for 'standalone'" "" -c "$bad_bool"
bad "config '$not_map' line 1: expected a mapping of option names to values" "" -c "$not_map"
bad "config '$bad_rdzv' line 1: invalid value 'join_timeout=60,bogus=1' for 'rdzv_conf'" "" \
	-c "$bad_rdzv"

echo "$cases cases, $failures failures"
[ "$cases" -ge 30 ] || { echo "FAIL: only $cases cases"; exit 1; }
[ "$failures" = 0 ]
