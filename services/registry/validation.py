"""Checks a registration must pass before any variant is generated, each failing with a clear reason.

The model: decoded size within `MAX_MODEL_BYTES`, parses as ONNX, passes ``onnx.checker``, loads in
onnxruntime, has one float32 input ``[N, *input_shape]`` with a dynamic batch axis N, and maps a
2-row batch to 2 rows of class scores. The validation set: decoded size within
`MAX_VALIDATION_BYTES`, an ``.npz`` whose unpacked arrays stay within `MAX_UNPACKED_BYTES` (a small
archive can inflate a lot), read with ``allow_pickle=False`` (object arrays are refused, never
unpickled), holding numeric ``x`` of shape ``[n, *input_shape]`` and integer labels ``y`` of shape
``[n]``.
"""
from __future__ import annotations

import base64
import binascii
import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas import MAX_MODEL_BYTES, MAX_VALIDATION_BYTES, RegisterModel
from shared.onnx_runtime import make_session, run_batch

__all__ = ["MAX_UNPACKED_BYTES", "RegistrationRejected", "ValidatedRegistration", "validate_registration"]

#: the most bytes the validation archive's arrays may unpack to
MAX_UNPACKED_BYTES = 64 * 1024 * 1024


class RegistrationRejected(Exception):
    """The registration cannot be accepted; ``str(exc)`` is the reason the developer sees."""


@dataclass(frozen=True)
class ValidatedRegistration:
    model_bytes: bytes
    x: np.ndarray
    y: np.ndarray


def _decode(text: str, limit: int, what: str) -> bytes:
    if len(text) * 3 // 4 > limit + 2:
        raise RegistrationRejected(f"{what} exceeds the {limit}-byte limit")
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise RegistrationRejected(f"{what} is not valid base64: {exc}") from None
    if len(data) > limit:
        raise RegistrationRejected(f"{what} of {len(data)} bytes exceeds the {limit}-byte limit")
    if not data:
        raise RegistrationRejected(f"{what} is empty")
    return data


def check_model(model_bytes: bytes, input_shape: Sequence[int]) -> None:
    """Raise `RegistrationRejected` unless the model is valid ONNX that runs with the declared input."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_from_string(model_bytes)
        onnx.checker.check_model(model)
    except (DecodeError, onnx.checker.ValidationError, ValueError, RuntimeError) as exc:
        raise RegistrationRejected(f"model is not a valid ONNX model: {type(exc).__name__}: {exc}"[:1000]) from None
    try:
        session = make_session(model_bytes)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise RegistrationRejected(f"onnxruntime cannot load the model: {exc}"[:1000]) from None
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise RegistrationRejected(f"the model must have exactly one input, it has {len(inputs)}")
    spec = inputs[0]
    if spec.type != "tensor(float)":
        raise RegistrationRejected(f"the model input {spec.name!r} must be float32, it is {spec.type}")
    dims = list(spec.shape)
    if isinstance(dims[0] if dims else None, int):
        raise RegistrationRejected(f"the model input {spec.name!r} has a fixed batch axis ({dims}); export it "
                                   f"with a dynamic batch axis")
    if dims[1:] != list(input_shape):
        raise RegistrationRejected(f"the model input {spec.name!r} has shape {dims}, which does not match the "
                                   f"declared `input_shape` [N, {', '.join(map(str, input_shape))}]")
    try:
        output = run_batch(session, np.zeros((2, *input_shape), dtype=np.float32))
    except Exception as exc:  # noqa: BLE001
        raise RegistrationRejected(f"the model fails on a batch of 2 rows: {exc}"[:1000]) from None
    if output.ndim != 2 or output.shape[0] != 2:
        raise RegistrationRejected(f"the model's first output must be class scores [N, classes]; a 2-row batch "
                                   f"gave shape {list(output.shape)}")


def read_validation(npz_bytes: bytes, input_shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(x float32, y int64)`` from an ``.npz`` archive; raises `RegistrationRejected` with the reason."""
    try:
        with zipfile.ZipFile(io.BytesIO(npz_bytes)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        raise RegistrationRejected("validation set is not an .npz archive") from None
    if unpacked > MAX_UNPACKED_BYTES:
        raise RegistrationRejected(
            f"validation set unpacks to {unpacked} bytes, over the {MAX_UNPACKED_BYTES}-byte limit")
    arrays = {}
    try:
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as npz:
            missing = {"x", "y"} - set(npz.files)
            if missing:
                raise RegistrationRejected(f"validation set lacks array(s) {sorted(missing)}; it needs `x` and `y`")
            for name in ("x", "y"):
                arrays[name] = npz[name]
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise RegistrationRejected("validation set holds Python objects (pickled data); only numeric arrays "
                                       "are accepted") from None
        raise RegistrationRejected(f"validation set cannot be read: {exc}"[:1000]) from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise RegistrationRejected(f"validation set cannot be read: {exc}"[:1000]) from None
    x, y = arrays["x"], arrays["y"]
    if x.dtype.kind not in "fiu" or list(x.shape[1:]) != list(input_shape) or len(x) == 0:
        row = ", ".join(map(str, input_shape))
        raise RegistrationRejected(f"validation `x` must be numeric of shape [n >= 1, {row}], got {x.dtype} "
                                   f"{list(x.shape)}")
    if y.dtype.kind not in "iu" or y.shape != (len(x),) or (y < 0).any():
        raise RegistrationRejected(f"validation `y` must be non-negative integer labels of shape [{len(x)}], got "
                                   f"{y.dtype} {list(y.shape)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise RegistrationRejected("validation `x` holds NaN or infinite values")
    return x, y.astype(np.int64)


def validate_registration(command: RegisterModel) -> ValidatedRegistration:
    """Every check of the module docstring, cheapest first."""
    model_bytes = _decode(command.model_onnx_b64, MAX_MODEL_BYTES, "model")
    npz_bytes = _decode(command.validation_npz_b64, MAX_VALIDATION_BYTES, "validation set")
    x, y = read_validation(npz_bytes, command.input_shape)
    check_model(model_bytes, command.input_shape)
    return ValidatedRegistration(model_bytes, x, y)
