"""Meridian's wire contracts: one pydantic model per topic, see `messages.py`."""
from schemas.messages import *  # noqa: F403
from schemas.messages import __all__  # noqa: F401
