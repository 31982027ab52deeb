#!/usr/bin/env python3
"""Find stalls of a perftest bandwidth run through goiwarp.

usage: stallwatch.py [--build DIR] [--runs N] [--secs S] [--port P] [--capture DIR] TEST [ARG...]

Runs TEST (e.g. ib_read_bw, or "ib_write_bw -b") --runs times for --secs
seconds each, 64 KiB unless ARGs say otherwise, over TCP on giw_lo, the
server in a session of its own (a scheduling group of its own under
sched_autogroup, as compare.py and two terminals start it). Every 20 ms it
sums the bytes the test's TCP connections moved (ss); a stall is 50 ms or
more without a byte. Prints per run the bandwidth perftest reports and the
stalls (count, seconds), skipping the first 1.5 s (setup) and what follows
--secs (teardown). With --capture, the first stall of 100 ms of a
run writes every thread's state, CPU and affinity (/proc) and the
sockets' queues (ss -tinm) to DIR/PORT.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def moved(port):
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    return sum(int(x) for x in re.findall(r"bytes_(?:received|acked):(\d+)", out))


def threads(pid):
    rows = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        base = f"/proc/{pid}/task/{tid}"
        try:
            stat = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
            aff = next(line.split()[1] for line in open(f"{base}/status")
                       if line.startswith("Cpus_allowed_list"))
            wchan = open(f"{base}/wchan").read()
        except (OSError, StopIteration):
            continue
        rows.append(f"{pid}/{tid} {stat[0]} cpu={stat[36]} allowed={aff} utime={stat[11]} stime={stat[12]} {wchan}")
    return rows


def capture(where, port, pids, stalled):
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, str(port)), "w") as f:
        f.write(f"no byte moved for {stalled:.3f} s\n")
        for pid in pids:
            f.write("\n".join(threads(pid)) + "\n")
        f.write(subprocess.run(["ss", "-tinmH", "state", "established",
                                f"( sport = :{port} or dport = :{port} )"],
                               capture_output=True, text=True).stdout)


def run(args, port):
    env = dict(os.environ, LD_PRELOAD=os.path.join(args.build, "libgoiwarp.so"), GOIWARP_SHM="0")
    test = args.test.split() + args.args
    cmd = test[:1] + ["-R", "-s", "65536", "-D", str(args.secs), "-d", "giw_lo", "-F", "-p", str(port)] + test[1:]
    srv = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    time.sleep(0.5)
    cli = subprocess.Popen(cmd + ["127.0.0.1"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    last, since, stalls, captured = moved(port), start, [], False
    while cli.poll() is None:
        time.sleep(0.02)
        now, v = time.monotonic(), moved(port)
        if v != last:
            last, since = v, now
            continue
        if not 1.5 < now - start < args.secs or now - since <= 0.05:
            continue
        if stalls and stalls[-1][0] == since:
            stalls[-1][1] = now
        else:
            stalls.append([since, now])
        if args.capture and not captured and now - since > 0.1:
            capture(args.capture, port, [srv.pid, cli.pid], now - since)
            captured = True
    out = cli.stdout.read()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()  # a server that outlives its client is a finding of its own
        srv.wait()
        print(f"port {port}: the server did not exit; killed", flush=True)
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*\d+\s+\d+", line)]
    bw = float(rows[-1][3]) / 1000 if rows else 0.0
    return bw, len(stalls), sum(e - s for s, e in stalls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "_build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--secs", type=int, default=10)
    ap.add_argument("--port", type=int, default=28500)
    ap.add_argument("--capture", metavar="DIR")
    ap.add_argument("test")
    ap.add_argument("args", nargs="*")
    args = ap.parse_args()
    stalled = 0
    for i in range(args.runs):
        bw, n, secs = run(args, args.port + i)
        stalled += n > 0
        print(f"{args.test} {' '.join(args.args)} run {i + 1}: {bw:.2f} GB/s, {n} stalls, {secs:.2f} s", flush=True)
    print(f"{stalled} of {args.runs} runs stalled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
