"""Real photographs for the image models, made from those scikit-image ships (nothing is downloaded).

Three of its bundled photographs show one thing a person names at once, and an ImageNet class says the
same: Chelsea the cat, a cup of coffee, a rocket on its launch pad. `photographs` encodes them as JPEG;
`augmented` makes as many more as a load needs (mirrored, cropped and rescaled, then encoded), each still
showing its subject, so that a load of images is not one file repeated.
"""
from __future__ import annotations

import io
from collections.abc import Collection
from typing import NamedTuple

import numpy as np
from PIL import Image


class Photograph(NamedTuple):
    name: str
    #: what a person would call it
    subject: str
    #: the ImageNet-1k classes that name it (a cat photograph gets a cat class)
    classes: Collection[int]
    jpeg: bytes


#: scikit-image's name -> (subject, ImageNet classes): 281-285 tabby, tiger cat, Persian, Siamese, Egyptian
#: cat; 967 espresso, 968 cup, 504 coffee mug; 657 missile, 744 projectile, 812 space shuttle
SUBJECTS: dict[str, tuple[str, frozenset[int]]] = {
    "chelsea": ("a cat", frozenset(range(281, 286))),
    "coffee": ("a cup of coffee", frozenset({967, 968, 504})),
    "rocket": ("a rocket", frozenset({657, 744, 812})),
}

#: the ImageNet-1k names of `SUBJECTS`' classes (no label file ships offline; these are the standard ones)
CLASS_NAMES = {281: "tabby", 282: "tiger cat", 283: "Persian cat", 284: "Siamese cat", 285: "Egyptian cat",
               504: "coffee mug", 967: "espresso", 968: "cup", 657: "missile", 744: "projectile",
               812: "space shuttle"}


def class_name(index: int) -> str:
    """An ImageNet class as a person reads it: its name if it is one of `SUBJECTS`', else its number."""
    return CLASS_NAMES.get(index, f"ImageNet class {index}")


def pixels(name: str) -> np.ndarray:
    """The bundled photograph ``name`` as RGB uint8 ``[H, W, 3]`` (scikit-image, a test dependency)."""
    from skimage import data

    return getattr(data, name)()


def encode_jpeg(image: np.ndarray, *, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def photographs(*, quality: int = 90) -> list[Photograph]:
    """The three photographs, as JPEG files."""
    return [Photograph(name, subject, classes, encode_jpeg(pixels(name), quality=quality))
            for name, (subject, classes) in SUBJECTS.items()]


def augmented(count: int, *, seed: int = 0, quality: int = 90) -> list[Photograph]:
    """``count`` JPEGs, each a photograph mirrored or not, cropped to 80-100% of each side and rescaled by
    0.8-1.25: the same subjects, other files."""
    rng = np.random.default_rng(seed)
    originals = {name: pixels(name) for name in SUBJECTS}
    made = []
    for index in range(count):
        name = list(SUBJECTS)[index % len(SUBJECTS)]
        image = originals[name]
        if rng.random() < 0.5:
            image = image[:, ::-1]
        height, width = image.shape[:2]
        keep_h, keep_w = (int(side * rng.uniform(0.8, 1.0)) for side in (height, width))
        top, left = rng.integers(0, height - keep_h + 1), rng.integers(0, width - keep_w + 1)
        cropped = Image.fromarray(np.ascontiguousarray(image[top:top + keep_h, left:left + keep_w]))
        scale = rng.uniform(0.8, 1.25)
        resized = cropped.resize((max(1, round(keep_w * scale)), max(1, round(keep_h * scale))), Image.Resampling.BILINEAR)
        subject, classes = SUBJECTS[name]
        made.append(Photograph(name, subject, classes, encode_jpeg(np.asarray(resized), quality=quality)))
    return made
