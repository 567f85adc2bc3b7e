"""Service times from profiles (emulated workers and the simulator): the bucket mean or a measured sample."""
import numpy as np
import pytest

from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from services.worker.executors import EmulatedExecutor
from shared.serving import ProfileServiceTime
from shared.sim import make_fleet
from shared.tensors import encode, encode_images, read_batch

PROFILES = ProfileSet(
    source="test",
    devices=[DeviceType(name="d", kind="cpu", price_per_hour=1.0)],
    variants=[
        VariantProfile(
            variant="m", family="m", device="d", batch_latency_ms={10: 5.0, 20: 8.0},
            latency_samples_ms={10: [4.0, 6.0], 20: [7.0, 9.0]}, load_latency_ms=3.0, max_batch=20,
        )
    ],
)


def test_mean_service_uses_the_bucket_rounded_up():
    service = ProfileServiceTime(PROFILES)
    rng = np.random.default_rng(0)
    assert [service.sample_ms("d", "m", b, rng) for b in (1, 10, 11, 20)] == [5.0, 5.0, 8.0, 8.0]
    assert service.expected_ms("d", "m", 15) == 8.0
    with pytest.raises(ValueError, match="outside the profile"):
        service.sample_ms("d", "m", 21, rng)


def test_sampled_service_draws_the_measured_samples_reproducibly():
    service = ProfileServiceTime(PROFILES, sampled=True)
    draws = [service.sample_ms("d", "m", 15, np.random.default_rng(s)) for s in range(40)]
    assert set(draws) == {7.0, 9.0}
    again = [service.sample_ms("d", "m", 15, np.random.default_rng(s)) for s in range(40)]
    assert draws == again
    assert service.expected_ms("d", "m", 15) == 8.0  # what busy_remaining is predicted from
    bare = ProfileSet(
        source="test",
        devices=PROFILES.devices,
        variants=[VariantProfile(variant="m", family="m", device="d", batch_latency_ms={10: 5.0}, max_batch=10)],
    )
    assert ProfileServiceTime(bare, sampled=True).sample_ms("d", "m", 5, np.random.default_rng(0)) == 5.0


def test_an_emulated_worker_replays_the_simulators_service_times(monkeypatch):
    slept = []
    monkeypatch.setattr("services.worker.executors.time.sleep", slept.append)
    executor = EmulatedExecutor(PROFILES, "d", seed=3)
    assert executor.load("m") == ProfileServiceTime(PROFILES).load_ms("d", "m") == 3.0
    for _ in range(5):
        executor.run("m", None, 15)
    expected = ProfileServiceTime(PROFILES, sampled=True)
    rng = np.random.default_rng(3)
    assert slept[1:] == [expected.sample_ms("d", "m", 15, rng) / 1000.0 for _ in range(5)]


IMAGE_PROFILES = PROFILES.model_copy(update={"variants": [
    PROFILES.variants[0].model_copy(update={"image_prepare_ms": 1.5})]})


def test_each_image_a_batch_carries_adds_its_profiled_preparation():
    for service in (ProfileServiceTime(IMAGE_PROFILES), ProfileServiceTime(IMAGE_PROFILES, sampled=True)):
        assert service.prepare_ms("d", "m", 4) == 6.0
        assert service.expected_ms("d", "m", 15, images=4) == 8.0 + 6.0
        assert service.sample_ms("d", "m", 15, np.random.default_rng(1), images=4) - \
            service.sample_ms("d", "m", 15, np.random.default_rng(1)) == 6.0
    assert ProfileServiceTime(PROFILES).expected_ms("d", "m", 15, images=4) == 8.0  # not measured: nothing
    assert IMAGE_PROFILES.variants[0].latency_ms(15, images=4) == 14.0


def test_an_emulated_worker_takes_the_profiled_time_to_prepare_images_and_reads_none(monkeypatch):
    slept = []
    monkeypatch.setattr("services.worker.executors.time.sleep", slept.append)
    executor = EmulatedExecutor(IMAGE_PROFILES, "d")
    inputs = encode_images([b"not even an image", b"nor this", b"nor that"])
    (query,) = read_batch([inputs.tensors], inputs.binary)
    assert executor.prepare("m", query) is None and slept == [0.0045]
    executor.prepare("m", read_batch([encode(np.zeros((2, 3), np.float32))], b"")[0])
    assert slept == [0.0045]  # a numeric tensor: nothing to decode


def test_fleet_ids_and_order():
    fleet = make_fleet({"g": 2, "c": 1}, ["m"], max_batch=7)
    assert [(w.worker_id, w.device, w.variants, w.max_batch) for w in fleet] == [
        ("g-0", "g", ("m",), 7), ("g-1", "g", ("m",), 7), ("c-0", "c", ("m",), 7)
    ]
