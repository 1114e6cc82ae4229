"""make test's entry to the Python tests: python3 python/tests/run.py [BUILD]

Runs pytest on python/tests against BUILD/libdcpattn.so and ends with the line the test
runner sums, "N passed, N failed" (skips are said on a line of their own). Without pytest
it says so and counts nothing."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    try:
        import pytest
    except ImportError:
        print("skipped: pytest is not installed (python3 -m pip install pytest)")
        print("0 passed, 0 failed")
        return 0
    lib = os.path.abspath(os.path.join(build, "libdcpattn.so"))
    if os.path.isfile(lib):
        os.environ.setdefault("DCPATTN_LIBRARY", lib)

    class Count:
        passed = failed = 0
        skipped = []

        def pytest_runtest_logreport(self, report):
            if report.when == "call" and report.passed:
                self.passed += 1
            elif report.failed:  # a failed setup or teardown counts too
                self.failed += 1
            elif report.skipped:
                self.skipped.append(report.longrepr[2] if isinstance(report.longrepr, tuple) else "")

        def pytest_collectreport(self, report):
            if report.failed:
                self.failed += 1
            elif report.skipped:  # a module skipped as a whole (no GPU, no PyTorch)
                self.skipped.append(report.longrepr[2] if isinstance(report.longrepr, tuple) else "")

    count = Count()
    rc = pytest.main(["-q", "-p", "no:cacheprovider", HERE], plugins=[count])
    if count.skipped:
        reasons = sorted(set(r.replace("Skipped: ", "") for r in count.skipped))
        print("skipped: %d (%s)" % (len(count.skipped), "; ".join(reasons)))
    if rc not in (0, 1) and not count.failed:  # usage error, internal error, nothing collected
        count.failed = 1
    print("%d passed, %d failed" % (count.passed, count.failed))
    return 1 if count.failed else 0


if __name__ == "__main__":
    sys.exit(main())
