"""What every command shares: its one-line error, and its description for ``--help``."""
from __future__ import annotations


class CommandError(Exception):
    """Printed as ``meridian <command>: <message>``; the process exits with ``code``."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def summary(doc: str | None) -> str:
    """A module docstring's first paragraph as ``--help`` shows it (no reST quoting)."""
    return (doc or "").split("\n\n")[0].replace("``", "")
