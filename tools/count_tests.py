#!/usr/bin/env python3
"""Counts test cases in one or more JUnit logs (meson's: gtest cases one by one, other tests
as one case each; tests/fuzz/run_fuzz.sh's: one case per fuzz target) and prints the plain
closing line over all of them: 'N passed, N failed, N skipped'.
    count_tests.py build/meson-logs/testlog.junit.xml [MORE.junit.xml ...]
A log that is missing or unreadable counts as one failure: the build or the run that should
have written it broke."""
import re
import sys
import xml.etree.ElementTree as ET


def count(path):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        # Test output copied into the log may hold terminal colour codes: not legal XML 1.0.
        root = ET.fromstring(re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text))
    except (OSError, ET.ParseError) as e:
        print(f"no test log {path} ({e})", file=sys.stderr)
        return 0, 1, 0
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    # A suite that crashed before reporting its cases shows up as a failed suite with none.
    for suite in root.iter("testsuite"):
        if int(suite.get("failures", 0)) + int(suite.get("errors", 0)) > 0 and suite.find("testcase") is None:
            failed += 1
    return passed, failed, skipped


paths = sys.argv[1:] or ["build/meson-logs/testlog.junit.xml"]
totals = [sum(c) for c in zip(*(count(p) for p in paths))]
print(f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped")
