#!/usr/bin/env python3
"""netpath.py: goiwarp between two hosts' worth of network stack.

usage: netpath.py [--lib NAME=DIR ...] [--env NAME:VAR=VALUE ...] [--runs N] [--secs S] [--mtu M ...]
                  [--only REGEX]

Makes two network namespaces joined by a veth pair (root needed, as in CI),
so neither loopback nor the same-host path applies (GOIWARP_SHM=0 as well),
and runs, rounds interleaved -- round 1 of everything, then round 2 --:
  iperf3 single stream (-l SIZE) and -P 4, the reference;
  perftest ib_write_bw / ib_send_bw / ib_read_bw -R, 64 KiB and 1 MiB, and
  ib_write_bw -q 4, under LD_PRELOAD of each --lib (default: _build);
  ib_write_lat / ib_send_lat -R -s 2 (typical and 99 %), and ib_send_lat
  -e (waiting for events, as rping and storage engines do), against
  ucx_perftest ucp_am_lat -s 2 over UCX_TLS=tcp (the latency reference);
  fi_pingpong 64 KiB and 1 MiB, libfabric's verbs provider on goiwarp
  against libfabric's tcp provider (fabtests' fi_msg_bw is not packaged
  for Debian; fi_pingpong is in libfabric-bin);
  CPU per GiB (user + system of both processes over the bytes moved) of
  ib_write_bw 64 KiB against iperf3 -l 64K.
Prints min/median/max per row and each ratio of medians at every MTU. Server in namespace giwB (10.77.0.2), client in
giwA (10.77.0.1); the namespaces are removed at the end.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (lib_env)

NS_A, NS_B = "giwA", "giwB"
IP_A, IP_B = "10.77.0.1", "10.77.0.2"


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def setup(mtu):
    teardown()
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", "giwva", "netns", NS_A, "type", "veth", "peer", "name", "giwvb", "netns", NS_B)
    for ns, dev, ip in ((NS_A, "giwva", IP_A), (NS_B, "giwvb", IP_B)):
        sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "mtu", str(mtu), "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def teardown():
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "del", ns, check=False)


def in_ns(ns, argv, env=None, **kw):
    return subprocess.Popen(["ip", "netns", "exec", ns] + argv, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def with_cpu(fn, secs):
    """fn() -> MB/s (10^6); returns (MB/s, CPU s per GiB moved)."""
    c0 = cpu_children()
    v = fn()
    cpu = cpu_children() - c0
    if not v:
        return None
    return v, cpu / (v * 1e6 * secs / 2**30)


def iperf3(size, streams, secs):
    srv = in_ns(NS_B, ["iperf3", "-s", "-1", "-p", "5301"])
    time.sleep(0.3)
    cli = in_ns(NS_A, ["iperf3", "-c", IP_B, "-p", "5301", "-t", str(secs), "-l", str(size),
                       "-P", str(streams), "-f", "m"])
    out, _ = cli.communicate(timeout=secs + 30)
    srv.wait(timeout=10)
    rows = [l for l in out.splitlines() if "receiver" in l]
    m = re.search(r"([\d.]+) Mbits/sec", rows[-1]) if rows else None
    return float(m.group(1)) / 8 if m else None  # MB/s (10^6 bytes)


def perftest(lib, prog, args, secs, port, extra_env=None):
    env = dict(os.environ, LD_PRELOAD=os.path.join(lib, "libgoiwarp.so.1"), GOIWARP_SHM="0", **(extra_env or {}))
    common = [prog, "-R", "-p", str(port)] + args
    if "_bw" in prog:
        common += ["-D", str(secs)]
    srv = in_ns(NS_B, ["timeout", str(secs + 40)] + common, env=env)
    time.sleep(0.5)
    cli = in_ns(NS_A, ["timeout", str(secs + 40)] + common + [IP_B], env=env)
    out, _ = cli.communicate()
    srv.communicate()
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+[\d.]", l)]
    if not rows:
        return None
    r = rows[-1]
    if "_bw" in prog:
        return float(r[3])  # BW average, MB/s (perftest's MB = 2^20)... see below
    return (float(r[4]), float(r[7]))  # t_typical, 99 %


def ucx_lat(secs):
    env = dict(os.environ, UCX_TLS="tcp", UCX_WARN_UNUSED_ENV_VARS="n")
    srv = in_ns(NS_B, ["timeout", "60", "ucx_perftest", "-p", "5302"],
                env=dict(env, UCX_NET_DEVICES="giwvb"))
    time.sleep(0.5)
    cli = in_ns(NS_A, ["timeout", "60", "ucx_perftest", IP_B, "-p", "5302", "-t", "ucp_am_lat",
                       "-s", "2", "-n", "20000"], env=dict(env, UCX_NET_DEVICES="giwva"))
    out, _ = cli.communicate()
    srv.communicate()
    for l in out.splitlines():
        if l.strip().startswith("Final:"):
            return float(l.split()[2]), None  # 50th percentile, one way
    return None


def pingpong(lib, prov, size, port, extra_env=None):
    env = dict(os.environ, GOIWARP_SHM="0", **(extra_env or {}))
    if lib:
        env["LD_PRELOAD"] = os.path.join(lib, "libgoiwarp.so.1")
    ep = "msg"
    args = ["fi_pingpong", "-p", prov, "-e", ep, "-S", str(size), "-I", "200" if size > 65536 else "1000"]
    srv = in_ns(NS_B, ["timeout", "60"] + args + ["-B", str(port)], env=env)
    time.sleep(0.5)
    cli = in_ns(NS_A, ["timeout", "60"] + args + ["-P", str(port), IP_B], env=env)
    out, _ = cli.communicate()
    srv.communicate()
    for l in out.splitlines():
        f = l.split()
        if len(f) >= 6 and f[0][0].isdigit() and ("k" in f[0] or "m" in f[0] or f[0].isdigit()):
            try:
                return float(f[5])  # MB/sec (10^6)
            except ValueError:
                pass
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], help="NAME=DIR holding libgoiwarp.so.1")
    ap.add_argument("--env", action="append", default=[], metavar="NAME:VAR=VALUE",
                    help="an environment variable for --lib NAME's programs")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--secs", type=int, default=4)
    ap.add_argument("--mtu", type=int, action="append", default=[])
    ap.add_argument("--only", default="")
    o = ap.parse_args()
    libs = [l.split("=", 1) for l in o.lib] or [["goiwarp", "_build"]]
    try:
        envs = ab.lib_env(o.env, dict(libs))
    except ValueError as e:
        ap.error(str(e))
    mtus = o.mtu or [1500, 9000]
    if os.geteuid() != 0:
        sys.exit("netpath.py makes network namespaces: run as root")

    rows = []  # (name, kind, fn)
    for size, label in ((65536, "64K"), (1 << 20, "1M")):
        rows.append((f"iperf3 -l {label}", "bw", lambda s=size: iperf3(s, 1, o.secs)))
    rows.append(("iperf3 -P 4 -l 64K", "bw", lambda: iperf3(65536, 4, o.secs)))
    rows.append(("iperf3 -l 64K CPU", "cpu", lambda: with_cpu(lambda: iperf3(65536, 1, o.secs), o.secs)))
    rows.append(("ucx ucp_am_lat 2", "lat", lambda: ucx_lat(o.secs)))
    port = [28000]
    for size, label in ((65536, "64K"), (1 << 20, "1M")):
        rows.append((f"fi_pingpong tcp {label}", "bw",
                     lambda s=size: (port.__setitem__(0, port[0] + 2), pingpong(None, "tcp", s, port[0]))[1]))

    def pt(lib, prog, args, env):
        port[0] += 1
        return perftest(lib, prog, args, o.secs, port[0], env)

    for name, d in libs:
        e = envs.get(name)
        for prog in ("ib_write_bw", "ib_send_bw", "ib_read_bw"):
            for size, label in ((65536, "64K"), (1 << 20, "1M")):
                rows.append((f"{name} {prog} {label}", "bw",
                             lambda d=d, p=prog, s=size, e=e: pt(d, p, ["-s", str(s)], e)))
        rows.append((f"{name} ib_write_bw -q 4 64K", "bw",
                     lambda d=d, e=e: pt(d, "ib_write_bw", ["-s", "65536", "-q", "4"], e)))
        rows.append((f"{name} ib_write_bw 64K CPU", "cpu",
                     lambda d=d, e=e: with_cpu(lambda: (pt(d, "ib_write_bw", ["-s", "65536"], e) or 0) * 1.048576,
                                                 o.secs)))
        for size, label in ((65536, "64K"), (1 << 20, "1M")):
            rows.append((f"{name} fi_pingpong verbs {label}", "bw",
                         lambda d=d, s=size, e=e: (port.__setitem__(0, port[0] + 2),
                                                   pingpong(d, "verbs", s, port[0], e))[1]))
        for prog, extra in (("ib_write_lat", []), ("ib_send_lat", []), ("ib_send_lat", ["-e"])):
            rows.append((" ".join([name, prog, "2"] + extra), "lat",
                         lambda d=d, p=prog, x=extra, e=e: pt(d, p, ["-s", "2", "-n", "20000"] + x, e)))
    rows = [r for r in rows if re.search(o.only, r[0])]

    try:
        for mtu in mtus:
            setup(mtu)
            samples = {r[0]: [] for r in rows}
            for rnd in range(o.runs):
                for name, kind, fn in rows:
                    v = fn()
                    samples[name].append(v)
                    print(f"mtu {mtu} round {rnd + 1}: {name}: {v}", file=sys.stderr, flush=True)
            report(mtu, rows, samples)
    finally:
        teardown()


def med3(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    return vals[0], statistics.median(vals), vals[-1]


def report(mtu, rows, samples):
    print(f"\n## veth, MTU {mtu} (GOIWARP_SHM=0; bandwidth MB/s: iperf3 10^6 B/s, perftest 2^20 B/s "
          f"converted to 10^6; latency µs typical / 99 %)")
    print("| row | min | median | max |")
    print("|---|---|---|---|")
    med = {}
    for name, kind, _ in rows:
        s = samples[name]
        if kind == "cpu":
            m = med3([v[1] if v else None for v in s])
            med[name] = m[1] if m else None
            cell = " | ".join(f"{x:.2f} s/GiB" for x in m) if m else "failed | | "
        elif kind == "bw":
            scale = 1.048576 if " ib_" in name else 1
            vals = [v * scale if v else None for v in s]
            m = med3(vals)
            med[name] = m[1] if m else None
            cell = " | ".join(f"{x:,.0f}" for x in m) if m else "failed | | "
        else:
            t = med3([v[0] if v else None for v in s])
            p = med3([v[1] if v and v[1] is not None else None for v in s])
            med[name] = t[1] if t else None
            if t and p:
                cell = " | ".join(f"{a:.1f} / {b:.1f}" for a, b in zip(t, p))
            else:
                cell = " | ".join(f"{a:.1f}" for a in t) if t else "failed | | "
        print(f"| {name} | {cell} |")
    ref64, ref1m, refp4 = med.get("iperf3 -l 64K"), med.get("iperf3 -l 1M"), med.get("iperf3 -P 4 -l 64K")
    print("\n| ratio of medians | value |")
    print("|---|---|")
    for name, kind, _ in rows:
        if not med.get(name) or name.startswith(("iperf3", "ucx", "fi_pingpong tcp")):
            continue
        if kind == "bw" and "fi_pingpong" in name:
            ref, what = med.get("fi_pingpong tcp " + name.split()[-1]), "libfabric tcp"
        elif kind == "bw":
            ref, what = (refp4 if "-q 4" in name else (ref1m if name.endswith("1M") else ref64)), "iperf3"
        elif kind == "cpu":
            ref, what = med.get("iperf3 -l 64K CPU"), "iperf3"
        else:
            ref, what = med.get("ucx ucp_am_lat 2"), "UCX over TCP"
        if ref:
            print(f"| {name} / {what} | {med[name] / ref:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
