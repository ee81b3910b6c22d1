"""The one exception type for user mistakes: the CLI prints its message alone and exits with status 2."""

from __future__ import annotations


class PalUserError(ValueError):
    """A mistake in the user's input or configuration, with a message that says how to fix it."""
