"""Encoded images prepared as a variant's profile says (`shared.imaging`), and refused with a reason when
they cannot be: never decoded past the pixel bound."""
from __future__ import annotations

import numpy as np
import pytest

from services.drills.hostile_images import bomb_png, encoded
from shared import imaging
from shared.profiles import ImagePreprocessing

SPEC = ImagePreprocessing(size=32, crop_padding=8, mean=127.0, std=128.0)


def _photo(height: int = 120, width: int = 180) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_image_becomes_one_row_of_the_models_input(fmt: str) -> None:
    row = imaging.prepare(encoded(_photo(), fmt), SPEC)
    assert row.shape == (3, 32, 32) and row.dtype == np.float32
    assert -1.0 <= row.min() and row.max() <= 1.0


def test_a_png_is_prepared_exactly_as_its_pixels_are() -> None:
    pixels = _photo()
    assert np.array_equal(imaging.prepare(encoded(pixels, "PNG"), SPEC), imaging.prepare_pixels(pixels, SPEC))


def test_the_crop_is_central_and_scaled_as_the_spec_says() -> None:
    pixels = np.zeros((40, 80, 3), np.uint8)
    pixels[:, 20:60] = 255  # the central square of the shorter side is white, the sides black
    row = imaging.prepare_pixels(pixels, ImagePreprocessing(size=8, crop_padding=0, mean=0.0, std=255.0))
    assert np.allclose(row, 1.0)
    padded = imaging.prepare_pixels(pixels, ImagePreprocessing(size=8, crop_padding=8, mean=0.0, std=255.0))
    assert np.allclose(padded, 1.0)  # a crop of 8/16 of 40 rows stays inside the white square


@pytest.mark.parametrize(("encoded", "reason"), [
    (bomb_png(30_000, 30_000), "pixels (a decompression bomb?)"),
    (bomb_png(6_000, 5_000), "6000x5000 pixels, more than the 24,000,000"),
    (encoded(_photo(), "JPEG")[:1200], "the JPEG image cannot be decoded (image file is truncated"),
    (encoded(np.zeros((20, 20, 4), np.uint8), "PNG"), "mode RGBA (4 channel(s))"),
    (encoded(np.zeros((20, 20), np.uint8), "PNG"), "mode L (1 channel(s))"),
    (b"GIF89a not an image we take", "not a JPEG or PNG image"),
    (b"", "not a JPEG or PNG image"),
])
def test_an_image_that_cannot_be_served_is_refused_with_a_reason(encoded: bytes, reason: str) -> None:
    with pytest.raises(imaging.ImageError, match=reason.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        imaging.prepare(encoded, SPEC)
