"""Preloaded by a fork server in tests/test_server_prestart.py: marks the file named by
$CB_TEST_ATEXIT_MARK at interpreter teardown, which a server that leaves by os._exit skips."""

import atexit
import os
from pathlib import Path

_MARK = os.environ.get("CB_TEST_ATEXIT_MARK")
if _MARK:
    atexit.register(lambda: Path(_MARK).write_text("teardown ran\n"))
