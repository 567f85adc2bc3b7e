"""Turn a torch module into an ONNX file the registry accepts (it never unpickles torch checkpoints).

The developer exports in their own process, from a module they built, then registers the ``.onnx``.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

__all__ = ["export_torch_module"]

#: opset 17: read by onnxruntime 1.31 and what the digits family uses
OPSET_VERSION = 17


def export_torch_module(module, example_input, path: str | os.PathLike, *, input_name: str = "input",
                        output_name: str = "logits") -> Path:
    """Export `module` (eval mode) to ONNX at `path` with a dynamic batch axis on input and output.

    Uses the TorchScript exporter (``dynamo=False``), which needs no ``onnxscript``. `example_input` is one
    batch ``[N, *row_shape]``; every axis but the first is fixed in the exported graph. The result passes
    ``onnx.checker``.
    """
    import onnx
    import torch

    path = Path(path)
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated in torch 2.9+
        torch.onnx.export(module, (example_input,), str(path), dynamo=False, opset_version=OPSET_VERSION,
                          do_constant_folding=True, input_names=[input_name], output_names=[output_name],
                          dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}})
    onnx.checker.check_model(onnx.load(str(path)))
    return path
