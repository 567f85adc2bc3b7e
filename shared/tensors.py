"""Tensor payloads <-> numpy arrays."""
from __future__ import annotations

import base64

import numpy as np

from schemas import TensorPayload


def decode(payload: TensorPayload) -> np.ndarray:
    return np.frombuffer(base64.b64decode(payload.data_b64), dtype=np.dtype(payload.dtype).newbyteorder("<")) \
        .reshape(payload.shape)


def encode(array: np.ndarray) -> TensorPayload:
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return TensorPayload(dtype=str(array.dtype.name), shape=list(array.shape),
                         data_b64=base64.b64encode(array.tobytes()).decode())


def decode_batch(payloads: list[TensorPayload | None]) -> np.ndarray | None:
    """One array of all queries' rows, or ``None`` when no query carries inputs (emulated work)."""
    if all(p is None for p in payloads):
        return None
    if any(p is None for p in payloads):
        raise ValueError("some queries of the batch carry inputs and some do not")
    arrays = [decode(p) for p in payloads]
    if len({a.shape[1:] for a in arrays}) > 1 or len({a.dtype for a in arrays}) > 1:
        raise ValueError("queries of one batch have different input shapes or dtypes")
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
