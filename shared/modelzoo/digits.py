"""The ``digits`` model family: small MLPs and CNNs for scikit-learn's 8x8 handwritten digits.

The data set is scikit-learn's bundled ``load_digits`` (1797 grayscale 8x8 images, 10 classes; it ships
inside scikit-learn, nothing is downloaded). It is split once, stratified and with a fixed seed, into
train (60 %), validation (15 %, picks the best epoch) and a held-out test split (25 %, 450 images) that
gives each variant its accuracy and that the registry uses as validation set.

Every variant of the family takes the same input and gives the same output, so they are interchangeable
behind one family name:

- input ``input``: float32 ``[N, 1, 8, 8]``, pixel intensity divided by 16 (so in [0, 1]); see `preprocess`;
- output ``logits``: float32 ``[N, 10]``; the class is the argmax.

Variants (`VARIANTS`, ordered by compute) range from a one-hidden-layer MLP to a three-layer CNN with
about 3000x the multiply-accumulates. Training is deterministic: fixed seeds, one torch thread,
``torch.use_deterministic_algorithms(True)``; the same recipe on the same machine and software gives the
same weights and the same ONNX bytes. `recipe_sha256` fingerprints everything that determines the weights
(variant, data, software versions), so ``shared.modelzoo.build`` can skip training when nothing changed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import itertools
import json
import warnings
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "FAMILY",
    "INPUT_NAME",
    "INPUT_SHAPE",
    "NUM_CLASSES",
    "OUTPUT_NAME",
    "RECIPE_VERSION",
    "VARIANTS",
    "DigitsArch",
    "DigitsSplit",
    "DigitsVariant",
    "TrainRecipe",
    "TrainedVariant",
    "build_module",
    "export_onnx",
    "get_variant",
    "load_split",
    "onnx_metadata",
    "preprocess",
    "recipe_sha256",
    "save_split_npz",
    "train_variant",
]

FAMILY = "digits"
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (1, 8, 8)
NUM_CLASSES = 10
#: Bump when the training or export code changes in a way the variant fields do not capture.
RECIPE_VERSION = 1
#: ONNX opset of the exported models (onnxruntime 1.31 runs it).
OPSET_VERSION = 17
#: Metadata key in each exported ONNX model that holds its `recipe_sha256`.
RECIPE_METADATA_KEY = "meridian.recipe_sha256"

_SPLIT_SEED = 0
_TEST_FRACTION = 0.25
_VAL_FRACTION = 0.15  # of the whole data set


@dataclass(frozen=True)
class DigitsArch:
    """The shape of one network.

    ``kind="mlp"``: flatten, then one ReLU layer per entry of `hidden`, then a linear layer to 10 logits.
    ``kind="cnn"``: one 3x3 convolution (padding 1, no bias) + batch norm + ReLU per entry of `channels`,
    a 2x2 max pool after the layers listed in `pool_after`, then flatten, an optional ReLU layer of width
    `fc` (0: none), and a linear layer to 10 logits. Batch norm is folded into the convolutions at export.
    """

    kind: Literal["mlp", "cnn"]
    hidden: tuple[int, ...] = ()
    channels: tuple[int, ...] = ()
    pool_after: tuple[int, ...] = ()
    fc: int = 0


@dataclass(frozen=True)
class TrainRecipe:
    """How one variant is trained: Adam with a cosine learning-rate decay, best validation epoch kept."""

    epochs: int
    batch_size: int = 64
    lr: float = 3e-3
    #: Shift each training image by a random -1..1 pixels in x and y (zero fill). Helps CNNs; MLPs,
    #: which have no translation invariance, train better without it.
    shift_augment: bool = False
    seed: int = 0


@dataclass(frozen=True)
class DigitsVariant:
    """One member of the family: a name ``digits-<arch>-<size>``, an architecture and a training recipe."""

    name: str
    arch: DigitsArch
    recipe: TrainRecipe

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def macs(self) -> int:
        """Multiply-accumulates for one image (convolutions and linear layers)."""
        return _count_macs(self.arch)

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in build_module(self).parameters())


#: The family, ordered by compute (smallest first).
VARIANTS: tuple[DigitsVariant, ...] = (
    DigitsVariant(
        "digits-mlp-s",
        DigitsArch("mlp", hidden=(32,)),
        TrainRecipe(epochs=60),
    ),
    DigitsVariant(
        "digits-cnn-xs",
        DigitsArch("cnn", channels=(16,), pool_after=(0,)),
        TrainRecipe(epochs=30, shift_augment=True),
    ),
    DigitsVariant(
        "digits-cnn-s",
        DigitsArch("cnn", channels=(8, 16), pool_after=(1,)),
        TrainRecipe(epochs=30, shift_augment=True),
    ),
    DigitsVariant(
        "digits-cnn-m",
        DigitsArch("cnn", channels=(32, 64), pool_after=(1,), fc=128),
        TrainRecipe(epochs=20, shift_augment=True),
    ),
    DigitsVariant(
        "digits-cnn-l",
        DigitsArch("cnn", channels=(64, 128, 128), pool_after=(1,), fc=256),
        TrainRecipe(epochs=20, shift_augment=True),
    ),
)


def get_variant(name: str) -> DigitsVariant:
    """The variant of `VARIANTS` called `name`; ``ValueError`` listing the valid names otherwise."""
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ValueError(f"unknown digits variant {name!r}; valid names: {[v.name for v in VARIANTS]}")


# --------------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DigitsSplit:
    """The fixed train / validation / test split, inputs already preprocessed (`preprocess`)."""

    x_train: np.ndarray = field(repr=False)
    y_train: np.ndarray = field(repr=False)
    x_val: np.ndarray = field(repr=False)
    y_val: np.ndarray = field(repr=False)
    x_test: np.ndarray = field(repr=False)
    y_test: np.ndarray = field(repr=False)

    def sha256(self) -> str:
        """Fingerprint of all six arrays (values, dtypes and shapes)."""
        digest = hashlib.sha256()
        for array in (self.x_train, self.y_train, self.x_val, self.y_val, self.x_test, self.y_test):
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


def preprocess(images: np.ndarray) -> np.ndarray:
    """Raw ``load_digits`` images (values 0..16, shape ``[N, 8, 8]``) to model input ``[N, 1, 8, 8]``.

    Examples
    --------
    >>> preprocess(np.full((2, 8, 8), 16.0)).shape
    (2, 1, 8, 8)
    """
    images = np.asarray(images, dtype=np.float32)
    if images.shape[-2:] != INPUT_SHAPE[-2:]:
        raise ValueError(f"`images` must end in shape (8, 8), got {images.shape}")
    return (images.reshape(-1, *INPUT_SHAPE) / np.float32(16.0)).astype(np.float32)


def load_split() -> DigitsSplit:
    """Load scikit-learn's digits and split them 60/15/25 (stratified, seed 0) into train/val/test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = preprocess(digits.images)
    y = digits.target.astype(np.int64)
    x_rest, x_test, y_rest, y_test = train_test_split(
        x, y, test_size=_TEST_FRACTION, random_state=_SPLIT_SEED, stratify=y
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest,
        y_rest,
        test_size=_VAL_FRACTION / (1 - _TEST_FRACTION),
        random_state=_SPLIT_SEED,
        stratify=y_rest,
    )
    return DigitsSplit(x_train, y_train, x_val, y_val, x_test, y_test)


def save_split_npz(path, x: np.ndarray, y: np.ndarray) -> None:
    """Write a validation file in the registry's format: ``.npz`` with ``x`` (float32) and ``y`` (int64)."""
    np.savez(path, x=np.asarray(x, dtype=np.float32), y=np.asarray(y, dtype=np.int64))


# -------------------------------------------------------------------------------------------- the models


def _count_macs(arch: DigitsArch) -> int:
    if arch.kind == "mlp":
        widths = [64, *arch.hidden, NUM_CLASSES]
        return sum(a * b for a, b in itertools.pairwise(widths))
    macs, prev, side = 0, 1, 8
    for index, channels in enumerate(arch.channels):
        macs += prev * channels * 9 * side * side
        prev = channels
        if index in arch.pool_after:
            side //= 2
    widths = [prev * side * side, *([arch.fc] if arch.fc else []), NUM_CLASSES]
    return macs + sum(a * b for a, b in itertools.pairwise(widths))


def build_module(variant: DigitsVariant):
    """A freshly initialised ``torch.nn.Module`` for `variant` (initialised from ``torch``'s global RNG)."""
    from torch import nn

    arch = variant.arch
    layers: list[nn.Module] = [] if arch.kind == "cnn" else [nn.Flatten()]
    if arch.kind == "mlp":
        prev = 64
        for width in arch.hidden:
            layers += [nn.Linear(prev, width), nn.ReLU()]
            prev = width
    elif arch.kind == "cnn":
        prev, side = 1, 8
        for index, channels in enumerate(arch.channels):
            layers += [
                nn.Conv2d(prev, channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels),
                nn.ReLU(),
            ]
            prev = channels
            if index in arch.pool_after:
                layers.append(nn.MaxPool2d(2))
                side //= 2
        layers.append(nn.Flatten())
        prev = prev * side * side
        if arch.fc:
            layers += [nn.Linear(prev, arch.fc), nn.ReLU()]
            prev = arch.fc
    else:
        raise ValueError(f"`arch.kind` must be 'mlp' or 'cnn', got {arch.kind!r}")
    layers.append(nn.Linear(prev, NUM_CLASSES))
    return nn.Sequential(*layers)


# ------------------------------------------------------------------------------------------------ training


@dataclass(frozen=True)
class TrainedVariant:
    """A trained network (eval mode) with the epoch kept, its validation loss and accuracies (in torch)."""

    variant: DigitsVariant
    module: object = field(repr=False)  # torch.nn.Module; typed loosely so importing needs no torch
    best_epoch: int
    val_loss: float
    val_accuracy: float
    test_accuracy: float


def _set_deterministic() -> None:
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def _shift(batch, generator):
    """Shift each image by a random -1..1 pixels along both axes (zero fill), per sample."""
    import torch

    num = batch.shape[0]
    padded = torch.nn.functional.pad(batch, (1, 1, 1, 1))
    offsets = torch.randint(0, 3, (num, 2), generator=generator)
    shifted = torch.empty_like(batch)
    for dy in range(3):
        for dx in range(3):
            mask = (offsets[:, 0] == dy) & (offsets[:, 1] == dx)
            shifted[mask] = padded[mask, :, dy : dy + 8, dx : dx + 8]
    return shifted


def _evaluate(module, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy and top-1 accuracy of `module` (eval mode) on ``(x, y)``."""
    import torch

    with torch.no_grad():
        logits = module(torch.from_numpy(x))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)).item()
    return loss, float((logits.argmax(dim=1).numpy() == y).mean())


def train_variant(variant: DigitsVariant, split: DigitsSplit | None = None) -> TrainedVariant:
    """Train `variant` deterministically and keep the weights of its best validation epoch.

    Adam (``recipe.lr``) with cosine decay over ``recipe.epochs`` epochs of shuffled mini-batches; after
    each epoch the validation cross-entropy is measured, and the first epoch with the lowest one is kept
    (the loss is a finer criterion than the accuracy, which on 270 validation images ties often).
    Sets ``torch.set_num_threads(1)`` and ``torch.use_deterministic_algorithms(True)`` for the process.
    """
    import torch
    from torch import nn

    _set_deterministic()
    split = split if split is not None else load_split()
    recipe = variant.recipe
    torch.manual_seed(recipe.seed)
    module = build_module(variant)
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=recipe.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=recipe.epochs)
    x_train, y_train = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)

    best_loss, best_epoch, best_state = float("inf"), -1, None
    for epoch in range(recipe.epochs):
        module.train()
        order = torch.randperm(len(x_train), generator=generator)
        for start in range(0, len(order), recipe.batch_size):
            index = order[start : start + recipe.batch_size]
            batch = x_train[index]
            if recipe.shift_augment:
                batch = _shift(batch, generator)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(module(batch), y_train[index])
            loss.backward()
            optimizer.step()
        schedule.step()
        module.eval()
        loss, _ = _evaluate(module, split.x_val, split.y_val)
        if loss < best_loss:
            best_loss, best_epoch, best_state = loss, epoch, copy.deepcopy(module.state_dict())
    module.load_state_dict(best_state)
    module.eval()
    return TrainedVariant(
        variant=variant,
        module=module,
        best_epoch=best_epoch,
        val_loss=best_loss,
        val_accuracy=_evaluate(module, split.x_val, split.y_val)[1],
        test_accuracy=_evaluate(module, split.x_test, split.y_test)[1],
    )


# ------------------------------------------------------------------------------------------ export, hash


def recipe_sha256(variant: DigitsVariant, split: DigitsSplit) -> str:
    """Fingerprint of everything that determines `variant`'s exported bytes.

    Covers the variant (architecture and recipe), the split's data, `RECIPE_VERSION`, the opset and the
    versions of torch, onnx and numpy (kernels and the exporter may change results across versions).
    """
    import onnx
    import torch

    payload = {
        "variant": asdict(variant),
        "data": split.sha256(),
        "recipe_version": RECIPE_VERSION,
        "opset": OPSET_VERSION,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def onnx_metadata(model_bytes: bytes) -> dict[str, str]:
    """The ``metadata_props`` of a serialized ONNX model as a dict."""
    import onnx

    return {prop.key: prop.value for prop in onnx.load_from_string(model_bytes).metadata_props}


def export_onnx(module, *, metadata: dict[str, str] | None = None) -> bytes:
    """Export a digits network to ONNX bytes with a dynamic batch axis.

    The graph has input ``input`` float32 ``[N, 1, 8, 8]`` and output ``logits`` float32 ``[N, 10]``;
    `metadata` goes into the model's ``metadata_props`` (sorted by key, so the bytes are deterministic).
    Uses the TorchScript exporter (``dynamo=False``), which needs no ``onnxscript``.
    """
    import onnx
    import torch

    module.eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated in torch 2.9+
        torch.onnx.export(
            module,
            (torch.zeros(1, *INPUT_SHAPE),),
            buffer,
            dynamo=False,
            opset_version=OPSET_VERSION,
            do_constant_folding=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
        )
    model = onnx.load_from_string(buffer.getvalue())
    for key, value in sorted((metadata or {}).items()):
        model.metadata_props.add(key=key, value=str(value))
    onnx.checker.check_model(model)
    return model.SerializeToString()
