#!/usr/bin/env python3
"""c-calls.py [DIR ...]: which C file calls which, and the cycles among them.

The directories are one library's sources: capi rsockets (the default) are
the core, libgoiwarp-core.so.1; capi/loader is the shim, run on its own
(it needs its generated header:
C_CALLS_CFLAGS='-I_build/capi-loader -DGOIWARP_CORE_SONAME="x"').

For every .c (and .S) file in the given directories, compiles
it on its own (-c, include/ and the file's directory on the include path; for
a cgo package the _cgo_export.h that `go tool cgo` writes) and reads `nm` of
the object: the global symbols it defines and the ones it leaves undefined.
An undefined symbol another of the files defines is a call (or an address
taken, e.g. an ops table entry) from the one file to the other. Undefined
symbols the Go side of a cgo package defines (its //export functions) are
shown as calls to "(go)"; libc and the rest are ignored.

Prints each file's outgoing edges with the symbols behind them, then the
strongly connected components of more than one file (the circles). Exit
status 1 if there is any circle: ctest c_calls_no_cycles runs it.
"""
import os
import re
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dirs = sys.argv[1:] or ["capi", "rsockets"]
cc = os.environ.get("CC", "cc")
go = os.environ.get("GO", "go")
extra = os.environ.get("C_CALLS_CFLAGS", "").split()


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode:
        sys.exit("c-calls.py: %s failed:\n%s" % (" ".join(cmd), p.stderr))
    return p.stdout


def go_exports(pkgdir, tmp):
    """Writes _cgo_export.h for a cgo package dir; returns the exported names."""
    gofiles = sorted(f for f in os.listdir(pkgdir) if f.endswith(".go") and not f.endswith("_test.go"))
    cgo = [f for f in gofiles if re.search(r'^import "C"', open(os.path.join(pkgdir, f)).read(), re.M)]
    if not cgo:
        return None
    run([go, "tool", "cgo", "-objdir", tmp, "--", "-I" + os.path.join(root, "include")] + cgo, cwd=pkgdir)
    names = set()
    for f in gofiles:
        names |= set(re.findall(r"^//export (\w+)", open(os.path.join(pkgdir, f)).read(), re.M))
    return names


defs, undefs, goexp = {}, {}, set()
with tempfile.TemporaryDirectory() as tmp:
    for d in dirs:
        pkgdir = os.path.join(root, d)
        if not os.path.isdir(pkgdir):
            continue
        cgodir = os.path.join(tmp, d.replace("/", "_") + "_cgo")
        os.makedirs(cgodir)
        names = go_exports(pkgdir, cgodir)
        goexp |= names or set()
        for f in sorted(os.listdir(pkgdir)):
            if not f.endswith((".c", ".S")):
                continue
            src = os.path.join(d, f)
            obj = os.path.join(tmp, src.replace("/", "_") + ".o")
            run([cc, "-c", "-O2", "-w", "-I" + os.path.join(root, "include"), "-I" + pkgdir,
                 "-I" + cgodir] + extra + ["-o", obj, os.path.join(root, src)])
            d_, u_ = set(), set()
            for line in run(["nm", obj]).splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == "U":
                    u_.add(parts[1])
                elif len(parts) == 3 and parts[1] in "TDBRVW":
                    d_.add(parts[2])
            defs[src], undefs[src] = d_, u_

owner = {s: f for f, ds in defs.items() for s in ds}
edges = {}
for f in sorted(defs):
    out = {}
    for s in sorted(undefs[f]):
        if s in owner and owner[s] != f:
            out.setdefault(owner[s], []).append(s)
        elif s in goexp:
            out.setdefault("(go)", []).append(s)
    edges[f] = out
    print(f)
    for g, syms in sorted(out.items()):
        more = "" if len(syms) <= 4 else " +%d more" % (len(syms) - 4)
        print("  -> %-24s %s%s" % (g, " ".join(syms[:4]), more))

# Tarjan's strongly connected components over the C files.
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = n[0]
    n[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, {}):
        if w not in edges:
            continue
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop()
            on.discard(w)
            c.append(w)
            if w == v:
                break
        if len(c) > 1:
            sccs.append(sorted(c))


for v in sorted(edges):
    if v not in index:
        visit(v)
print()
if not sccs:
    print("no cycles among %d C files" % len(edges))
for c in sccs:
    print("CYCLE: " + " <-> ".join(c))
    for a in c:
        for b in c:
            if b in edges[a]:
                print("  %s -> %s: %s" % (a, b, " ".join(edges[a][b])))
sys.exit(1 if sccs else 0)
