#!/usr/bin/env python3
"""ab.py: two or more goiwarp builds side by side over a workload matrix.

usage: ab.py --lib NAME=DIR --lib NAME=DIR [...] [--runs N] [--secs S]
             [--lat-iters N] [--only REGEX] [--path tcp|shm|both] [--json FILE] [--list]

Each DIR holds libgoiwarp.so.1 (the shim, preloaded) and libgoiwarp-core.so.1;
e.g. --lib before=/tmp/base --lib after=_build. Every row runs once per
library per round, rounds interleaved (round 1 of every row and library, then
round 2, ...) and the libraries of a row back to back, in reverse order on
even rounds, so machine noise and order hit every build alike. Unmodified
programs over 127.0.0.1 on giw_lo, each under timeout, both sides under
LD_PRELOAD; --path tcp sets GOIWARP_SHM=0, shm takes the default same-host
path, both runs every row on each. Rows (issue 30's matrix, as far as real
programs go):
  perftest -R: ib_{write,send,read}_bw -s 4 KiB/64 KiB/1 MiB -D S,
  ib_write_bw -q 4 -s 65536, ib_{send,write,read}_lat -s 2 -n 20000
  (typical and 99 %), ib_write_bw -s 8 message rate;
  qperf -cm1 rc_rdma_write_poll_lat and rc_lat (event mode, qperf's default),
  rping -C 2000 -S 64 wall-clock per round trip;
  oversubscribed: two ib_write_bw -s 65536 pairs at once (sum), two
  ib_send_lat pairs at once (the worse typical and 99 %);
  confined: ib_send_lat (a tenth of the iterations) with both processes
  under taskset -c 0.
Prints a markdown table: min / median / max per library, the ratio of each
library's median to the first's, and flags (a latency run whose 99 % is over
5 x its typical; a bandwidth run at 0 or missing; failed runs). All samples
go to --json (default bench/results/ab-<date>.json).
Units: GB/s = 10^9 B/s; Mpps = 10^6 messages/s; latency µs as the program
reports it (perftest and qperf one way, ib_read_lat and rping a round trip).
Ports: 29000-29999 (compare.py uses 27000s, netpath.py 28000s).
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (wait_listen: readiness by the listen table; fmt)

HOST = "127.0.0.1"
TAIL = 5.0  # issue 30: 99 % <= 5 x typical in every latency row
_port = [29000 + os.getpid() % 500]


def port():
    _port[0] = 29000 + (_port[0] - 29000 + 1) % 1000
    return _port[0]


# ---------------------------------------------------------------- running pairs
class Setup:
    """How one library runs on one path: the command prefix and environment."""

    def __init__(self, libdir, path, timeout):
        self.so = os.path.join(libdir, "libgoiwarp.so.1")
        self.env = dict(os.environ)
        if path == "tcp":
            self.env["GOIWARP_SHM"] = "0"
        else:
            self.env.pop("GOIWARP_SHM", None)  # the default: same-host path
        self.timeout = timeout

    def cmd(self, argv, cpus=None):
        # LD_PRELOAD through env(1), after timeout and taskset, so that only
        # the measured program loads goiwarp.
        pin = ["taskset", "-c", cpus] if cpus else []
        return ["timeout", "-k", "5", str(self.timeout)] + pin + ["env", "LD_PRELOAD=" + self.so] + argv


def kill(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # timeout and its program (timeout leads its group)
        except ProcessLookupError:
            pass
        p.wait()


def run_pairs(setup, pairs, persistent=False, cpus=None):
    """Runs (server argv, client argv, port) pairs at once: all servers, then
    all clients once every server listens. Returns each client's (stdout,
    wall-clock seconds). persistent: servers that never exit by themselves
    (qperf), stopped after the clients."""
    procs, logs = [], []
    try:
        srvs = []
        for srv, _, p in pairs:
            logs.append(tempfile.TemporaryFile("w+"))
            # A session of its own, as a second terminal would start it (as
            # compare.py); output to a file, which no quiet reader can fill up.
            s = subprocess.Popen(setup.cmd(srv, cpus), env=setup.env, stdin=subprocess.DEVNULL,
                                 stdout=logs[-1], stderr=subprocess.STDOUT,
                                 start_new_session=True)
            procs.append(s)
            srvs.append(s)
        for (srv, _, p), s in zip(pairs, srvs):
            if not compare.wait_listen(p, s):
                raise RuntimeError("server did not listen: %s\n%s" % (" ".join(srv), tail(logs[srvs.index(s)])))
        clis = []
        for _, cli, _ in pairs:
            c = subprocess.Popen(setup.cmd(cli, cpus), env=setup.env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(c)
            clis.append((c, time.monotonic()))
        res = []
        for (_, cli, _), (c, t0) in zip(pairs, clis):
            out, _ = c.communicate()
            secs = time.monotonic() - t0
            if c.returncode != 0:
                why = "timed out" if c.returncode in (124, 137) else "exit %d" % c.returncode
                # A server killed by its timeout first makes its client fail otherwise.
                if any(s.poll() in (124, 137) for s in srvs):
                    why += " (a server timed out first: --timeout)"
                raise RuntimeError("client %s: %s\n%s\nservers:\n%s" % (
                    why, " ".join(cli), out[-600:], "\n".join(tail(f) for f in logs)))
            res.append((out, secs))
        for s in srvs:
            if persistent:
                os.killpg(s.pid, signal.SIGTERM)
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # killed below; the client's figures stand
        return res
    finally:
        for p in procs:
            kill(p)
            if p.stdout:
                p.stdout.close()
        for f in logs:
            f.close()


def tail(f):
    f.seek(0)
    return f.read()[-600:]


# ---------------------------------------------------------------- programs
def perftest_args(prog, args, p, secs):
    argv = [prog, "-R", "-d", "giw_lo", "-F", "-p", str(p)] + args
    return argv + (["-D", str(secs)] if secs else [])


def perftest_result(prog, out):
    """The figures of perftest's result row: bandwidth (GB/s) and rate, or
    t_typical and 99 % (µs)."""
    lines = out.splitlines()
    for i, l in enumerate(lines):
        if "#bytes" in l and i + 1 < len(lines):
            hdr, row = l, lines[i + 1].split()
            break
    else:
        raise RuntimeError("no result table from %s:\n%s" % (prog, out[-600:]))
    # A message on stderr may be glued to the row's last figure.
    vals = [float(m.group()) for m in (re.match(r"[0-9.]+", x) for x in row) if m]
    if "BW average" in hdr:
        return {"gbps": vals[3] * 1048576 / 1e9, "mpps": vals[4]}  # perftest's MB is 2^20 B
    if "t_typical" in hdr:
        return {"typical": vals[4], "p99": vals[7]}
    raise RuntimeError("%s: unexpected table header: %s" % (prog, hdr))


def perftest(setup, prog, args, secs=None, pairs=1, cpus=None):
    """pairs perftest pairs at once; each pair's figures."""
    specs = []
    for _ in range(pairs):
        p = port()
        argv = perftest_args(prog, args, p, secs)
        specs.append((argv, argv + [HOST], p))
    return [perftest_result(prog, out) for out, _ in run_pairs(setup, specs, cpus=cpus)]


def qperf(setup, test, secs):
    p = port()
    client = ["qperf", HOST, "-lp", str(p), "-cm1", "-t", str(secs), test]
    (out, _), = run_pairs(setup, [(["qperf", "-lp", str(p)], client, p)], persistent=True)
    m = re.search(r"^\s*latency\s*=\s*([0-9.]+)\s*(ns|us|µs|ms|sec)\s*$", out, re.M)
    if not m:
        raise RuntimeError("qperf %s: no latency:\n%s" % (test, out[-600:]))
    return {"typical": float(m.group(1)) * {"ns": 1e-3, "us": 1, "µs": 1, "ms": 1e3, "sec": 1e6}[m.group(2)],
            "p99": None}


def rping(setup, count, size):
    """Wall clock of the client per round trip (connection setup and teardown
    included: rping reports no timing of its own)."""
    p = port()
    srv = ["rping", "-s", "-a", HOST, "-p", str(p), "-C", str(count)]
    cli = ["rping", "-c", "-a", HOST, "-p", str(p), "-C", str(count), "-S", str(size)]
    (_, secs), = run_pairs(setup, [(srv, cli, p)])
    return {"typical": secs * 1e6 / count, "p99": None}


def one(results):
    return results[0]


def bw_sum(results):
    g = [r["gbps"] for r in results]
    return {"gbps": sum(g), "parts": g}


def lat_worse(results):
    return {"typical": max(r["typical"] for r in results), "p99": max(r["p99"] for r in results),
            "parts": results}


# ---------------------------------------------------------------- the matrix
def rows(a):
    """(name, kind, fn(setup) -> sample); kind: bw (GB/s), rate (Mpps), lat (µs)."""
    R = []
    lat = ["-s", "2", "-n", str(a.lat_iters)]
    for prog in ("ib_write_bw", "ib_send_bw", "ib_read_bw"):
        for size in (4096, 65536, 1048576):
            R.append(("%s -s %d" % (prog, size), "bw",
                      lambda s, prog=prog, size=size: one(perftest(s, prog, ["-s", str(size)], a.secs))))
    R.append(("ib_write_bw -q 4 -s 65536", "bw",
              lambda s: one(perftest(s, "ib_write_bw", ["-q", "4", "-s", "65536"], a.secs))))
    for prog in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
        R.append(("%s -s 2" % prog, "lat", lambda s, prog=prog: one(perftest(s, prog, lat))))
    R.append(("ib_write_bw -s 8 rate", "rate", lambda s: one(perftest(s, "ib_write_bw", ["-s", "8"], a.secs))))
    for test in ("rc_rdma_write_poll_lat", "rc_lat"):
        R.append(("qperf %s" % test, "lat", lambda s, test=test: qperf(s, test, a.secs)))
    R.append(("rping -C 2000 -S 64 (round trip)", "lat", lambda s: rping(s, 2000, 64)))
    R.append(("2 x ib_write_bw -s 65536 (sum)", "bw",
              lambda s: bw_sum(perftest(s, "ib_write_bw", ["-s", "65536"], a.secs, pairs=2))))
    R.append(("2 x ib_send_lat -s 2 (worse)", "lat", lambda s: lat_worse(perftest(s, "ib_send_lat", lat, pairs=2))))
    # On one CPU a round trip may cost a scheduler time slice (about 5 ms
    # with today's engine): a tenth of the iterations keeps the row bounded.
    confined = ["-s", "2", "-n", str(max(a.lat_iters // 10, 100))]
    R.append(("ib_send_lat -s 2, taskset -c 0", "lat",
              lambda s: one(perftest(s, "ib_send_lat", confined, cpus="0"))))
    return R


UNITS = {"bw": ("gbps", "GB/s ↑"), "rate": ("mpps", "Mpps ↑"), "lat": ("typical", "µs ↓")}


def run_all(matrix, libs, paths, a):
    """samples[(row, path)][lib] = [sample or None per round]; errors."""
    samples = {(name, path): {lib: [] for lib, _ in libs} for name, _, _ in matrix for path in paths}
    errors = []
    for rnd in range(a.runs):
        order = libs if rnd % 2 == 0 else libs[::-1]  # neither build always first
        for name, kind, fn in matrix:
            for path in paths:
                for lib, d in order:
                    try:
                        v = fn(Setup(d, path, a.timeout))
                        shown = " ".join("%s=%s" % (k, compare.fmt(x)) for k, x in v.items()
                                         if k != "parts" and x is not None)
                    except Exception as e:  # one failed run is reported, the others go on
                        v, shown = None, "error: " + (str(e).splitlines() or ["?"])[0]
                        errors.append({"row": name, "path": path, "lib": lib, "round": rnd + 1, "error": str(e)})
                    samples[(name, path)][lib].append(v)
                    print("round %d/%d  %s [%s] %s: %s" % (rnd + 1, a.runs, name, path, lib, shown),
                          file=sys.stderr, flush=True)
    return samples, errors


# ---------------------------------------------------------------- the table
def stats(v):
    v = [x for x in v if x is not None]
    return (min(v), statistics.median(v), max(v)) if v else None


def cell(st):
    return " / ".join(compare.fmt(x) for x in st) if st else "failed"


def flags(kind, key, runs, lib):
    """What a row's runs of one library must not show."""
    n, f = len(runs), []
    bad = sum(1 for r in runs if r is None)
    if kind in ("bw", "rate"):
        bad += sum(1 for r in runs if r is not None and (not r[key] or 0 in r.get("parts", ())))
        if bad:
            f.append("%s: %d/%d runs at 0 or missing" % (lib, bad, n))
    elif key == "p99":  # failures are flagged on the typical line
        tail = sum(1 for r in runs if r and r["p99"] is not None and r["p99"] > TAIL * r["typical"])
        if tail:
            f.append("%s: 99 %% > %g x typical in %d/%d runs" % (lib, TAIL, tail, n))
    elif bad:
        f.append("%s: %d/%d runs failed" % (lib, bad, n))
    return f


def table(matrix, libs, paths, samples):
    names = [lib for lib, _ in libs]
    head = ["row", "path", "unit"] + ["%s min / median / max" % l for l in names] + \
           ["%s / %s" % (l, names[0]) for l in names[1:]] + ["flags"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary = {}
    for name, kind, _ in matrix:
        for path in paths:
            s = samples[(name, path)]
            key, unit = UNITS[kind]
            lines = [(name, key)]
            if kind == "lat" and any(r and r.get("p99") is not None for l in names for r in s[l]):
                lines = [(name + " typical", "typical"), (name + " 99 %", "p99")]
            for label, k in lines:
                st = {l: stats([r[k] if r else None for r in s[l]]) for l in names}
                med0 = st[names[0]][1] if st[names[0]] else None
                ratios = [compare.fmt(st[l][1] / med0) if st[l] and med0 else "-" for l in names[1:]]
                fl = [x for l in names for x in flags(kind, k, s[l], l)]
                out.append("| " + " | ".join([label, path, unit] + [cell(st[l]) for l in names] + ratios +
                                             ["; ".join(fl)]) + " |")
                summary["%s [%s]" % (label, path)] = {
                    "unit": unit.split()[0], "flags": fl,
                    "libs": {l: dict(zip(("min", "median", "max"), st[l] or (None,) * 3)) for l in names}}
    return "\n".join(out), summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=DIR",
                    help="a library directory (libgoiwarp.so.1, libgoiwarp-core.so.1); the first is the base")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3, help="duration of bandwidth, rate and qperf runs")
    ap.add_argument("--lat-iters", type=int, default=20000, help="iterations of perftest latency runs")
    ap.add_argument("--only", default="", help="regex: rows to run")
    ap.add_argument("--path", choices=("tcp", "shm", "both"), default="tcp")
    ap.add_argument("--timeout", type=int, default=0, help="per program, s (default 60 + 2 x --secs)")
    ap.add_argument("--json")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    a.timeout = a.timeout or 60 + 2 * a.secs
    matrix = [r for r in rows(a) if re.search(a.only, r[0])]
    if a.list:
        print("\n".join(r[0] for r in matrix))
        return 0
    libs = []
    for spec in a.lib:
        name, sep, d = spec.partition("=")
        if not sep or not name:
            ap.error("--lib NAME=DIR, not %r" % spec)
        d = os.path.abspath(d)
        for f in ("libgoiwarp.so.1", "libgoiwarp-core.so.1"):
            if not os.path.exists(os.path.join(d, f)):
                ap.error("--lib %s: no %s in %s" % (name, f, d))
        libs.append((name, d))
    if len(libs) < 2 or len({n for n, _ in libs}) != len(libs):
        ap.error("give two or more --lib NAME=DIR with distinct names")
    if not matrix:
        ap.error("--only %r matches no row (--list shows them)" % a.only)
    paths = ["tcp", "shm"] if a.path == "both" else [a.path]

    samples, errors = run_all(matrix, libs, paths, a)
    tab, summary = table(matrix, libs, paths, samples)
    print("\ngoiwarp ab: %s, %d cores, %d runs, --secs %d; %s\n" % (
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.runs, a.secs,
        ", ".join("%s = %s" % l for l in libs)))
    print(tab)

    out = a.json or os.path.join(compare.HERE, "results", "ab-%s.json" % datetime.date.today().isoformat())
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
                   "runs": a.runs, "secs": a.secs, "lat_iters": a.lat_iters, "libs": dict(libs),
                   "samples": {"%s [%s]" % k: v for k, v in samples.items()},
                   "summary": summary, "errors": errors}, f, indent=1)
    print("\nwrote %s%s" % (out, "; %d run(s) failed (listed in the file)" % len(errors) if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
