"""What every command shares: its one-line error, its description for ``--help``, and a quick look for the
broker before a Kafka client would retry for long and log every attempt."""
from __future__ import annotations

import socket


class CommandError(Exception):
    """Printed as ``meridian <command>: <message>``; the process exits with ``code``."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def summary(doc: str | None) -> str:
    """A module docstring's first paragraph as ``--help`` shows it (no reST quoting)."""
    return (doc or "").split("\n\n")[0].replace("``", "")


def require_broker(bootstrap: str, *, timeout_s: float = 5.0) -> None:
    """Return once some address of ``bootstrap`` (``host:port[,host:port...]``) accepts a connection;
    `CommandError` within ``timeout_s`` if none does."""
    addresses = [a.strip().rsplit(":", 1) for a in bootstrap.split(",") if a.strip()]
    for host, port in addresses:
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s / len(addresses)).close()
            return
        except (OSError, ValueError):
            continue
    raise CommandError(f"no Kafka broker at {bootstrap}: is the stack up? (`meridian stack up`)")
