#!/usr/bin/env python3
"""Counts test cases in meson's JUnit log (gtest cases one by one, other tests as one
case each) and prints the plain closing line: 'N passed, N failed, N skipped'."""
import re
import sys
import xml.etree.ElementTree as ET

try:
    with open(sys.argv[1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    # Test output copied into the log may hold terminal colour codes: not legal XML 1.0.
    root = ET.fromstring(re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text))
except (OSError, ET.ParseError) as e:
    # No log means the build or the test run itself broke: that is one failure, not zero.
    print(f"no test log ({e})", file=sys.stderr)
    print("0 passed, 1 failed, 0 skipped")
    sys.exit(0)
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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
