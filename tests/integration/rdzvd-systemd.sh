#!/bin/sh
# crun-rdzvd as a systemd service: `meson install` puts the unit in the
# unit directory, the unit passes `systemd-analyze verify` and its offline
# security check, and the daemon speaks the readiness protocol (READY=1
# once its port is bound and the port file written, STOPPING=1 on SIGTERM)
# to a $NOTIFY_SOCKET this test listens on. Where systemd is PID 1 and the
# test runs as root, the unit also runs for real and comes back after a
# SIGKILL. Parts the machine cannot do are skipped with a reason; the
# whole test skips (77) only when none can run.
set -u

: "${CRUN_RDZVD:?CRUN_RDZVD must name the crun-rdzvd binary}"
: "${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must name the build directory}"
unset CRUN_TOKEN CRUN_TOKEN_FILE NOTIFY_SOCKET

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-rdzvd-systemd.XXXXXX") || exit 1
unit_live=""
cleanup() {
	if [ -n "$unit_live" ]; then
		systemctl stop "$unit_live" 2>/dev/null
		rm -f "/run/systemd/system/$unit_live"
		systemctl daemon-reload 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# The unit as `meson install` puts it.
DESTDIR="$tmp/dest" timeout --foreground 60 meson install -C "$CRUN_BUILD_DIR" --no-rebuild --quiet \
	>"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "meson install failed"; }
unit=$(find "$tmp/dest" -path '*/systemd/system/crun-rdzvd.service')
[ -n "$unit" ] && [ "$(printf '%s\n' "$unit" | wc -l)" -eq 1 ] ||
	fail "meson install put no crun-rdzvd.service in a systemd/system directory"
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
[ -x "$tmp/dest$exec_path" ] || fail "the unit runs '$exec_path', which meson install did not put there"
grep -q '^Type=notify$' "$unit" || fail "the unit is not Type=notify"
echo "ok: installed $unit (ExecStart $exec_path)"

# Verify it, pointed at the binary in DESTDIR (verify checks that
# ExecStart exists). Unknown or misspelt keys only warn, so any output
# fails the test.
if command -v systemd-analyze >/dev/null; then
	mkdir "$tmp/units"
	sed "s|^ExecStart=$exec_path|ExecStart=$tmp/dest$exec_path|" "$unit" \
		>"$tmp/units/crun-rdzvd.service"
	timeout --foreground 60 systemd-analyze verify --man=no "$tmp/units/crun-rdzvd.service" \
		>"$tmp/verify.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] && [ ! -s "$tmp/verify.log" ] ||
		{ cat "$tmp/verify.log" >&2; fail "systemd-analyze verify: status $rc"; }
	echo "ok: systemd-analyze verify"
	# Exposure: 0 is fully confined, 10 unconfined; --threshold counts in
	# tenths, so 20 fails the test above 2.0.
	timeout --foreground 60 systemd-analyze security --offline=yes --threshold=20 \
		"$tmp/units/crun-rdzvd.service" >"$tmp/security.log" 2>&1 ||
		{ tail -n 5 "$tmp/security.log" >&2; fail "systemd-analyze security: exposure above 2"; }
	echo "ok: $(grep -o 'Overall exposure level.*' "$tmp/security.log")"
else
	echo "skip: systemd-analyze is not installed: the unit is not verified"
fi

# The readiness protocol, without systemd: a datagram socket of our own.
command -v python3 >/dev/null || fail "python3 is needed for the readiness check"
timeout --foreground 30 python3 - "$CRUN_RDZVD" "$tmp" <<'PY' || fail "readiness protocol (above)"
import os, signal, socket, subprocess, sys

rdzvd, tmp = sys.argv[1], sys.argv[2]

def check(address, env_value):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(address)
    s.settimeout(10)
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    env = dict(os.environ, NOTIFY_SOCKET=env_value)
    log = open(os.path.join(tmp, "rdzvd.log"), "w+")
    p = subprocess.Popen([rdzvd, "--host", "127.0.0.1", "--port", "0",
                          "--port-file", port_file], env=env, stderr=log)
    try:
        msg = s.recv(4096).decode()
        if msg != "READY=1":
            sys.exit(f"{env_value}: first notification {msg!r}, not 'READY=1'")
        # Ready means serving: the port file is written and the port accepts.
        port = int(open(port_file).read())
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        p.send_signal(signal.SIGTERM)
        msg = s.recv(4096).decode()
        if msg != "STOPPING=1":
            sys.exit(f"{env_value}: after SIGTERM {msg!r}, not 'STOPPING=1'")
        rc = p.wait(10)
        if rc != 0:
            sys.exit(f"{env_value}: exit status {rc} after SIGTERM")
    except socket.timeout:
        log.seek(0)
        sys.exit(f"{env_value}: no notification within 10 s; log:\n{log.read()}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        s.close()
    print(f"ok: READY=1 after the port is bound, STOPPING=1 on SIGTERM ({env_value})")

path = os.path.join(tmp, "notify.sock")
check(path, path)
name = f"crun-rdzvd-test-{os.getpid()}"
check("\0" + name, "@" + name)

# A socket that cannot be used costs one warning, not the service.
log_path = os.path.join(tmp, "bad.log")
with open(log_path, "w") as log:
    port_file = os.path.join(tmp, "port")
    os.unlink(port_file)
    p = subprocess.Popen([rdzvd, "--host", "127.0.0.1", "--port", "0",
                          "--port-file", port_file],
                         env=dict(os.environ, NOTIFY_SOCKET="relative.sock"), stderr=log)
    for _ in range(100):
        if os.path.exists(port_file) and open(port_file).read():
            break
        if p.poll() is not None:
            sys.exit(f"bad NOTIFY_SOCKET: exited {p.returncode} at start")
        subprocess.run(["sleep", "0.1"])
    p.send_signal(signal.SIGTERM)
    rc = p.wait(10)
text = open(log_path).read()
if rc != 0 or "cannot notify $NOTIFY_SOCKET of READY=1" not in text:
    sys.exit(f"bad NOTIFY_SOCKET: status {rc}, log:\n{text}")
print("ok: an unusable NOTIFY_SOCKET gives a warning and the daemon serves")
PY

# The unit under a running systemd: starts, and restarts after SIGKILL.
if [ ! -d /run/systemd/system ]; then
	echo "skip: systemd is not PID 1 here: the unit is not started"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "skip: not root: the unit is not started"
	exit 0
fi
unit_live="crun-rdzvd-test-$$.service"
head -c 32 /dev/urandom | base64 >"$tmp/token"
chmod 644 "$tmp/token"
sed -e "s|^ExecStart=.*|ExecStart=$CRUN_RDZVD --host 127.0.0.1 --port 0 --token-file=\${CREDENTIALS_DIRECTORY}/token --state-dir=\${STATE_DIRECTORY}|" \
	-e "s|^LoadCredential=.*|LoadCredential=token:$tmp/token|" \
	-e "s|^StateDirectory=.*|StateDirectory=crun-rdzvd-test-$$|" \
	-e "s|^ProtectHome=.*|ProtectHome=read-only|" \
	"$unit" >"/run/systemd/system/$unit_live"
systemctl daemon-reload
timeout --foreground 30 systemctl start "$unit_live" || fail "systemctl start $unit_live"
pid1=$(systemctl show -P MainPID "$unit_live")
[ "$pid1" -gt 0 ] || fail "$unit_live: no main process after start"
kill -KILL "$pid1"
i=0
while :; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "$unit_live: not active again within 10 s of SIGKILL"
	pid2=$(systemctl show -P MainPID "$unit_live")
	if [ "$pid2" -gt 0 ] && [ "$pid2" != "$pid1" ] &&
		[ "$(systemctl show -P ActiveState "$unit_live")" = active ]; then
		break
	fi
	sleep 0.1
done
[ "$(systemctl show -P NRestarts "$unit_live")" -ge 1 ] || fail "$unit_live: NRestarts is 0"
echo "ok: started under systemd, restarted after SIGKILL ($pid1 -> $pid2)"
