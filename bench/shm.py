#!/usr/bin/env python3
"""Same-host fast path (issue 13): perftest through goiwarp with GOIWARP_SHM=1
(direct placement, and the rings alone: GOIWARP_SHM_DIRECT=0) and =0, iperf3 and UCX shared memory, in one run (bench/shm.sh builds first).

usage: shm.py [--build DIR] [--runs N] [--secs S] [--lat-iters N] [--only REGEX] [--json FILE] [--list]

Rounds are interleaved (round 1 of everything, then round 2, ...); each
measurement prints min/median/max, then the ratios of medians the issue sets
targets for. UCX rows need ucx_perftest (ucx-utils) and are skipped without
it. Units: GB/s = 10^9 bytes/s; latency one-way microseconds (perftest's
t_typical, UCX's 50th percentile); Mpps = 10^6 messages/s. JSON goes to
bench/results/shm-<date>.json. Ports: 27000-27999 (compare.py's helpers).
"""
import argparse
import datetime
import os
import re
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (perftest, iperf3, Pair, port)

HERE = compare.HERE


def with_env(env, fn):
    """fn run with env set in the environment the pairs copy."""
    def run():
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for k, v in old.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
    return run


# The paths measured: direct placement (the default), the rings alone, TCP.
MODES = (
    ({"GOIWARP_SHM": "1", "GOIWARP_SHM_DIRECT": "1"}, "shm"),
    ({"GOIWARP_SHM": "1", "GOIWARP_SHM_DIRECT": "0"}, "shm-ring"),
    ({"GOIWARP_SHM": "0"}, "tcp"),
)


def measurements(a):
    lib, secs, M = a.lib, a.secs, []

    def add(name, fn, key, unit):
        M.append({"name": name, "fn": fn, "key": key, "unit": unit})

    for mode, label in MODES:
        for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            add("%s -s 65536 %s" % (prog, label),
                with_env(mode, lambda prog=prog: compare.perftest(lib, prog, ["-s", "65536"], secs)), "gbps", "GB/s")
        for prog in ("ib_write_lat", "ib_send_lat", "ib_read_lat"):
            add("%s -s 2 %s" % (prog, label),
                with_env(mode, lambda prog=prog: compare.perftest(lib, prog, ["-s", "2", "-n", str(a.lat_iters)])),
                "typical", "us")
        add("ib_write_bw -s 8 %s" % label,
            with_env(mode, lambda: compare.perftest(lib, "ib_write_bw", ["-s", "8"], secs)), "mpps", "Mpps")
    add("iperf3 -l 65536", lambda: compare.iperf3(65536, 1, secs), "gbps", "GB/s")
    if shutil.which("ucx_perftest"):
        add("ucx ucp_put_bw -s 65536", lambda: compare.ucx("ucp_put_bw", 65536, a.bw_iters, "posix,cma,self", "all"), "gbps", "GB/s")
        add("ucx ucp_am_lat -s 2", lambda: compare.ucx("ucp_am_lat", 2, a.lat_iters, "posix,cma,self", "all"), "typical", "us")
    return M


RATIOS = [  # (label, numerator, denominator, target, better)
    ("write_bw shm / iperf3", "ib_write_bw -s 65536 shm", "iperf3 -l 65536", 5, "high"),
    ("write_bw shm / UCX put_bw", "ib_write_bw -s 65536 shm", "ucx ucp_put_bw -s 65536", 0.3, "high"),
    ("read_bw shm / iperf3", "ib_read_bw -s 65536 shm", "iperf3 -l 65536", 5, "high"),
    ("read_bw shm / UCX put_bw", "ib_read_bw -s 65536 shm", "ucx ucp_put_bw -s 65536", 0.3, "high"),
    ("send_bw shm / iperf3", "ib_send_bw -s 65536 shm", "iperf3 -l 65536", 3, "high"),
    ("write_bw shm / tcp", "ib_write_bw -s 65536 shm", "ib_write_bw -s 65536 tcp", None, "high"),
    ("write_bw shm / shm-ring", "ib_write_bw -s 65536 shm", "ib_write_bw -s 65536 shm-ring", None, "high"),
    ("write_lat shm / shm-ring", "ib_write_lat -s 2 shm", "ib_write_lat -s 2 shm-ring", None, "low"),
    ("send_lat shm / tcp", "ib_send_lat -s 2 shm", "ib_send_lat -s 2 tcp", None, "low"),
]
ABS = [  # (measurement, target, better)
    ("ib_write_lat -s 2 shm", 1.0, "low"),
    ("ib_send_lat -s 2 shm", 1.0, "low"),
    ("ib_read_lat -s 2 shm", 2.0, "low"),
    ("ib_write_bw -s 8 shm", 5.0, "high"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(compare.ROOT, "_build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--lat-iters", type=int, default=20000)
    ap.add_argument("--bw-iters", type=int, default=100000)
    ap.add_argument("--only")
    ap.add_argument("--json")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    a.lib = os.path.join(os.path.abspath(a.build), "libgoiwarp.so")
    M = measurements(a)
    if a.only:
        M = [m for m in M if re.search(a.only, m["name"])]
    if a.list:
        print("\n".join(m["name"] for m in M))
        return 0
    samples, _, errors = compare.run_rounds(M, a.runs)
    summary = {}
    print("\ngoiwarp same-host: %s, %d cores, %d runs each" %
          (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.runs))
    print("%-32s %9s %9s %9s  %s" % ("measurement", "min", "median", "max", "unit"))
    for m in M:
        v = [x for x in samples[m["name"]] if x is not None]
        lo, med, hi = (min(v), statistics.median(v), max(v)) if v else (None, None, None)
        summary[m["name"]] = {"min": lo, "median": med, "max": hi, "samples": v, "unit": m["unit"]}
        print("%-32s %9s %9s %9s  %s" % (m["name"], compare.fmt(lo), compare.fmt(med), compare.fmt(hi), m["unit"]))
    compare.write_json("shm", a, summary, compare.judge(summary, RATIOS, ABS), errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
