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


class HarnessError(Exception):
    """The harness could not do its job (I/O error, disk full, corrupt store, nothing to
    compare, nothing measured); the CLI shows its message and exits 3.

    Distinct from UserError (exit 2: the user can fix the input) and from a measured failure
    (exit 1: a case failed or a regression was found), so CI never reads a broken runner
    as a regression.
    """
