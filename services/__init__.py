"""Meridian's processes, each run as ``python -m services.<name>``."""
