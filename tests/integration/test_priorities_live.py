"""Priority classes through the real stack (``make demo``'s fourth act, short): one worker emulating ``cpu-1t``
offered twice what it serves, 40% of its capacity in class 1. The class rides the query, its batch and its
result; the scheduler sheds class 9 for class 1; both processes count results per class.

Live attainment is judged as the path's health (at least 90% of class 1 within its SLO, where the same
queries without the gate get about half, `tests/unit/test_priorities.py`): how close live comes to 99% is
``make bench-priorities``' figure, run alone."""
from __future__ import annotations

import pytest

from services.demo import priorities as act
from services.launcher import metrics_text
from shared.catalogue import Catalogue
from shared.sim.scenarios.priorities import ClassMix

pytestmark = pytest.mark.integration

METRICS_PORT = 19461


def test_class_1_keeps_its_slo_while_class_9_is_shed_and_each_result_names_its_class(stack, tmp_path) -> None:
    settings = stack.settings()
    mix = ClassMix(act.capacity_qps(Catalogue.from_settings(settings.model_copy(update=act.policy_settings("fcfs")))),
                   2.0)
    with act.running(stack.env, settings, tmp_path / "logs", "fcfs", metrics_port=METRICS_PORT) as client:
        outcome = act.serve(client, act.plan(mix, 8.0, seed=3), 8.0)
        classes = {result.priority for result, _ in client.results.values()}
        scheduler, worker = metrics_text(METRICS_PORT), metrics_text(METRICS_PORT + 1)
    high, low = outcome.classes[mix.high], outcome.classes[mix.low]
    assert high.attainment >= 0.9, outcome
    assert outcome.shed > 0.3 * low.queries and low.goodput_qps > 0.5 * (mix.capacity_qps - mix.high_qps), outcome
    assert classes == {1, 9}
    assert 'meridian_class_results_total{application="vision",outcome="dropped",priority="9"}' in scheduler
    assert 'meridian_class_results_total{application="vision",outcome="within_slo",priority="1"}' in worker
