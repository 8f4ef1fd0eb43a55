"""A worker that beats on crun's heartbeat channel with the standard
library only, and can be made to hang (tests/integration/heartbeat.sh,
scripts/bench/faults).

    BEAT_STEPS      steps to run (15)
    BEAT_INTERVAL   seconds per step (0.2)
    BEAT_NEVER      1: never beat (a torchrun script); just run the steps
    HANG_RANK       the rank that hangs, in the first attempt only (none)
    HANG_STEP       at this step (5)
    HANG_HOW        stop: SIGSTOP itself; section: open section
                    HANG_SECTION and never close it; filetimer: a FileTimer
                    request expiring in 1 s, then sleep; slow-section: open
                    HANG_SECTION, sleep HANG_SECONDS, close it, go on;
                    filetimer-child: start a child, a FileTimer request
                    for the child's pid expiring in 1 s, the child exits,
                    the worker goes on past the expiry; filetimer-fragment:
                    a FileTimer request expiring in 1 s, an unfinished
                    request (no newline), the release of the first, then
                    on past the expiry
    HANG_MARK       file that gets time.time() at the fault (for a
                    FileTimer: its expiry)
"""
import json
import os
import signal
import subprocess
import sys
import time

env = os.environ
rank = int(env["RANK"])
restart = int(env["TORCHELASTIC_RESTART_COUNT"])
steps = int(env.get("BEAT_STEPS", "15"))
interval = float(env.get("BEAT_INTERVAL", "0.2"))
never = env.get("BEAT_NEVER") == "1"
hang = rank == int(env.get("HANG_RANK", "-1")) and restart == 0
hang_step = int(env.get("HANG_STEP", "5"))
how = env.get("HANG_HOW", "stop")
section = env.get("HANG_SECTION", "checkpoint")
fd = None if never else int(env["CRUN_HEARTBEAT_FD"])


def say(line):
    if fd is not None:
        os.write(fd, line.encode() + b"\n")


def mark(when=None):
    path = env.get("HANG_MARK")
    if path:
        with open(path + ".tmp", "w") as f:
            f.write("%.6f\n" % (when if when is not None else time.time()))
        os.rename(path + ".tmp", path)


def file_timer(scope, expires, pid=None, fragment=None):
    # torch's FileTimerClient: one JSON request per line on the named pipe,
    # each in one write; fragment: written first, without its newline
    req = {"version": 1, "pid": pid or os.getpid(), "scope_id": scope,
           "expiration_time": expires, "signal": signal.SIGKILL}
    pipe = os.open(env["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
    if fragment:
        os.write(pipe, fragment.encode())
    os.write(pipe, (json.dumps(req) + "\n").encode())
    os.close(pipe)


for step in range(steps):
    say("step %d" % step)
    if hang and step == hang_step:
        print("hanging (%s) at step %d" % (how, step), flush=True)
        if how == "stop":
            mark()
            os.kill(os.getpid(), signal.SIGSTOP)
        elif how == "section":
            say("section begin " + section)
            mark()
            time.sleep(600)
        elif how == "filetimer":
            expires = time.time() + 1.0
            file_timer("train_step", expires)
            mark(expires)
            time.sleep(600)
        elif how == "filetimer-child":
            child = subprocess.Popen([sys.executable, "-c",
                                      "import time; time.sleep(0.3)"])
            expires = time.time() + 1.0
            file_timer("child_step", expires, pid=child.pid)
            mark(expires)
            child.wait()
            time.sleep(1.5)
        elif how == "filetimer-fragment":
            expires = time.time() + 1.0
            file_timer("train_step", expires)
            mark(expires)
            time.sleep(0.2)
            file_timer("train_step", -1, fragment='{"version": 1, "pid": ')
            time.sleep(1.5)
        elif how == "slow-section":
            say("section begin " + section)
            time.sleep(float(env.get("HANG_SECONDS", "2")))
            say("section end " + section)
    time.sleep(interval)
print("done rank %d restart %d" % (rank, restart), flush=True)
sys.exit(0)
