"""The demo's fourth act, and ``make bench-priorities``' live half: two priority classes, one overloaded worker.

One application (``vision``, EfficientNet-Lite0 pinned, a 200 ms SLO) on one worker that emulates ``cpu-1t``
from its measured profile (about 110 q/s at its best batch): a high class (1) at 40% of that capacity and
a low class (9) making up the rest of an offered load of 1x-3x capacity, both Poisson
(`shared.sim.scenarios.priorities`), sent open loop; or served by the same policy in the simulator
(`simulated`). The high class should keep its SLO: the serving core's
priority gate (`shared.serving.priorities`) shows the policy the low class only while the high class leaves
room, and sheds what can no longer start in time.
"""
from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from schemas import Query, ResultStatus
from services.launcher import LocalLauncher
from services.replay.comparison import sim_config, sim_policy
from services.serve_config import settings_env
from shared.adapters.client import MeridianClient
from shared.catalogue import Catalogue
from shared.serving.service_time import ProfileServiceTime
from shared.serving.wording import reason_kind
from shared.settings import Settings
from shared.sim.engine import simulate
from shared.sim.scenarios.priorities import (HIGH, ClassMix, ClassOutcome, class_outcomes, sim_class_outcomes,
                                             workloads)
from shared.sim.workers import SimWorker

APPLICATION, FAMILY, VARIANT, DEVICE = "vision", "efficientnet-lite", "efficientnet-lite0", "cpu-1t"
SLO_MS = 200.0
#: the act's offered load (x capacity) and length
LOAD, DURATION_S = 2.0, 20.0
#: seconds at half the high class's rate, unmeasured, before the first point (a fresh scheduler learns its hops)
WARM_UP_S = 5.0


def policy_settings(policy: str) -> dict[str, object]:
    """What every process of a run starts with (the simulator reads the same values)."""
    fields: dict[str, object] = {"applications": {APPLICATION: [FAMILY]}, "application_slo_ms": {APPLICATION: SLO_MS},
                                 "scheduler_policy": policy, "application_policies": {}, "load_stats_interval_s": 1.0}
    if policy == "proteus":
        fields |= {"planner": "proteus", "planner_fleet": {DEVICE: 1}, "replan_period_s": 5.0}
    return fields


def capacity_qps(catalogue: Catalogue) -> float:
    """Queries a second the worker serves at one row each, at its best batch size."""
    profile = catalogue.profile(VARIANT, DEVICE)
    return max(batch / latency_ms * 1000.0 for batch, latency_ms in profile.batch_latency_ms.items())


def simulated(policy: str, catalogue: Catalogue, mix: ClassMix, duration_s: float, seed: int, *,
              gate: bool = True) -> dict[int, ClassOutcome]:
    """How each class of ``mix`` fares in the simulator, served by ``policy`` built as the live scheduler (and
    planner) builds it from the live run's settings, on an ideal machine (no Kafka hops); ``gate=False``: every
    class shown to the policy at once, the baseline."""
    settings = Settings().model_copy(update=policy_settings(policy))
    dispatch, controller = sim_policy(policy, settings, catalogue)
    config = sim_config(settings, ideal=True)
    if not gate:
        config = dataclasses.replace(config, priority_hold_share=math.inf)
    loads = workloads(mix, application=APPLICATION, slo_ms=SLO_MS, candidates=(VARIANT,), duration_s=duration_s,
                      seed=seed)
    result = simulate(loads, [SimWorker("w0", DEVICE, (VARIANT,), catalogue.profile(VARIANT, DEVICE).max_batch)],
                      dispatch, catalogue.profiles, service=ProfileServiceTime(catalogue.profiles, sampled=True),
                      controller=controller, control_interval_s=settings.load_stats_interval_s, config=config,
                      fleet_follows_plans=False, seed=seed)
    return sim_class_outcomes(result, duration_s)


def plan(mix: ClassMix, duration_s: float, seed: int) -> list[tuple[float, int]]:
    """(send offset, class) of every query, in send order."""
    loads = workloads(mix, application=APPLICATION, slo_ms=SLO_MS, candidates=(VARIANT,), duration_s=duration_s,
                      seed=seed)
    return sorted((float(t), w.priority) for w in loads for t in w.arrival_s)


@contextmanager
def running(stack_env: dict[str, str], stack_settings: Settings, log_dir: Path, policy: str, *,
            metrics_port: int) -> Iterator[MeridianClient]:
    """The scheduler (with Proteus' planner for ``proteus``) and the emulating worker, on metrics ports from
    ``metrics_port`` up, warmed up; a client of the application."""
    fields = policy_settings(policy)
    with LocalLauncher({**stack_env, **settings_env(fields)}, log_dir) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=metrics_port)
        if policy == "proteus":
            launcher.start_planner(metrics_port=metrics_port + 2)
        launcher.start_worker(f"{DEVICE}-emu", variants=[VARIANT], emulate=DEVICE, metrics_port=metrics_port + 1)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        with MeridianClient(stack_settings.model_copy(update=fields), applications=[APPLICATION]) as client:
            warm = send(client, [(k / 20.0, HIGH) for k in range(int(20 * WARM_UP_S))])
            client.wait_for([q.query_id for q in warm], timeout_s=30)
            yield client


def send(client: MeridianClient, sends: Sequence[tuple[float, int]]) -> list[Query]:
    """Each query at its offset from now (open loop: a late answer never delays the next send)."""
    run, sent, start = uuid.uuid4().hex[:6], [], time.time()
    for index, (offset, priority) in enumerate(sends):
        time.sleep(max(0.0, start + offset - time.time()))
        sent.append(client.send(Query(query_id=f"prio-{run}-{index}", application=APPLICATION, model=VARIANT,
                                      slo_ms=SLO_MS, priority=priority, batch_size=1, sent_at=time.time())))
    client.flush()
    return sent


class LiveOutcome(NamedTuple):
    classes: dict[int, ClassOutcome]
    #: queries shed for a higher class
    shed: int
    #: the high class's misses: answered late, not ok (by status and reason kind), unanswered
    high_missed: dict[str, int]


def serve(client: MeridianClient, sends: Sequence[tuple[float, int]], duration_s: float) -> LiveOutcome:
    """``sends`` sent and answered; how each class fared."""
    sent = send(client, sends)
    client.wait_for([q.query_id for q in sent], timeout_s=30)
    within, shed, missed = [], 0, Counter()
    for query in sent:
        result, received = client.results.get(query.query_id, (None, math.nan))
        ok = result is not None and result.status is ResultStatus.OK
        in_time = ok and (received - query.sent_at) * 1000.0 <= query.slo_ms
        within.append(in_time)
        shed += result is not None and (result.reason or "").startswith("shed for higher priorities")
        if query.priority == HIGH and not in_time:
            missed["unanswered" if result is None else "late" if ok else
                   f"{result.status.value}: {reason_kind(result.reason or '')}"] += 1
    return LiveOutcome(class_outcomes(np.array([q.priority for q in sent]), np.array(within), duration_s), shed,
                       dict(missed))


def describe(classes: dict[int, ClassOutcome]) -> str:
    return ", ".join(f"class {level} {100 * o.attainment:.2f}% within SLO ({o.goodput_qps:.1f} q/s)"
                     for level, o in classes.items())


def act(stack_env: dict[str, str], settings: Settings, *, metrics_port: int, policy: str = "infaas") -> LiveOutcome:
    """The demo's fourth act: `LOAD` x capacity for `DURATION_S`, served by ``policy``; prints each class."""
    capacity = capacity_qps(Catalogue.from_settings(settings.model_copy(update=policy_settings(policy))))
    mix = ClassMix(capacity, LOAD)
    print(f"\nact 4, priorities: {DURATION_S:.0f} s of {APPLICATION} at {LOAD:g}x what one worker serves "
          f"({VARIANT} on {DEVICE}, emulated: {capacity:.0f} q/s), class 1 at {mix.high_qps:.0f} q/s and class 9 at "
          f"{mix.low_qps:.0f} q/s, {SLO_MS:.0f} ms SLO, served by {policy}", flush=True)
    with running(stack_env, settings, settings.var_dir / "logs" / "priorities", policy,
                 metrics_port=metrics_port) as client:
        outcome = serve(client, plan(mix, DURATION_S, seed=5), DURATION_S)
    high, low = outcome.classes[mix.high], outcome.classes[mix.low]
    print(f"  class 1: {high.queries} sent, {100 * high.attainment:.2f}% within SLO ({high.goodput_qps:.1f} q/s)\n"
          f"  class 9: {low.queries} sent, {100 * low.attainment:.2f}% within SLO ({low.goodput_qps:.1f} q/s of the "
          f"{capacity - mix.high_qps:.0f} q/s class 1 leaves), {outcome.shed} shed for class 1", flush=True)
    return outcome
