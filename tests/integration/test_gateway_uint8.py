"""UINT8 rows through the front door, driven by tritonclient's HTTP and gRPC clients unchanged: a model that takes
them (digits-cnn-xs behind a Cast of the digits' raw 0-16 pixels, profiled as it) served by a real onnxruntime
worker, each answer equal to digits-cnn-xs run in-process. A module of its own: its scheduler serves its own
application, and must not share the queries topic's consumer group with another module's."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import tritonclient.grpc as oip_grpc
import tritonclient.http as oip

from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.profiles.format import ProfileSet
from shared.settings import REPO_ROOT
from tests.integration.gateway_helpers import digits_in_process, refusal

pytestmark = pytest.mark.integration

ROWS = np.load(REPO_ROOT / "var/models/digits-test.npz")["x"][:6]

UINT8_DOOR, UINT8_GRPC = 19514, 19524


def uint8_model(float_model: Path, out: Path) -> None:
    """``float_model``, which takes the digits' pixels scaled to [0, 1], behind a Cast and a scaling: a model
    that takes the raw 0-16 pixels as UINT8."""
    model = onnx.load(float_model)
    graph = model.graph
    (given,) = graph.input
    for node in graph.node:
        node.input[:] = [f"{name}-scaled" if name == given.name else name for name in node.input]
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(1 / 16, dtype=np.float32), "one-sixteenth"))
    graph.node.insert(0, onnx.helper.make_node("Mul", [f"{given.name}-fp32", "one-sixteenth"], [f"{given.name}-scaled"]))
    graph.node.insert(0, onnx.helper.make_node("Cast", [given.name], [f"{given.name}-fp32"], to=onnx.TensorProto.FLOAT))
    given.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    onnx.checker.check_model(model)
    onnx.save(model, out)


@pytest.fixture(scope="module")
def uint8_door(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``pixels``: one model that takes UINT8 rows (digits-cnn-xs behind a Cast, profiled as it), served by a real
    onnxruntime worker behind a gateway, from a models and a profiles folder of its own."""
    root = tmp_path_factory.mktemp("uint8")
    (root / "models").mkdir()
    (root / "profiles").mkdir()
    uint8_model(REPO_ROOT / "var" / "models" / "digits-cnn-xs.onnx", root / "models" / "digits-u8.onnx")
    profiles = ProfileSet.load(REPO_ROOT / "profiles" / "digits.json")
    profile = profiles.get("digits-cnn-xs", "cpu-1t").model_copy(
        update={"variant": "digits-u8", "family": "digits-u8", "input_dtype": "uint8"})
    profiles.model_copy(update={"variants": [profile], "slo_ms": {"digits-u8": 50.0}}).save(root / "profiles" / "u8.json")
    env = {"MERIDIAN_MODELS_DIR": str(root / "models"), "MERIDIAN_PROFILES_DIR": str(root / "profiles"),
           "MERIDIAN_APPLICATIONS": json.dumps({"pixels": ["digits-u8"]})}
    with LocalLauncher({**stack.env, **env}, root / "logs") as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19531, name="scheduler-uint8")
        launcher.start_worker("gw-uint8", variants=["digits-u8"], metrics_port=19532)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        launcher.start_gateway(port=UINT8_DOOR, grpc_port=UINT8_GRPC, name="gateway-uint8")
        yield UINT8_DOOR


def test_uint8_rows_are_served_by_a_model_that_takes_them_through_both_doors(uint8_door: int) -> None:
    rows = np.rint(ROWS * 16).astype(np.uint8)  # the raw pixels
    expected = digits_in_process("digits-cnn-xs", ROWS)
    client = oip.InferenceServerClient(f"127.0.0.1:{uint8_door}")
    assert client.get_model_metadata("pixels")["inputs"] == [{"name": "input", "datatype": "UINT8",
                                                              "shape": [-1, 1, 8, 8]}]
    for binary in (True, False):
        tensor = oip.InferInput("input", list(rows.shape), "UINT8")
        tensor.set_data_from_numpy(rows, binary_data=binary)
        result = client.infer("pixels", [tensor], parameters={"slo_ms": 2000})
        assert result.get_response()["parameters"]["worker"] == "gw-uint8"
        assert result.as_numpy("predictions").tolist() == expected
    grpc_client = oip_grpc.InferenceServerClient(f"127.0.0.1:{UINT8_GRPC}")
    tensor = oip_grpc.InferInput("input", list(rows.shape), "UINT8")
    tensor.set_data_from_numpy(rows)
    assert grpc_client.infer("pixels", [tensor], parameters={"slo_ms": 2000}).as_numpy("predictions").tolist() == expected
    grpc_client.close()
    wrong = oip.InferInput("input", list(rows.shape), "FP32")
    wrong.set_data_from_numpy(ROWS)
    status, message = refusal(lambda: client.infer("pixels", [wrong]))
    assert status == "400" and "UINT8" in message, message
