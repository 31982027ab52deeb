#!/usr/bin/env python3
"""Compile imports_snippet.c against our headers and against the reference
headers, at -O0 and -O2, and require identical undefined-symbol sets."""
import argparse
import os
import subprocess
import sys
import tempfile


def imports(cc, flags, inc, src, obj):
    cmd = [cc] + flags + (["-I", inc] if inc else []) + ["-c", src, "-o", obj]
    subprocess.run(cmd, check=True)
    out = subprocess.run(["nm", "-u", obj], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--reference", default="")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--src", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="goiwarp-imports-")
    bad = 0
    for opt in ("-O0", "-O2"):
        flags = ["-std=gnu11", "-w", opt]
        mine = imports(a.cc, flags, a.ours, a.src, os.path.join(tmp, "o.o"))
        ref = imports(a.cc, flags, a.reference, a.src, os.path.join(tmp, "r.o"))
        print("%s: ours imports %s" % (opt, " ".join(mine)))
        if mine != ref:
            print("%s: MISMATCH\n  reference: %s\n  ours:      %s"
                  % (opt, " ".join(ref), " ".join(mine)))
            bad = 1
    print("imports identical" if not bad else "imports differ")
    return bad


if __name__ == "__main__":
    sys.exit(main())
