"""The registry's validation, registration and monitoring logic, without Kafka (in-memory store)."""
import base64
import io
import time
import zipfile

import numpy as np
import pytest

from schemas import (
    MAX_MODEL_BYTES,
    BatchFinished,
    RegisterModel,
    VariantLoaded,
    VariantUnloaded,
    WorkerHeartbeat,
    WorkerStopped,
)
from shared.infaas.daemon import InstanceMonitor
from services.registry.registrar import RegistrarConfig, register_model
from services.registry.validation import RegistrationRejected, validate_registration
from shared.infaas import InMemoryMetadataStore, InstanceState, VariantRecord
from shared.modelzoo.variants import ProfilingBudget
from shared.profiles.format import ProfileSet
from tests.unit.test_infaas_variants import ROW_SHAPE, classifier_bytes, validation_set

QUICK = ProfilingBudget(num_warmup=1, num_repeats=3, num_rounds=1, max_seconds=0.05, num_loads=1, measure_memory=False)


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def request(model: bytes | None = None, npz: bytes | None = None, shape=ROW_SHAPE, name="tiny") -> RegisterModel:
    if npz is None:
        x, y = validation_set()
        npz = npz_bytes(x=x, y=y)
    return RegisterModel(request_id="r1", model_name=name, app_id="app", input_shape=list(shape),
                         model_onnx_b64=base64.b64encode(classifier_bytes() if model is None else model).decode(),
                         validation_npz_b64=base64.b64encode(npz).decode(), slo_ms=20.0, sent_at=time.time())


def rejected(command) -> str:
    with pytest.raises(RegistrationRejected) as caught:
        validate_registration(command)
    return str(caught.value)


def test_a_valid_registration_passes():
    validated = validate_registration(request())
    assert validated.x.shape == (40, *ROW_SHAPE) and validated.y.dtype == np.int64


@pytest.mark.parametrize("model, reason", [
    (b"\x08\x07garbage-bytes-that-are-not-onnx", "not a valid ONNX model"),
    (classifier_bytes(batch_dim=1), "fixed batch axis"),
])
def test_bad_models_are_rejected_with_the_reason(model, reason):
    assert reason in rejected(request(model=model))


def test_declared_input_shape_must_match_the_model():
    assert "does not match the declared `input_shape`" in rejected(request(shape=(1, 8, 8), npz=npz_bytes(
        x=np.zeros((2, 1, 8, 8), np.float32), y=np.zeros(2, np.int64))))


def test_pickled_objects_in_the_validation_set_are_refused_not_loaded():
    objects = np.array([{"boom": 1}, None], dtype=object)
    assert "pickled" in rejected(request(npz=npz_bytes(x=objects, y=np.zeros(2, np.int64))))


@pytest.mark.parametrize("arrays, reason", [
    (dict(x=np.zeros((2, *ROW_SHAPE), np.float32)), "lacks array(s) ['y']"),
    (dict(x=np.zeros((2, 1, 8, 8), np.float32), y=np.zeros(2, np.int64)), "validation `x` must be"),
    (dict(x=np.zeros((2, *ROW_SHAPE), np.float32), y=np.zeros(2, np.float32)), "validation `y` must be"),
])
def test_malformed_validation_sets_are_rejected(arrays, reason):
    assert reason in rejected(request(npz=npz_bytes(**arrays)))


def test_oversized_and_inflating_inputs_are_rejected_before_parsing():
    command = request().model_copy(update={"model_onnx_b64": base64.b64encode(bytes(MAX_MODEL_BYTES + 3)).decode()})
    assert f"exceeds the {MAX_MODEL_BYTES}-byte limit" in rejected(command)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", bytes(80 * 1024 * 1024))
    assert "unpacks to" in rejected(request(npz=bomb.getvalue()))
    assert "not an .npz archive" in rejected(request(npz=b"plain bytes"))


def test_register_model_writes_variants_profiles_and_metadata(tmp_path):
    store = InMemoryMetadataStore()
    config = RegistrarConfig(tmp_path / "models", tmp_path / "profiles", QUICK)
    answer = register_model(request(), config=config, store=store)
    assert answer.status == "registered" and len(answer.variants) == 12
    for variant in answer.variants:
        assert (config.models_dir / f"{variant.variant}.onnx").is_file()
        assert store.get_variant(variant.variant, variant.device).family == "tiny"
    assert not list(config.models_dir.glob(".registering-*"))  # the work folder is gone
    profiles = ProfileSet.load(config.profiles_dir / "registered" / "tiny.json")
    assert profiles.slo_ms == {"tiny": 20.0} and len(profiles.variants) == 12
    assert store.families_of("app") == ["tiny"]
    assert {(v.precision, v.optimization_level, v.max_batch) for v in answer.variants} == {
        (p, o, b) for p in ("fp32", "fp16", "int8") for o in ("basic", "all") for b in (8, 64)}


def test_too_long_model_names_are_rejected_before_any_work(tmp_path):
    config = RegistrarConfig(tmp_path / "models", tmp_path / "profiles", QUICK)
    with pytest.raises(RegistrationRejected, match="shorten"):
        register_model(request(name="m" * 120), config=config, store=InMemoryMetadataStore())
    assert not config.models_dir.exists()


def test_torch_modules_exported_by_the_helper_are_accepted(tmp_path):
    torch = pytest.importorskip("torch")
    from services.registry.torch_export import export_torch_module

    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 5))
    path = export_torch_module(module, torch.zeros(2, *ROW_SHAPE), tmp_path / "m.onnx")
    x = np.zeros((3, *ROW_SHAPE), np.float32)
    validate_registration(request(model=path.read_bytes(), npz=npz_bytes(x=x, y=np.zeros(3, np.int64))))


# ------------------------------------------------------------------------------------- monitoring

PROFILE = VariantRecord("v", "fam", "cpu-1t", batch_latency_ms=((1, 1.0), (8, 4.0)), max_batch=8)  # peak 2000 rows/s


def monitor():
    store = InMemoryMetadataStore()
    store.put_variant(PROFILE)
    return store, InstanceMonitor(store, device_kinds={"cpu-1t": "cpu"}, worker_timeout_s=3.0, last_flush_s=0.0)


def heartbeat(at, variants=("v",), busy=0.1):
    return WorkerHeartbeat(worker_id="w1", device="cpu-1t", emulated=False, variants=list(variants), max_batch=8,
                           inflight=0, busy_fraction=busy, price_per_hour=0.04, at=at)


def finished(rows, compute_ms, at):
    return BatchFinished(worker_id="w1", batch_id=f"b{at}", variant="v", device="cpu-1t", rows=rows,
                         compute_ms=compute_ms, ok=True, at=at)


def test_monitor_writes_qps_latency_state_and_utilization_every_window():
    store, mon = monitor()
    mon.observe(heartbeat(0.5, busy=0.3), 0.5)
    mon.observe(VariantLoaded(worker_id="w1", variant="v", load_ms=12.0, at=0.6), 0.6)
    mon.observe(finished(8, 4.0, 1.0), 1.0)
    mon.flush(2.0)
    instance = store.get_instance("v", "w1")
    assert (instance.state, instance.qps, instance.avg_latency_ms, instance.load_latency_ms) == (
        InstanceState.ACTIVE, 4.0, 4.0, 12.0)
    worker = store.get_worker("w1")
    assert (worker.utilization, worker.device_kind) == (0.3, "cpu")
    # next window: the instance computed for the whole window -> Overloaded (at peak)
    for k in range(10):
        mon.observe(finished(8, 190.0, 2.1 + k * 0.19), 2.1 + k * 0.19)
    mon.observe(heartbeat(3.5), 3.5)
    mon.flush(4.0)
    assert store.get_instance("v", "w1").state is InstanceState.OVERLOADED
    assert store.fleet_state(["fam"], ["cpu-1t"]).active == {}
    # then 2.5x slower than profiled while far below peak -> Interfered
    mon.observe(heartbeat(4.5), 4.5)
    mon.observe(finished(8, 10.0, 5.0), 5.0)
    mon.flush(6.0)
    assert store.get_instance("v", "w1").state is InstanceState.INTERFERED


def test_monitor_unloads_and_forgets_stopped_or_silent_workers():
    store, mon = monitor()
    mon.observe(heartbeat(0.5), 0.5)
    mon.flush(1.0)
    assert store.get_instance("v", "w1").state is InstanceState.ACTIVE
    mon.observe(VariantUnloaded(worker_id="w1", variant="v", at=1.5), 1.5)
    mon.flush(2.0)
    assert store.get_instance("v", "w1") is None and store.get_worker("w1") is not None
    mon.observe(heartbeat(2.5), 2.5)
    mon.flush(3.0)
    mon.observe(WorkerStopped(worker_id="w1", at=3.5), 3.5)
    mon.flush(4.0)
    assert store.get_worker("w1") is None and store.get_instance("v", "w1") is None
    mon.observe(heartbeat(5.0), 5.0)
    mon.flush(5.5)
    mon.flush(9.0)  # silent for 4 s > 3 s timeout
    assert store.get_worker("w1") is None


@pytest.mark.parametrize("raw", [b"\xff", b"[]", b'{"request_id": 5}'])
def test_any_malformed_registration_gets_a_reason(raw):
    """Errors without a field location (not JSON, not an object) once crashed the registry's size check."""
    from pydantic import ValidationError

    from services.registry.app import _size_reason
    from shared.adapters.dead_letter import describe_validation_error

    with pytest.raises(ValidationError) as caught:
        RegisterModel.model_validate_json(raw)
    assert _size_reason(caught.value) is None
    assert describe_validation_error(caught.value).startswith("malformed message:")
