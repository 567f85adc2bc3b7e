"""The simulator's Kafka hops: fitted from per-hop timestamps, and what they do to a run."""
from __future__ import annotations

import numpy as np
import pytest

from shared.policy.fcfs import FcfsDispatch
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.sim import SimWorker, Workload, simulate
from shared.sim.transport import LEVELS, HopLatency, HopRecord, TransportModel, fit_transport


def constant(seconds: float) -> HopLatency:
    return HopLatency(quantiles_s=[seconds] * len(LEVELS), samples=1)


def transport(to_scheduler=0.0, to_worker=0.0, publish=0.0, overhead=0.0, to_client=0.0) -> TransportModel:
    return TransportModel(to_scheduler=constant(to_scheduler), to_worker=constant(to_worker),
                          publish_per_row=constant(publish), batch_overhead=constant(overhead),
                          to_client=constant(to_client))


def profiles(latency_ms: float = 10.0) -> ProfileSet:
    return ProfileSet(source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)],
                      variants=[VariantProfile(variant="m", family="m", device="cpu",
                                               batch_latency_ms={1: latency_ms, 2: 2 * latency_ms}, max_batch=2)])


def run(arrivals, model=None, *, slo_ms=1000.0, workers=1):
    work = Workload(np.asarray(arrivals, dtype=float), np.ones(len(arrivals), dtype=int), "app", slo_ms, ("m",))
    fleet = [SimWorker(f"w{k}", "cpu", ("m",), 1) for k in range(workers)]
    return simulate(work, fleet, FcfsDispatch(), profiles(), transport=model, seed=1)


def test_a_hop_fitted_from_delays_draws_within_them() -> None:
    hop = HopLatency.fit([0.001, 0.002, 0.003, 0.010])
    draws = hop.draw(np.random.default_rng(0), 1000)
    assert draws.min() >= 0.001 and draws.max() <= 0.010
    assert hop.quantile_ms(0.5) == pytest.approx(2.5)
    assert HopLatency.fit([]).samples == 0 and HopLatency.fit([]).quantile_ms(0.99) == 0.0


def test_a_stall_is_counted_not_fitted() -> None:
    """200 ms of a stalled broker, on 1% of the messages: drawn independently it would hold up 1% of every
    later batch's path; the hop's own tail (up to 12 ms here) is kept."""
    rng = np.random.default_rng(0)
    delays = np.concatenate([rng.gamma(4.0, 0.0005, 990), [0.012], np.full(9, 0.2)])
    hop = HopLatency.fit(delays)
    assert hop.stalls == 9 and hop.samples == 991
    assert hop.quantile_ms(1.0) == pytest.approx(12.0) and hop.quantile_ms(0.5) < 2.5


def test_fit_reads_each_hop_the_publishing_and_the_overhead_between_back_to_back_batches() -> None:
    # b2 was dispatched (1.002) well before b1 finished computing (1.020): from b1's last result sent
    # (1.022) to b2's start (1.025) the worker did its own work; b2 was read (1.021) once b1 was done, so
    # only b1's read (1 ms after its dispatch) measures the hop to the worker
    records = [HopRecord("w", "b1", 1.000, 1.001, 1.002, 1.003, 1.004, 1.020, 1.021, 1.024),
               HopRecord("w", "b1", 1.0005, 1.0015, 1.002, 1.003, 1.004, 1.020, 1.022, 1.026),
               HopRecord("w", "b2", 1.0010, 1.0018, 1.002, 1.021, 1.025, 1.035, 1.036, 1.040)]
    model = fit_transport(records)
    assert model.to_scheduler.samples == 3
    assert model.to_worker.samples == 1 and model.to_worker.quantile_ms(1.0) == pytest.approx(1.0)
    assert model.publish_per_row.samples == 3 and model.publish_per_row.quantile_ms(0.5) == pytest.approx(1.0)
    assert model.batch_overhead.samples == 1 and model.batch_overhead.quantile_ms(0.5) == pytest.approx(3.0)
    assert model.to_client.quantile_ms(0.0) == pytest.approx(3.0)
    assert model.to_client.quantile_ms(1.0) == pytest.approx(4.0)


def test_answers_of_a_batch_leave_one_by_one_and_its_end_is_heard_after_the_last() -> None:
    result = run([0.0, 0.0], transport(publish=0.001, to_client=0.002), workers=1)
    # one worker, max batch 1 here: the second query waits for the first's result and its event
    assert result.latency_ms[0] == pytest.approx(10.0 + 1 + 2)
    assert result.start_s[1] == pytest.approx(0.010 + 0.001 + 0.002)


def test_without_transport_a_lone_query_takes_its_compute_and_with_it_every_hop() -> None:
    ideal = run([0.0])
    assert ideal.latency_ms[0] == pytest.approx(10.0)
    slow = run([0.0], transport(to_scheduler=0.003, to_worker=0.002, to_client=0.004))
    assert slow.latency_ms[0] == pytest.approx(10.0 + 3 + 2 + 4)


def test_the_deadline_counts_from_the_send_so_a_slow_hop_in_drops_the_query() -> None:
    result = run([0.0], transport(to_scheduler=0.995), slo_ms=1000.0)
    assert not result.served[0] and "deadline" in result.dropped[0]


def test_per_batch_overhead_slows_a_busy_worker_down() -> None:
    arrivals = np.zeros(20)
    busy = run(arrivals, transport(overhead=0.005))
    ideal = run(arrivals)
    # 20 batches of 10 ms back to back, each followed by 5 ms of the worker's own work
    assert np.nanmax(ideal.finish_s) == pytest.approx(0.200)
    assert np.nanmax(busy.finish_s) == pytest.approx(0.200 + 19 * 0.005)


def test_transport_changes_no_service_draw_and_runs_are_reproducible() -> None:
    model = TransportModel(to_scheduler=HopLatency.fit(np.linspace(0.001, 0.004, 50)), to_worker=constant(0.001),
                           publish_per_row=constant(0.0001), batch_overhead=constant(0.0),
                           to_client=HopLatency.fit(np.linspace(0.001, 0.01, 50)))
    arrivals = np.sort(np.random.default_rng(2).random(300)) * 3.0
    first, second = run(arrivals, model, workers=2), run(arrivals, model, workers=2)
    assert np.array_equal(first.finish_s, second.finish_s, equal_nan=True)
    assert first.num_served == 300
