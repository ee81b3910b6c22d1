"""The one exception type for user mistakes.

Anything the user can fix (a missing file, a bad row, an unknown task or
encoder, a wrong option) raises :class:`PalUserError` with a message that names
the problem and the fix. The CLI prints that message alone, without a
traceback, and exits with status 2.
"""

from __future__ import annotations


class PalUserError(ValueError):
    """A mistake in the user's input or configuration, with a message that says how to fix it."""
