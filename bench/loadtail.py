#!/usr/bin/env python3
"""loadtail.py: goiwarp's latency tail on an idle and on a busy machine,
beside the same ping-pong without RDMA.

usage: loadtail.py [--lib DIR] [--runs N] [--iters N] [--load N ...]
                   [--wakecost PATH] [--json FILE]

A spinning program shares its CPUs with whatever else runs; on a busy host
the scheduler takes them away for whole time slices, whoever the transport
is. So each goiwarp row has a reference that pays the same scheduler and
nothing of goiwarp's: bench/wakecost, a 2-byte TCP ping-pong of two C
processes over 127.0.0.1,
  c-spin   the application thread reads its non-blocking socket in its
           spin loop (as UCX does): the floor of a polled transport;
  c-read   the application thread spins on a counter that a C thread
           blocked in read(2) fills: the floor of a transport whose
           receive thread the kernel wakes;
  c-block  the application thread sleeps in read(2) itself: the floor of
           a program that sleeps on completion events.
Rows, 2 bytes, one way:
  ib_send_lat, goiwarp's TCP path (GOIWARP_SHM=0), polling   vs c-spin
  ib_send_lat, same-host path, polling                        vs c-spin
  ib_write_lat, TCP path (the application watches its memory) vs c-read
  ib_send_lat -e, TCP path (sleeps on completion events)      vs c-block
Every row runs at each --load (default 0 and 2: that many busy-looping
processes beside it), rounds interleaved; per row and load the min / median
/ max of typical (median) and 99 % latency in µs, and the ratio of the
goiwarp row's median 99 % to its reference's.
--lib: the directory of libgoiwarp.so.1 and libgoiwarp-core.so.1 (default
_build); --wakecost: the built bench/wakecost (default: go build into a
temporary directory). Ports: 29000-29999 (as ab.py, which it borrows from).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (Setup, perftest, busy, stats, cell)
import compare  # noqa: E402  (wakecost, fmt, ROOT)

# (name, reference name or None, how to run it)
ROWS = [
    ("wakecost c-spin", None, ("wake", "c-spin")),
    ("wakecost c-read", None, ("wake", "c-read")),
    ("wakecost c-block", None, ("wake", "c-block")),
    ("ib_send_lat tcp, polling", "wakecost c-spin", ("perf", "ib_send_lat", [], "tcp")),
    ("ib_send_lat same-host, polling", "wakecost c-spin", ("perf", "ib_send_lat", [], "shm")),
    ("ib_write_lat tcp, memory", "wakecost c-read", ("perf", "ib_write_lat", [], "tcp")),
    ("ib_send_lat tcp, events (-e)", "wakecost c-block", ("perf", "ib_send_lat", ["-e"], "tcp")),
]


def run(row, a):
    how = row[2]
    if how[0] == "wake":
        return compare.wakecost(a.wakecost, how[1], a.iters)
    _, prog, extra, path = how
    setup = ab.Setup(a.lib, path, 120)
    r, = ab.perftest(setup, prog, ["-s", "2", "-n", str(a.iters)] + extra)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(compare.ROOT, "_build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--load", type=int, action="append", help="busy processes (repeatable; default 0 and 2)")
    ap.add_argument("--wakecost", help="default: go build ./bench/wakecost into a temporary directory")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.lib = os.path.abspath(a.lib)
    if not a.wakecost:
        a.wakecost = os.path.join(tempfile.mkdtemp(prefix="loadtail-"), "wakecost")
        subprocess.run(["go", "build", "-o", a.wakecost, "./bench/wakecost"], cwd=compare.ROOT, check=True)
    a.wakecost = os.path.abspath(a.wakecost)
    loads = a.load or [0, 2]
    samples = {(r[0], n): [] for r in ROWS for n in loads}
    errors = []
    for rnd in range(a.runs):
        for n in loads:
            with ab.busy(n):
                for row in ROWS:
                    try:
                        res = run(row, a)
                    except RuntimeError as e:
                        res = None
                        errors.append("%s, load %d: %s" % (row[0], n, e))
                    samples[(row[0], n)].append(res)
                    print("round %d/%d load %d  %s: %s" % (rnd + 1, a.runs, n, row[0], res), flush=True)

    def st(name, n, k):
        return ab.stats([r[k] if r else None for r in samples[(name, n)]])

    print("\ngoiwarp loadtail: %s, %d cores, %d runs, %d iterations; lib %s\n" % (
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.runs, a.iters, a.lib))
    print("| row | busy processes | typical µs min / median / max | 99 % µs min / median / max "
          "| 99 % / reference's |")
    print("|---|---|---|---|---|")
    for name, ref, _ in ROWS:
        for n in loads:
            p99, rp = st(name, n, "p99"), st(ref, n, "p99") if ref else None
            ratio = compare.fmt(p99[1] / rp[1]) + " (" + ref + ")" if p99 and rp else "-"
            print("| %s | %d | %s | %s | %s |" % (name, n, ab.cell(st(name, n, "typical")), ab.cell(p99), ratio))
    out = a.json or os.path.join(compare.HERE, "results", "loadtail-%s.json" % datetime.date.today().isoformat())
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
                   "lib": a.lib, "iters": a.iters,
                   "samples": {"%s [load %d]" % k: v for k, v in samples.items()}, "errors": errors}, f, indent=1)
    print("\nwrote %s%s" % (out, "; %d run(s) failed (listed in the file)" % len(errors) if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
