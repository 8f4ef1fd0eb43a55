#!/bin/sh
# zero3 keeps about 1/N of the parameters on each rank (the padding of each
# unit to a multiple of N aside), zero1/zero2 shard the optimizer state
# (and zero2 the gradients), ddp keeps everything, as the summary reports;
# a model that does not fit in host memory is a config error with numbers.
# Also: CRUN_LOG_LEVEL=debug names each rank's ring neighbours and links.
. "$CRUN_SOURCE_DIR/tests/integration/train-lib.sh"

args="$SMALL --set train.steps=2 --set parallel.bucket_mb=0.05"
for s in ddp zero1 zero2 zero3; do
	level=info
	[ $s = zero1 ] && level=debug
	CRUN_LOG_LEVEL=$level run_ranks 4 $s $args --set parallel.strategy=$s ||
		fail "$s on 4 ranks failed"
done
# debug output speaks of ranks and links: each rank's ring neighbours
# (over tcp where the host forbids the shared-memory rings)
for r in 0 1 2 3; do
	grep '^crun-train' "$tmp/zero1.$r.out" >"$tmp/debug"
	want="^crun-train: comm: rank $r receives from rank $(((r + 3) % 4)) over (shared memory|tcp) and sends to rank $(((r + 1) % 4)) over (shared memory|tcp)\$"
	[ "$(wc -l <"$tmp/debug")" -eq 1 ] && grep -Eq "$want" "$tmp/debug" ||
		fail "debug output of rank $r: '$(cat "$tmp/debug")', want '$want'"
done
total=$(field zero3 param_bytes_total)
check() { # check RUN KEY LOW HIGH: LOW*total <= value <= HIGH*total
	v=$(field "$1" "$2")
	awk -v v="$v" -v t="$total" -v lo="$3" -v hi="$4" \
		'BEGIN { exit !(v != "" && v >= lo * t && v <= hi * t) }' ||
		fail "$1: $2=$v is not within [$3, $4] x $total"
}
check zero3 param_bytes_per_rank 0.25 0.26
check zero3 optim_bytes_per_rank 0.5 0.52
check ddp param_bytes_per_rank 1 1.01
check ddp optim_bytes_per_rank 2 2.02
check zero1 param_bytes_per_rank 1 1.01
check zero1 optim_bytes_per_rank 0.5 0.52
check zero2 optim_bytes_per_rank 0.5 0.52
g1=$(field zero1 grad_bytes_per_rank)
g2=$(field zero2 grad_bytes_per_rank)
awk -v a="$g1" -v b="$g2" 'BEGIN { exit !(b < a / 2) }' ||
	fail "zero2 gradients ($g2 bytes) not well below zero1's ($g1)"
echo "ok zero3 holds $(field zero3 param_bytes_per_rank) of $total parameter bytes per rank"

# A model larger than the host lets a rank have (here the address-space
# limit, ulimit -v): on every rank one line with the bytes needed and
# available, exit 78 (the config error: no restart would help), the same
# line in the error file, and no process of the ranks left running (each
# carries CRUN_TEST_MARK in its environment). The limit goes on crun-train
# alone, through a script that execs it.
mark="CRUN_TEST_MARK=oom-$$"
# The processes (other than this shell) whose environment holds $mark.
marked() {
	for e in /proc/[0-9]*/environ; do
		p=${e#/proc/}
		p=${p%/environ}
		[ "$p" != $$ ] && tr '\0' '\n' <"$e" 2>/dev/null | grep -qx "$mark" && echo "$p"
	done
}
# the check sees a marked process that is there
env "$mark" sleep 30 &
sleeper=$!
pids="$pids $sleeper"
sleep 0.2
marked | grep -qx "$sleeper" || fail "the leftover check does not see a marked process"
kill "$sleeper"
wait "$sleeper" 2>/dev/null
limit_kib=1048576
cat >"$tmp/limited" <<EOF
#!/bin/sh
ulimit -v $limit_kib || exit 125
exec "$TRAIN" "\$@"
EOF
chmod +x "$tmp/limited"
launcher="$tmp/limited"
bound='RLIMIT_AS \(ulimit -v\) 1.00 GiB less [0-9.]+ [KMG]iB in use(; MemAvailable [0-9.]+ [KMG]iB)?'
if ! "$tmp/limited" --version >/dev/null 2>&1; then
	# A sanitizer's shadow memory does not fit under the limit: its
	# allocator refuses any allocation above the same size instead, which
	# the line says when MemAvailable would have been enough.
	launcher=$TRAIN
	bound="MemAvailable of /proc/meminfo(; the allocator refused them all the same(, by a limit not shown here \\(vm\\.overcommit_memory=2, a cgroup's memory\\.max, a sanitizer's allocation limit\\)|: .*))?"
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:max_allocation_size_mb=$((limit_kib / 1024))"
	export ASAN_OPTIONS
fi
CRUN_TEST_MARK=${mark#*=} TORCHELASTIC_ERROR_FILE="$tmp/oom-error.json" TRAIN="$launcher" \
	run_ranks 2 oom $SMALL --set model.width=2048 --set model.layers=16 --set train.steps=1
rc=$?
unset CRUN_TEST_MARK
[ $rc -eq 78 ] || fail "out of host memory: exit $rc, want 78"
for r in 0 1; do
	n=$(grep -c "crun-train" "$tmp/oom.$r.out")
	[ "$n" -eq 1 ] || fail "out of host memory: rank $r printed $n lines of crun-train"
	grep -Eq "^crun-train: out of host memory for the model and its buffers: they need [0-9]+ bytes \([0-9.]+ GiB: parameters [0-9.]+ GiB, gradients [0-9.]+ GiB, optimizer state [0-9.]+ GiB, activations [0-9.]+ [KMG]iB, token batch [0-9.]+ KiB\), [0-9]+ bytes \([0-9.]+ [KMG]iB\) available: $bound: see OUT OF MEMORY in crun-train\(1\)$" \
		"$tmp/oom.$r.out" || fail "out of host memory: rank $r: $(cat "$tmp/oom.$r.out")"
done
# needed: the parameters, 4 bytes each, are part of it
need=$(sed -n 's/.*they need \([0-9]*\) bytes.*/\1/p' "$tmp/oom.0.out")
[ "$need" -gt $((limit_kib * 1024)) ] || fail "out of host memory: needs $need bytes, within the limit?"
grep -q "out of host memory for the model" "$tmp/oom-error.json" ||
	fail "out of host memory: not in the error file: $(cat "$tmp/oom-error.json" 2>&1)"
left=$(marked)
[ -z "$left" ] || fail "out of host memory: processes of the ranks left running: $left"
echo "ok $(sed -n 's/^crun-train: //p' "$tmp/oom.0.out")"
exit 0
