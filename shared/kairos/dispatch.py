"""`KairosDispatch`: the Kairos query distributor as a `DispatchPolicy` (HPDC'23 §5.1).

On every call it matches the first ``rows_per_worker * n`` queued queries *of each application* against
*all* n workers with the cost of `kairos_cost_matrix` and a rectangular linear sum assignment (the paper
serves one model: with several applications on one queue, a window over the queue's head alone would let
a burst of one application starve another, whose queries could run on workers the first cannot use).
Only pairs on idle workers are dispatched, one query per assignment (Kairos never batches queries
together; ``batch_queries`` is Meridian's extension, off here and on where Meridian serves Kairos:
`Settings.kairos_batch_queries`); a query matched to a busy worker stays queued,
"reserved", and is re-matched at the next event with a longer wait. The QoS safeguard xi widens with the
prediction error observed at completions (`QosMargin`; unchanged while predictions are exact).
"""
from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from shared.kairos.margin import QosMargin
from shared.kairos.matching import PENALTY_FACTOR, XI, cost_matrix_unchecked, heterogeneity_coefficients
from shared.kairos.predictor import LatencyPredictor
from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.policy.deadlines import most_in_time_per_second
from shared.profiles.format import ProfileSet
from shared.profiles.tail import at_quantile

#: predictions kept per (device, variant, size) awaiting their completion
IN_FLIGHT_KEPT = 1024
#: workers that look alike to the matcher: (device, variants, max batch)
_WorkerKind = tuple[str, tuple[str, ...], int]


class KairosDispatch(DispatchPolicy):
    """Min-cost bipartite matching of queued queries to instances.

    Parameters
    ----------
    latency : profiles (seed a warm `LatencyPredictor`) or a predictor to use and keep learning.
    latency_quantile : profiles seed the predictor at this quantile of their measured samples
        (`shared.profiles.tail`): a profile's median promises what a heavy-tailed pair often breaks.
    xi : QoS safeguard (0.98): a pair predicted past ``xi * T_qos`` counts as a violation.
    margin_quantile : widen ``xi`` to ``1 - z * (observed rms relative prediction error)`` with ``z`` this
        normal quantile (`QosMargin`); None keeps ``xi`` fixed.
    penalty_factor : an infeasible pair costs ``penalty_factor * T_qos`` (the paper's 10).
    penalty_tiebreak : add ``C_j L_ij`` to penalised costs (spec §8.2 option).
    hold_infeasible : keep a query queued rather than dispatch it to an idle worker where it would miss
        its QoS, when some busy worker could still meet it (spec §8.3 option; the paper dispatches).
    rows_per_worker : rows of the matrix = the first ``rows_per_worker * n`` queries of each application
        (the artifact's 2n).
    coefficients : fixed heterogeneity coefficient per device; by default derived from predictions at
        the largest batch, relative to the fastest device type present.
    learn : feed completions into the predictor.
    batch_queries : Meridian's extension, off in the paper: a query matched to an idle worker leads a batch of
        its application's queued queries that its variant serves, the batch size and queries that finish the
        most within their QoS (xi * T_qos less the wait) per second (`most_in_time_per_second`). One query
        per dispatch caps a fleet whose per-batch cost is not only compute (a Kafka hop each way) well below
        its batched capacity.
    """

    name = "kairos"

    def __init__(
        self,
        latency: ProfileSet | LatencyPredictor,
        *,
        xi: float = XI,
        margin_quantile: float | None = 0.99,
        penalty_factor: float = PENALTY_FACTOR,
        penalty_tiebreak: bool = False,
        hold_infeasible: bool = False,
        rows_per_worker: int = 2,
        coefficients: Mapping[str, float] | None = None,
        learn: bool = True,
        batch_queries: bool = False,
        latency_quantile: float = 0.95,
    ) -> None:
        if not 0 < xi <= 1 or penalty_factor <= 1 or rows_per_worker < 1:
            raise ValueError(
                f"need 0 < `xi` <= 1, `penalty_factor` > 1, `rows_per_worker` >= 1; "
                f"got {xi}, {penalty_factor}, {rows_per_worker}"
            )
        if coefficients is not None and not all(0 < c <= 1 for c in coefficients.values()):
            raise ValueError(f"`coefficients` must lie in (0, 1], got {dict(coefficients)}")
        self._latency_quantile = latency_quantile
        #: (device, variant) -> the profiled means the predictor was seeded with (none for a given predictor)
        self._seeded: dict[tuple[str, str], dict[int, float]] = {}
        if isinstance(latency, LatencyPredictor):
            self.predictor = latency
        else:
            seeds = at_quantile(latency, latency_quantile)
            self.predictor = LatencyPredictor.from_profiles(seeds)
            self._seeded = {(p.device, p.variant): dict(p.batch_latency_ms) for p in seeds.variants}
        self._xi = xi
        self._margin = QosMargin(xi, margin_quantile) if margin_quantile is not None else None
        #: (device, variant, batch size) -> latencies predicted for the queries in flight there, oldest first
        #: (bounded: a query whose completion is never heard of, e.g. on a lost worker, must not pile up)
        self._in_flight: dict[tuple[str, str, int], deque[float]] = {}
        self._penalty_factor = penalty_factor
        self._tiebreak = penalty_tiebreak
        self._hold = hold_infeasible
        self._rows_per_worker = rows_per_worker
        self._fixed_coefficients = dict(coefficients) if coefficients is not None else None
        self._learn = learn
        self._batch_queries = batch_queries
        #: (variant, devices) -> C per device; cleared whenever the predictor learns
        self._coefficient_cache: dict[tuple[str, frozenset[str]], dict[str, float]] = {}
        #: application -> its queued queries, in arrival order (each application's head joins the matching)
        self._by_application: dict[str, dict[str, PendingQuery]] = {}

    def on_profiles(self, profiles: ProfileSet) -> None:
        """A (device, variant) whose profile changed (a real worker measured it) is predicted afresh from it;
        the others keep what they learned (with a predictor given at construction, whose seeds this policy
        does not know, every pair the profiles name starts afresh)."""
        for profile in at_quantile(profiles, self._latency_quantile).variants:
            key = (profile.device, profile.variant)
            if self._seeded.get(key) != profile.batch_latency_ms:
                self._seeded[key] = dict(profile.batch_latency_ms)
                self.predictor.reseed(profile.device, profile.variant, profile.batch_latency_ms)
                self._coefficient_cache.clear()

    def on_query_added(self, query: PendingQuery) -> None:
        self._by_application.setdefault(query.application, {})[query.query_id] = query

    def on_query_removed(self, query_id: str) -> None:
        for queued in self._by_application.values():
            if queued.pop(query_id, None) is not None:
                return

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        idle = [w.inflight == 0 for w in workers]
        if not queue or not any(idle):
            return DispatchDecision.make_empty()
        rows = self._heads(queue, self._rows_per_worker * len(workers))
        groups: dict[_WorkerKind, int] = {}
        column_group = [groups.setdefault((w.device, w.variants, w.max_batch), len(groups)) for w in workers]
        per_row = np.array([(q.batch_size, q.budget_ms, q.arrival_s) for q in rows])
        latency, coeff, allowed, variant_of = self._predicted_usage(rows, per_row[:, 0], workers, groups, column_group)
        qos = per_row[:, 1]
        wait = (now_s - per_row[:, 2]) * 1000.0
        cost, feasible = cost_matrix_unchecked(
            latency, wait, coeff, qos, self._penalty_factor * qos, xi=self.xi, penalty_tiebreak=self._tiebreak
        )
        if not allowed.all():  # a pair that cannot run at all must never win: cost it above any real entry
            cost[~allowed] = 2.0 * float(cost.max()) * max(len(rows), len(workers)) + 1.0
        matched_rows, matched_cols = linear_sum_assignment(cost)
        pairs = []
        for i, j in zip(matched_rows.tolist(), matched_cols.tolist()):
            if not idle[j] or not allowed[i, j]:
                continue
            if self._hold and not feasible[i, j] and feasible[i].any():
                continue
            pairs.append((i, j, variant_of[(rows[i].candidate_variants, column_group[j])]))
        taken = {rows[i].query_id for i, _, _ in pairs}
        assignments = []
        for i, j, variant in pairs:
            batch = self._batch(rows[i], workers[j], variant, taken, now_s) if self._batch_queries else [rows[i]]
            for query in batch:
                self._by_application.get(query.application, {}).pop(query.query_id, None)
            assignments.append(Assignment(workers[j].worker_id, variant, tuple(q.query_id for q in batch)))
        if self._margin is not None and pairs:
            self._remember_predictions(pairs, rows, latency, workers)
        return DispatchDecision(assignments=tuple(assignments))

    def _batch(self, head: PendingQuery, worker: WorkerView, variant: str, taken: set[str],
               now_s: float) -> list[PendingQuery]:
        """The batch ``head`` was matched to lead (``batch_queries``): of it and its application's queued queries
        that its variant serves, those `most_in_time_per_second` chooses by their QoS (xi * T_qos less the
        wait); ``head`` alone when none finishes in time. A head left out stays queued for the next match.
        Marks the batch taken."""
        limit = min(worker.max_batch, self.predictor.max_batch)
        members = [head, *(q for q in self._by_application.get(head.application, {}).values()
                           if q.query_id not in taken and variant in q.candidate_variants)]  # heads are taken
        sizes = sorted({1 << k for k in range(limit.bit_length()) if 1 << k <= limit} | {limit})
        predicted = self.predictor.predict(worker.device, variant, np.array(sizes), noisy=False)
        left_ms = [self.xi * q.budget_ms - (now_s - q.arrival_s) * 1000.0 - worker.busy_remaining_ms for q in members]
        chosen = most_in_time_per_second([q.batch_size for q in members], left_ms,
                                         [(n, float(ms), float(ms)) for n, ms in zip(sizes, predicted)])
        batch = [members[i] for i in chosen] or [head]
        taken.update(q.query_id for q in batch)
        return batch

    def _heads(self, queue: Sequence[PendingQuery], per_application: int) -> list[PendingQuery]:
        """The first ``per_application`` queries of each application, oldest head first (the queue's own
        prefix while it holds one application, or when the policy was not told of its queries)."""
        queued = [q for q in self._by_application.values() if q]
        if len(queued) <= 1:
            return queue[:per_application]
        heads = [list(itertools.islice(q.values(), per_application)) for q in queued]
        return [query for head in sorted(heads, key=lambda h: h[0].arrival_s) for query in head]

    def _remember_predictions(
        self, pairs: list[tuple[int, int, str]], rows: Sequence[PendingQuery], latency: np.ndarray,
        workers: Sequence[WorkerView],
    ) -> None:
        """Keep each dispatched pair's predicted latency (``L`` less the worker's remaining time) until its
        completion tells how far off it was. Queries of one size on one device type are predicted alike, so
        any of their predictions pairs with any of their completions."""
        for i, j, variant in pairs:
            key = (workers[j].device, variant, rows[i].batch_size)
            self._in_flight.setdefault(key, deque(maxlen=IN_FLIGHT_KEPT)).append(
                float(latency[i, j]) - workers[j].busy_remaining_ms)

    @property
    def xi(self) -> float:
        """The QoS safeguard in use: ``xi``, widened by the observed prediction error (`QosMargin`)."""
        return self._margin.xi if self._margin is not None else self._xi

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        if self._margin is not None:
            predicted = self._in_flight.get((device, variant, batch_size))
            if predicted:
                self._margin.observe(predicted.popleft(), latency_ms)
        if self._learn:
            self.predictor.observe(device, variant, batch_size, latency_ms)
            self._coefficient_cache.clear()

    def _predicted_usage(
        self,
        rows: Sequence[PendingQuery],
        batch: np.ndarray,
        workers: Sequence[WorkerView],
        groups: dict[_WorkerKind, int],
        column_group: list[int],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[tuple[tuple[str, ...], int], str]]:
        """``L`` (remaining + predicted), ``C`` per pair, which pairs can run, and on which variant.

        Workers are grouped by kind (device, variants, max batch) and queries by candidate list, so the
        usual case, one model on a few device types, costs one vector lookup per device type.
        """
        first = rows[0].candidate_variants
        if all(q.candidate_variants == first for q in rows):  # the usual case: one model
            query_groups: dict[tuple[str, ...], list[int]] = {first: list(range(len(rows)))}
        else:
            query_groups = {}
            for i, q in enumerate(rows):
                query_groups.setdefault(q.candidate_variants, []).append(i)
        predicted = np.zeros((len(rows), len(groups)))
        runnable = np.zeros((len(rows), len(groups)), dtype=bool)
        coeff = np.ones((len(rows), len(groups)))  # per pair: a worker may host several variants
        variant_of: dict[tuple[tuple[str, ...], int], str] = {}
        coefficients: dict[str, dict[str, float]] = {}
        top = self.predictor.max_batch
        for candidates, members in query_groups.items():
            index = slice(None) if len(members) == len(rows) else np.asarray(members)
            sizes = batch[index]
            # sizes beyond what a worker takes are predicted clipped, then masked out
            buckets = self.predictor.buckets(np.minimum(sizes, top))
            for (device, hosted, max_batch), g in groups.items():
                variant = next((v for v in candidates if v in hosted), None)
                if variant is None:
                    continue
                predicted[index, g] = self.predictor.predict_buckets(device, variant, buckets)
                runnable[index, g] = sizes <= min(max_batch, top)
                if variant not in coefficients:
                    coefficients[variant] = self._coefficients(variant, groups)
                coeff[index, g] = coefficients[variant][device]
                variant_of[(candidates, g)] = variant
        columns = np.array(column_group)
        latency = predicted[:, columns] + np.array([w.busy_remaining_ms for w in workers])
        return latency, coeff[:, columns], runnable[:, columns], variant_of

    def _coefficients(self, variant: str, groups: dict[_WorkerKind, int]) -> dict[str, float]:
        """C per device type hosting ``variant``: relative to the fastest one on the largest batch."""
        if self._fixed_coefficients is not None:
            return self._fixed_coefficients
        devices = frozenset(device for device, hosted, _ in groups if variant in hosted)
        cached = self._coefficient_cache.get((variant, devices))
        if cached is None:
            cached = self._coefficient_cache[(variant, devices)] = self._learned_coefficients(variant, devices)
        return cached

    def _learned_coefficients(self, variant: str, devices: frozenset[str]) -> dict[str, float]:
        at_max = {d: self.predictor.at_max_batch(d, variant) for d in devices}
        # a device not learned yet has no meaningful ratio; weigh it like the base until it is
        known = {d: lat for d, lat in at_max.items() if lat > 0}
        coefficients = heterogeneity_coefficients(known) if known else {}
        return {d: coefficients.get(d, 1.0) for d in at_max}
