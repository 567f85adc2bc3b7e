"""The Open Inference Protocol front door, driven by stock clients no one here wrote (tritonclient's HTTP
and gRPC clients, unchanged): health and metadata, FP32 rows as binary and as JSON and encoded photographs
as BYTES served by real onnxruntime workers through the real broker, each refusal with its status and
reason, two gateways side by side, and a caller that goes away leaving nothing behind."""
from __future__ import annotations

import hashlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as oip_grpc
import tritonclient.http as oip
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from services.cli.main import main as cli_main
from services.demo.photos import InProcess
from services.launcher import LocalLauncher, read_metric, wait_until
from services.stack import LocalStack
from tests.integration.gateway_helpers import digits_in_process, refusal
from shared.modelzoo import photos
from shared.settings import REPO_ROOT

pytestmark = pytest.mark.integration

GATEWAYS = (19510, 19511)
#: the first gateway's gRPC door
GRPC = 19520
APPLICATIONS = {"digits": ["digits"], "photos": ["efficientnet-lite"]}
ENV = {"MERIDIAN_APPLICATIONS": json.dumps(APPLICATIONS)}
MAX_REQUEST_BYTES = 2 * 2**20
ROWS = np.load(REPO_ROOT / "var/models/digits-test.npz")["x"][:24]


@pytest.fixture(scope="module")
def gateways(stack: LocalStack, digits_variants: list[str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[list[oip.InferenceServerClient]]:
    with LocalLauncher({**stack.env, **ENV}, tmp_path_factory.mktemp("gateway")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19501)
        launcher.start_worker("gw-digits", variants=digits_variants[:1], metrics_port=19502)
        launcher.start_worker("gw-photos", variants=["efficientnet-lite0"], metrics_port=19503)
        launcher.wait_for_workers(scheduler, 2, timeout_s=120)
        env = {"MERIDIAN_GATEWAY_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES)}
        for k, port in enumerate(GATEWAYS):
            launcher.start_gateway(port=port, grpc_port=GRPC if k == 0 else None, name=f"gateway-{k}", extra_env=env)
        clients = [oip.InferenceServerClient(f"127.0.0.1:{port}", concurrency=8) for port in GATEWAYS]
        yield clients
        for client in clients:
            client.close()


def rows_input(rows: np.ndarray, *, binary: bool) -> oip.InferInput:
    tensor = oip.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    return tensor


def test_a_stock_client_reads_health_and_metadata(gateways) -> None:
    client = gateways[0]
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata()["name"] == "meridian"
    assert client.is_model_ready("digits") and client.is_model_ready("photos")
    assert not client.is_model_ready("nosuch")
    digits = client.get_model_metadata("digits")
    assert digits["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert digits["parameters"]["slo_ms"] == 50.0 and not digits["parameters"]["accepts_encoded_images"]
    assert client.get_model_metadata("photos")["parameters"]["accepts_encoded_images"]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_fp32_rows_are_served_by_a_real_worker_as_onnxruntime_answers_them_here(gateways, binary: bool) -> None:
    rows = ROWS[:8]
    result = gateways[0].infer("digits", [rows_input(rows, binary=binary)], parameters={"slo_ms": 2000},
                               outputs=[oip.InferRequestedOutput("predictions", binary_data=binary)])
    answer = result.get_response()
    variant = answer["model_version"]
    assert answer["parameters"]["worker"] == "gw-digits" and not answer["parameters"]["emulated"]
    assert result.as_numpy("predictions").tolist() == digits_in_process(variant, rows)


def test_encoded_photographs_are_served_as_bytes(gateways, tmp_path) -> None:
    shots = photos.photographs()[:3]
    images = oip.InferInput("input", [len(shots)], "BYTES")
    images.set_data_from_numpy(np.array([shot.jpeg for shot in shots], dtype=np.object_))
    result = gateways[1].infer("photos", [images], parameters={"slo_ms": 60_000})
    variant = result.get_response()["model_version"]
    assert variant == "efficientnet-lite0"
    assert result.as_numpy("predictions").tolist() == InProcess(REPO_ROOT / "var" / "models").top1(
        variant, [shot.jpeg for shot in shots])


def test_each_refusal_has_its_status_and_reason(gateways) -> None:
    client = gateways[0]
    status, message = refusal(lambda: client.infer("nosuch", [rows_input(ROWS[:1], binary=True)]))
    assert status == "404" and "unknown application 'nosuch'" in message and "digits" in message
    # the scheduler's refusals come back through Kafka, with its reason
    wrong = oip.InferInput("input", [1, 8, 8], "FP32")
    wrong.set_data_from_numpy(ROWS[:1].reshape(1, 8, 8))
    status, message = refusal(lambda: client.infer("digits", [wrong]))
    assert status == "400" and "shape" in message, message
    status, message = refusal(lambda: client.infer("digits", [rows_input(ROWS[:1], binary=True)],
                                                   parameters={"slo_ms": 0.001}))
    assert status == "400" and "fastest possible latency" in message, message
    status, message = refusal(lambda: client.infer("digits", [rows_input(ROWS[:1], binary=True)], priority=12))
    assert status == "400" and "priority" in message, message


def test_a_request_larger_than_a_gateway_reads_is_refused_before_it_reaches_kafka(gateways) -> None:
    before = sent_queries(GATEWAYS[0])
    body = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [0.0]}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{GATEWAYS[0]}/v2/models/digits/infer",
                                     data=body + b" " * MAX_REQUEST_BYTES, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 413
    assert "2,097,152 bytes" in json.loads(refused.value.read())["error"]
    assert sent_queries(GATEWAYS[0]) == before


def test_two_gateways_side_by_side_each_answer_their_own_callers(gateways) -> None:
    pending = []
    for k in range(16):
        rows = ROWS[k:k + 1 + k % 3]
        client = gateways[k % 2]
        pending.append((rows, client.async_infer("digits", [rows_input(rows, binary=True)],
                                                 parameters={"slo_ms": 2000})))
    for rows, call in pending:
        result = call.get_result(timeout=30)
        assert result.as_numpy("predictions").tolist() == digits_in_process(
            result.get_response()["model_version"], rows)


def test_a_caller_that_goes_away_leaves_nothing_waiting(gateways) -> None:
    raw = ROWS[:2].tobytes()
    header = json.dumps({"inputs": [{"name": "input", "shape": [2, 1, 8, 8], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", GATEWAYS[1]), timeout=5) as connection:
            connection.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: gw\r\n"
                               b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s%s"
                               % (len(header), len(header) + len(raw), header, raw))
    # the gone callers' answers arrive and are let go of: nothing waits, and the gateway serves on
    wait_until(lambda: read_metric(GATEWAYS[1], "meridian_gateway_inflight") == 0, 30, "no request to wait")
    result = gateways[1].infer("digits", [rows_input(ROWS[:1], binary=True)], parameters={"slo_ms": 2000})
    assert result.as_numpy("predictions").tolist() == digits_in_process(result.get_response()["model_version"],
                                                                        ROWS[:1])
    assert read_metric(GATEWAYS[1], "meridian_gateway_inflight") == 0


def grpc_input(rows: np.ndarray) -> oip_grpc.InferInput:
    tensor = oip_grpc.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return tensor


@pytest.fixture(scope="module")
def grpc_client(gateways) -> Iterator[oip_grpc.InferenceServerClient]:
    client = oip_grpc.InferenceServerClient(f"127.0.0.1:{GRPC}")
    yield client
    client.close()


def test_a_stock_grpc_client_reads_health_and_metadata(grpc_client) -> None:
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    assert grpc_client.get_server_metadata(as_json=True)["name"] == "meridian"
    assert grpc_client.is_model_ready("digits") and not grpc_client.is_model_ready("nosuch")
    digits = grpc_client.get_model_metadata("digits", as_json=True)
    assert digits["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "1", "8", "8"]}]
    assert "digits-mlp-s" in digits["versions"]


def test_fp32_rows_and_photographs_are_served_over_grpc(grpc_client) -> None:
    rows = ROWS[:6]
    result = grpc_client.infer("digits", [grpc_input(rows)], parameters={"slo_ms": 2000})
    answer = result.get_response(as_json=True)
    assert answer["parameters"]["worker"]["string_param"] == "gw-digits"
    assert result.as_numpy("predictions").tolist() == digits_in_process(answer["model_version"], rows)
    shots = photos.photographs()[:2]
    images = oip_grpc.InferInput("input", [len(shots)], "BYTES")
    images.set_data_from_numpy(np.array([shot.jpeg for shot in shots], dtype=np.object_))
    result = grpc_client.infer("photos", [images], parameters={"slo_ms": 60_000})
    variant = result.get_response().model_version
    assert result.as_numpy("predictions").tolist() == InProcess(REPO_ROOT / "var" / "models").top1(
        variant, [shot.jpeg for shot in shots])


def test_each_grpc_refusal_has_its_status_and_reason(grpc_client) -> None:
    status, message = refusal(lambda: grpc_client.infer("nosuch", [grpc_input(ROWS[:1])]))
    assert status == "StatusCode.NOT_FOUND" and "unknown application 'nosuch'" in message
    wrong = oip_grpc.InferInput("input", [1, 8, 8], "FP32")
    wrong.set_data_from_numpy(ROWS[:1].reshape(1, 8, 8))
    status, message = refusal(lambda: grpc_client.infer("digits", [wrong]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "shape" in message, message
    status, message = refusal(lambda: grpc_client.infer("digits", [grpc_input(ROWS[:1])], priority=12))
    assert status == "StatusCode.INVALID_ARGUMENT" and "priority" in message, message


TOKEN, PHOTOS_TOKEN = "digits-caller-token", "photos-caller-token"
SECURED, SECURED_GRPC = 19512, 19522


@pytest.fixture(scope="module")
def secured(gateways, stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A gateway that takes two tokens, each for one application, two requests a second per caller."""
    tokens = {hashlib.sha256(TOKEN.encode()).hexdigest(): ["digits"],
              hashlib.sha256(PHOTOS_TOKEN.encode()).hexdigest(): ["photos"]}
    env = {**ENV, "MERIDIAN_GATEWAY_TOKENS": json.dumps(tokens), "MERIDIAN_GATEWAY_RATE_PER_S": "2",
           "MERIDIAN_GATEWAY_BURST": "2"}
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("secured")) as launcher:
        launcher.start_gateway(port=SECURED, grpc_port=SECURED_GRPC, name="gateway-secured", extra_env=env)
        yield SECURED


def sent_queries(port: int) -> float:
    return read_metric(port, "meridian_client_queries_sent_total") or 0.0


def test_only_a_known_token_for_its_own_application_gets_in_and_no_refusal_reaches_kafka(secured: int) -> None:
    rows = rows_input(ROWS[:1], binary=True)
    for headers, status in (({}, "401"), ({"Authorization": "Bearer wrong"}, "401"),
                            ({"Authorization": f"Basic {TOKEN}"}, "401"),
                            ({"Authorization": f"Bearer {PHOTOS_TOKEN}"}, "403")):
        client = oip.InferenceServerClient(f"127.0.0.1:{secured}")
        got, message = refusal(lambda: client.infer("digits", [rows], headers=headers))
        assert got == status, (headers, got, message)
        assert not client.is_model_ready("digits", headers=headers)
    client = oip_grpc.InferenceServerClient(f"127.0.0.1:{SECURED_GRPC}")  # the gRPC door: the same checks
    for headers, status in (({}, "UNAUTHENTICATED"), ({"authorization": "Bearer wrong"}, "UNAUTHENTICATED"),
                            ({"authorization": f"Bearer {PHOTOS_TOKEN}"}, "PERMISSION_DENIED")):
        got, message = refusal(lambda: client.infer("digits", [grpc_input(ROWS[:1])], headers=headers))
        assert got == f"StatusCode.{status}", (headers, got, message)
    client.close()
    assert sent_queries(secured) == 0
    client = oip.InferenceServerClient(f"127.0.0.1:{secured}")
    assert client.is_server_live()  # health needs no token
    result = client.infer("digits", [rows], headers={"Authorization": f"Bearer {TOKEN}"}, parameters={"slo_ms": 2000})
    assert result.as_numpy("predictions").tolist() == digits_in_process(result.get_response()["model_version"], ROWS[:1])
    assert sent_queries(secured) == 1


STORED = 19515


def test_a_token_added_in_redis_gets_in_and_once_revoked_no_longer(gateways, stack: LocalStack, tmp_path,
                                                                   monkeypatch, capsys) -> None:
    """``meridian token add`` stores a token's digest in Redis; a gateway reading Redis lets it in within its
    refresh, and refuses it within the next once ``meridian token revoke`` forgot it."""
    for name, value in stack.env.items():
        if name.startswith("MERIDIAN_"):
            monkeypatch.setenv(name, value)
    assert cli_main(["token", "add", "--application", "digits"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    env = {**ENV, "MERIDIAN_GATEWAY_REDIS_TOKENS": "true", "MERIDIAN_GATEWAY_TOKEN_REFRESH_S": "0.5"}
    rows, headers = [rows_input(ROWS[:1], binary=True)], {"Authorization": f"Bearer {token}"}
    with LocalLauncher(stack.env, tmp_path) as launcher:
        launcher.start_gateway(port=STORED, name="gateway-stored", extra_env=env)
        client = oip.InferenceServerClient(f"127.0.0.1:{STORED}")
        assert refusal(lambda: client.infer("digits", rows))[0] == "401", "a store always asks for a token"
        assert refusal(lambda: client.infer("photos", rows, headers=headers))[0] == "403"
        answer = client.infer("digits", rows, headers=headers, parameters={"slo_ms": 2000}, priority=2)
        assert answer.get_response()["parameters"]["priority"] == 2
        assert cli_main(["token", "revoke", token]) == 0
        time.sleep(1.5)
        assert refusal(lambda: client.infer("digits", rows, headers=headers))[0] == "401"


def test_a_caller_over_its_rate_is_told_when_to_retry(secured: int) -> None:
    time.sleep(1.5)  # a full bucket again after the test before
    body = json.dumps({"parameters": {"slo_ms": 2000}, "inputs": [
        {"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": ROWS[0].reshape(-1).tolist()}]}).encode()
    codes, retry = [], None
    for _ in range(4):
        request = urllib.request.Request(f"http://127.0.0.1:{secured}/v2/models/digits/infer", data=body,
                                         headers={"Authorization": f"Bearer {TOKEN}"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                codes.append(response.status)
        except urllib.error.HTTPError as exc:
            codes.append(exc.code)
            retry = exc.headers.get("Retry-After")
    assert codes[:2] == [200, 200] and 429 in codes[2:], codes
    assert retry is not None and int(retry) >= 1
    # the caller's bucket is the gateway's, whichever door it calls: at once on gRPC, still over its rate
    with grpc.insecure_channel(f"127.0.0.1:{SECURED_GRPC}") as channel:
        infer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer
        with pytest.raises(grpc.RpcError) as refused:
            infer(pb.ModelInferRequest(model_name="digits", raw_input_contents=[ROWS[:1].tobytes()], inputs=[
                pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 1, 8, 8])]),
                  metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    assert int(dict(refused.value.trailing_metadata())["retry-after"]) >= 1


def test_a_gateway_holding_all_it_may_answers_503_to_one_more(stack: LocalStack, gateways, tmp_path) -> None:
    port = 19513
    with LocalLauncher({**stack.env, **ENV}, tmp_path) as launcher:
        launcher.start_gateway(port=port, name="gateway-narrow", extra_env={"MERIDIAN_GATEWAY_MAX_INFLIGHT": "1"})
        client = oip.InferenceServerClient(f"127.0.0.1:{port}", concurrency=6)
        shots = photos.photographs()
        images = oip.InferInput("input", [len(shots)], "BYTES")
        images.set_data_from_numpy(np.array([shot.jpeg for shot in shots], dtype=np.object_))
        calls = [client.async_infer("photos", [images], parameters={"slo_ms": 60_000}) for _ in range(6)]
        outcomes = []
        for call in calls:
            try:
                outcomes.append(call.get_result(timeout=60).as_numpy("predictions").shape)
            except InferenceServerException as exc:
                outcomes.append((exc.status(), exc.message()))
        client.close()
    assert (len(shots),) in outcomes, outcomes  # the one it held was served
    overloaded = [o for o in outcomes if o != (len(shots),)]
    assert overloaded and all(status == "503" and "overloaded" in message for status, message in overloaded), outcomes
