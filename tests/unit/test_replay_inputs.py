"""A record of real arrivals turned into the simulator's inputs, and both sides scored by one scorecard."""
from __future__ import annotations

import math

import numpy as np
import pytest

from schemas import HopTimestamps, Query, Result, ResultStatus, WorkerHeartbeat, WorkerStopped
from shared.catalogue import Catalogue
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.sim.replay import fleet_from_events, live_outcomes, what_if_fleet, workloads_from
from shared.sim.scorecard import Outcomes, Tenure, fleet_cost, over_time, score


def catalogue() -> Catalogue:
    devices = [DeviceType(name="cpu", kind="cpu", price_per_hour=0.36),
               DeviceType(name="gpu", kind="gpu", price_per_hour=3.6)]
    variants = [VariantProfile(variant=f"m-{size}", family="m", device=device, accuracy=accuracy,
                               batch_latency_ms={1: latency, 8: 4 * latency}, max_batch=8)
                for size, accuracy, latency in (("s", 0.7, 5.0), ("l", 0.9, 20.0)) for device in ("cpu", "gpu")]
    return Catalogue(ProfileSet(source="test", devices=devices, variants=variants), {"app": ["m"]})


def query(k: int, sent_at: float, **fields) -> Query:
    return Query(**{"query_id": f"q{k}", "application": "app", "model": "m", "slo_ms": 100.0, "batch_size": 1,
                    "sent_at": sent_at, **fields})


def beat(worker: str, device: str, at: float, variants=("m-l", "m-s")) -> tuple[float, WorkerHeartbeat]:
    return at, WorkerHeartbeat(worker_id=worker, device=device, emulated=True, variants=list(variants), max_batch=8,
                               inflight=0, busy_fraction=0.0, price_per_hour=0.0, at=at)


def test_the_fleet_is_every_worker_that_heartbeated_with_its_time_in_the_fleet() -> None:
    events = [beat("a", "cpu", 10.0), beat("b", "gpu", 11.0), beat("a", "cpu", 12.0, variants=("m-s",)),
              (15.0, WorkerStopped(worker_id="b", at=15.0))]
    fleet = {w.worker_id: w for w in fleet_from_events(events)}
    assert fleet["a"].first_seen_s == 10.0 and fleet["a"].variants == ("m-s",) and fleet["a"].stopped_s is None
    assert fleet["b"].stopped_s == 15.0 and fleet["b"].sim_worker().device == "gpu"


def test_a_what_if_fleet_copies_what_recorded_peers_hosted_or_everything_profiled() -> None:
    recorded = fleet_from_events([beat("a", "cpu", 0.0, variants=("m-s",))])
    workers = what_if_fleet(recorded, {"cpu": 2, "gpu": 1}, catalogue(), ["app"])
    assert [(w.device, w.variants) for w in workers] == [("cpu", ("m-s",)), ("cpu", ("m-s",)), ("gpu", ("m-l", "m-s"))]
    with pytest.raises(ValueError, match="'tpu' has no profile"):
        what_if_fleet(recorded, {"tpu": 1}, catalogue(), ["app"])


def test_workloads_keep_each_query_its_send_time_and_goals() -> None:
    queries = [query(0, 100.5), query(1, 100.2), query(2, 100.9, slo_ms=50.0), query(3, 101.0, model="m-s")]
    workloads = {(w.slo_ms, w.candidate_variants): w for w in workloads_from(queries, catalogue(), 100.0)}
    family = workloads[(100.0, ("m-s", "m-l"))]
    assert family.arrival_s.tolist() == pytest.approx([0.2, 0.5])
    assert workloads[(50.0, ("m-s", "m-l"))].arrival_s.tolist() == pytest.approx([0.9])
    assert workloads[(100.0, ("m-s",))].arrival_s.tolist() == pytest.approx([1.0])


def test_live_outcomes_count_only_ok_answers_as_answered() -> None:
    queries = [query(0, 0.0), query(1, 0.0), query(2, 0.0)]
    answers = {"q0": (Result(query_id="q0", status=ResultStatus.OK, variant="m-l", timestamps=HopTimestamps()), 0.05),
               "q1": (Result(query_id="q1", status=ResultStatus.DROPPED, reason="late"), 0.01)}
    outcomes = live_outcomes(queries, answers)
    assert outcomes.answered_s[0] == 0.05 and math.isnan(outcomes.answered_s[1]) and math.isnan(outcomes.answered_s[2])
    assert outcomes.variant.tolist() == ["m-l", "", ""]


def outcomes(sent, answered, variants, slo=100.0) -> Outcomes:
    n = len(sent)
    return Outcomes(np.array(["app"] * n, dtype=object), np.full(n, slo), np.array(sent, dtype=float),
                    np.array(answered, dtype=float), np.array(variants, dtype=object))


def test_the_scorecard_counts_late_and_unanswered_queries_against_the_slo() -> None:
    card = score(outcomes([0.0, 0.0, 0.0, 0.0], [0.05, 0.2, np.nan, 0.09], ["m-l", "m-s", "", "m-s"]),
                 {"m-l": 90.0, "m-s": 70.0}, 1.5)
    assert card.slo_attainment == 0.5  # one late, one never answered
    assert card.effective_accuracy == pytest.approx((90 + 70 + 70) / 3)
    assert card.dropped == 1 and card.p50_ms == pytest.approx(90.0) and card.cost_dollars == 1.5


def test_pooled_draws_score_rates_over_all_draws_and_counts_per_draw() -> None:
    first = outcomes([0.0, 0.0], [0.05, np.nan], ["m-l", ""])
    second = outcomes([0.0, 0.0], [0.05, 0.09], ["m-l", "m-s"])
    card = score(Outcomes.pooled([first, second]), {"m-l": 90.0, "m-s": 70.0}, 1.5, draws=2)
    assert card.queries == 2 and card.dropped == 0  # one drop in two draws rounds to none per draw
    assert card.slo_attainment == 0.75 and card.effective_accuracy == pytest.approx((90 + 90 + 70) / 3)
    series = over_time(Outcomes.pooled([first, second]), {"m-l": 90.0}, start_s=0.0, bin_s=5.0, draws=2)
    assert series["sent"] == [2] and series["slo_attainment"] == [0.75]


def test_fleet_cost_charges_each_worker_its_time_in_the_window() -> None:
    tenures = [Tenure("cpu", 0.0, None), Tenure("gpu", 1800.0, 5400.0), Tenure("gpu", -100.0, 10.0)]
    # cpu: the whole hour at $0.36; gpu: the half hour inside the window at $3.6; the last: 10 s
    assert fleet_cost(tenures, {"cpu": 0.36, "gpu": 3.6}, 0.0, 3600.0) == pytest.approx(0.36 + 1.8 + 0.01)


def test_over_time_scores_each_bin_of_send_time() -> None:
    series = over_time(outcomes([0.1, 0.2, 5.5], [0.15, 0.5, 5.55], ["m-l", "m-l", "m-s"]), {"m-l": 90.0, "m-s": 70.0},
                       start_s=0.0, bin_s=5.0)
    assert series["t_s"] == [0.0, 5.0] and series["sent"] == [2, 1]
    assert series["slo_attainment"] == [0.5, 1.0] and series["effective_accuracy"] == [90.0, 70.0]
