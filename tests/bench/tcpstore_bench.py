#!/usr/bin/env python3
"""Load generator for torch.distributed.TCPStore, the counterpart of
store_bench for scripts/bench/store.

One process runs the TCPStore server (is_master=True, port 0); up to
max(--clients) worker processes each hold one TCPStore client and, per run,
the first N of them do set/get/add in a closed loop for --seconds, timing
every call with perf_counter_ns. Each run prints one line in store_bench's
format:

  impl=tcpstore clients=16 op=set value_size=32 seconds=2.00 ops=...
  ops_per_s=... p50_us=... p99_us=... p999_us=... max_us=... errors=0

TCPStore's SET sends no reply, so its latency is only the time to queue
the request; each worker ends a SET run with one GET, which the server
answers after every earlier request, and ops/s counts up to that answer.
GET reads keys the worker set before the clock started; ADD increments one
counter per run shared by every worker, and the largest value any add
returned must equal the number of adds, or the run counts an error.

The clients go through torch's Python binding, which is how PyTorch
programs use TCPStore; the per-call Python overhead is part of what is
measured.

Exit status: 0 success, 1 a call failed, 2 usage error, 3 torch missing
or the store could not start.
"""
import argparse
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time
from datetime import timedelta

KEYS_PER_CLIENT = 256
OPS = ("set", "get", "add")


def die_with_parent(parent):
    """Children die with the parent, even when it is killed: the pipes
    alone do not tell them, since every later child holds copies of the
    parent's ends of the earlier pipes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def serve(conn, parent):
    die_with_parent(parent)
    import torch.distributed as dist

    try:
        store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60),
                              wait_for_workers=False)
        backend = "libuv" if getattr(store, "libuvBackend", False) else "classic"
        conn.send((store.port, backend))
    except Exception as e:  # reported by the parent
        conn.send((0, "error: %s" % e))
        return
    try:
        conn.recv()  # anything, or EOF when the parent goes away
    except EOFError:
        pass


def work(index, port, conn, parent):
    die_with_parent(parent)
    import torch.distributed as dist

    try:
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30))
        conn.send(("connected", None))
    except Exception as e:
        conn.send(("error", str(e)))
        return
    while True:
        try:
            cmd = conn.recv()
        except EOFError:
            return
        if cmd is None:
            return
        run, op, value_size = cmd
        value = b"v" * value_size
        keys = ["bench/%d/%d/%d" % (run, index, k) for k in range(KEYS_PER_CLIENT)]
        counter = "bench/%d/counter" % run
        errors = 0
        first_error = None
        if op == "get":
            for k in keys:
                store.set(k, value)
        conn.send(("ready", None))
        try:
            stop_ns = conn.recv()
        except EOFError:
            return
        lat = []
        adds = 0
        top = 0
        i = 0
        now = time.perf_counter_ns
        t0 = now()
        while t0 < stop_ns:
            try:
                if op == "set":
                    store.set(keys[i % KEYS_PER_CLIENT], value)
                elif op == "get":
                    if len(store.get(keys[i % KEYS_PER_CLIENT])) != value_size:
                        raise RuntimeError("get returned a value of the wrong size")
                else:
                    got = store.add(counter, 1)
                    adds += 1
                    if got > top:
                        top = got
                ok = True
            except Exception as e:
                ok = False
                errors += 1
                if first_error is None:
                    first_error = str(e)
            t1 = now()
            if ok:
                lat.append(t1 - t0)
            t0 = t1
            i += 1
        if op == "set":
            # TCPStore's SET has no reply: the loop above only queued the
            # requests. A GET is answered after every earlier request on
            # the connection, so the run ends when the server has caught up.
            try:
                store.get(keys[0])
            except Exception as e:
                errors += 1
                first_error = first_error or str(e)
            t0 = now()
        conn.send(("done", (lat, t0, adds, top, errors, first_error)))


def quantile(sorted_lat, q):
    if not sorted_lat:
        return 0.0
    r = min(int(q * len(sorted_lat)), len(sorted_lat) - 1)
    return sorted_lat[r] / 1e3


def recv_bounded(conn, what, timeout_s):
    if not conn.poll(timeout_s):
        raise RuntimeError("no answer from %s within %d s" % (what, timeout_s))
    return conn.recv()


def run_one(workers, n, op, run, args):
    """Runs op on the first n workers; prints the result line. False when
    a call failed."""
    active = workers[:n]
    for _, c in active:
        c.send((run, op, args.value_size))
    for i, (_, c) in enumerate(active):
        recv_bounded(c, "worker %d" % i, 60)
    start = time.perf_counter_ns()
    stop = start + int(args.seconds * 1e9)
    for _, c in active:
        c.send(stop)
    lat = []
    end = start
    adds = top = errors = 0
    for i, (_, c) in enumerate(active):
        _, res = recv_bounded(c, "worker %d" % i, args.seconds + 60)
        wl, wend, wadds, wtop, werr, first = res
        lat.extend(wl)
        end = max(end, wend)
        adds += wadds
        top = max(top, wtop)
        errors += werr
        if first:
            print("tcpstore_bench: worker %d: %s failed: %s" % (i, op, first), file=sys.stderr)
    if op == "add" and top != adds:
        print("tcpstore_bench: add check failed: counter reached %d after %d adds"
              % (top, adds), file=sys.stderr)
        errors += 1
    lat.sort()
    elapsed = (end - start) / 1e9
    print("impl=tcpstore clients=%d op=%s value_size=%d seconds=%.2f ops=%d ops_per_s=%.0f"
          " p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f errors=%d"
          % (n, op, args.value_size, elapsed, len(lat), len(lat) / elapsed if elapsed > 0 else 0,
             quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999),
             lat[-1] / 1e3 if lat else 0, errors), flush=True)
    return errors == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,16,64",
                    help="comma-separated client counts (default 1,16,64)")
    ap.add_argument("--ops", default="set,get,add",
                    help="comma-separated operations (default set,get,add)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--value-size", type=int, default=32)
    ap.add_argument("--serve", action="store_true",
                    help="start max(--clients) workers, then run one 'CLIENTS OP' per stdin line")
    args = ap.parse_args()
    try:
        clients = [int(c) for c in args.clients.split(",")]
        ops = args.ops.split(",")
        if any(c < 1 or c > 1024 for c in clients) or any(o not in OPS for o in ops):
            raise ValueError
        if not (0 < args.seconds <= 600) or not (1 <= args.reps <= 100):
            raise ValueError
    except ValueError:
        print("tcpstore_bench: invalid --clients, --ops, --seconds or --reps", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as e:
        print("tcpstore_bench: cannot import torch: %s" % e, file=sys.stderr)
        return 3

    ctx = mp.get_context("fork")
    srv_conn, child = ctx.Pipe()
    server = ctx.Process(target=serve, args=(child, os.getpid()), daemon=True)
    server.start()
    child.close()
    workers = []
    status = 0
    try:
        port, backend = recv_bounded(srv_conn, "the TCPStore server", 60)
        if not port:
            print("tcpstore_bench: cannot start TCPStore: %s" % backend, file=sys.stderr)
            return 3
        print("# torch %s TCPStore server backend=%s port=%d" % (torch.__version__, backend,
                                                                 port), flush=True)
        for i in range(max(clients)):
            parent_end, child = ctx.Pipe()
            p = ctx.Process(target=work, args=(i, port, child, os.getpid()), daemon=True)
            p.start()
            child.close()
            workers.append((p, parent_end))
        for i, (_, c) in enumerate(workers):
            tag, err = recv_bounded(c, "worker %d" % i, 60)
            if tag != "connected":
                print("tcpstore_bench: worker %d cannot connect: %s" % (i, err),
                      file=sys.stderr)
                return 3

        run = 0
        if args.serve:
            # One run per line "CLIENTS OP" on stdin, one result line each.
            print("# ready", flush=True)
            for cmd in sys.stdin:
                parts = cmd.split()
                if len(parts) != 2 or not parts[0].isdigit() or parts[1] not in OPS or \
                        not 1 <= int(parts[0]) <= len(workers):
                    print("error: expected 'CLIENTS OP' with CLIENTS <= %d and OP in %s"
                          % (len(workers), ",".join(OPS)), flush=True)
                    status = 1
                    continue
                run += 1
                if not run_one(workers, int(parts[0]), parts[1], run, args):
                    status = 1
        else:
            for n in clients:
                for op in ops:
                    for _ in range(args.reps):
                        run += 1
                        if not run_one(workers, n, op, run, args):
                            status = 1
    except (RuntimeError, OSError, EOFError) as e:
        print("tcpstore_bench: %s" % e, file=sys.stderr)
        return 1
    finally:
        for p, c in workers:
            try:
                c.send(None)
            except OSError:
                pass
        try:
            srv_conn.send(None)
        except OSError:
            pass
        for p, _ in workers:
            p.join(5)
            if p.is_alive():
                p.kill()
        server.join(5)
        if server.is_alive():
            server.kill()
    return status


def on_term(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_term)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
