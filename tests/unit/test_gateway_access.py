"""Who may call the gateway (`services.gateway.access`): bearer tokens kept as their SHA-256, each for its
applications, and a token bucket per caller."""
from __future__ import annotations

import doctest
import hashlib
from http import HTTPStatus

from services.gateway import access
from services.gateway.access import Access


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def statuses(gate: Access, address: str, times: int) -> list[HTTPStatus | None]:
    """What ``times`` requests in a row from ``address`` were told (None: let in)."""
    return [getattr(gate.check(None, "digits", address), "status", None) for _ in range(times)]


def test_the_modules_examples_hold() -> None:
    assert doctest.testmod(access).failed == 0


def test_a_token_is_let_in_for_its_own_applications_only_and_a_star_for_all() -> None:
    gate = Access({digest("a"): ["digits"], digest("b").upper(): ["*"]})
    assert gate.check("Bearer a", "digits", "h") is None
    assert gate.check("Bearer a", "photos", "h").status is HTTPStatus.FORBIDDEN
    assert gate.check("bearer  b ", "photos", "h") is None  # the scheme's case and spaces do not matter
    for header in (None, "", "Bearer", "Basic a", "Bearer c", f"Bearer {digest('a')}"):  # a digest is no token
        verdict = gate.check(header, "digits", "h")
        assert verdict.status is HTTPStatus.UNAUTHORIZED and "WWW-Authenticate" in verdict.headers, header


def test_a_callers_bucket_refills_at_its_rate_and_says_when_to_retry() -> None:
    now = [0.0]
    gate = Access({}, rate_per_s=2.0, burst=2, clock=lambda: now[0])
    assert gate.open
    assert statuses(gate, "10.0.0.1", 3) == [None, None, HTTPStatus.TOO_MANY_REQUESTS]
    assert gate.check(None, "digits", "10.0.0.2") is None  # another address, another caller
    refused = gate.check(None, "digits", "10.0.0.1")
    assert refused.headers["Retry-After"] == "1"
    now[0] = 0.5  # one request's worth back
    assert statuses(gate, "10.0.0.1", 2) == [None, HTTPStatus.TOO_MANY_REQUESTS]
    now[0] = 100.0  # never more than the burst
    assert statuses(gate, "10.0.0.1", 3) == [None, None, HTTPStatus.TOO_MANY_REQUESTS]


def test_without_a_rate_no_caller_is_counted() -> None:
    gate = Access({digest("a"): ["digits"]})
    assert all(gate.check("Bearer a", "digits", "h") is None for _ in range(1000))
    assert not gate._buckets


def test_stored_tokens_join_the_configured_ones_and_a_store_always_asks_for_a_token() -> None:
    gate = Access({digest("a"): ["digits"]}, stored=True)
    gate.use_stored({digest("c"): ["photos"], digest("a"): ["*"]})
    assert gate.check("Bearer c", "photos", "h") is None
    assert gate.check("Bearer a", "photos", "h").status is HTTPStatus.FORBIDDEN, "the configuration wins"
    gate.use_stored({})
    assert gate.check("Bearer c", "photos", "h").status is HTTPStatus.UNAUTHORIZED, "revoked"
    empty = Access({}, stored=True)
    assert not empty.open and empty.check(None, "digits", "h").status is HTTPStatus.UNAUTHORIZED
