#!/usr/bin/env python3
"""check.py EXPECTED TESTS_DIR [run_tests.py arguments]: runs rdma-core's
Python suite (TESTS_DIR is its unpacked tests/ folder) as run_tests.py does,
records each test's outcome and compares it with EXPECTED. Every test passes
unless EXPECTED lists it (fnmatch pattern on the test id) as `skip` (the
suite must skip it), `xfail` (it must fail or error) or `flaky` (pass, fail
or error: a known race, with its reason). Any other outcome,
a listed test that passes, or a pattern that matches nothing is a mismatch:
exit 1. Prints the totals (pass/fail/error/skip)."""
import fnmatch
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


def load_expected(path):
    rules = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            pattern, kind, reason = (line.split(None, 2) + [''])[:3]
            if kind not in ('skip', 'xfail', 'flaky') or not reason:
                sys.exit(f'{path}:{n}: want "PATTERN skip|xfail|flaky REASON"')
            rules.append([pattern, kind, reason, 0])
    return rules


class Recorder(unittest.TextTestResult):
    outcomes = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[test.id()] = 'pass'

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = 'fail'

    def addError(self, test, err):
        super().addError(test, err)
        # setUpClass errors come as a _ErrorHolder without a test id
        self.outcomes[getattr(test, 'id', lambda: str(test))()] = 'error'

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[test.id()] = 'skip'


def main():
    expected, tests_dir = sys.argv[1], sys.argv[2]
    rules = load_expected(expected)
    sys.argv[1:] = sys.argv[3:]
    sys.path.insert(0, tests_dir)
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    parser.parse_args()
    prog = unittest.main(module=tests, exit=False,
                         testRunner=unittest.TextTestRunner(resultclass=Recorder, verbosity=2))
    totals = {k: 0 for k in ('pass', 'fail', 'error', 'skip')}
    bad = []
    for tid, got in sorted(Recorder.outcomes.items()):
        totals[got] += 1
        rule = next((r for r in rules if fnmatch.fnmatchcase(tid, r[0])), None)
        want = 'pass'
        if rule:
            rule[3] += 1
            want = rule[1]
        ok = got == want or (want == 'xfail' and got in ('fail', 'error')) or \
            (want == 'flaky' and got != 'skip')
        if not ok:
            why = f' (listed: {rule[2]})' if rule else ''
            bad.append(f'{tid}: {got}, expected {want}{why}')
    for r in rules:
        if r[3] == 0:
            bad.append(f'pattern {r[0]} matches no test: remove it')
    print('rdma-core suite: %(pass)d pass, %(fail)d fail, %(error)d error, %(skip)d skip' % totals)
    if not prog.result.testsRun:
        bad.append('no test ran')
    for b in bad:
        print('MISMATCH', b)
    sys.exit(1 if bad else 0)


main()
