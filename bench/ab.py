#!/usr/bin/env python3
"""ab.py: two or more goiwarp builds side by side over a workload matrix.

usage: ab.py --lib NAME=DIR [--lib NAME=DIR ...] [--env NAME:VAR=VALUE ...] [--runs N] [--secs S]
             [--lat-iters N] [--only REGEX] [--path tcp|shm|both] [--rpcshape PATH]
             [--json FILE] [--list]

Each DIR holds libgoiwarp.so.1 (the shim, preloaded) and libgoiwarp-core.so.1;
e.g. --lib before=/tmp/base --lib after=_build (one --lib alone runs the rows
without ratios); --env NAME:VAR=VALUE sets a variable for one --lib's
programs, so --lib off=_build --lib spin=_build --env spin:GOIWARP_RX_SPIN=200us
compares a setting on one build. Every row runs once per library per round, rounds
interleaved (round 1 of every row and library, then round 2, ...) and the
libraries of a row back to back, in reverse order on even rounds, so machine
noise and order hit every build alike. Programs over 127.0.0.1 on giw_lo,
each under timeout, both sides under LD_PRELOAD; --path tcp sets
GOIWARP_SHM=0, shm takes the default same-host path, both runs every row on
each. Rows (issue 30's matrix):
  perftest -R: ib_{write,send,read}_bw -s 4 KiB/64 KiB/1 MiB -D S,
  ib_write_bw -q 4 -s 65536, ib_{send,write,read}_lat -s 2 -n 20000
  (typical and 99 %), ib_write_bw -s 8 message rate; ib_send_lat -s 2 -e
  (event mode);
  qperf -cm1 rc_rdma_write_poll_lat and rc_lat (event mode, qperf's default),
  rping -C 2000 -S 64 wall-clock per round trip;
  oversubscribed: two ib_write_bw -s 65536 pairs at once (sum), two
  ib_send_lat pairs at once (the worse typical and 99 %);
  confined: ib_send_lat (a tenth of the iterations) with both processes
  under taskset -c 0;
  an RPC server (bench/rpcshape -m rpc): 32 B Send request, the server
  busy-polls its CQ and computes 20 or 200 µs (a busy loop on the clock)
  after each request before its Send reply; mean and 99 % round trip;
  many QPs (bench/rpcshape -m qps): 8 QPs on one CQ polled by 2 threads, 64
  QPs on 64 CQs polled by one thread, 4 KiB Sends, 16 in flight per QP; the
  aggregate GB/s, a row flagged when one QP moved nothing;
  fio --ioengine=rdma --verb=write|read|send, 4 KiB and 64 KiB, iodepth 1
  and 16, time based: the client's GB/s and IOPS;
  iperf3 -w 1M, single stream, through rdma-core's librspreload.so over
  goiwarp's rsockets (LD_PRELOAD="libgoiwarp.so.1 librspreload.so").
--load N runs N busy-looping processes beside every row (background load:
the latency tail an application sees on a busy host).
bench/rpcshape is built with the tree (linked with -lgoiwarp; the preloaded
shim of each --lib takes the place of the one it links): --rpcshape, else the
first --lib DIR's bench/rpcshape, else _build/bench/rpcshape.
Prints a markdown table: min / median / max per library, the ratio of each
library's median to the first's, and flags (a latency run whose 99 % is over
5 x its typical or mean; a bandwidth run at 0 or missing; failed runs). All
samples go to --json (default bench/results/ab-<date>.json).
Units: GB/s = 10^9 B/s; Mpps = 10^6 messages/s; k IOPS = 10^3 I/Os per s;
latency µs as the program reports it (perftest and qperf one way,
ib_read_lat, rping and rpcshape a round trip).
Ports: 29000-29999 (compare.py uses 27000s, netpath.py 28000s).
"""
import argparse
import contextlib
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
RSPRELOAD = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"  # rdma-core's socket interposer
TAIL = 5.0  # issue 30: 99 % <= 5 x typical in every latency row
_port = [29000 + os.getpid() % 500]


def port():
    """The next port of 29000-29999 that nothing listens on (a server left
    over from elsewhere would take our client)."""
    for _ in range(1000):
        _port[0] = 29000 + (_port[0] - 29000 + 1) % 1000
        if not compare.listening(_port[0]):
            break
    return _port[0]


# ---------------------------------------------------------------- running pairs
class Setup:
    """How one library runs on one path: the command prefix and environment.
    libdir None runs the programs as they are (a kernel TCP reference)."""

    def __init__(self, libdir, path, timeout, extra_env=None):
        self.so = [os.path.join(libdir, "libgoiwarp.so.1")] if libdir else []
        self.env = dict(os.environ)
        if path == "tcp":
            self.env["GOIWARP_SHM"] = "0"
        else:
            self.env.pop("GOIWARP_SHM", None)  # the default: same-host path
        self.env.update(extra_env or {})
        self.timeout = timeout

    def cmd(self, argv, cpus=None, preload=()):
        # LD_PRELOAD through env(1), after timeout and taskset, so that only
        # the measured program loads goiwarp; preload: libraries after ours
        # (librspreload.so).
        pin = ["taskset", "-c", cpus] if cpus else []
        libs = self.so + list(preload)
        env = ["env", "LD_PRELOAD=" + " ".join(libs)] if libs else []
        return ["timeout", "-k", "5", str(self.timeout)] + pin + env + argv


def kill(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # timeout and its program (timeout leads its group)
        except ProcessLookupError:
            pass
        p.wait()


def run_pairs(setup, pairs, persistent=False, cpus=None, preload=(), grace=10):
    """Runs (server argv, client argv, port) pairs at once: all servers, then
    all clients once every server listens. Returns each client's (stdout,
    wall-clock seconds). persistent: servers that never exit by themselves
    (qperf), stopped after the clients; grace: seconds a server is given to
    exit after its client before it is killed; preload: libraries to preload
    after goiwarp's (Setup.cmd)."""
    procs, logs = [], []
    try:
        srvs = []
        for srv, _, p in pairs:
            logs.append(tempfile.TemporaryFile("w+"))
            # A session of its own, as a second terminal would start it (as
            # compare.py); output to a file, which no quiet reader can fill up.
            s = subprocess.Popen(setup.cmd(srv, cpus, preload), env=setup.env, stdin=subprocess.DEVNULL,
                                 stdout=logs[-1], stderr=subprocess.STDOUT,
                                 start_new_session=True)
            procs.append(s)
            srvs.append(s)
        for (srv, _, p), s in zip(pairs, srvs):
            if not compare.wait_listen(p, s):
                raise RuntimeError("server did not listen: %s\n%s" % (" ".join(srv), tail(logs[srvs.index(s)])))
        clis = []
        for _, cli, _ in pairs:
            c = subprocess.Popen(setup.cmd(cli, cpus, preload), env=setup.env, stdin=subprocess.DEVNULL,
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
                s.wait(timeout=grace)
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


def rpcshape(setup, exe, args, secs):
    """bench/rpcshape (built with the tree, linked with -lgoiwarp; the
    preloaded shim takes its place): the client's result line as numbers."""
    if not os.access(exe, os.X_OK):
        raise RuntimeError("no rpcshape at %s: build the tree (cmake --build) or give --rpcshape" % exe)
    p = port()
    srv = [exe, "-s", "-p", str(p), "-t", str(secs)] + args
    (out, _), = run_pairs(setup, [(srv, [exe, "-p", str(p), "-t", str(secs)] + args + [HOST], p)])
    m = re.search(r"^rpcshape (rpc|qps) (.*)$", out, re.M)
    if not m:
        raise RuntimeError("rpcshape %s: no result line:\n%s" % (" ".join(args), out[-600:]))
    v = {k: float(x) for k, x in re.findall(r"(\w+)=([0-9.]+)", m.group(2))}
    if m.group(1) == "rpc":
        return {"mean": v["mean_us"], "p99": v["p99_us"], "p50": v["p50_us"], "rate": v["rate"]}
    return {"gbps": v["gbps"], "mpps": v["mpps"], "min_qp": v["min_qp_msgs"], "max_qp": v["max_qp_msgs"]}


def fio(setup, verb, bs, depth, secs):
    """fio's rdma engine: the server (rw=read) listens and lends its buffers,
    the client (rw=write) moves the data with VERB, time based. fio's bandwidth
    and IOPS of the client. Its send-mode server never exits by itself after a
    time-based client (after the flushed receive it waits in ibv_get_cq_event
    again): it is killed after grace seconds. --thread: fio's job runs as a
    thread of the process timeout started (a forked job makes a session of
    its own, out of reach of kill())."""
    p = port()
    # The engine's options (--port, --verb, --hostname) only after --ioengine.
    common = ["--thread", "--ioengine=rdma", "--port=%d" % p, "--verb=%s" % verb,
              "--bs=%d" % bs, "--iodepth=%d" % depth]
    srv = ["fio", "--name=server"] + common + ["--rw=read", "--size=100g"]
    fd, out_json = tempfile.mkstemp(prefix="ab-fio-", suffix=".json")
    os.close(fd)
    try:
        cli = ["fio", "--name=client"] + common + ["--hostname=" + HOST, "--rw=write", "--size=1g", "--time_based",
                                                   "--runtime=%d" % secs, "--output-format=json",
                                                   "--output=" + out_json]
        (out, _), = run_pairs(setup, [(srv, cli, p)], grace=2)
        try:
            with open(out_json) as f:
                job = json.load(f)["jobs"][0]
        except (OSError, ValueError, KeyError, IndexError) as e:
            raise RuntimeError("fio %s: no JSON result (%s):\n%s" % (verb, e, out[-600:]))
    finally:
        os.unlink(out_json)
    if job.get("error"):
        raise RuntimeError("fio %s: error %s:\n%s" % (verb, job["error"], out[-600:]))
    w = job["write"]  # the client's direction, whatever the verb
    return {"gbps": w["bw_bytes"] / 1e9, "kiops": w["iops"] / 1e3}


def iperf3_rsockets(setup, secs, window="1M", streams=1, preload=(RSPRELOAD,)):
    """iperf3 through rdma-core's librspreload.so over goiwarp's rsockets
    (docs/rsockets.md), or as it is with preload=() and a Setup(None, ...):
    bandwidth the receiver saw. window None: iperf3's default buffers."""
    if preload and not os.path.exists(RSPRELOAD):
        raise RuntimeError("no %s (package librdmacm1)" % RSPRELOAD)
    p = port()
    cli = ["iperf3", "-c", HOST, "-p", str(p), "-t", str(secs), "-J"]
    if window:
        cli += ["-w", window]
    if streams > 1:
        cli += ["-P", str(streams)]
    (out, _), = run_pairs(setup, [(["iperf3", "-s", "-1", "-p", str(p)], cli, p)], preload=preload)
    try:
        j = json.loads(out[out.index("{"):out.rindex("}") + 1])
        return {"gbps": j["end"]["sum_received"]["bits_per_second"] / 8e9}
    except (ValueError, KeyError) as e:
        raise RuntimeError("iperf3: no result (%s):\n%s" % (e, out[-600:]))


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
    # Event mode (-e): the programs sleep in ibv_get_cq_event between completions.
    R.append(("ib_send_lat -s 2 -e", "lat", lambda s: one(perftest(s, "ib_send_lat", lat + ["-e"]))))
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
    # An RPC server: it computes between its polls (bench/rpcshape -m rpc).
    for us in (20, 200):
        R.append(("rpcshape rpc, compute %d us (round trip)" % us, "rtt",
                  lambda s, us=us: rpcshape(s, a.rpcshape, ["-m", "rpc", "-u", str(us)], a.secs)))
    # Many QPs on shared or separate CQs (bench/rpcshape -m qps), 4 KiB Sends.
    for q, c, t in ((8, 1, 2), (64, 64, 1)):
        R.append(("rpcshape qps, %d QPs on %d CQ%s, %d poll thread%s, 4 KiB send" % (
            q, c, "s" if c > 1 else "", t, "s" if t > 1 else ""), "bw",
            lambda s, q=q, c=c, t=t: rpcshape(s, a.rpcshape, ["-m", "qps", "-q", str(q), "-c", str(c),
                                                               "-T", str(t), "-S", "4096"], a.secs)))
    for verb in ("write", "read", "send"):
        for bs in (4096, 65536):
            for depth in (1, 16):
                R.append(("fio rdma %s %d KiB iodepth %d" % (verb, bs // 1024, depth), "io",
                          lambda s, verb=verb, bs=bs, depth=depth: fio(s, verb, bs, depth, a.secs)))
    R.append(("iperf3 over rsockets (librspreload), -w 1M", "bw", lambda s: iperf3_rsockets(s, a.secs)))
    return R


# The table's lines per kind of row: (label suffix, sample key, unit); the
# first line carries a row's failures, a line whose key no sample has is left
# out (qperf and rping have no 99 %).
LINES = {"bw": [("", "gbps", "GB/s ↑")],
         "rate": [("", "mpps", "Mpps ↑")],
         "lat": [(" typical", "typical", "µs ↓"), (" 99 %", "p99", "µs ↓")],
         "rtt": [(" mean", "mean", "µs ↓"), (" 99 %", "p99", "µs ↓")],
         "io": [("", "gbps", "GB/s ↑"), (" IOPS", "kiops", "k IOPS ↑")]}


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
                        v = fn(Setup(d, path, a.timeout, a.lib_env.get(lib)))
                        shown = " ".join("%s=%s" % (k, compare.fmt(x)) for k, x in v.items()
                                         if k != "parts" and x is not None)
                    except Exception as e:  # one failed run is reported, the others go on
                        v, shown = None, "error: " + (str(e).splitlines() or ["?"])[0]
                        errors.append({"row": name, "path": path, "lib": lib, "round": rnd + 1, "error": str(e)})
                    samples[(name, path)][lib].append(v)
                    print("round %d/%d  %s [%s] %s: %s" % (rnd + 1, a.runs, name, path, lib, shown),
                          file=sys.stderr, flush=True)
    return samples, errors


@contextlib.contextmanager
def busy(n):
    """n busy-looping processes for the length of the block: background load."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- the table
def stats(v):
    v = [x for x in v if x is not None]
    return (min(v), statistics.median(v), max(v)) if v else None


def cell(st):
    return " / ".join(compare.fmt(x) for x in st) if st else "failed"


def flags(kind, key, runs, lib):
    """What a row's runs of one library must not show."""
    n, f = len(runs), []
    first = LINES[kind][0][1]
    bad = sum(1 for r in runs if r is None)
    if key != first:  # failures are flagged on a row's first line
        if key == "p99":
            tail = sum(1 for r in runs if r and r["p99"] is not None and r["p99"] > TAIL * r[first])
            if tail:
                f.append("%s: 99 %% > %g x %s in %d/%d runs" % (lib, TAIL, LINES[kind][0][0].strip(), tail, n))
    elif kind in ("bw", "rate", "io"):
        # A run at 0, one of two pairs at 0, a QP that moved nothing (rpcshape -m qps).
        bad += sum(1 for r in runs if r is not None and
                   (not r[key] or 0 in r.get("parts", ()) or r.get("min_qp") == 0))
        if bad:
            f.append("%s: %d/%d runs at 0 or missing" % (lib, bad, n))
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
            lines = [ln for i, ln in enumerate(LINES[kind])
                     if i == 0 or any(r and r.get(ln[1]) is not None for l in names for r in s[l])]
            if len(lines) == 1:
                lines = [("", lines[0][1], lines[0][2])]  # a lone line is the row itself
            for suffix, k, unit in lines:
                label = name + suffix
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


def lib_env(specs, names):
    """--env NAME:VAR=VALUE specs, for libraries of the given names, as
    {NAME: {VAR: VALUE}} (ab.py's and netpath.py's --env)."""
    out = {}
    for spec in specs:
        name, sep, kv = spec.partition(":")
        var, eq, val = kv.partition("=")
        if not sep or not eq or not var or name not in names:
            raise ValueError("--env NAME:VAR=VALUE for a --lib NAME, not %r" % spec)
        out.setdefault(name, {})[var] = val
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=DIR",
                    help="a library directory (libgoiwarp.so.1, libgoiwarp-core.so.1); the first is the base")
    ap.add_argument("--env", action="append", default=[], metavar="NAME:VAR=VALUE",
                    help="an environment variable for --lib NAME's programs (the same DIR under two names "
                         "with different --env compares settings)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3,
                    help="duration of bandwidth, rate, qperf, rpcshape, fio and iperf3 runs")
    ap.add_argument("--lat-iters", type=int, default=20000, help="iterations of perftest latency runs")
    ap.add_argument("--only", default="", help="regex: rows to run")
    ap.add_argument("--path", choices=("tcp", "shm", "both"), default="tcp")
    ap.add_argument("--timeout", type=int, default=0, help="per program, s (default 60 + 2 x --secs)")
    ap.add_argument("--rpcshape", help="bench/rpcshape program (default: the first --lib DIR's bench/rpcshape "
                    "that exists, else _build/bench/rpcshape)")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy-looping processes (nice 0) for the whole run: background load")
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
    if not libs or len({n for n, _ in libs}) != len(libs):
        ap.error("give --lib NAME=DIR, two or more with distinct names to compare")
    try:
        a.lib_env = lib_env(a.env, dict(libs))
    except ValueError as e:
        ap.error(str(e))
    if not matrix:
        ap.error("--only %r matches no row (--list shows them)" % a.only)
    if not a.rpcshape:
        cands = [os.path.join(d, "bench", "rpcshape") for _, d in libs] + \
                [os.path.join(compare.ROOT, "_build", "bench", "rpcshape")]
        a.rpcshape = next((c for c in cands if os.access(c, os.X_OK)), cands[-1])
    a.rpcshape = os.path.abspath(a.rpcshape)
    paths = ["tcp", "shm"] if a.path == "both" else [a.path]

    with busy(a.load):
        samples, errors = run_all(matrix, libs, paths, a)
    tab, summary = table(matrix, libs, paths, samples)
    print("\ngoiwarp ab: %s, %d cores, %d runs, --secs %d%s; %s\n" % (
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.runs, a.secs,
        ", background load: %d busy processes" % a.load if a.load else "",
        ", ".join("%s = %s%s" % (n, d, "".join(" %s=%s" % kv for kv in a.lib_env.get(n, {}).items()))
                  for n, d in libs)))
    print(tab)

    out = a.json or os.path.join(compare.HERE, "results", "ab-%s.json" % datetime.date.today().isoformat())
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
                   "runs": a.runs, "secs": a.secs, "load": a.load, "lat_iters": a.lat_iters, "libs": dict(libs),
                   "env": a.lib_env,
                   "samples": {"%s [%s]" % k: v for k, v in samples.items()},
                   "summary": summary, "errors": errors}, f, indent=1)
    print("\nwrote %s%s" % (out, "; %d run(s) failed (listed in the file)" % len(errors) if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
