#!/usr/bin/env python3
"""One line on a test_cuda run (bench/device/device_run.sh, device_all.sh): its exit
status and gtest JSON report counted; PASS only when it exited 0, ran tests
and none failed or was skipped (TERN_REQUIRE_GPU=1 turns a missing GPU into
failures, so a skip here is a defect too).

  test_summary.py TESTS.json EXIT_STATUS REV
"""
import json
import sys

path, rc, rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    r = json.load(open(path))
    tests = [t for s in r["testsuites"] for t in s["testsuite"]]
    skipped = sum(t.get("result") == "SKIPPED" for t in tests)
    failed = sum(bool(t.get("failures")) for t in tests)
    ran = len(tests)
except (OSError, ValueError, KeyError) as e:
    ran = failed = skipped = -1
    print(f"no test report ({e})")
ok = rc == 0 and ran > 0 and failed == 0 and skipped == 0
print(f"rev {rev}: test_cuda exit {rc}; {ran} tests, {ran - failed - skipped} passed, "
      f"{failed} failed, {skipped} skipped (TERN_REQUIRE_GPU=1): {'PASS' if ok else 'FAIL'}")
