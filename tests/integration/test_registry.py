"""The registry service on the real stack: registrations through Kafka, profiles and state in Redis.

The service runs as a process with temporary ``MERIDIAN_MODELS_DIR`` / ``MERIDIAN_PROFILES_DIR`` so the
repository's ``var/models`` and ``profiles`` stay untouched.
"""
from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from schemas import MAX_VALIDATION_BYTES, BatchFinished, RegistrationProgress, WorkerHeartbeat, WorkerStopped
from services.launcher import LocalLauncher, read_metric, wait_until
from services.registry.cli import ReplyWaiter, build_request, request_registration
from shared.adapters import topics
from shared.adapters.infaas_store import RedisMetadataStore
from shared.adapters.kafka_io import make_producer
from shared.infaas import InstanceState
from shared.profiles.format import ProfileSet
from shared.settings import REPO_ROOT
from tests.integration.helpers import DeadLetterReader

pytestmark = pytest.mark.integration

MODEL = REPO_ROOT / "var/models/digits-mlp-s.onnx"
TEST_SPLIT = REPO_ROOT / "var/models/digits-test.npz"
METRICS_PORT = int(os.environ.get("MERIDIAN_TEST_REGISTRY_METRICS_PORT", "19311"))
RUN = uuid.uuid4().hex[:6]
APP = f"it-app-{RUN}"


@pytest.fixture(scope="module")
def registry(stack, tmp_path_factory) -> Iterator[dict[str, Path]]:
    """The registry process, healthy (its ready gauge is 1), stopped at the end."""
    if not MODEL.exists() or not TEST_SPLIT.exists():
        pytest.fail("the digits models are not built: run `make models` (make test does)")
    root = tmp_path_factory.mktemp("registry")
    dirs = {"models": root / "models", "profiles": root / "profiles"}
    env = {"MERIDIAN_MODELS_DIR": str(dirs["models"]), "MERIDIAN_PROFILES_DIR": str(dirs["profiles"])}
    launcher = LocalLauncher(stack.env, root)
    process = launcher.start_registry(metrics_port=METRICS_PORT, extra_env=env)
    try:
        wait_until(lambda: read_metric(METRICS_PORT, "meridian_registry_ready") == 1.0, 60, "the registry to be ready",
                   [process])
        yield dirs
    finally:
        print(process.log_tail(40))
        launcher.stop_all()


@pytest.fixture(scope="module")
def store(settings) -> RedisMetadataStore:
    return RedisMetadataStore.from_url(settings.redis_url)


@pytest.fixture(scope="module")
def registered(registry, settings):
    """The smallest digits model registered through Kafka, how long it took, and the progress heard meanwhile."""
    request = build_request(model_name=f"itdigits-{RUN}", app_id=APP, model_file=MODEL, validation_set=TEST_SPLIT,
                            input_shape=[1, 8, 8], slo_ms=50.0)
    started = time.monotonic()
    heard: list[RegistrationProgress] = []
    answer = request_registration(settings, request, timeout_s=90, on_progress=heard.append)
    assert answer is not None, "no registration reply within 90 s"
    return answer, time.monotonic() - started, heard


def test_registration_generates_profiles_and_stores_variants(registered, registry, store):
    answer, took_s, _ = registered
    assert answer.status == "registered", answer.reason
    assert took_s < 60
    model = answer.model_name
    names = {v.variant for v in answer.variants}
    assert {f"{model}-fp32-{level}-b{b}" for level in ("basic", "all") for b in (8, 64)} <= names
    for variant in answer.variants:
        assert (registry["models"] / f"{variant.variant}.onnx").is_file()
        assert variant.accuracy > 0.9 and variant.batch_latency_ms[1] > 0
        stored = store.get_variant(variant.variant, variant.device)
        assert stored is not None and stored.family == model and stored.max_batch == variant.max_batch
    profiles = ProfileSet.load(registry["profiles"] / "registered" / f"{model}.json")
    assert {p.variant for p in profiles.variants} == names
    assert store.families_of(APP) == [model]
    assert len(store.variants_of_family(model)) == len(answer.variants)


def test_a_registration_reports_each_step_before_its_reply(registered):
    answer, _, heard = registered
    assert heard, "no progress message before the reply"
    assert heard[0].stage == "validated" and heard[-1].stage == "profiling"
    groups = {(v.precision, v.optimization_level) for v in answer.variants}
    assert sum(p.stage == "profiling" for p in heard) == len(groups)
    assert all(p.request_id == answer.request_id and p.at <= answer.at for p in heard)


def test_monitor_turns_worker_events_into_instance_state(registered, settings, store):
    variant = registered[0].variants[0]
    worker_id = f"it-reg-w-{RUN}"
    producer = make_producer(settings)

    def send(event) -> None:
        producer.send(topics.WORKER_EVENTS, key=worker_id.encode(), value=event.model_dump_json().encode())
        producer.flush()

    def instance():
        now = time.time()
        send(WorkerHeartbeat(worker_id=worker_id, device=variant.device, emulated=False, variants=[variant.variant],
                             max_batch=64, inflight=0, busy_fraction=0.25, price_per_hour=0.0425, at=now))
        send(BatchFinished(worker_id=worker_id, batch_id=f"b-{now}", variant=variant.variant, device=variant.device,
                           rows=4, compute_ms=variant.batch_latency_ms[4], ok=True, at=now))
        return store.get_instance(variant.variant, worker_id)

    try:
        def indexed_active() -> bool:
            found = instance()
            fleet = store.fleet_state([registered[0].model_name], [variant.device])
            return (found is not None and found.qps > 0 and found.state is InstanceState.ACTIVE
                    and fleet.active.get((variant.variant, variant.device)) == worker_id)

        # the monitor flushes every ~2 s: wait for one flush that saw both the heartbeat and the batch
        wait_until(indexed_active, 20, "the instance Active in Redis and in the fleet index")
        assert store.get_worker(worker_id).utilization == 0.25
        send(WorkerStopped(worker_id=worker_id, at=time.time()))
        wait_until(lambda: store.get_worker(worker_id) is None, 10, "the stopped worker to be forgotten")
        assert store.get_instance(variant.variant, worker_id) is None
    finally:
        producer.close(timeout=5)


def test_a_real_worker_loads_a_registered_variant_and_shows_up_active(registered, registry, stack, store,
                                                                       tmp_path):
    variant = registered[0].variants[-1]
    worker_id = f"it-reg-real-{RUN}"
    env = {**stack.env, "MERIDIAN_MODELS_DIR": str(registry["models"])}
    with LocalLauncher(env, tmp_path) as launcher:
        process = launcher.start_worker(worker_id, variants=[variant.variant], metrics_port=METRICS_PORT + 1)
        wait_until(lambda: (found := store.get_instance(variant.variant, worker_id)) is not None
                   and found.state is InstanceState.ACTIVE, 30, "the worker's instance in Redis", [process])
        assert store.get_worker(worker_id).device == variant.device == "cpu-1t"


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _raw_request(model: bytes, npz: bytes, input_shape: list[int]) -> tuple[str, bytes]:
    """A request as raw JSON: the oversized one could not even be built as a `RegisterModel`."""
    request_id = f"bad-{uuid.uuid4().hex}"
    body = {"schema_version": 1, "request_id": request_id, "model_name": f"itbad-{RUN}", "app_id": APP,
            "input_shape": input_shape, "model_onnx_b64": base64.b64encode(model).decode(),
            "validation_npz_b64": base64.b64encode(npz).decode(), "sent_at": time.time()}
    return request_id, json.dumps(body).encode()


def test_bad_registrations_are_rejected_with_reasons_and_dead_lettered(registry, settings):
    with np.load(TEST_SPLIT) as split:
        x, y = split["x"][:50], split["y"][:50]
    model = MODEL.read_bytes()
    cases = {
        "corrupt onnx": (_raw_request(b"this is not an onnx model", _npz(x=x, y=y), [1, 8, 8]),
                         "not a valid ONNX model"),
        "oversized": (_raw_request(model, os.urandom(MAX_VALIDATION_BYTES + 1024), [1, 8, 8]),
                      f"validation set exceeds the {MAX_VALIDATION_BYTES}-byte limit"),
        "input shape mismatch": (_raw_request(model, _npz(x=x.reshape(50, 1, 64), y=y), [1, 64]),
                                 "does not match the declared `input_shape`"),
        "pickle in npz": (_raw_request(model, _npz(x=np.array([{"a": 1}] * 2, dtype=object), y=y[:2]), [1, 8, 8]),
                          "pickled"),
    }
    waiter, letters = ReplyWaiter(settings), DeadLetterReader(settings)
    producer = make_producer(settings)
    try:
        for (_, raw), _ in cases.values():
            producer.send(topics.REGISTRATIONS, value=raw)
        producer.flush()
        for name, ((request_id, _), reason) in cases.items():
            answer = waiter.wait(request_id, timeout_s=60)
            assert answer is not None, f"{name}: no reply"
            assert answer.status == "rejected" and reason in answer.reason, (name, answer.reason)
        dead = [d for d in letters.read(len(cases), timeout_s=20) if d.service == "registry"]
        assert len(dead) == len(cases) and all(d.source_topic == topics.REGISTRATIONS for d in dead)
    finally:
        producer.close(timeout=5)
        waiter.close()
        letters.close()


def register_cli(stack, model_name: str, model_file: Path, app_id: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "register", "--model-name", model_name, "--model-file",
         str(model_file), "--validation-set", str(TEST_SPLIT), "--app-id", app_id, "--input-shape", "1,8,8",
         "--slo-ms", "50", "--timeout", "60", *extra],
        cwd=REPO_ROOT, env=stack.env, capture_output=True, text=True, timeout=180)


def test_cli_says_why_in_one_line_and_exits_1_on_rejection(registry, stack, tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x00\x01 not onnx")
    result = register_cli(stack, f"itcli-{RUN}", corrupt, APP)
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert result.stdout == "" and last.startswith("meridian register: rejected: ") and "not a valid ONNX model" in last
    result = register_cli(stack, f"itcli-{RUN}", corrupt, APP, "--json")
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert answer["status"] == "rejected" and "not a valid ONNX model" in answer["reason"]


def test_cli_shows_progress_then_a_summary_of_the_registered_variants(registry, stack):
    result = register_cli(stack, f"itcliok-{RUN}", MODEL, f"it-cli-app-{RUN}")
    assert result.returncode == 0, result.stderr
    progress = result.stderr.splitlines()
    assert any(line.startswith(f"validated itcliok-{RUN}: ") for line in progress), progress
    assert any(line.startswith(f"profiling itcliok-{RUN}-") for line in progress), progress
    summary = result.stdout.splitlines()
    assert summary[0] == (f"registered itcliok-{RUN} for application it-cli-app-{RUN} (SLO 50 ms): "
                          f"{len(summary) - 2} variants profiled on cpu-1t"), result.stdout
    assert all(line.endswith(" ms on cpu-1t") for line in summary[2:]), result.stdout

