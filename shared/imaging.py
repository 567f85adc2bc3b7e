"""Encoded images (JPEG, PNG) to a model's input, as the variant that serves them was trained.

A worker prepares each query's images itself, with the `ImagePreprocessing` recorded beside the
variant's profile, so one query of images may be served by any variant of its family whatever its input
resolution (EfficientNet-Lite0 at 224 pixels, Lite2 at 260): the scheduler can move it between them.
Pillow decodes and resizes (it is already the runtime's image library, matplotlib's own); torch is not
needed to serve. The model zoo's `preprocess` is this same code, so a model measured or checked in
process sees the inputs a worker gives it.

Memory is bounded before anything is decoded: an image's header must say at most `MAX_IMAGE_PIXELS`
(a 24-megapixel photograph: 72 MB once decoded to RGB), and a worker decodes one image at a time.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image

from shared.profiles.format import ImagePreprocessing

#: the most pixels an image may have (its header is read before its pixels are)
MAX_IMAGE_PIXELS = 24_000_000
FORMATS = ("JPEG", "PNG")
#: modes decoded to 3-channel RGB as they stand (YCbCr is how JPEG stores colour; Pillow gives RGB)
_RGB_MODES = {"RGB", "YCbCr"}
_CHANNELS = {"1": 1, "L": 1, "I": 1, "I;16": 1, "F": 1, "LA": 2, "La": 2, "RGBA": 4, "RGBa": 4, "CMYK": 4, "P": 1}


class ImageError(ValueError):
    """An image that cannot be served, and why (its query is answered ``error`` with this reason)."""


def prepare(encoded: bytes, spec: ImagePreprocessing) -> np.ndarray:
    """One encoded image as the model's input row: float32 ``[3, size, size]``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(encoded), formats=FORMATS)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise ImageError(f"the image has more than {MAX_IMAGE_PIXELS:,} pixels (a decompression bomb?)") from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise ImageError(f"not a JPEG or PNG image ({_first_line(exc)})") from None
    with image:
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ImageError(f"the image is {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS:,} a worker "
                             f"decodes")
        if image.mode not in _RGB_MODES:
            channels = _CHANNELS.get(image.mode, "an unknown number of")
            raise ImageError(f"the {image.format} image has mode {image.mode} ({channels} channel(s)); the model "
                             f"takes 3-channel RGB images")
        try:
            image.load()
            pixels = image if image.mode == "RGB" else image.convert("RGB")
        except (OSError, SyntaxError, ValueError) as exc:
            raise ImageError(f"the {image.format} image cannot be decoded ({_first_line(exc)})") from None
        return prepare_pixels(pixels, spec)


def prepare_pixels(image: Image.Image | np.ndarray, spec: ImagePreprocessing) -> np.ndarray:
    """An RGB image (Pillow, or uint8 ``[H, W, 3]``) as the model's input row: float32 ``[3, size, size]``."""
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[-1] != 3:
            raise ImageError(f"pixels must be [H, W, 3] RGB, got shape {image.shape}")
        image = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), mode="RGB")
    width, height = image.size
    crop = max(1, round(spec.size / (spec.size + spec.crop_padding) * min(width, height)))
    left, top = (width - crop) // 2, (height - crop) // 2
    cropped = image.crop((left, top, left + crop, top + crop))  # first: a resize's filter would read past a box
    resized = cropped.resize((spec.size, spec.size), Image.Resampling.BILINEAR)
    row = (np.asarray(resized, dtype=np.float32) - spec.mean) / spec.std
    return np.ascontiguousarray(row.transpose(2, 0, 1))


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
