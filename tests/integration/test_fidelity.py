"""The fidelity bench's quick mode on the real stack: FCFS live through Kafka, then the simulator on the
arrivals read back from the queries topic, with the Kafka hops fitted from a calibration run.

The peak is below the fleet's capacity: at and past it, two live runs of the same 30 s were seen 3-4
points of SLO attainment apart, which no bound on one run's gap can tell from a wrong simulator.

The hops are fitted from the calibration run and the simulator is judged on the next: where the host's
hypervisor took more than `MAX_STOLEN_SHARE` of its CPU meanwhile (`tests.integration.host_cpu`), the stalls
it caused differ from run to run (on 2026-12-03, with 31% taken, the live run attained 82.9% and its
simulation 69.3%), and the gaps are reported, not judged."""
from __future__ import annotations

import warnings

import pytest

from bench.fidelity import QUICK_PEAK_OVER_CAPACITY, run_bench
from tests.integration.host_cpu import MAX_STOLEN_SHARE, cpu_jiffies, stolen_share

pytestmark = pytest.mark.integration


def test_live_and_simulated_fcfs_agree(stack, tmp_path) -> None:
    cpu_before = cpu_jiffies()
    outcome = run_bench(stack, ["fcfs"], duration_s=30.0, calibration_s=10.0, logs=tmp_path,
                        peak_over_capacity=QUICK_PEAK_OVER_CAPACITY)
    entry = outcome["policies"]["fcfs"]
    assert entry["queries_sent"] == entry["queries_read_back"] == outcome["queries"], "the record is what was sent"
    assert entry["answered"] == entry["queries_sent"], "every query got a final result"
    assert len(entry["fleet"]) == 4 and sum("emulated" in w for w in entry["fleet"]) == 3
    assert outcome["transport"].to_scheduler.samples > 100
    gaps, stolen = entry["gaps"], stolen_share(cpu_before)
    live_p50, sim_p50 = entry["live"].card.p50_ms, entry["sim"].card.p50_ms
    if stolen > MAX_STOLEN_SHARE:
        warnings.warn(f"live and simulated FCFS not judged on a host with {stolen:.0%} of its CPU stolen: {gaps}, "
                      f"p50 {live_p50} ms live, {sim_p50} ms simulated", stacklevel=1)
        return
    # the bench's target is 2 points and 0.5 points; a 30 s run on a shared CI machine gets a looser bound
    assert abs(gaps["slo_attainment_points"]) <= 5.0, gaps
    assert abs(gaps["effective_accuracy_points"]) <= 1.0, gaps
    # at this load the hops are half of a query's median time: an ideal machine answers twice as fast
    assert abs(sim_p50 - live_p50) <= 0.25 * live_p50, (live_p50, sim_p50)
