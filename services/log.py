"""Logging of the service processes, configured once by each entry point (``__main__``).

Meridian's own loggers (``services.*``, ``shared.*``) log at INFO, libraries (kafka-python, aiokafka,
faust) at WARNING, all to stderr in one format. The handler sits on Meridian's two top loggers
themselves, so it survives faust's worker, which replaces the root logger's handlers when it starts.
"""
from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    for name in ("services", "shared"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        logger.propagate = False
