"""Run pytest and make "no tests ran" (exit 5) an explicit, explained failure.

pytest exits 5 when it collected nothing (a bad path, a broken conftest, a filter that
matches nothing). CI must neither pass on that nor fail without saying why.
"""

import subprocess
import sys

NO_TESTS_COLLECTED = 5

rc = subprocess.call([sys.executable, "-m", "pytest", *sys.argv[1:]])
if rc == NO_TESTS_COLLECTED:
    print("pytest_strict: pytest collected no tests (exit 5); check the test paths and -k/-m filters", file=sys.stderr)
    sys.exit(3)
sys.exit(rc)
