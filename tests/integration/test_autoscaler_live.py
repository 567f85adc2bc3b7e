"""The autoscaler service on the real stack: from no worker at all it starts one when queries arrive,
adds capacity when the load outgrows it, and gives it back when the load is gone.

Workers emulate cpu-1t EfficientNet-Lite from its measured profile (about 100 images/s per instance),
so one client can outgrow an instance."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from schemas import Query, ResultStatus
from services.launcher import LocalLauncher, metrics_text, read_metric, wait_until
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin

pytestmark = pytest.mark.integration

SCHEDULER_PORT, AUTOSCALER_PORT = 19741, 19742
ENV = {"MERIDIAN_APPLICATIONS": '{"vision": ["efficientnet-lite"]}', "MERIDIAN_LOCAL_DEVICE": "none",
       "MERIDIAN_AUTOSCALER_METRICS_PORT": str(AUTOSCALER_PORT), "MERIDIAN_AUTOSCALER_WORKER_PORT_BASE": "19750",
       "MERIDIAN_LOAD_STATS_INTERVAL_S": "1.0"}


def actions(kind: str) -> float:
    text = metrics_text(AUTOSCALER_PORT)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("meridian_scaling_actions_total{") and f'action="{kind}"' in line)


class Load:
    def __init__(self, client: MeridianClient) -> None:
        self.client, self.rate, self.sent = client, 0.0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.rate <= 0:
                time.sleep(0.05)
                continue
            query = Query(query_id=f"as-{uuid.uuid4().hex}", application="vision", slo_ms=500.0, batch_size=1,
                          sent_at=time.time())
            self.client.send(query)
            self.sent.append(query.query_id)
            time.sleep(1.0 / self.rate)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


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


def test_scales_up_from_nothing_out_with_the_load_and_back_in(autoscaled, settings) -> None:
    with MeridianClient(settings, applications=["vision"]) as client:
        load = Load(client)
        try:
            load.rate = 20.0
            wait_until(lambda: any(r.status is ResultStatus.OK for r, _ in list(client.results.values())), 90,
                       "a worker the autoscaler started to answer", list(autoscaled.processes.values()))
            assert actions("start") >= 1
            before = actions("start") + actions("load_variant")
            load.rate = 180.0  # about twice one instance's capacity
            wait_until(lambda: actions("start") + actions("load_variant") > before, 60,
                       "the autoscaler to add capacity", list(autoscaled.processes.values()))
            cost = read_metric(AUTOSCALER_PORT, "meridian_fleet_cost_dollars_per_hour")
            assert cost is not None and cost > 0
            stopped = actions("stop")
            load.rate = 0.0
            wait_until(lambda: actions("stop") > stopped, 120, "the autoscaler to stop an idle worker",
                       list(autoscaled.processes.values()))
        finally:
            load.stop()
