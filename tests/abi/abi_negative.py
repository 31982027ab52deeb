#!/usr/bin/env python3
"""Prove abi_check.py catches drift: perturb a copy of include/ and expect
abi_check.py to report an ABI mismatch (exit status 1).

  moved-field  swap struct ibv_wc's qp_num and src_qp (same type and size,
               so only the offsets betray it)
  extra-name   add an enumerator that rdma-core does not have
  missing-name drop an enumerator that rdma-core has
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def perturb(inc, mode):
    path = os.path.join(inc, "infiniband", "verbs.h")
    with open(path) as f:
        text = f.read()
    if mode == "moved-field":
        m = re.search(r"struct ibv_wc \{.*?\n\};", text, re.S)
        body = m.group(0)
        a = re.search(r"\n(\s*uint32_t\s+qp_num;)", body)
        b = re.search(r"\n(\s*uint32_t\s+src_qp;)", body)
        new = body.replace(a.group(1), "@A@").replace(b.group(1), a.group(1))
        new = new.replace("@A@", b.group(1))
        expect = "struct ibv_wc.qp_num"
    elif mode == "extra-name":
        body = "\tIBV_WC_SUCCESS,\n"
        new = body + "\tIBV_WC_GOIWARP_ONLY_NAME_FOR_TEST = 1000,\n"
        expect = "IBV_WC_GOIWARP_ONLY_NAME_FOR_TEST"
    elif mode == "missing-name":
        body = "\tIBV_WC_TM_RNDV_INCOMPLETE,\n"
        new = ""
        expect = "IBV_WC_TM_RNDV_INCOMPLETE"
    else:
        sys.exit("unknown mode " + mode)
    if body not in text or new == body:
        sys.exit("perturbation did not apply")
    with open(path, "w") as f:
        f.write(text.replace(body, new, 1))
    return expect


def main():
    check, inc, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    extra = sys.argv[4:]
    tmp = tempfile.mkdtemp(prefix="goiwarp-abi-neg-")
    try:
        copy = os.path.join(tmp, "include")
        shutil.copytree(inc, copy)
        expect = perturb(copy, mode)
        r = subprocess.run([sys.executable, check, "--ours", copy,
                            "--workdir", os.path.join(tmp, "work")] + extra,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        print(r.stdout[-3000:])
        if r.returncode != 1:
            print("FAIL: expected abi_check exit 1 (mismatch), got %d" % r.returncode)
            return 1
        if expect not in r.stdout:
            print("FAIL: mismatch reported, but not about " + expect)
            return 1
        print("OK: perturbation '%s' detected" % mode)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
