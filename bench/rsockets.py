#!/usr/bin/env python3
"""rsockets.py: plain socket programs over goiwarp's rsockets against the same
programs over kernel TCP.

usage: rsockets.py [--lib NAME=DIR ...] [--runs N] [--secs S]
                   [--path tcp|shm|both] [--json FILE]

Each program runs unmodified: under rsockets both sides preload goiwarp and
rdma-core's socket interposer (LD_PRELOAD="DIR/libgoiwarp.so.1
librspreload.so", docs/rsockets.md); the reference is the same command with
nothing preloaded. Rows, over 127.0.0.1:
  iperf3, one stream, default options (no -w: the buffers are the
          library's defaults), the receiver's Gbit/s;
  iperf3 -P 4, the same with four streams;
  sockperf ping-pong (sockperf pp --tcp, 14-byte messages), mean and 99 %
          latency in µs as sockperf reports it (half a round trip).
Rounds interleaved: every row's kernel TCP run and each library's run back
to back in one round, then the next round. --path tcp runs goiwarp with
GOIWARP_SHM=0 (what two hosts get), shm its default same-host path, both
(default) each. Prints per row min / median / max and each rsockets
median over kernel TCP's. Issue 30's targets: bandwidth >= 0.9 x TCP,
latency <= 1.2 x. Ports 29000-29999 (as ab.py, whose pair runner this uses).
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (Setup, iperf3_rsockets, run_pairs, port, stats, cell, HOST, RSPRELOAD)
import compare  # noqa: E402  (fmt, ROOT)


def iperf3(setup, secs, streams, preload):
    gbps = ab.iperf3_rsockets(setup, secs, window=None, streams=streams, preload=preload)["gbps"]
    return {"gbit": gbps * 8}


def sockperf(setup, secs, preload):
    p = ab.port()
    srv = ["sockperf", "sr", "--tcp", "-i", ab.HOST, "-p", str(p)]
    cli = ["sockperf", "pp", "--tcp", "-i", ab.HOST, "-p", str(p), "-t", str(secs)]
    (out, _), = ab.run_pairs(setup, [(srv, cli, p)], persistent=True, preload=preload)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    mean = re.search(r"avg-latency=([\d.]+)", out)
    p99 = re.search(r"percentile 99\.000 =\s*([\d.]+)", out)
    if not mean or not p99:
        raise RuntimeError("sockperf: no result:\n%s" % out[-600:])
    return {"mean": float(mean.group(1)), "p99": float(p99.group(1))}


# (row, what its figures are, how to run it)
ROWS = [
    ("iperf3, 1 stream, defaults", [("gbit", "Gbit/s ↑")], lambda s, a, pre: iperf3(s, a.secs, 1, pre)),
    ("iperf3 -P 4", [("gbit", "Gbit/s ↑")], lambda s, a, pre: iperf3(s, a.secs, 4, pre)),
    ("sockperf ping-pong", [("mean", "µs mean ↓"), ("p99", "µs 99 % ↓")], lambda s, a, pre: sockperf(s, a.secs, pre)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--path", choices=("tcp", "shm", "both"), default="both")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(ab.RSPRELOAD):
        sys.exit("no %s (package librdmacm1)" % ab.RSPRELOAD)
    libs = [tuple(x.split("=", 1)) for x in a.lib] or [("goiwarp", os.path.join(compare.ROOT, "_build"))]
    paths = ["tcp", "shm"] if a.path == "both" else [a.path]
    # The columns: kernel TCP, then each library on each path.
    cols = [("kernel TCP", ab.Setup(None, "tcp", 60), ())]
    for name, d in libs:
        for path in paths:
            cols.append(("%s rsockets [%s]" % (name, path), ab.Setup(d, path, 60), (ab.RSPRELOAD,)))
    samples = {(r[0], c[0]): [] for r in ROWS for c in cols}
    for rnd in range(a.runs):
        for row, _, fn in ROWS:
            for col, setup, pre in cols:
                try:
                    v = fn(setup, a, pre)
                except RuntimeError as e:
                    print("round %d %s %s: %s" % (rnd + 1, row, col, e), file=sys.stderr)
                    v = None
                samples[(row, col)].append(v)
                print("round %d/%d  %s  %s: %s" % (rnd + 1, a.runs, row, col, v), file=sys.stderr, flush=True)

    print("| row | " + " | ".join(c[0] + " min / median / max" for c in cols) +
          " | " + " | ".join(c[0] + " / TCP" for c in cols[1:]) + " |")
    print("|" + "---|" * (1 + 2 * len(cols) - 1))
    for row, lines, _ in ROWS:
        for key, unit in lines:
            st = {c[0]: ab.stats([r[key] if r else None for r in samples[(row, c[0])]]) for c in cols}
            ref = st["kernel TCP"][1] if st["kernel TCP"] else None
            ratios = [compare.fmt(st[c[0]][1] / ref) if st[c[0]] and ref else "-" for c in cols[1:]]
            print("| %s, %s | " % (row, unit) + " | ".join(ab.cell(st[c[0]]) for c in cols) +
                  " | " + " | ".join(ratios) + " |")
    out = a.json or os.path.join(compare.ROOT, "bench", "results",
                                 "rsockets-%s.json" % datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"%s | %s" % k: v for k, v in samples.items()}, f, indent=1)
    print("samples: %s" % out, file=sys.stderr)


if __name__ == "__main__":
    main()
