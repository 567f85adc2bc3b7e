"""The one INFaaS monitor (spec §4-5, §12.7-8): windows, Fig. 4 states, thresholds from settings."""
from __future__ import annotations

import pytest

from schemas import BatchFinished, WorkerHeartbeat
from shared.autoscale.tracker import FleetTracker
from shared.infaas.daemon import InstanceMonitor
from shared.autoscale import Application, MachineCatalogue, VariantOption, WorkerType
from shared.infaas.metadata import InMemoryMetadataStore
from shared.infaas.monitor import InfaasMonitor, MonitorConfig
from shared.infaas.records import VariantRecord
from shared.infaas.state import InstanceState, StateThresholds
from shared.settings import Settings

I, A, O, X = InstanceState.INACTIVE, InstanceState.ACTIVE, InstanceState.OVERLOADED, InstanceState.INTERFERED
#: peak 100 rows/s with batches within 50 ms (half of a 100 ms SLO); 8000/60 = 133 rows/s without an SLO
PROFILE = VariantRecord("m", "fam", "cpu", batch_latency_ms=((1, 10.0), (8, 60.0)), max_batch=8)
KEY = ("w1", "m")


def loaded(config: MonitorConfig | None = None, *, slo_ms: float | None = 100.0, **options) -> InfaasMonitor:
    mon = InfaasMonitor(config or MonitorConfig(), start_s=0.0)
    mon.instance_loaded(KEY, 0.0, worker_id="w1", variant="m", device="cpu", profile=PROFILE, slo_ms=slo_ms,
                        **options)
    return mon


def serve(mon: InfaasMonitor, start_s: float, end_s: float, *, rows: int, every_s: float, ms: float) -> None:
    t = start_s
    while t < end_s - 1e-9:
        t += every_s
        mon.batch_finished(KEY, t, rows=rows, latency_ms=ms)


# ------------------------------------------------------------------------------------------ config


def test_settings_defaults_are_the_spec_values_where_it_gives_them():
    config = MonitorConfig.from_settings(Settings())
    assert config.window_s == 2.0  # spec §6.8
    assert (config.thresholds.interfered_ratio, config.thresholds.mitigated_ratio) == (1.5, 1.25)  # §12.7
    assert config.overload_queue_s == 1.0  # §12.8
    assert (config.latency_budget, config.thresholds.saturated_busy_fraction) == (0.5, 0.95)  # spec silent
    assert config == MonitorConfig()


def test_thresholds_come_from_the_environment(monkeypatch):
    for name, value in {"MONITOR_WINDOW_S": "4", "LATENCY_BUDGET": "0.8", "INTERFERED_RATIO": "2.0",
                        "MITIGATED_RATIO": "1.1", "SATURATED_BUSY_FRACTION": "0.9", "OVERLOAD_QUEUE_S": "0"}.items():
        monkeypatch.setenv(f"MERIDIAN_INFAAS_{name}", value)
    assert MonitorConfig.from_settings(Settings()) == MonitorConfig(
        window_s=4.0, latency_budget=0.8, overload_queue_s=0.0,
        thresholds=StateThresholds(interfered_ratio=2.0, mitigated_ratio=1.1, saturated_busy_fraction=0.9))


@pytest.mark.parametrize("options", [dict(window_s=0.0), dict(latency_budget=0.0), dict(latency_budget=1.5),
                                     dict(overload_queue_s=-1.0)])
def test_bad_config_names_the_field(options):
    with pytest.raises(ValueError, match=f"`{next(iter(options))}`"):
        MonitorConfig(**options)


def test_settings_reject_mitigation_above_interference():
    with pytest.raises(ValueError, match="mitigated_ratio"):
        MonitorConfig.from_settings(Settings(infaas_interfered_ratio=1.2, infaas_mitigated_ratio=1.3))


# ------------------------------------------------------------------------------------ transitions


def test_loading_makes_an_instance_active_at_once_and_unloading_reports_it_inactive_once():
    mon = loaded()
    assert mon.state(KEY) is A and mon.snapshot(0.5).instances[KEY].state is A
    mon.instance_unloaded(KEY, 0.6)
    assert mon.state(KEY) is I
    mon.batch_finished(KEY, 0.7, rows=8, latency_ms=500.0)  # a draining batch: ignored
    assert mon.snapshot(0.8).instances[KEY].state is I, "reported once, for the store to remove"
    assert KEY not in mon.snapshot(0.9).instances


def test_states_advance_once_per_window_not_at_every_snapshot():
    mon = loaded()
    mon.batch_finished(KEY, 0.5, rows=1, latency_ms=20.0)  # 2x the profile, far below peak
    first = mon.snapshot(1.0)
    assert (first.stepped, first.instances[KEY].state) == (False, A)
    assert first.instances[KEY].window.latency_ratio == 2.0, "statistics are fresh at every snapshot"
    second = mon.snapshot(2.0)
    assert (second.stepped, second.instances[KEY].state) == (True, X)
    assert not mon.snapshot(3.0).stepped and mon.snapshot(4.0).stepped


def test_interference_needs_the_threshold_and_recovers_with_hysteresis():
    mon = loaded()
    mon.batch_finished(KEY, 1.0, rows=1, latency_ms=14.0)  # 1.4x: below 1.5x
    assert mon.snapshot(2.0).instances[KEY].state is A
    mon.batch_finished(KEY, 3.0, rows=1, latency_ms=16.0)  # 1.6x
    assert mon.snapshot(4.0).instances[KEY].state is X
    mon.batch_finished(KEY, 5.0, rows=1, latency_ms=13.0)  # 1.3x: between 1.25x and 1.5x, stays
    assert mon.snapshot(6.0).instances[KEY].state is X
    mon.batch_finished(KEY, 7.0, rows=1, latency_ms=12.0)  # 1.2x: mitigated
    assert mon.snapshot(8.0).instances[KEY].state is A


def test_the_latency_ratio_weighs_every_batch_against_its_own_profiled_size():
    mon = loaded()
    mon.batch_finished(KEY, 0.5, rows=1, latency_ms=10.0)  # as profiled
    mon.batch_finished(KEY, 1.0, rows=8, latency_ms=120.0)  # 2x the 8-row profile
    report = mon.snapshot(2.0).instances[KEY]
    assert report.window.latency_ratio == pytest.approx(130.0 / 70.0)  # not 65 ms / T(ceil(4.5)) = 1.08
    assert report.state is X and report.record.avg_latency_ms == 65.0


def test_peak_uses_the_latency_budget_share_of_the_slo():
    # 110 rows/s in 10-row batches of 10 ms (as profiled, busy 11%): above Q = 100 within 50 ms ...
    mon = loaded()
    serve(mon, 0.0, 2.0, rows=11, every_s=0.1, ms=10.0)
    report = mon.snapshot(2.0).instances[KEY]
    assert (report.window.qps, report.window.peak_qps, report.state) == (pytest.approx(110.0), 100.0, O)
    # ... below Q = 133 when a batch may take 60% of the SLO, or when the SLO is unknown
    for mon in (loaded(MonitorConfig(latency_budget=0.6)), loaded(slo_ms=None)):
        serve(mon, 0.0, 2.0, rows=11, every_s=0.1, ms=10.0)
        report = mon.snapshot(2.0).instances[KEY]
        assert report.window.peak_qps == pytest.approx(8000.0 / 60.0) and report.state is A


def test_overloaded_recovers_and_contention_below_peak_moves_it_to_interfered():
    mon = loaded()
    serve(mon, 0.0, 2.0, rows=11, every_s=0.1, ms=10.0)
    assert mon.snapshot(2.0).instances[KEY].state is O
    serve(mon, 2.0, 4.0, rows=5, every_s=0.1, ms=10.0)
    assert mon.snapshot(4.0).instances[KEY].state is A
    serve(mon, 4.0, 6.0, rows=11, every_s=0.1, ms=10.0)
    assert mon.snapshot(6.0).instances[KEY].state is O
    serve(mon, 6.0, 8.0, rows=1, every_s=0.5, ms=30.0)
    assert mon.snapshot(8.0).instances[KEY].state is X


def test_a_busy_window_counts_as_peak_below_the_profiled_rate():
    mon = loaded()
    serve(mon, 0.0, 2.0, rows=1, every_s=0.1, ms=96.0)  # busy 96% of the window at 10 rows/s
    report = mon.snapshot(2.0).instances[KEY]
    assert report.window.busy_fraction == pytest.approx(0.96) and report.state is O


def test_a_queue_of_more_than_a_second_of_peak_work_is_overloaded():
    mon = loaded()
    mon.queue_depth(KEY, 101, 1.9)  # Q = 100 rows/s
    assert mon.snapshot(2.0).instances[KEY].state is O
    mon.queue_depth(KEY, 100, 3.9)
    assert mon.snapshot(4.0).instances[KEY].state is A, "not more than 1 s of work"
    off = loaded(MonitorConfig(overload_queue_s=0.0))
    off.queue_depth(KEY, 10_000, 1.9)
    assert off.snapshot(2.0).instances[KEY].state is A, "0 turns the queue test off"


# ----------------------------------------------------------------------------- windows and load


def test_the_window_slides_over_the_last_window_s():
    mon = loaded()
    mon.batch_finished(KEY, 0.5, rows=8, latency_ms=60.0)
    assert mon.snapshot(2.0).instances[KEY].record.qps == 4.0
    assert mon.snapshot(2.4).instances[KEY].record.qps == 4.0
    later = mon.snapshot(2.6).instances[KEY]
    assert (later.record.qps, later.record.avg_latency_ms, later.window.latency_ratio) == (0.0, None, None)


def test_incoming_load_is_routed_plus_queued_rows_and_served_rows_stand_in_for_routing():
    mon = loaded()
    mon.batch_finished(KEY, 1.0, rows=8, latency_ms=60.0, queue_rows=2)
    report = mon.snapshot(1.5).instances[KEY]
    assert report.load_qps == (8 + 2) / 2.0 and report.slack_qps == 100.0 - 5.0
    for t in (1.6, 1.7, 1.8):
        mon.rows_routed(KEY, 20, t)
    assert mon.snapshot(1.9).instances[KEY].load_qps == (60 + 2) / 2.0


def test_worker_utilization_is_its_heartbeat_or_else_its_instances_busy_share():
    mon = loaded(compute_share=0.5)
    serve(mon, 0.0, 2.0, rows=1, every_s=0.5, ms=250.0)  # busy 1 s of 2
    assert mon.snapshot(2.0).workers["w1"].utilization == pytest.approx(0.25)
    mon.worker_seen("w1", 2.1, device="cpu", device_kind="cpu", busy_fraction=0.7)
    worker = mon.snapshot(2.2).workers["w1"]
    assert (worker.utilization, worker.device_kind) == (0.7, "cpu")


def test_a_lost_worker_takes_its_instances_to_inactive():
    mon = loaded()
    mon.instance_loaded(("w2", "m"), 0.0, worker_id="w2", variant="m", device="cpu", profile=PROFILE)
    mon.worker_lost("w1", 1.0)
    snap = mon.snapshot(1.0)
    assert snap.instances[KEY].state is I and snap.instances[("w2", "m")].state is A
    assert list(snap.workers) == ["w2"] and KEY not in mon.snapshot(1.1).instances


def test_loading_again_updates_the_instance_and_keeps_its_state_and_window():
    mon = loaded()
    mon.batch_finished(KEY, 1.5, rows=1, latency_ms=30.0)
    assert mon.snapshot(2.0).instances[KEY].state is X
    mon.instance_loaded(KEY, 2.5, worker_id="w1", variant="m", device="cpu", profile=PROFILE, slo_ms=100.0,
                        load_latency_ms=7.0)
    report = mon.snapshot(3.0).instances[KEY]
    assert (report.state, report.record.load_latency_ms, report.record.qps) == (X, 7.0, 0.5)


def test_virtual_time_is_deterministic_and_start_s_sets_the_phase():
    def run() -> list:
        mon = InfaasMonitor(MonitorConfig(window_s=2.0), start_s=-1.0)  # steps at 1, 3, 5 (a 1 s poll's)
        mon.instance_loaded(KEY, 0.0, worker_id="w1", variant="m", device="cpu", profile=PROFILE, slo_ms=100.0)
        out = []
        for k in range(6):
            mon.batch_finished(KEY, k + 0.5, rows=1, latency_ms=10.0 * (1 + k % 3))
            snap = mon.snapshot(float(k))
            out.append((snap.stepped, snap.instances[KEY].state, snap.instances[KEY].window))
        return out

    first = run()
    assert first == run()
    assert [stepped for stepped, _, _ in first] == [False, True, False, True, False, True]


@pytest.mark.parametrize("call", [
    lambda m: m.batch_finished(KEY, 1.0, rows=-1, latency_ms=1.0),
    lambda m: m.batch_finished(KEY, 1.0, rows=1, latency_ms=float("nan")),
    lambda m: m.queue_depth(KEY, -1, 1.0),
    lambda m: m.snapshot(float("inf")),
    lambda m: m.worker_seen("w1", 1.0, device="cpu", busy_fraction=1.5),
])
def test_malformed_events_raise(call):
    with pytest.raises(ValueError):
        call(loaded())


# ------------------------------------------------------------------ one logic behind both services


def test_the_registry_and_the_autoscaler_judge_the_same_events_alike():
    """The same worker events through both service adapters give the same states and rates."""
    config = MonitorConfig(window_s=2.0)
    store = InMemoryMetadataStore()
    store.put_variant(PROFILE)
    registry = InstanceMonitor(store, device_kinds={"cpu": "cpu"}, worker_timeout_s=30.0, last_flush_s=0.0,
                               config=config, family_slo_ms={"fam": 100.0})
    catalogue = MachineCatalogue((WorkerType("cpu", "cpu", 0.1, {"vcpu": 1}),),
                          (VariantOption(PROFILE, "fam", {"vcpu": 1.0}, 0.1),), (Application("app", "fam", 100.0),))
    tracker = FleetTracker(catalogue, config=config)

    def feed(event, now_s):
        registry.observe(event, now_s)
        tracker.on_worker_event(event, now_s)

    feed(WorkerHeartbeat(worker_id="w1", device="cpu", emulated=True, variants=["m"], max_batch=8, inflight=0,
                         busy_fraction=0.5, price_per_hour=0.1, at=0.0), 0.0)
    seen = []
    for k, (rows, ms) in enumerate([(11, 10.0)] * 20 + [(1, 10.0)] * 20 + [(1, 30.0)] * 20):
        t = 0.1 * (k + 1)
        feed(BatchFinished(worker_id="w1", batch_id=f"b{k}", variant="m", device="cpu", rows=rows,
                           compute_ms=ms, ok=True, at=t), t)
        if k % 20 == 19:
            registry.flush(t)
            (worker,) = tracker.state(t).workers
            stored = store.get_instance("m", "w1")
            seen.append(stored.state)
            assert worker.instances[0].state is stored.state
            assert worker.instances[0].load_qps == pytest.approx(stored.qps)
    assert seen == [O, A, X]
