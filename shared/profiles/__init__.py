"""Latency/accuracy profiles in one documented format (see `format.py`)."""
from shared.profiles.format import DeviceType, ImagePreprocessing, ProfileSet, VariantProfile

__all__ = ["DeviceType", "ImagePreprocessing", "ProfileSet", "VariantProfile"]
