"""The exception user-facing code raises for bad input (CLI: exit 2), and the warning it prints."""

from __future__ import annotations

import warnings


class SpecsimError(ValueError):
    """Bad input or an unanswerable question; the message is one line naming the bad value."""


class SpecsimWarning(UserWarning):
    """Something suspicious but harmless to the result; the CLI prints it as one ``specsim: warning:``
    line."""


def warn(message: str) -> None:
    """Issue a :class:`SpecsimWarning` (shown once per message by Python's default filter)."""
    warnings.warn(message, SpecsimWarning, stacklevel=2)
