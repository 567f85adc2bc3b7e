"""Whether a real worker still computes as fast as the profile it is served by.

A real worker is served by what it measured at its first start (`shared.profiles.measured`), or by the
committed profile of its device. Either can stop being true while it serves: another process takes the
host's cores, the machine was measured while the stack around it started, a cached measurement outlived a
change of hardware. `ProfileDrift` keeps, per (worker, variant), a moving average of each finished batch's
compute over the latency the core predicted for it (batches predicted at `MIN_PREDICTED_MS` or more), and
says when that ratio leaves [1 / `DRIFT_RATIO`, `DRIFT_RATIO`] (the INFaaS monitor's interference threshold,
spec §12.7) and when it comes back, so that the scheduler flags the profile (a warning and
`meridian_scheduler_profile_drift`). Emulated workers replay their profile and are not watched. The worker
is not re-measured while it serves: measuring would take its cores from the queries it holds; a restart
with an emptied measurement cache (``<MERIDIAN_VAR_DIR>/measured``) measures it again.
"""
from __future__ import annotations

from typing import NamedTuple

#: observed / predicted compute beyond which (or below whose inverse) a profile has drifted
DRIFT_RATIO = 1.5
#: batches of a (worker, variant) before its ratio is judged
MIN_BATCHES = 20
#: weight of a new batch in the moving average
WEIGHT = 0.1
#: batches predicted shorter are not judged: below it a worker's own work around the model (reading the
#: payload, joining the rows) is much of a batch's time, and a sub-millisecond profile would read as drifted
MIN_PREDICTED_MS = 2.0


class DriftChange(NamedTuple):
    """A (worker, variant) whose profile drifted (``drifted``) or came back within bounds."""

    worker_id: str
    variant: str
    ratio: float
    drifted: bool


class ProfileDrift:
    """Observed over predicted compute per (worker, variant); see the module docstring."""

    def __init__(self) -> None:
        #: (worker, variant) -> [moving average of the ratio, batches seen, drifted]
        self._state: dict[tuple[str, str], list] = {}

    def observe(self, worker_id: str, variant: str, compute_ms: float, predicted_ms: float) -> DriftChange | None:
        """A batch took ``compute_ms`` where ``predicted_ms`` was predicted; the change it makes, if any."""
        if not predicted_ms >= MIN_PREDICTED_MS or not compute_ms >= 0:
            return None
        ratio = compute_ms / predicted_ms
        state = self._state.get((worker_id, variant))
        if state is None:
            state = self._state[worker_id, variant] = [ratio, 0, False]
        state[0] += WEIGHT * (ratio - state[0])
        state[1] += 1
        drifted = state[1] >= MIN_BATCHES and not 1.0 / DRIFT_RATIO <= state[0] <= DRIFT_RATIO
        if drifted == state[2]:
            return None
        state[2] = drifted
        return DriftChange(worker_id, variant, state[0], drifted)

    def ratios(self) -> dict[tuple[str, str], float]:
        """(worker, variant) -> its moving observed / predicted ratio."""
        return {key: state[0] for key, state in self._state.items()}

    def forget(self, worker_id: str) -> None:
        """The worker is gone (or restarted, and measured again)."""
        for key in [key for key in self._state if key[0] == worker_id]:
            del self._state[key]
