"""The autoscaler service on the real stack: from no worker at all it starts one when queries arrive,
starts another while the load rises and before one machine falls short of it, and gives it back when the
load is gone, losing no query; the rise's SLO holds for all but a few of its queries, judged on a host that
was given its CPU (`tests.integration.host_cpu`).

Workers emulate cpu-1t EfficientNet-Lite from its measured profile (one machine serves about 100 images/s
within the SLO's half), so the rise outgrows one machine.
"""
from __future__ import annotations

import re
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator

import pytest

from schemas import Query, Result, ResultStatus
from services.launcher import LocalLauncher, metrics_text, read_metric, wait_until
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin
from shared.profiles.format import ProfileSet
from shared.settings import REPO_ROOT
from tests.integration.host_cpu import MAX_STOLEN_SHARE, cpu_jiffies, stolen_share
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

SCHEDULER_PORT, AUTOSCALER_PORT = 19741, 19742
ENV = {"MERIDIAN_APPLICATIONS": '{"vision": ["efficientnet-lite"]}', "MERIDIAN_LOCAL_DEVICE": "none",
       "MERIDIAN_AUTOSCALER_METRICS_PORT": str(AUTOSCALER_PORT), "MERIDIAN_AUTOSCALER_WORKER_PORT_BASE": "19750",
       "MERIDIAN_LOAD_STATS_INTERVAL_S": "1.0", "MERIDIAN_INFAAS_SLACK_THRESHOLD": "2.0"}
SLO_MS = 500.0
#: the rise: 20 to 180 queries/s over 90 s, then held. One machine serves about 100; with the paper's 5% of
#: headroom (slack 1.05) the replica comes ~3 s before that machine is full and 0.7% of the rise missed here.
#: With 30% the ask came 7 s before the first miss alone, but 3.5 s after it in a CI run sharing the host
#: with the rest of the suite (a machine then serves less than its profile). With 50%, on a host 2-3x
#: slower, a machine missed from ~78 queries/s on and its replica, asked for at ~70-78, came one boot later:
#: 2.0-2.2% of the rise missed in both full runs of the suite (it passed alone). So the autoscaler keeps
#: 100%, which asks at ~50 queries/s, some 15 s of the rise before one machine falls short.
#: The ask used to be held to come before the rise's first miss; in a CI run one stray late query 12.9 s
#: into the rise (at ~43 queries/s, one machine idle enough) failed it, so proactivity is now judged by
#: the load the ask came at: below what one machine serves, where a reactive autoscaler cannot yet ask.
#: On 2026-12-03, with a third of the host's CPU stolen by its neighbours, a quarter to half of the rise was
#: dropped from ~40 queries/s on, in four runs; one cause was the core's: it sent a deadline-sized batch (a
#: row or two) only after the one before it came back. With such a batch followed ahead
#: (`TrackedWorker.takes_next`), two runs with a third stolen missed 2.0% and 36%; with 0.7 of a core
#: taken by a busy process instead (none stolen), 1.7%; on a quiet host, under 1%.
RISE_S, PEAK_QPS, HOLD_S = 90.0, 180.0, 10.0
#: the share of the rise that may miss its SLO: a fleet left at one machine misses about a fifth of it or
#: more (all that arrives beyond ~110 queries/s, from 51 s on); with the autoscaler, misses here were 0.2%
#: (CI) and under 1% to 2.6% on this host; judged where it was given its CPU (`host_cpu.MAX_STOLEN_SHARE`)
MAX_MISSED_SHARE = 0.03
#: the steady 20 queries/s served before the rise: this module runs first in the suite, on a broker started
#: moments before (in one `make test` it failed there and passed alone minutes later), and the rise should
#: meet a stack as settled as a later module's
WARM_S = 15.0


def offered_qps(seconds_into_rise: float) -> float:
    return 20.0 + (PEAK_QPS - 20.0) * min(1.0, seconds_into_rise / RISE_S)


def one_machine_qps() -> float:
    """Rows/s the best cpu-1t variant sustains with batches within half the SLO, from its profile."""
    profiles = ProfileSet.load(REPO_ROOT / "profiles" / "efficientnet-lite.json")
    return max(batch * 1000.0 / ms for p in profiles.variants if p.device == "cpu-1t"
               for batch, ms in p.batch_latency_ms.items() if ms <= SLO_MS / 2)


def actions(kind: str) -> float:
    text = metrics_text(AUTOSCALER_PORT)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("meridian_scaling_actions_total{") and f'action="{kind}"' in line)


def within_slo(query: Query, result: Result, received: float) -> bool:
    return result.status is ResultStatus.OK and (received - query.sent_at) * 1000.0 <= SLO_MS


def misses_by_time(missed: list[Query], results: dict, since: float) -> str:
    """Where the misses fall, per 5 s of the rise, as late / not ok, and why the not-ok ones were: what a
    failure needs to be read."""
    late, not_ok, reasons = Counter(), Counter(), Counter()
    for query in missed:
        result, _ = results[query.query_id]
        (late if result.status is ResultStatus.OK else not_ok)[int((query.sent_at - since) // 5) * 5] += 1
        if result.status is not ResultStatus.OK:
            reasons[f"{result.status.value}: {re.sub(r'[0-9.]+', 'N', result.reason or '')[:80]}"] += 1
    spread = ", ".join(f"{t}-{t + 5} s: {late[t]} late / {not_ok[t]} not ok" for t in sorted(late | not_ok))
    return f"{spread}; not ok: {dict(reasons.most_common(3))}"


def vision_query() -> Query:
    return Query(query_id=f"as-{uuid.uuid4().hex}", application="vision", slo_ms=SLO_MS, batch_size=1,
                 sent_at=time.time())


@pytest.fixture(scope="module")
def autoscaled(stack, settings, tmp_path_factory) -> Iterator[LocalLauncher]:
    with LocalLauncher({**stack.env, **ENV}, tmp_path_factory.mktemp("autoscaler-logs")) as launcher:
        launcher.start_scheduler(metrics_port=SCHEDULER_PORT)
        autoscaler = launcher.start_service("autoscaler", "services.autoscaler", metrics_port=AUTOSCALER_PORT)
        wait_until(lambda: read_metric(AUTOSCALER_PORT, "meridian_dead_letters_total") is not None, 60,
                   "the autoscaler", [autoscaler])
        yield launcher
    # its group would fall further behind on the load statistics of every later module's scheduler, and
    # rightly fire the lag alert that test_observability expects silent
    admin = make_admin(settings)
    try:
        admin.delete_groups(["meridian.autoscaler"])
    finally:
        admin.close()


def test_starts_a_worker_before_the_rise_misses_and_stops_it_after_the_fall_losing_nothing(autoscaled,
                                                                                         settings) -> None:
    with MeridianClient(settings, applications=["vision"]) as client:
        with Sender(client, vision_query, 20.0) as load:
            wait_until(lambda: any(r.status is ResultStatus.OK for r, _ in list(client.results.values())), 90,
                       "a worker the autoscaler started to answer", list(autoscaled.processes.values()))
            time.sleep(WARM_S)
            started = actions("start")
            rise_began, cpu_before = time.time(), cpu_jiffies()
            load.follow(offered_qps)
            asked_at = None
            while time.time() < rise_began + RISE_S + HOLD_S:
                if asked_at is None and actions("start") > started:
                    asked_at = time.time()
                time.sleep(0.5)
            load.follow(lambda _: 0.0)
            stolen = stolen_share(cpu_before)
            rise = [q for q in load.sent if q.sent_at >= rise_began]
            assert client.wait_for([q.query_id for q in load.sent], timeout_s=30), "a query was lost"
            assert asked_at is not None, "the autoscaler added no machine for the rise"
            cost = read_metric(AUTOSCALER_PORT, "meridian_fleet_cost_dollars_per_hour")
            assert cost is not None and cost > 0
            # the machine was asked for while one machine still served the load, and the SLO held
            missed = [q for q in rise if not within_slo(q, *client.results[q.query_id])]
            when = misses_by_time(missed, client.results, rise_began)
            asked_qps, capacity = offered_qps(asked_at - rise_began), one_machine_qps()
            assert asked_qps < capacity, (
                f"the autoscaler asked for a machine {asked_at - rise_began:.1f} s into the rise, at {asked_qps:.0f} "
                f"queries/s, when one machine serves {capacity:.0f}; {len(missed)} of {len(rise)} missed: {when}")
            verdict = (f"{len(missed)} of {len(rise)} queries of the rise missed (asked at {asked_at - rise_began:.1f} "
                       f"s, {stolen:.0%} of the host's CPU stolen): {when}")
            if stolen <= MAX_STOLEN_SHARE:
                assert len(missed) <= MAX_MISSED_SHARE * len(rise), verdict
            else:
                warnings.warn(f"the SLO is not judged on a host starved of its CPU: {verdict}", stacklevel=1)
            stopped = actions("stop")
            wait_until(lambda: actions("stop") > stopped, 120, "the autoscaler to stop an idle worker",
                       list(autoscaled.processes.values()))
