"""`AutoscaleLoop`: the autoscaler's control loop without its I/O, run by the service and the simulator.

The live service (`services.autoscaler`) feeds it Kafka messages and carries out each `AutoscalePoll`
through a launcher and the workers' dispatch topics; the simulator (`shared.sim.scenarios.autoscaling`)
feeds it the engine's events and turns the polls into fleet commands. Both therefore decide with the
same tracker, monitor and policy calls, in the same order: forget silent workers, build the state, step
the policy, count what was asked for so the next poll does not ask again.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schemas import LoadStatistics
from shared.autoscale.autoscaler import BaseAutoscaler
from shared.autoscale.cost import to_fleet_plan
from shared.autoscale.state import AutoscaleState, ScaleActions, StartWorker
from shared.autoscale.tracker import FleetTracker
from shared.infaas.monitor import MonitorConfig
from shared.policy.base import FleetPlan
from shared.profiles.format import ProfileSet
from shared.profiles.measured import AnnouncedMeasurements

__all__ = ["AutoscaleLoop", "AutoscalePoll"]


@dataclass(frozen=True, slots=True)
class AutoscalePoll:
    """One poll's outcome, for the caller to carry out."""

    at_s: float
    #: workers gone silent or never started: whatever is left of them must be stopped
    expired: tuple[str, ...]
    #: the fleet the policy saw
    state: AutoscaleState
    actions: ScaleActions
    #: the fleet once `actions` are applied (published by the service); None when nothing changed
    plan: FleetPlan | None
    #: how long ``policy.step`` took on the loop's timer (None without one)
    decision_s: float | None = None


class AutoscaleLoop:
    """Tracker plus policy, fed by events and load statistics, polled every ``policy.poll_interval_s``.

    Parameters
    ----------
    policy : the autoscaler (``shared.policy.registry.make_autoscaler``).
    config : the monitor's window and thresholds (`MonitorConfig.from_settings`).
    silent_after_s : a worker not heard from this long is gone.
    timer : seconds on any clock, read around ``policy.step`` only (decision time); never used to decide.
    profiles : the profiles the policy's catalogue was made from; with them, the latencies real workers
        announce they measured on their machines (`shared.profiles.measured`) replace their options' own.
    """

    def __init__(self, policy: BaseAutoscaler, *, config: MonitorConfig | None = None, silent_after_s: float = 30.0,
                 timer: Callable[[], float] | None = None, profiles: ProfileSet | None = None) -> None:
        self.policy = policy
        self.tracker = FleetTracker(policy.catalogue, config=config, silent_after_s=silent_after_s)
        self._timer = timer
        self._profiles = profiles
        self._announced = AnnouncedMeasurements()

    def begin(self, initial_fleet: Sequence[StartWorker], now_s: float) -> ScaleActions:
        """The machines to start before the first poll (already up at ``now_s`` in the simulator): the
        tracker expects them, so the first polls do not ask for them again."""
        actions = ScaleActions(start=tuple(initial_fleet))
        self.tracker.expect(actions, now_s)
        return actions

    def on_worker_event(self, event: object, now_s: float) -> None:
        if self._profiles is not None and self._announced.heard_in(event):
            self.policy.remeasured(self._announced.applied_to(self._profiles))
            self.tracker.use(self.policy.catalogue)
        self.tracker.on_worker_event(event, now_s)

    def on_load_statistics(self, stats: LoadStatistics) -> None:
        self.tracker.on_load_statistics(stats)

    def poll(self, now_s: float) -> AutoscalePoll:
        expired = tuple(self.tracker.expire(now_s))
        state = self.tracker.state(now_s)
        started = self._timer() if self._timer is not None else None
        actions = self.policy.step(state, now_s)
        decision_s = self._timer() - started if started is not None else None
        plan = None
        if actions:
            self.tracker.expect(actions, now_s)
            plan = to_fleet_plan(state, self.policy.catalogue, actions)
        return AutoscalePoll(now_s, expired, state, actions, plan, decision_s)
