"""The demo's second act: a load with room for the fleet to move, the fleets it starts from and is billed
against, and the bill's arithmetic."""
from __future__ import annotations

import numpy as np
import pytest

from services.demo import bill
from services.demo.report import phases
from shared.settings import InitialMachine, Settings
from shared.sim.scorecard import Tenure


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings().model_copy(update=bill.FIELDS)


def test_the_act_serves_vision_alone_by_infaas(settings) -> None:
    assert settings.applications == {"vision": ["efficientnet-lite"]}
    assert settings.scheduler_policy == "infaas" and settings.application_policies == {}


def test_the_load_rises_to_its_peak_and_falls_below_where_it_began(settings) -> None:
    rates = bill.rates(settings)
    assert len(rates) == bill.DURATION_S and rates.max() == pytest.approx(bill.PEAK_QPS)
    top = int(np.argmax(rates))
    assert 0.2 * len(rates) < top < 0.8 * len(rates)
    assert rates[0] < bill.PEAK_QPS / 2 and rates[-1] < rates[0]
    assert [p.name for p in phases(rates, bill.PEAK_QPS / 2)] == ["low", "peak", "after"]
    sent = np.array([t for t, _ in bill.schedule(settings)])
    assert len(sent) == pytest.approx(rates.sum(), rel=0.05)


def test_the_first_fleet_is_smaller_than_the_one_sized_for_the_peak(settings) -> None:
    first, peak = bill.settled_fleet(settings, bill.rates(settings)[0]), bill.settled_fleet(settings, bill.PEAK_QPS)
    assert 1 <= len(first.devices) < len(peak.devices)
    assert first.per_hour < peak.per_hour
    assert [m.device for m in first.machines] == list(first.devices) and all(m.variants for m in first.machines)


def test_the_bill_counts_running_workers_against_the_peak_fleet_held_throughout() -> None:
    peak = bill.Fleet((InitialMachine(device="cpu"),) * 3, 0.3)
    # one cpu throughout, a second for the middle half of a 3,600 s act: 1.5 cpu-hours at $0.1
    tenures = [Tenure("cpu", 0.0, None), Tenure("cpu", 900.0, 2700.0)]
    got = bill.following_bill(tenures, {"cpu": 0.1}, 0.0, 3600.0, peak, ok=1000)
    assert got["dollars"] == pytest.approx(0.15) and got["peak_fleet_dollars"] == pytest.approx(0.3)
    assert got["dollars_per_1000_ok"] == pytest.approx(0.15) and got["cheaper_than_peak_fleet_x"] == 2.0
    assert "2.00x less" in bill.bill_line(got, peak) and "3 x cpu" in bill.bill_line(got, peak)
    assert bill.following_bill([], {"cpu": 0.1}, 0.0, 3600.0, peak, ok=0)["cheaper_than_peak_fleet_x"] is None
