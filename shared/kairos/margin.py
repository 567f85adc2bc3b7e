"""The QoS safeguard xi, widened by the prediction error Kairos observes (HPDC'23 §5.1, spec §7 item 22).

The paper replaces ``T_qos`` by ``xi T_qos`` in Eq. 5 "as a noise safeguard" (xi = 0.98): a pair predicted
to finish within 2% of the target counts as a violation. That covers prediction errors up to 2%. Under the
paper's 5% prediction noise (Fig. 16b) a pair predicted at 0.98 T_qos misses in about a third of the cases,
and a queued query is predicted afresh at every event, so it is eventually matched on a favourable draw to
an auxiliary instance where it misses. The online predictor already learns from every completion; here the
same completions also tell how far the prediction made at dispatch was from the latency observed, and

    xi_eff = min(xi, 1 - z_q * rms relative error),    z_q = Phi^-1(quantile)

A pair predicted just within ``xi_eff T_qos`` then misses ``T_qos`` with probability about ``1 - quantile``
(0.99: the p99 QoS), since its predicted latency is at most ``T_qos``. With exact predictions the error is
0 and ``xi_eff = xi``, the paper's behaviour.
"""
from __future__ import annotations

import math
from statistics import NormalDist


class QosMargin:
    """Running rms of ``(predicted - observed) / observed`` and the safeguard it implies.

    Parameters
    ----------
    xi : the paper's safeguard, the widest ``xi_eff`` ever used (0.98).
    quantile : share of just-feasible pairs that should still meet the QoS despite the error.
    """

    def __init__(self, xi: float, quantile: float = 0.99) -> None:
        if not 0 < xi <= 1 or not 0.5 <= quantile < 1:
            raise ValueError(f"need 0 < `xi` <= 1 and 0.5 <= `quantile` < 1; got {xi}, {quantile}")
        self._xi = xi
        self._z = NormalDist().inv_cdf(quantile)
        self._count = 0
        self._sum_sq = 0.0

    def observe(self, predicted_ms: float, observed_ms: float) -> None:
        """One completion: the latency predicted when the query was matched, and the one measured."""
        if observed_ms > 0 and math.isfinite(predicted_ms):
            self._count += 1
            self._sum_sq += ((predicted_ms - observed_ms) / observed_ms) ** 2

    @property
    def relative_error(self) -> float:
        """rms relative prediction error so far (0 before any completion)."""
        return math.sqrt(self._sum_sq / self._count) if self._count else 0.0

    @property
    def xi(self) -> float:
        """The safeguard to use now: ``min(xi, 1 - z_q * error)``, floored at 0 (every pair infeasible)."""
        return max(0.0, min(self._xi, 1.0 - self._z * self.relative_error))
