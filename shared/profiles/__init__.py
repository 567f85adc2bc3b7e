"""Latency/accuracy profiles in one documented format (see `format.py`)."""
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

__all__ = ["DeviceType", "ProfileSet", "VariantProfile"]
