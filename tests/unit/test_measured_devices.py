"""A real worker's machine: its device key and price, its variants measured there and cached, and the
scheduler's core serving that device by what was measured."""
from __future__ import annotations

import itertools
import shutil
import threading

import numpy as np

import pytest

from schemas import MachineDescription, MeasuredLatency, Query, WorkerHeartbeat
from services.worker.executors import OnnxExecutor
from services.worker.self_measure import MeasurementCache, measure_session, model_digest
from shared.catalogue import Catalogue
from shared.device_identity import device_key, device_price
from shared.onnx_runtime import make_session
from shared.policy.fcfs import FcfsDispatch
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.serving import CoreConfig, SchedulerCore
from shared.serving.drift import MIN_BATCHES
from shared.settings import REPO_ROOT
from shared.tensors import encode

DIGITS = REPO_ROOT / "profiles" / "digits"
CPU = DeviceType(name="cpu-1t", kind="cpu", price_per_hour=0.0425)
PROFILES = ProfileSet(source="test", devices=[CPU], variants=[
    VariantProfile(variant="m", family="fam", device="cpu-1t", accuracy=0.9,
                   batch_latency_ms={1: 2.0, 2: 3.0, 4: 5.0, 8: 9.0}, max_batch=8, input_shape=(4,),
                   input_dtype="float32", load_latency_ms=30.0)])
MACHINE = MachineDescription(provider="CPUExecutionProvider", name="Test CPU @ 2.0GHz", threads=2)


def test_a_cpu_is_keyed_by_its_threads_and_a_gpu_by_its_name() -> None:
    assert device_key(MACHINE) == "cpu-2t"
    gpu = MachineDescription(provider="CUDAExecutionProvider", name="NVIDIA H200", threads=1, memory_mb=143771)
    assert device_key(gpu) == "gpu-nvidia-h200"
    assert device_key(gpu.model_copy(update={"name": "??"})) == "gpu-cuda"


def test_a_price_comes_from_the_table_then_the_profiles_then_is_zero_with_a_warning(caplog) -> None:
    known = {"cpu-1t": CPU}
    assert device_price("cpu-1t", {"cpu-1t": 0.05}, known) == 0.05
    assert device_price("cpu-1t", {}, known) == 0.0425
    assert device_price("cpu-16t", {}, known) == 0.0
    assert "'cpu-16t' has no price" in caplog.text


def test_a_measured_device_keeps_its_profiles_fields_and_scales_the_batches_left_out() -> None:
    measured = MeasuredLatency(batch_latency_ms={1: 1.0, 2: 1.5}, load_latency_ms=12.0)
    catalogue = Catalogue(PROFILES, {"app": ["fam"]}).with_measured({("m", "cpu-1t"): measured}, {})
    profile = catalogue.profile("m", "cpu-1t")
    # batch 2 measured at half its profile: batches 4 and 8 are taken as half theirs
    assert profile.batch_latency_ms == {1: 1.0, 2: 1.5, 4: 2.5, 8: 4.5}
    assert (profile.accuracy, profile.input_shape, profile.load_latency_ms) == (0.9, (4,), 12.0)
    assert "measured by workers" in catalogue.profiles.source


def test_a_machine_no_profile_names_starts_from_another_devices_profile_and_its_announced_price() -> None:
    measured = MeasuredLatency(batch_latency_ms={1: 0.5})
    catalogue = Catalogue(PROFILES, {"app": ["fam"]}).with_measured(
        {("m", "gpu-nvidia-h200"): measured, ("unknown", "gpu-nvidia-h200"): measured}, {"gpu-nvidia-h200": 3.5})
    profile = catalogue.profile("m", "gpu-nvidia-h200")
    assert profile.batch_latency_ms == {1: 0.5, 2: 0.75, 4: 1.25, 8: 2.25}
    assert catalogue.profile("m", "cpu-1t").batch_latency_ms[1] == 2.0  # the CPU's own profile is untouched
    assert catalogue.profiles_of("unknown") == []
    device = catalogue.profiles.device_by_name["gpu-nvidia-h200"]
    assert (device.kind, device.price_per_hour) == ("gpu", 3.5)


def heartbeat(measured: dict[str, MeasuredLatency]) -> WorkerHeartbeat:
    return WorkerHeartbeat(worker_id="w", device="cpu-1t", emulated=False, variants=["m"], max_batch=8, inflight=0,
                           busy_fraction=0.0, price_per_hour=0.0425, machine=MACHINE, measured=measured, at=0.0)


def test_the_core_predicts_a_measured_device_by_its_measurement_even_after_a_registration() -> None:
    core = SchedulerCore(FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}), CoreConfig(), clock=lambda: 1.0)
    core.on_worker_event(heartbeat({}))
    assert core.catalogue.profile("m", "cpu-1t").latency_ms(8) == 9.0
    core.on_worker_event(heartbeat({"m": MeasuredLatency(batch_latency_ms={1: 1.0, 8: 3.0})}))
    assert core.catalogue.profile("m", "cpu-1t").latency_ms(8) == 3.0
    core.catalogue = Catalogue(PROFILES, {"app": ["fam"], "other": ["fam"]})  # a model was registered
    assert core.catalogue.profile("m", "cpu-1t").latency_ms(8) == 3.0
    assert "other" in core.catalogue.applications


def test_a_measurement_is_cached_by_device_machine_and_model_file(tmp_path) -> None:
    cache = MeasurementCache(tmp_path)
    measured = MeasuredLatency(batch_latency_ms={1: 1.0})
    cache.put("cpu-2t", MACHINE, "m", "abc", measured)
    assert cache.get("cpu-2t", MACHINE, "m", "abc") == measured
    assert cache.get("cpu-2t", MACHINE, "m", "abd") is None  # another model file
    assert cache.get("cpu-2t", MACHINE.model_copy(update={"name": "Other CPU"}), "m", "abc") is None
    assert cache.get("cpu-1t", MACHINE, "m", "abc") is None


def test_measuring_a_real_model_covers_the_batch_sizes_the_budget_allows() -> None:
    session = make_session(DIGITS / "digits-mlp-s.onnx")
    whole = measure_session(session, max_batch=64, load_ms=5.0, images=None, budget_s=60.0)
    assert list(whole.batch_latency_ms) == [1, 2, 4, 8, 16, 32, 64]
    assert all(ms > 0 for ms in whole.batch_latency_ms.values()) and whole.load_latency_ms == 5.0
    assert list(measure_session(session, max_batch=64, load_ms=5.0, images=None, budget_s=0.0).batch_latency_ms) == [1]
    assert list(measure_session(session, max_batch=4, load_ms=5.0, images=None, budget_s=60.0).batch_latency_ms) == [1, 2, 4]


def test_a_real_executor_measures_what_it_starts_with_once_and_reads_it_back_after(tmp_path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(DIGITS / "digits-mlp-s.onnx", models)
    shutil.copy(DIGITS / "digits-cnn-xs.onnx", models)
    first = OnnxExecutor(models, threads=2, cache=MeasurementCache(tmp_path / "measured"), max_batch=8)
    assert first.device == "cpu-2t" and first.machine.threads == 2
    first.load("digits-mlp-s", measure=True)
    first.load("digits-cnn-xs")  # loaded on demand: not measured, and nothing cached to announce
    assert list(first.measured()) == ["digits-mlp-s"]
    again = OnnxExecutor(models, threads=2, cache=MeasurementCache(tmp_path / "measured"), max_batch=8)
    again.load("digits-mlp-s")
    assert again.measured() == first.measured()
    again.unload("digits-mlp-s")
    assert again.measured() == {}
    (models / "digits-mlp-s.onnx").write_bytes((models / "digits-cnn-xs.onnx").read_bytes())
    assert model_digest(models / "digits-mlp-s.onnx") == model_digest(models / "digits-cnn-xs.onnx")
    again.load("digits-mlp-s")
    assert again.measured() == {}  # another file under the same name is not the one measured
    told = OnnxExecutor(models, threads=1, device="c5.large")
    assert told.device == "c5.large" and told.machine.threads == 1


@pytest.mark.parametrize("threads", ["0", "-1", "two"])
def test_a_worker_is_told_a_whole_number_of_threads(threads, capsys) -> None:
    from services.worker.app import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--worker-id", "w", "--threads", threads])
    assert "--threads: must be a whole number >= 1" in capsys.readouterr().err


def test_workers_of_one_device_are_served_by_the_median_of_what_they_measured() -> None:
    core = SchedulerCore(FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}), CoreConfig(), clock=lambda: 1.0)
    for worker, ms in (("a", 1.0), ("b", 2.0), ("c", 6.0)):
        core.on_worker_event(heartbeat({"m": MeasuredLatency(batch_latency_ms={1: ms})}).model_copy(
            update={"worker_id": worker}))
    assert core.catalogue.profile("m", "cpu-1t").batch_latency_ms[1] == 2.0
    catalogue = core.catalogue
    core.on_worker_event(heartbeat({"m": MeasuredLatency(batch_latency_ms={1: 1.0})}).model_copy(
        update={"worker_id": "a"}))
    assert core.catalogue is catalogue  # a heartbeat repeating its announcement changes nothing


def test_workers_sharing_a_cache_measure_one_at_a_time(tmp_path) -> None:
    cache, order = MeasurementCache(tmp_path), []
    first_in, first_may_leave = threading.Event(), threading.Event()

    def first() -> None:
        with cache.alone():
            order.append("first in")
            first_in.set()
            first_may_leave.wait(5)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(5)
    def then() -> None:
        with cache.alone():
            order.append("second in")

    second = threading.Thread(target=then)
    second.start()
    second.join(0.3)
    assert second.is_alive(), "the second measured while the first did"
    first_may_leave.set()
    thread.join(5)
    second.join(5)
    assert order == ["first in", "first out", "second in"]


def test_a_real_worker_computing_slower_than_it_is_served_by_is_flagged_and_cleared_once_it_is_back() -> None:
    now = [1.0]
    core = SchedulerCore(FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}), CoreConfig(), clock=lambda: now[0])
    core.on_worker_event(heartbeat({}))
    served = itertools.count()

    def serve(compute_ms: float) -> None:
        query = Query(query_id=f"q{next(served)}", application="app", model="m", slo_ms=1000.0, batch_size=1,
                      inputs=encode(np.zeros((1, 4), np.float32)), sent_at=now[0])
        assert core.admit(query) is None
        (dispatch,) = core.step().dispatches
        now[0] += 0.01
        core.batch_finished("w", dispatch.batch_id, compute_ms)

    for _ in range(MIN_BATCHES - 1):
        serve(6.0)  # three times the profiled 2 ms
    assert not core.drift_changes, "judged before enough batches"
    serve(6.0)
    assert [(c.worker_id, c.variant, c.drifted) for c in core.drift_changes] == [("w", "m", True)]
    core.drift_changes.clear()
    for _ in range(20):
        serve(2.0)
    assert [(c.drifted, round(c.ratio, 1)) for c in core.drift_changes] == [(False, 1.5)]
    assert core.drift.ratios()["w", "m"] < 1.3
