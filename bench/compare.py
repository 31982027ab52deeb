#!/usr/bin/env python3
"""goiwarp against kernel TCP and UCX in one run (bench/compare.sh installs and builds first).

usage: compare.py [--build DIR] [--runs N] [--secs S] [--only REGEX] [--json FILE] [--list] [--shm]

Every measurement is taken --runs times (default 3); rounds are interleaved --
round 1 of everything, then round 2, ... -- so machine noise hits every tool
alike. Prints min/median/max per measurement and the ratios of medians the
performance issue sets targets for; writes all samples and ratios as JSON
(default bench/results/compare-<date>.json).

goiwarp runs unmodified perftest (-R, rdma_cm; the "noR" rows without -R)
through LD_PRELOAD over 127.0.0.1 on giw_lo, over TCP (GOIWARP_SHM=0: this
is the TCP data path; --shm takes the same-host path, which bench/shm.py
compares with TCP). References, same machine, same run:
  iperf3 (single stream, -l SIZE; -P 4 for the 4-QP rows), qperf tcp_lat,
  ucx_perftest ucp_am_lat with UCX_TLS=tcp,self (UCX over TCP, busy-polling).
  bench/wakecost c-spin (built by compare.sh): a 2-byte TCP ping-pong whose
  C threads busy-poll their sockets, this machine's floor for the 99 % tail.
Scale and idle cost come from bench/qpscale (built with the tree), CPU per GiB
from /proc/PID/stat of both perftest processes, syscalls per message from
strace -c -f on an ib_write_bw -s 8 client.
Units: GB/s = 10^9 bytes/s; latencies one-way microseconds (perftest's
t_typical / 99% percentile, qperf's latency, UCX's 50th percentile);
Mpps = 10^6 messages/s. Ports: 27000-27999.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HOST = "127.0.0.1"
_port = [27000 + os.getpid() % 500]


def port():
    _port[0] = 27000 + (_port[0] - 27000 + 1) % 1000
    return _port[0]


def listening(p):
    hexp = ":%04X" % p
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in open(f).read().splitlines()[1:]:
                col = line.split()
                if col[1].endswith(hexp) and col[3] == "0A":
                    return True
        except OSError:
            pass
    return False


def wait_listen(p, proc, secs=10):
    end = time.time() + secs
    while time.time() < end and proc.poll() is None:
        if listening(p):
            return True
        time.sleep(0.02)  # the servers have no readiness signal but the listen table
    return False


def cpu_of(pid):
    """user+system seconds of pid from /proc (None once gone)."""
    try:
        s = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Pair:
    """A server and a client of one tool; returns the client's stdout."""

    def __init__(self, env=None, tolerate=None):
        self.env = dict(os.environ, **(env or {}))
        self.tolerate = tolerate  # out -> True: a client's non-zero exit that is not the measurement's

    def run(self, server, client, listen_port, timeout=120, measure_cpu=False):
        srv = subprocess.Popen(server, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, text=True)
        cpu = None
        try:
            if not wait_listen(listen_port, srv):
                raise RuntimeError("server did not listen: " + " ".join(server))
            cli = subprocess.Popen(client, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            if measure_cpu:
                last = {}
                while cli.poll() is None:
                    for p in (srv.pid, cli.pid):
                        c = cpu_of(p)
                        if c is not None:
                            last[p] = c
                    time.sleep(0.05)
                cpu = sum(last.values())
            out, _ = cli.communicate(timeout=timeout)
            if cli.returncode != 0 and not (self.tolerate and self.tolerate(out)):
                raise RuntimeError("client exit %d: %s\n%s" % (cli.returncode, " ".join(client), out[-600:]))
            return out, cpu
        finally:
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(srv.pid, signal.SIGKILL)
                srv.wait()


# ---------------------------------------------------------------- tools
def perftest(lib, prog, args, secs=None, measure_cpu=False, cm=True):
    """perftest through LD_PRELOAD; cm=False connects without librdmacm
    (no -R: perftest's own socket exchange, ibv_modify_qp to RTS)."""
    p = port()
    common = [prog] + (["-R"] if cm else []) + ["-d", "giw_lo", "-F", "-p", str(p)] + args
    if secs:
        common += ["-D", str(secs)]
    # Without -R, ib_send_bw ends with perftest's own leak of its credit MR
    # (EBUSY from ibv_dealloc_pd), after its table.
    leak = None if cm else (lambda out: "Failed to deallocate PD" in out)
    out, cpu = Pair({"LD_PRELOAD": lib}, leak).run(common, common + [HOST], p, measure_cpu=measure_cpu)
    lines = out.splitlines()
    for i, l in enumerate(lines):
        if "#bytes" in l and i + 1 < len(lines):
            hdr, row = l, lines[i + 1].split()
            break
    else:
        raise RuntimeError("no result table from %s:\n%s" % (prog, out[-600:]))
    # A message on the client's stderr may be glued to the row's last figure.
    vals = [float(m.group()) for m in (re.match(r"[0-9.]+", x) for x in row) if m]
    if "BW average" in hdr:
        # MB/sec in perftest is 2^20 bytes
        return {"gbps": vals[3] * 1048576 / 1e9, "mpps": vals[4], "cpu": cpu,
                "bytes": vals[0] * vals[1]}
    if "t_typical" in hdr:
        return {"typical": vals[4], "p99": vals[7]}
    return {"typical": vals[2], "p99": None}  # duration mode: t_avg only


def iperf3(size, streams, secs):
    p = port()
    srv = ["iperf3", "-s", "-1", "-p", str(p)]
    cli = ["iperf3", "-c", HOST, "-p", str(p), "-l", str(size), "-t", str(secs), "-P", str(streams), "-J"]
    out, _ = Pair().run(srv, cli, p)
    j = json.loads(out)
    return {"gbps": j["end"]["sum_received"]["bits_per_second"] / 8 / 1e9}


def iperf3_cpu(size, secs):
    """iperf3 single stream with the CPU of both processes (for CPU per GiB)."""
    p = port()
    srv = ["iperf3", "-s", "-1", "-p", str(p)]
    cli = ["iperf3", "-c", HOST, "-p", str(p), "-l", str(size), "-t", str(secs), "-J"]
    out, cpu = Pair().run(srv, cli, p, measure_cpu=True)
    j = json.loads(out)
    return {"bytes": j["end"]["sum_received"]["bytes"], "cpu": cpu}


def qperf_lat(size, secs):
    lp = port()
    out, _ = Pair().run(["qperf", "-lp", str(lp)],
                        ["qperf", HOST, "-lp", str(lp), "-t", str(secs), "-m", str(size), "tcp_lat", "quit"], lp)
    m = re.search(r"latency\s*=\s*([0-9.]+)\s*(ns|us|ms)", out)
    if not m:
        raise RuntimeError("qperf: no latency:\n" + out)
    v = float(m.group(1)) * {"ns": 1e-3, "us": 1, "ms": 1e3}[m.group(2)]
    return {"typical": v}


def ucx(test, size, iters, tls="tcp,self", net_devices="lo"):
    """ucx_perftest over UCX_TLS: one-way typical latency (us, 50th
    percentile) and bandwidth (GB/s)."""
    p = port()
    env = {"UCX_TLS": tls, "UCX_NET_DEVICES": net_devices, "UCX_WARN_UNUSED_ENV_VARS": "n"}
    out, _ = Pair(env).run(["ucx_perftest", "-p", str(p)],
                           ["ucx_perftest", HOST, "-p", str(p), "-t", test, "-s", str(size),
                            "-n", str(iters)], p)
    for l in out.splitlines():
        if l.strip().startswith("Final:"):
            # Final: iterations, overhead 50%/avg/overall (us), bandwidth
            # avg/overall (MB/s, 2^20), rate avg/overall
            f = l.split()
            return {"typical": float(f[2]), "gbps": float(f[6]) * 1048576 / 1e9}
    raise RuntimeError("ucx_perftest: no Final line:\n" + out[-600:])


def wakecost(exe, mode, iters):
    """One run of bench/wakecost's receive path mode (the built program
    exe): typical and 99 %, one way."""
    out = subprocess.run([exe, "-runs", "1", "-iters", str(iters), "-modes", mode], capture_output=True,
                         text=True, timeout=300)
    m = re.search(r"^%s\s+([0-9.]+) /.*?/\s+[0-9.]+\s+([0-9.]+) /" % re.escape(mode), out.stdout, re.M)
    if out.returncode != 0 or not m:
        raise RuntimeError("wakecost %s: %s" % (mode, (out.stdout + out.stderr)[-600:]))
    return {"typical": float(m.group(1)), "p99": float(m.group(2))}


def tcp_spin(build, iters):
    """bench/wakecost c-spin: a 2-byte TCP ping-pong whose C threads read
    their non-blocking sockets in their spin loops (what UCX does, with
    nothing of UCX's own): this machine's floor, typical and 99 %, one way."""
    return wakecost(os.path.join(build, "bench", "wakecost"), "c-spin", iters)


def qpscale(build, n, idle):
    exe = os.path.join(build, "bench", "qpscale")
    out = subprocess.run([exe, "-n", str(n), "-t", str(idle), "-p", str(port())], capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("qpscale -n %d: %s" % (n, out.stderr[-600:]))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", out.stdout)}


def syscalls_per_msg(lib, iters):
    """strace -c -f of an ib_write_bw -s 8 client: syscalls per message."""
    if not shutil.which("strace"):
        raise RuntimeError("strace not installed")
    p = port()
    cmd = ["ib_write_bw", "-R", "-d", "giw_lo", "-F", "-s", "8", "-n", str(iters), "-p", str(p)]
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as tf:
        Pair({"LD_PRELOAD": lib}).run(cmd, ["strace", "-f", "-c", "-o", tf.name] + cmd + [HOST], p)
        total = 0
        for l in tf.read().splitlines():
            m = re.match(r"\s*[0-9.]+\s+[0-9.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", l)
            if m and m.group(2) != "total":
                total += int(m.group(1))
    return {"per_msg": total / iters}


# ---------------------------------------------------------------- the table
def measurements(a):
    lib, secs = a.lib, a.secs
    M = []

    def add(name, fn, key, unit, better):
        M.append({"name": name, "fn": fn, "key": key, "unit": unit, "better": better})

    for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
        for size in (4096, 65536, 1048576):
            add("%s -s %d" % (prog, size), lambda prog=prog, size=size: perftest(lib, prog, ["-s", str(size)], secs),
                "gbps", "GB/s", "high")
        add("%s -s 65536 -q 4" % prog,
            lambda prog=prog: perftest(lib, prog, ["-s", "65536", "-q", "4"], secs), "gbps", "GB/s", "high")
    for size in (4096, 65536, 1048576):
        add("iperf3 -l %d" % size, lambda size=size: iperf3(size, 1, secs), "gbps", "GB/s", "high")
    add("iperf3 -l 65536 -P 4", lambda: iperf3(65536, 4, secs), "gbps", "GB/s", "high")
    for prog in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
        for size in (2, 4096):
            f = lambda prog=prog, size=size: perftest(lib, prog, ["-s", str(size), "-n", str(a.lat_iters)])
            add("%s -s %d typical" % (prog, size), f, "typical", "us", "low")
            M[-1]["p99"] = True
    for size in (2, 4096):
        add("qperf tcp_lat -m %d" % size, lambda size=size: qperf_lat(size, secs), "typical", "us", "low")
        add("ucx ucp_am_lat -s %d" % size, lambda size=size: ucx("ucp_am_lat", size, a.lat_iters), "typical", "us", "low")
    add("tcp spin ping-pong -s 2 typical", lambda: tcp_spin(a.build, a.lat_iters), "typical", "us", "low")
    M[-1]["p99"] = True
    # Issue 11: the same tests connected without librdmacm, against the -R
    # rows above (the server of a test without -R waits in its own socket:
    # its side of the data path runs on goiwarp's receive goroutine alone).
    for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
        add("%s -s 65536 noR" % prog,
            lambda prog=prog: perftest(lib, prog, ["-s", "65536"], secs, cm=False), "gbps", "GB/s", "high")
    for prog in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
        add("%s -s 2 noR typical" % prog,
            lambda prog=prog: perftest(lib, prog, ["-s", "2", "-n", str(a.lat_iters)], cm=False), "typical", "us", "low")
        M[-1]["p99"] = True
    add("ib_write_bw -s 8 rate", lambda: perftest(lib, "ib_write_bw", ["-s", "8"], secs), "mpps", "Mpps", "high")
    add("ib_send_bw -s 8 rate", lambda: perftest(lib, "ib_send_bw", ["-s", "8"], secs), "mpps", "Mpps", "high")
    add("ib_atomic_bw rate", lambda: perftest(lib, "ib_atomic_bw", [], secs), "mpps", "Mpps", "high")
    for n in (1, 64, 1000):
        add("connect %d QPs" % n, lambda n=n: qpscale(a.build, n, 1), "connect_s", "s", "low")
        M[-1]["extra"] = ("client_rss_per_qp_kib", "server_rss_per_qp_kib")
    add("ib_write_bw -s 65536 -q 64 aggregate",
        lambda: perftest(lib, "ib_write_bw", ["-s", "65536", "-q", "64"], secs), "gbps", "GB/s", "high")
    add("idle 100 QPs, 10 s: CPU %", lambda: qpscale(a.build, 100, 10), "server_idle_cpu_pct", "%", "low")
    M[-1]["extra"] = ("client_idle_cpu_pct",)
    add("ib_write_bw -s 65536 CPU s/GiB", lambda: cpu_per_gib(perftest(lib, "ib_write_bw", ["-s", "65536"], secs,
                                                                        measure_cpu=True)),
        "cpu_s_per_gib", "s/GiB", "low")
    add("iperf3 -l 65536 CPU s/GiB", lambda: cpu_per_gib(iperf3_cpu(65536, secs)), "cpu_s_per_gib", "s/GiB", "low")
    add("ib_write_bw -s 8 syscalls/msg", lambda: syscalls_per_msg(lib, a.strace_iters), "per_msg", "", "low")
    return M


def cpu_per_gib(r):
    r["cpu_s_per_gib"] = r["cpu"] / (r["bytes"] / 2**30) if r.get("cpu") and r.get("bytes") else float("nan")
    return r


RATIOS = [  # (label, numerator, denominator, target, better)
    ("ib_write_bw 64 KiB / iperf3", "ib_write_bw -s 65536", "iperf3 -l 65536", 0.95, "high"),
    ("ib_write_bw 1 MiB / iperf3", "ib_write_bw -s 1048576", "iperf3 -l 1048576", 0.95, "high"),
    ("ib_write_bw 4 KiB / iperf3", "ib_write_bw -s 4096", "iperf3 -l 4096", None, "high"),
    ("ib_send_bw 64 KiB / iperf3", "ib_send_bw -s 65536", "iperf3 -l 65536", 0.90, "high"),
    ("ib_read_bw 64 KiB / iperf3", "ib_read_bw -s 65536", "iperf3 -l 65536", 0.90, "high"),
    ("ib_write_bw -q 4 / iperf3 -P 4", "ib_write_bw -s 65536 -q 4", "iperf3 -l 65536 -P 4", 0.90, "high"),
    ("ib_send_bw -q 4 / iperf3 -P 4", "ib_send_bw -s 65536 -q 4", "iperf3 -l 65536 -P 4", 0.90, "high"),
    ("ib_read_bw -q 4 / iperf3 -P 4", "ib_read_bw -s 65536 -q 4", "iperf3 -l 65536 -P 4", 0.90, "high"),
    ("ib_send_lat 2 B / UCX", "ib_send_lat -s 2 typical", "ucx ucp_am_lat -s 2", 1.0, "low"),
    ("ib_write_lat 2 B / UCX", "ib_write_lat -s 2 typical", "ucx ucp_am_lat -s 2", 1.0, "low"),
    ("ib_read_lat 2 B / UCX", "ib_read_lat -s 2 typical", "ucx ucp_am_lat -s 2", 2.0, "low"),
    ("ib_send_lat 2 B 99% / typical", "ib_send_lat -s 2 99%", "ib_send_lat -s 2 typical", 3.0, "low"),
    ("ib_write_lat 2 B 99% / typical", "ib_write_lat -s 2 99%", "ib_write_lat -s 2 typical", 3.0, "low"),
    ("tcp spin ping-pong 99% / typical", "tcp spin ping-pong -s 2 99%", "tcp spin ping-pong -s 2 typical", None,
     "low"),
    ("ib_send_lat 2 B / qperf tcp_lat", "ib_send_lat -s 2 typical", "qperf tcp_lat -m 2", None, "low"),
    ("ib_send_lat 4 KiB / UCX", "ib_send_lat -s 4096 typical", "ucx ucp_am_lat -s 4096", None, "low"),
    ("ib_write_bw 64 KiB without -R / -R", "ib_write_bw -s 65536 noR", "ib_write_bw -s 65536", 0.8, "high"),
    ("ib_read_bw 64 KiB without -R / -R", "ib_read_bw -s 65536 noR", "ib_read_bw -s 65536", 0.8, "high"),
    ("ib_send_bw 64 KiB without -R / -R", "ib_send_bw -s 65536 noR", "ib_send_bw -s 65536", 0.8, "high"),
    ("ib_send_lat 2 B without -R / -R", "ib_send_lat -s 2 noR typical", "ib_send_lat -s 2 typical", 1.2, "low"),
    ("ib_write_lat 2 B without -R / -R", "ib_write_lat -s 2 noR typical", "ib_write_lat -s 2 typical", 1.2, "low"),
    ("ib_read_lat 2 B without -R / -R", "ib_read_lat -s 2 noR typical", "ib_read_lat -s 2 typical", 1.2, "low"),
    ("CPU per GiB / iperf3's", "ib_write_bw -s 65536 CPU s/GiB", "iperf3 -l 65536 CPU s/GiB", 1.5, "low"),
]


def fmt(v):
    if v is None or v != v:
        return "-"
    return "%.3g" % v if abs(v) < 100 else "%.0f" % v


def run_rounds(M, runs):
    """Every measurement of M once per round, rounds interleaved so machine
    noise hits every tool alike: samples by name, extra figures (p99,
    "extra" keys) by name, and the failed runs."""
    samples = {m["name"]: [] for m in M}
    extras = {}
    errors = []
    for r in range(runs):
        for m in M:
            try:
                res = m["fn"]()
            except Exception as e:  # one failed run is reported, the others go on
                errors.append("%s (round %d): %s" % (m["name"], r + 1, e))
                print("  error: %s: %s" % (m["name"], str(e).splitlines()[0]), file=sys.stderr)
                continue
            samples[m["name"]].append(res[m["key"]])
            if m.get("p99"):
                extras.setdefault(m["name"].replace("typical", "99%"), []).append(res["p99"])
            for k in m.get("extra", ()):
                extras.setdefault("%s: %s" % (m["name"], k), []).append(res[k])
        print("round %d of %d done" % (r + 1, runs), file=sys.stderr)
    return samples, extras, errors


def judge(summary, ratios, absolute=()):
    """Prints and returns each target: (label, numerator, denominator, target,
    better) ratios of medians and (name, target, better) medians."""
    checks = []

    def check(label, v, target, better):
        met = None if v is None or target is None else (v >= target if better == "high" else v <= target)
        checks.append({"label": label, "value": v, "target": target, "met": met})
        print("%-36s %8s %8s  %s" % (label, fmt(v), fmt(target) if target else "-",
                                     {True: "yes", False: "NO", None: "-"}[met]))

    print("\n%-36s %8s %8s  %s" % ("target", "value", "target", "met"))
    for label, num, den, target, better in ratios:
        n, d = summary.get(num, {}).get("median"), summary.get(den, {}).get("median")
        check(label, n / d if n and d else None, target, better)
    for name, target, better in absolute:
        check(name, summary.get(name, {}).get("median"), target, better)
    return checks


def write_json(kind, a, summary, checks, errors):
    out = a.json or os.path.join(HERE, "results", "%s-%s.json" % (kind, datetime.date.today().isoformat()))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
                   "runs": a.runs, "results": summary, "targets": checks, "errors": errors}, f, indent=1)
    print("\nwrote %s%s" % (out, "; %d run(s) failed (listed in the file)" % len(errors) if errors else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "_build"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=3, help="duration of bandwidth/rate runs")
    ap.add_argument("--lat-iters", type=int, default=20000)
    ap.add_argument("--strace-iters", type=int, default=20000)
    ap.add_argument("--only", help="regex: measurements to run")
    ap.add_argument("--json")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--shm", action="store_true",
                    help="goiwarp's default same-host path (GOIWARP_SHM=auto) instead of TCP; for the "
                         "goiwarp-only rows, e.g. the -R / without -R pairs (bench/shm.py compares it to TCP)")
    a = ap.parse_args()
    os.environ["GOIWARP_SHM"] = "auto" if a.shm else "0"
    a.lib = os.path.join(os.path.abspath(a.build), "libgoiwarp.so")
    M = measurements(a)
    if a.only:
        M = [m for m in M if re.search(a.only, m["name"])]
    if a.list:
        print("\n".join(m["name"] for m in M))
        return 0
    if not os.path.exists(a.lib):
        sys.exit("no %s: build first (bash bench/compare.sh builds)" % a.lib)
    samples, extras, errors = run_rounds(M, a.runs)

    def stats(v):
        v = [x for x in v if x is not None and x == x]
        return (min(v), statistics.median(v), max(v)) if v else (None, None, None)

    summary = {}
    print("\ngoiwarp compare: %s, %d cores, %d runs each, %s" %
          (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.runs, a.lib))
    print("%-44s %10s %10s %10s  %s" % ("measurement", "min", "median", "max", "unit"))
    units = {m["name"]: m["unit"] for m in M}

    def unit(name):
        if name in units:
            return units[name]
        return "us" if "99%" in name else "KiB" if name.endswith("_kib") else "%" if name.endswith("_pct") else ""

    for name, v in list(samples.items()) + list(extras.items()):
        lo, med, hi = stats(v)
        summary[name] = {"min": lo, "median": med, "max": hi, "samples": v, "unit": unit(name)}
        print("%-44s %10s %10s %10s  %s" % (name, fmt(lo), fmt(med), fmt(hi), unit(name)))
    write_json("compare", a, summary, judge(summary, RATIOS), errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
