"""`LearnedProfiles`: profiles corrected by what batches showed, never below what was profiled."""
from __future__ import annotations

import pytest

from schemas import BatchFinished
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.profiles.learned import LearnedProfiles

PROFILES = ProfileSet(source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], variants=[
    VariantProfile(variant="m", family="f", device="cpu", batch_latency_ms={1: 10.0, 2: 15.0, 4: 25.0}, max_batch=4)])


def finished(at: float, started: float, compute_ms: float, rows: int = 4, worker: str = "w") -> BatchFinished:
    return BatchFinished(worker_id=worker, batch_id=f"b{at}", variant="m", device="cpu", rows=rows,
                         compute_ms=compute_ms, ok=True, compute_started_at=started, at=at)


def test_a_device_slower_than_profiled_is_learnt_and_unseen_sizes_scale_with_it() -> None:
    learned = LearnedProfiles(PROFILES, refresh_every=1)
    for _ in range(20):
        learned.observe("cpu", "m", 3, 50.0)  # profiled 25 ms at size 4: twice as slow
    profile = learned.profiles().get("m", "cpu")
    assert profile.batch_latency_ms[4] == pytest.approx(50.0, rel=0.01)
    assert profile.batch_latency_ms[1] == pytest.approx(20.0, rel=0.01)  # the worst ratio seen, 2x
    assert learned.version >= 1


def test_a_faster_device_keeps_its_profile_and_a_few_batches_change_nothing() -> None:
    learned = LearnedProfiles(PROFILES, refresh_every=1, min_batches=5)
    for _ in range(4):
        learned.observe("cpu", "m", 4, 90.0)
    assert learned.profiles() is PROFILES and learned.version == 0
    for _ in range(20):
        learned.observe("cpu", "m", 1, 5.0)
    assert learned.profiles().get("m", "cpu").batch_latency_ms[1] >= 10.0


def test_the_overhead_of_a_busy_worker_is_added_to_every_batch() -> None:
    """Back to back, a batch starts 3 ms after the previous end event, and its own results and end take
    2 ms after its compute: 5 ms a batch that the profile does not show."""
    learned = LearnedProfiles(PROFILES, refresh_every=1)
    end = 0.0
    for _ in range(30):
        started = end + 0.003
        end = started + 0.025 + 0.002
        learned.observe_event(finished(end, started, 25.0))
    assert learned.overhead_ms("cpu") == pytest.approx(5.0, abs=0.01)
    assert learned.profiles().get("m", "cpu").batch_latency_ms[4] == pytest.approx(30.0, abs=0.05)


def test_an_idle_gap_is_not_overhead() -> None:
    learned = LearnedProfiles(PROFILES, refresh_every=1)
    learned.observe_event(finished(1.0, 0.975, 25.0))
    learned.observe_event(finished(2.0, 1.975, 25.0))  # started 975 ms after the previous end: idle
    assert learned.overhead_ms("cpu") == 0.0
