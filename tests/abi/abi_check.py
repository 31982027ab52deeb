#!/usr/bin/env python3
"""ABI identity check of goiwarp's public headers against rdma-core's.

Every struct/union defined in our headers (size, alignment, offset and size
of every member, nested and anonymous members included, bit offset and width
of bit-fields), every enum (size and value of every enumerator) and every
#define with a value is dumped twice by one generated C program: compiled
once against our include/ and once against the reference headers (the
system's /usr/include from libibverbs-dev/librdmacm-dev). The two dumps must
be identical.

The names come from our headers only (gcc -E -dD, keeping what our files
define), so nothing new escapes the check; a name the reference headers lack
makes the reference build fail, which is reported as a mismatch. In the
other direction, every struct, member, enum, enumerator, macro and function
that rdma-core's version of one of our headers defines must exist in ours
(rdma/ib_user_verbs.h, intentionally partial, excepted).

Exit status: 0 identical, 1 ABI mismatch (diff or name missing from the
reference), 2 our own headers or the tool failed.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile

TOKEN_RE = re.compile(r"""
    [A-Za-z_]\w*
  | 0[xX][0-9a-fA-F]+[uUlL]*
  | \d+[uUlL]*
  | "(?:\\.|[^"\\])*"
  | '(?:\\.|[^'\\])*'
  | ->|<<|>>|\.\.\.
  | \S
""", re.VERBOSE)
IDENT_RE = re.compile(r"^[A-Za-z_]\w*$")
OPEN = {"(": ")", "[": "]", "{": "}"}


class Fail(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, **kw)


def public_headers(inc):
    """Every header of our tree that mirrors an rdma-core header."""
    out = []
    for sub in ("infiniband", "rdma"):
        d = os.path.join(inc, sub)
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith(".h"):
                    out.append(os.path.relpath(os.path.join(root, f), inc))
    return sorted(out)


def includes_src(headers):
    return "".join("#include <%s>\n" % h for h in headers)


# ---- reading our headers ------------------------------------------------

def our_text(cc, inc, headers, only=None):
    """Tokens and macros defined by files under inc (or by the files in
    the set only, when given)."""
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(includes_src(headers))
        src = f.name
    try:
        r = run([cc, "-std=gnu11", "-E", "-dD", "-w"] +
                (["-I", inc] if inc and only is None else []) + [src])
    finally:
        os.unlink(src)
    if r.returncode != 0:
        raise Fail(2, "preprocessing our headers failed:\n" + r.stderr)
    inc_real = os.path.realpath(inc or "/usr/include") + os.sep
    code, macros = [], {}
    ours = False
    for line in r.stdout.splitlines():
        m = re.match(r'^# \d+ "(.*)"', line)
        if m:
            real = os.path.realpath(m.group(1))
            ours = real in only if only is not None else real.startswith(inc_real)
            continue
        if not ours:
            continue
        m = re.match(r"^#define (\w+)(\(([^)]*)\))?\s*(.*)$", line)
        if m:
            macros[m.group(1)] = (m.group(3), m.group(4))
            continue
        m = re.match(r"^#undef (\w+)", line)
        if m:
            macros.pop(m.group(1), None)
            continue
        if not line.startswith("#"):
            code.append(line)
    return TOKEN_RE.findall("\n".join(code)), macros


def match(tokens, i):
    """Index just past the bracket that closes tokens[i]."""
    want = [OPEN[tokens[i]]]
    i += 1
    while want:
        t = tokens[i]
        if t in OPEN:
            want.append(OPEN[t])
        elif t == want[-1]:
            want.pop()
        i += 1
    return i


def split_top(tokens, sep):
    parts, cur, i = [], [], 0
    while i < len(tokens):
        t = tokens[i]
        if t in OPEN:
            j = match(tokens, i)
            cur.extend(tokens[i:j])
            i = j
            continue
        if t == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
        i += 1
    if cur:
        parts.append(cur)
    return parts


def declarator_name(decl):
    """(name, is_bitfield) of one member declarator."""
    for k in range(len(decl) - 3):
        if decl[k] == "(" and decl[k + 1] == "*" and IDENT_RE.match(decl[k + 2]):
            return decl[k + 2], False
    depth, colon, end = 0, None, len(decl)
    for k, t in enumerate(decl):
        if t in "([{":
            depth += 1
            if t == "[" and depth == 1 and end == len(decl):
                end = k
        elif t in ")]}":
            depth -= 1
        elif t == ":" and depth == 0:
            colon = k
            break
    stop = colon if colon is not None else end
    for t in reversed(decl[:stop]):
        if IDENT_RE.match(t):
            return t, colon is not None
    raise Fail(2, "cannot find member name in: " + " ".join(decl))


def parse_body(tokens):
    """Member list [(path, is_bitfield)] of a struct/union body."""
    members = []
    for decl in split_top(tokens, ";"):
        if not decl:
            continue
        if "{" in decl:
            b = decl.index("{")
            e = match(decl, b)
            inner = parse_body(decl[b + 1:e - 1])
            rest = decl[e:]
            if not rest:  # anonymous struct/union: members lift up
                members.extend(inner)
                continue
            for d in split_top(rest, ","):
                name, _ = declarator_name(d)
                members.append((name, False))
                if "[" not in d:
                    members.extend((name + "." + p, bf) for p, bf in inner)
            continue
        lead = []
        parts = split_top(decl, ",")
        for n, d in enumerate(parts):
            if n == 0:
                lead = d
            name, bf = declarator_name(d if n == 0 else lead[:1] + d)
            members.append((name, bf))
    return members


def scan(tokens):
    """Definitions in our code: aggregates, named enums, enumerators."""
    aggs, enums, consts = [], [], []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("struct", "union") and i + 2 < len(tokens) and \
                IDENT_RE.match(tokens[i + 1]) and tokens[i + 2] == "{":
            e = match(tokens, i + 2)
            aggs.append((t + " " + tokens[i + 1],
                         parse_body(tokens[i + 3:e - 1])))
            i = e
            continue
        if t == "enum":
            j = i + 1
            name = None
            if j < len(tokens) and IDENT_RE.match(tokens[j]):
                name = tokens[j]
                j += 1
            if j < len(tokens) and tokens[j] == "{":
                e = match(tokens, j)
                if name:
                    enums.append("enum " + name)
                for item in split_top(tokens[j + 1:e - 1], ","):
                    if item:
                        consts.append(item[0])
                i = e
                continue
        i += 1
    return aggs, enums, consts


# ---- completeness -------------------------------------------------------

# Headers of ours that intentionally hold only a subset of rdma-core's.
PARTIAL = {"rdma/ib_user_verbs.h"}


def missing_names(cc, ref, our_inc, headers, aggs, enums, consts, macros):
    """Names that the reference versions of our headers define and ours lack."""
    only = {os.path.realpath(os.path.join(ref or "/usr/include", h))
            for h in headers if h not in PARTIAL}
    tokens, rmacros = our_text(cc, ref, headers, only)
    raggs, renums, rconsts = scan(tokens)
    mine = dict(aggs)
    missing = []
    for tag, members in raggs:
        if tag not in mine:
            missing.append(tag)
            continue
        have = {p for p, _ in mine[tag]}
        missing += ["%s.%s" % (tag, p) for p, _ in members if p not in have]
    missing += [e for e in renums if e not in enums]
    have = set(consts)
    missing += ["enumerator " + c for c in rconsts if c not in have]
    kw = {"if", "while", "for", "switch", "return", "sizeof", "do",
          "__attribute__", "__builtin_constant_p", "offsetof", "assert"}

    def called(toks):
        return {t for k, t in enumerate(toks[:-1])
                if toks[k + 1] == "(" and IDENT_RE.match(t) and t not in kw
                and not t.startswith("__")}
    mytoks, _ = our_text(cc, our_inc, headers)
    have = called(mytoks) | set(macros)
    missing += ["function " + f for f in sorted(called(tokens) - have)]
    missing += ["macro " + m for m in sorted(rmacros)
                if m not in macros and (rmacros[m][0] is not None or rmacros[m][1])]
    return missing


# ---- classifying macros -------------------------------------------------

def integer_macros(cc, inc, headers, names):
    """Names among names that are integer constant expressions in ours."""
    ok = list(names)
    for _ in range(len(names) + 1):
        src = includes_src(headers)
        first = src.count("\n") + 1
        src += "".join('_Static_assert(__builtin_classify_type(%s) == 1 '
                       '&& ((%s) || 1), "");\n' % (n, n) for n in ok)
        with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
            f.write(src)
            path = f.name
        try:
            r = run([cc, "-std=gnu11", "-fsyntax-only", "-w", "-I", inc, path])
        finally:
            os.unlink(path)
        if r.returncode == 0:
            return ok
        bad = set()
        for m in re.finditer(re.escape(path) + r":(\d+):\d+: error", r.stderr):
            k = int(m.group(1)) - first
            if 0 <= k < len(ok):
                bad.add(ok[k])
        if not bad:
            raise Fail(2, "cannot classify macros:\n" + r.stderr)
        ok = [n for n in ok if n not in bad]
    return ok


# ---- the dump program ---------------------------------------------------

def c_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gen_program(headers, aggs, enums, consts, int_macros):
    out = ["#include <stdio.h>", "#include <string.h>", "#include <stddef.h>",
           includes_src(headers),
           "#define MSZ(T, m) sizeof(((T *)0)->m)",
           "static void bits(const char *what, const unsigned char *p, size_t n)",
           "{",
           "\tlong lo = -1, hi = -1;",
           "\tfor (size_t i = 0; i < n * 8; i++)",
           "\t\tif (p[i / 8] & (1u << (i % 8))) { if (lo < 0) lo = (long)i; hi = (long)i; }",
           '\tprintf("%s bitoff=%ld width=%ld\\n", what, lo, hi - lo + 1);',
           "}",
           "int main(void)", "{"]
    for tag, members in aggs:
        out.append('\tprintf("%%s size=%%zu align=%%zu\\n", %s, sizeof(%s), _Alignof(%s));'
                   % (c_str(tag), tag, tag))
        for path, bf in members:
            what = c_str(tag + "." + path)
            if bf:
                out.append("\t{ union { %s o; unsigned char b[sizeof(%s)]; } u;"
                           " memset(&u, 0, sizeof(u)); u.o.%s = -1;"
                           " bits(%s, u.b, sizeof(u.b)); }" % (tag, tag, path, what))
            else:
                out.append('\tprintf("%%s off=%%zu size=%%zu class=%%d\\n", %s, offsetof(%s, %s),'
                           ' MSZ(%s, %s), __builtin_classify_type(((%s *)0)->%s));'
                           % (what, tag, path, tag, path, tag, path))
    for e in enums:
        out.append('\tprintf("%%s size=%%zu\\n", %s, sizeof(%s));' % (c_str(e), e))
    for c in consts:
        out.append('\tprintf("enumerator %%s = %%lld\\n", %s, (long long)(%s));'
                   % (c_str(c), c))
    for m in int_macros:
        out.append('\tprintf("define %%s = %%lld\\n", %s, (long long)(%s));'
                   % (c_str(m), m))
    out += ["\treturn 0;", "}", ""]
    return "\n".join(out)


def macro_table(cc, inc, headers):
    """name -> (params or None, normalized body) as seen through inc."""
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(includes_src(headers))
        src = f.name
    try:
        cmd = [cc, "-std=gnu11", "-E", "-dM", "-w"] + \
            (["-I", inc] if inc else []) + [src]
        r = run(cmd)
    finally:
        os.unlink(src)
    if r.returncode != 0:
        return None, r.stderr
    table = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^#define (\w+)(\(([^)]*)\))?\s*(.*)$", line)
        if m:
            params = None if m.group(2) is None else m.group(3).replace(" ", "")
            table[m.group(1)] = (params, "".join(m.group(4).split()))
    return table, ""


def dump(cc, inc, headers, program, other_macros, workdir, label):
    src = os.path.join(workdir, "abi_dump_%s.c" % label)
    exe = os.path.join(workdir, "abi_dump_%s" % label)
    with open(src, "w") as f:
        f.write(program)
    cmd = [cc, "-std=gnu11", "-w"] + (["-I", inc] if inc else []) + [src, "-o", exe]
    r = run(cmd)
    if r.returncode != 0:
        return None, r.stderr
    r = run([exe])
    if r.returncode != 0:
        return None, "dump program failed: " + r.stderr
    lines = r.stdout.splitlines()
    table, err = macro_table(cc, inc, headers)
    if table is None:
        return None, err
    for name in other_macros:
        if name not in table:
            lines.append("macro %s MISSING" % name)
            continue
        params, body = table[name]
        if params is None:
            lines.append("macro %s = %s" % (name, body))
        else:
            # function-like: the signature must exist; bodies legitimately differ
            lines.append("macro %s(%s)" % (name, params))
    return lines, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", required=True, help="our include/ directory")
    ap.add_argument("--reference", default="",
                    help="reference include dir (default: compiler default, /usr/include)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--show", action="store_true", help="print our dump")
    a = ap.parse_args()

    ref_verbs = os.path.join(a.reference or "/usr/include", "infiniband", "verbs.h")
    if not os.path.exists(ref_verbs):
        print("reference headers missing (%s): install the Debian packages "
              "libibverbs-dev and librdmacm-dev" % ref_verbs, file=sys.stderr)
        return 2
    workdir = a.workdir or tempfile.mkdtemp(prefix="goiwarp-abi-")
    os.makedirs(workdir, exist_ok=True)
    try:
        headers = public_headers(a.ours)
        if not headers:
            raise Fail(2, "no headers under " + a.ours)
        tokens, macros = our_text(a.cc, a.ours, headers)
        aggs, enums, consts = scan(tokens)
        valued = sorted(n for n, (p, body) in macros.items() if p is None and body)
        ints = integer_macros(a.cc, a.ours, headers, valued)
        other = sorted(n for n, (p, body) in macros.items()
                       if n not in ints and (p is not None or body))
        program = gen_program(headers, aggs, enums, consts, ints)
        missing = missing_names(a.cc, a.reference, a.ours, headers, aggs, enums,
                                consts, macros)

        mine, err = dump(a.cc, a.ours, headers, program, other, workdir, "ours")
        if mine is None:
            raise Fail(2, "dump against our headers failed:\n" + err)
        theirs, err = dump(a.cc, a.reference, headers, program, other, workdir,
                           "reference")
        if theirs is None:
            raise Fail(1, "ABI MISMATCH: the reference headers lack names our "
                          "headers define (or differ in kind):\n" + err)
        with open(os.path.join(workdir, "ours.txt"), "w") as f:
            f.write("\n".join(mine) + "\n")
        with open(os.path.join(workdir, "reference.txt"), "w") as f:
            f.write("\n".join(theirs) + "\n")
        if a.show:
            print("\n".join(mine))
        nmem = sum(len(m) for _, m in aggs)
        summary = ("%d headers, %d structs/unions, %d members, %d enums, "
                   "%d enumerators, %d integer macros, %d other macros"
                   % (len(headers), len(aggs), nmem, len(enums), len(consts),
                      len(ints), len(other)))
        if missing:
            print("ABI INCOMPLETE: rdma-core defines, our headers lack:\n  " +
                  "\n  ".join(missing))
            return 1
        if mine != theirs:
            sys.stdout.writelines(difflib.unified_diff(
                [l + "\n" for l in theirs], [l + "\n" for l in mine],
                "reference", "ours"))
            print("ABI MISMATCH (%s)" % summary)
            return 1
        print("ABI identical: " + summary)
        return 0
    except Fail as e:
        print(str(e), file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
