"""What the gateway's tests share: a stock client's refusal, and the digits' answers computed in this process."""
from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from shared.onnx_runtime import make_session, run_batch
from shared.settings import REPO_ROOT


def refusal(call) -> tuple[str, str]:
    """The status and reason of the refusal ``call`` (a tritonclient call) meets."""
    with pytest.raises(InferenceServerException) as refused:
        call()
    return refused.value.status(), refused.value.message()


def digits_in_process(variant: str, rows: np.ndarray) -> list[int]:
    """The top-1 class of each of ``rows``, by ``variant`` run here."""
    session = make_session(REPO_ROOT / "var" / "models" / f"{variant}.onnx")
    return run_batch(session, rows).argmax(axis=-1).tolist()
