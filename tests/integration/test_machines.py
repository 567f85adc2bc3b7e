"""Real workers know their machine: two real onnxruntime workers on this host, one given one thread and one
given two, announce different device keys and prices and the latencies they measured here, through the
real broker; a restart reads its measurement back instead of measuring again; and every policy serves the
two within the SLO, FCFS splitting the work as the simulator, told the same announcements, predicts."""
from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest

from bench import machine_shares
from schemas import WorkerHeartbeat, worker_event_adapter
from services.launcher import LocalLauncher, wait_until
from shared.adapters import topics
from shared.adapters.kafka_io import make_admin, make_consumer
from shared.modelzoo.profiler import BATCH_SIZES
from tests.integration.host_cpu import MAX_STOLEN_SHARE, cpu_jiffies, stolen_share

pytestmark = pytest.mark.integration

PORTS = {"mach-1t": 19891, "mach-2t": 19892}
PLANNER_GROUP = "meridian.planner"


class Heartbeats:
    """The worker events topic from now on, as the scheduler reads it: each worker's latest heartbeat."""

    def __init__(self, settings) -> None:
        self._consumer = make_consumer(settings, topics.WORKER_EVENTS, group_id=None, auto_offset_reset="latest")
        self._consumer.poll(timeout_ms=1000)  # joins at the end: earlier workers' heartbeats are not these
        self.latest: dict[str, tuple[float, WorkerHeartbeat]] = {}

    def wait_for(self, workers: set[str], timeout_s: float, *, after: float = 0.0,
                 not_of: str | None = None) -> dict[str, WorkerHeartbeat]:
        """Each of ``workers``' latest heartbeat heard after ``after`` (and of another incarnation than
        ``not_of``: a stopped worker's last heartbeats may still be on their way)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for records in self._consumer.poll(timeout_ms=500).values():
                for record in records:
                    event = worker_event_adapter.validate_json(record.value)
                    if isinstance(event, WorkerHeartbeat):
                        self.latest[event.worker_id] = (time.time(), event)
            fresh = {w: beat for w, (heard, beat) in self.latest.items()
                     if w in workers and heard > after and beat.incarnation != not_of}
            if set(fresh) == workers:
                return fresh
        raise AssertionError(f"no heartbeat of {sorted(workers - set(self.latest))} within {timeout_s} s")

    def close(self) -> None:
        self._consumer.close()


@pytest.fixture
def heartbeats(settings) -> Iterator[Heartbeats]:
    reader = Heartbeats(settings)
    yield reader
    reader.close()


def test_a_one_and_a_two_thread_worker_announce_their_machine_and_what_they_measured_on_it(
        stack, digits_variants, heartbeats, tmp_path) -> None:
    variant = digits_variants[-1]  # the slowest: where a second thread shows
    env = {"MERIDIAN_VAR_DIR": str(tmp_path / "var")}  # an empty measurement cache
    with LocalLauncher(stack.env, tmp_path / "logs") as launcher:
        for name, threads in (("mach-1t", 1), ("mach-2t", 2)):
            launcher.start_worker(name, variants=[variant], metrics_port=PORTS[name], threads=threads, extra_env=env)
        beats = heartbeats.wait_for(set(PORTS), 120)
        one, two = beats["mach-1t"], beats["mach-2t"]
        assert (one.device, two.device) == ("cpu-1t", "cpu-2t")
        assert (one.price_per_hour, two.price_per_hour) == (0.0425, 0.085)  # the committed profiles' prices
        assert (one.machine.threads, two.machine.threads) == (1, 2) and one.machine.name == two.machine.name != ""
        assert not one.emulated and not two.emulated
        measured = two.measured[variant]
        assert set(one.measured) == {variant} and list(measured.batch_latency_ms) == list(BATCH_SIZES)
        assert one.measured[variant] != measured

        started = time.time()
        launcher.stop("worker-mach-2t")
        launcher.start_worker("mach-2t", variants=[variant], metrics_port=PORTS["mach-2t"], threads=2, extra_env=env)
        again = heartbeats.wait_for({"mach-2t"}, 60, after=started, not_of=two.incarnation)["mach-2t"]
        assert again.incarnation != two.incarnation
        assert again.measured[variant] == measured  # read back, to the last digit: not measured again
        log = (tmp_path / "logs" / "worker-mach-2t.log").read_text()
        assert log.count(f"measured {variant} on cpu-2t") == 1, log


#: policies that split the work by what the workers announced alone, not by what their batches then
#: took: FCFS. Kairos (`LatencyPredictor`), INFaaS and Proteus (`LearnedProfiles`) learn each machine from
#: its batches, so where the two announced nearly the same they break the tie by what the live workers
#: took, while the simulator's workers take exactly what they announced (make test runs of 2026-12-03:
#: Kairos live 0.78 on the two-thread worker against 0.20 simulated, INFaaS 0.19 against 0.36)
BY_ANNOUNCEMENTS_ALONE = ("fcfs",)
#: for those, the live share of rows on a worker and the simulator's differ by at most this (2026-12-03,
#: at 0.1x: by 0.004 to 0.012 for FCFS)
MAX_SHARE_GAP = 0.15
#: within the SLO at 0.1x, each policy, simulated: the simulator's scheduler never stalls, so this judges
#: the policy on these two machines (make test runs of 2026-12-03: 98.97-100%)
MIN_ATTAINMENT_SIMULATED = 0.97
#: ... and live, where this judges the path, not the machine's speed: an 8 s point is ~500-1,300 queries,
#: and on the shared two-core host one stall of the scheduler longer than a batch's compute drops or delays
#: every query then due (CI on 2026-12-03: FCFS 99.38%, Kairos 98.56%, INFaaS 96.10%, Proteus 91.79%, whose
#: non-work-conserving batching starts each batch at the last moment its head's deadline allows; alone
#: here 98.54-99.59% for Proteus). How close live comes to the 99% target is `make bench-machines`' figure
#: (20 s points, run alone: 99.55-100% on 2026-12-03)
MIN_ATTAINMENT_LIVE = 0.85


@pytest.fixture
def planner_group_removed(settings) -> Iterator[None]:
    """Proteus' planner follows the worker events in the planner's consumer group; once it stopped, the
    group's offsets there would fall ever further behind and page later tests' operators (the lag alert)."""
    yield
    admin = make_admin(settings)
    try:
        wait_until(lambda: _deleted(admin, PLANNER_GROUP), 30, f"the {PLANNER_GROUP} consumer group to be removed")
    finally:
        admin.close()


def _deleted(admin, group: str) -> bool:
    """Delete ``group``: True once it is gone, False while a member is still leaving."""
    outcome = admin.delete_groups([group])[group]
    if outcome == "NonEmptyGroupError":
        return False
    assert outcome in ("OK", "GroupIdNotFoundError"), outcome
    return True


def test_every_policy_serves_two_real_workers_that_announced_what_they_measured(
        stack, tmp_path, planner_group_removed) -> None:
    before = cpu_jiffies()
    points = [point for policy in machine_shares.POLICIES
              for point in machine_shares.policy_points(stack, tmp_path / policy, policy, loads=(0.1,), seconds=8.0)]
    stolen = stolen_share(before)
    for point in points:
        live, sim = point["live"], point["sim"]
        assert live["answered"] == live["queries"], point
        if point["policy"] not in BY_ANNOUNCEMENTS_ALONE:
            continue
        gap = abs(live["row_share"]["real-2t"] - sim["row_share"]["real-2t"])
        assert gap <= MAX_SHARE_GAP, f"{point['policy']}: live {live['row_share']}, simulated {sim['row_share']}"
    simulated = {point["policy"]: point["sim"]["slo_attainment"] for point in points}
    assert min(simulated.values()) >= MIN_ATTAINMENT_SIMULATED, simulated
    attained = {point["policy"]: point["live"]["slo_attainment"] for point in points}
    if stolen > MAX_STOLEN_SHARE:
        warnings.warn(f"live SLO attainment not judged with {stolen:.0%} of the CPU stolen: {attained}")
    else:
        assert min(attained.values()) >= MIN_ATTAINMENT_LIVE, attained
