#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sums meson test logs (testlog.json) and pytest JUnit XML files into one closing line,
"N passed, N failed[, N skipped]", and exits 1 if anything failed or nothing ran. Before it,
the whole message of every pytest failure (pytest's --tb=line printed only its first line),
each distinct message once: a CI log then holds what is needed to tell why."""
import json
import sys
import xml.etree.ElementTree as ET

MESSAGE_LINES = 80

passed = failed = skipped = 0
failures = {}  # message -> the tests that failed with it
for path in sys.argv[1:]:
    try:
        if path.endswith(".json"):
            with open(path) as f:
                for line in f:
                    result = json.loads(line).get("result")
                    if result in ("OK", "EXPECTEDFAIL"):
                        passed += 1
                    elif result == "SKIP":
                        skipped += 1
                    else:
                        failed += 1
        else:
            root = ET.parse(path).getroot()
            for suite in root.iter("testsuite"):
                tests = int(suite.get("tests", 0))
                f = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
                s = int(suite.get("skipped", 0))
                passed += tests - f - s
                failed += f
                skipped += s
            for case in root.iter("testcase"):
                for bad in list(case.iter("failure")) + list(case.iter("error")):
                    message = bad.get("message") or bad.text or "(no message)"
                    failures.setdefault(message, []).append(f"{case.get('classname')}::{case.get('name')}")
    except (OSError, ValueError, ET.ParseError) as e:
        print(f"test-summary: cannot read {path}: {e}", file=sys.stderr)
        failed += 1

for message, cases in failures.items():
    print(f"=== {len(cases)} failed: {', '.join(cases[:5])}{' ...' if len(cases) > 5 else ''}")
    lines = message.splitlines()
    print("\n".join(lines[:MESSAGE_LINES]))
    if len(lines) > MESSAGE_LINES:
        print(f"... ({len(lines) - MESSAGE_LINES} more lines)")

line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed or passed == 0 else 0)
