"""Who may call the gateway, for which applications, and how often: bearer tokens and per-caller rates.

A caller sends ``Authorization: Bearer <token>``. The gateway keeps no token, only its SHA-256 (hex) and
the applications it may query (``MERIDIAN_GATEWAY_TOKENS``: ``{"<sha256>": ["digits"], ...}``, ``"*"`` for
every one; and, with ``MERIDIAN_GATEWAY_REDIS_TOKENS``, those ``meridian token add`` stored in Redis,
`shared.adapters.token_store`), so a leaked configuration lets no one in. Each caller (its token, or its address when no
token is configured) has a token bucket of ``rate_per_s`` requests a second up to ``burst`` at once.
Checked before a request's body is read: a refused request never reaches Kafka.

Examples
--------
>>> digest = digest_of("s3cret")
>>> access = Access({digest: ["digits"]}, rate_per_s=1.0, burst=1, clock=lambda: 0.0)
>>> access.check("Bearer s3cret", "digits", "10.0.0.1") is None, access.check("Bearer s3cret", "digits", "x").status
(True, <HTTPStatus.TOO_MANY_REQUESTS: 429>)
>>> access.check("Bearer s3cret", "photos", "x").status, access.check(None, "digits", "x").status
(<HTTPStatus.FORBIDDEN: 403>, <HTTPStatus.UNAUTHORIZED: 401>)
"""
from __future__ import annotations

import hmac
import math
import time
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus

from services.gateway.protocol import Refusal
from shared.adapters.token_store import digest_of

EVERY_APPLICATION = "*"
#: callers whose buckets are kept at most; the longest-idle are let go of beyond it
MAX_CALLERS = 65_536


class Access:
    """``tokens``: SHA-256 hex digest -> the applications its bearer may query (empty and not ``stored``: no
    token needed); ``stored``: tokens come from a store too (`use_stored`), so a caller always needs one;
    ``rate_per_s`` None: no rate limit."""

    def __init__(self, tokens: Mapping[str, Sequence[str]], *, rate_per_s: float | None = None, burst: int = 1,
                 clock: Callable[[], float] = time.monotonic, stored: bool = False) -> None:
        self._configured = _by_digest(tokens)
        self._tokens = dict(self._configured)
        self._stored = stored
        self._rate, self._burst, self._clock = rate_per_s, max(1, burst), clock
        #: caller -> (tokens left, when last counted)
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def open(self) -> bool:
        """No token is configured, nor read from a store: anyone may call."""
        return not self._tokens and not self._stored

    def use_stored(self, tokens: Mapping[str, Sequence[str]]) -> None:
        """The tokens the store holds now, beside the configured ones (which win for a digest in both)."""
        self._tokens = {**_by_digest(tokens), **self._configured}

    def check(self, authorization: str | None, application: str, address: str) -> Refusal | None:
        """Why this request (its ``Authorization`` header, for ``application``) from ``address`` goes no
        further; None: it may."""
        caller = address
        if not self.open:
            digest = _bearer_digest(authorization)
            if digest is None:
                return Refusal(HTTPStatus.UNAUTHORIZED, "send `Authorization: Bearer <token>`",
                               {"WWW-Authenticate": 'Bearer realm="meridian"'})
            allowed = next((apps for known, apps in self._tokens.items() if hmac.compare_digest(known, digest)), None)
            if allowed is None:
                return Refusal(HTTPStatus.UNAUTHORIZED, "unknown token", {"WWW-Authenticate": 'Bearer error="invalid_token"'})
            if application not in allowed and EVERY_APPLICATION not in allowed:
                return Refusal(HTTPStatus.FORBIDDEN, f"this token may not query application {application!r}")
            caller = digest
        return self._take(caller)

    def _take(self, caller: str) -> Refusal | None:
        if self._rate is None:
            return None
        now = self._clock()
        left, then = self._buckets.pop(caller, (float(self._burst), now))
        left = min(float(self._burst), left + (now - then) * self._rate)
        if len(self._buckets) >= MAX_CALLERS:
            del self._buckets[next(iter(self._buckets))]  # the longest-idle caller: a full bucket again
        if left < 1.0:
            self._buckets[caller] = (left, now)
            retry_s = math.ceil((1.0 - left) / self._rate)
            return Refusal(HTTPStatus.TOO_MANY_REQUESTS, f"more than {self._rate:g} requests a second from this "
                                                         f"caller", {"Retry-After": str(retry_s)})
        self._buckets[caller] = (left - 1.0, now)
        return None


def _by_digest(tokens: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    return {digest.lower(): frozenset(apps) for digest, apps in tokens.items()}


def _bearer_digest(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return digest_of(token)
