"""The one base class of user mistakes.

A UserError is a problem the user can fix (an unknown name, a bad option, a damaged or
foreign file): its message names the problem and the fix. The CLI catches UserError once
and exits 2 with that one line, never a traceback (harness/cli/main.py). Failures of a
case while measuring are not UserErrors: they are statuses in the record.

This module imports nothing, so every layer and the compiler/ and suites/ packages can
derive their errors from it. Classes keep their historical builtin base too
(`class X(UserError, ValueError)`), so code that catches ValueError still does.
"""


class UserError(Exception):
    """A mistake the user can fix; the CLI shows its message and exits 2."""
