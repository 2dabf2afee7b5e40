"""The one exception type that user-facing code raises for bad input (CLI turns it into exit 2)."""


class SpecsimError(ValueError):
    """Bad input or an unanswerable question; the message is one line naming the bad value."""
