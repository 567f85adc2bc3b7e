"""The variant-instance state machine of INFaaS Fig. 4 (spec §5; checklist item 8)."""
import itertools

import pytest

from shared.infaas.state import TRANSITIONS, InstanceState, InstanceWindow, StateThresholds, next_state

I, A, O, X = InstanceState.INACTIVE, InstanceState.ACTIVE, InstanceState.OVERLOADED, InstanceState.INTERFERED
PEAK = 400.0


def window(qps=10.0, ratio=1.0, busy=0.1):
    return InstanceWindow(qps=qps, peak_qps=PEAK, latency_ratio=ratio, busy_fraction=busy)


def test_loading_makes_an_inactive_instance_active():
    assert next_state(I, loaded=True) is A
    assert next_state(I, loaded=False) is I


@pytest.mark.parametrize("state", [A, O, X])
def test_unload_returns_any_state_to_inactive(state):
    assert next_state(state, loaded=False, window=window()) is I


def test_qps_at_peak_overloads_and_below_peak_recovers():
    assert next_state(A, loaded=True, window=window(qps=PEAK)) is O
    assert next_state(A, loaded=True, window=window(qps=PEAK - 1)) is A
    assert next_state(O, loaded=True, window=window(qps=PEAK + 5)) is O
    assert next_state(O, loaded=True, window=window(qps=PEAK - 1)) is A


def test_saturated_compute_counts_as_peak_even_below_profiled_qps():
    # batch-1 traffic saturates an instance below the peak measured at its largest batch
    assert next_state(A, loaded=True, window=window(qps=50.0, busy=0.97)) is O


def test_slower_than_profile_while_not_overloaded_is_interfered():
    assert next_state(A, loaded=True, window=window(ratio=1.6)) is X
    assert next_state(A, loaded=True, window=window(ratio=1.4)) is A
    # overloaded and slow: contention is not the explanation
    assert next_state(A, loaded=True, window=window(qps=PEAK, ratio=3.0)) is O


def test_overloaded_with_contention_below_peak_goes_to_interfered():
    assert next_state(O, loaded=True, window=window(qps=PEAK - 1, ratio=2.0)) is X


def test_interfered_recovers_with_hysteresis():
    assert next_state(X, loaded=True, window=window(ratio=1.3)) is X  # between 1.25 and 1.5: stays
    assert next_state(X, loaded=True, window=window(ratio=1.2)) is A
    assert next_state(X, loaded=True, window=None) is A  # avoided, so unobserved: counts as mitigated


def test_interfered_at_peak_stays_interfered_as_fig4_has_no_such_edge():
    assert next_state(X, loaded=True, window=window(qps=PEAK * 2, ratio=2.0)) is X


def test_every_step_follows_an_edge_of_fig4():
    ratios = [None, 1.0, 1.3, 2.0]
    for state, loaded, qps, ratio, busy in itertools.product(InstanceState, [True, False], [0.0, PEAK - 1, PEAK],
                                                             ratios, [0.0, 0.99]):
        after = next_state(state, loaded=loaded, window=InstanceWindow(qps, PEAK, ratio, busy))
        assert after is state or (state, after) in TRANSITIONS


def test_invalid_thresholds_and_windows_are_refused():
    with pytest.raises(ValueError, match="mitigated_ratio"):
        StateThresholds(interfered_ratio=1.2, mitigated_ratio=1.3)
    with pytest.raises(ValueError, match="InstanceWindow"):
        InstanceWindow(qps=-1.0, peak_qps=1.0)
