"""The gateway's bearer tokens in Redis, beside those in its configuration: added and revoked while gateways run.

Layout (under ``prefix``, ``meridian:`` by default)::

    gateway:tokens    hash  SHA-256 hex of a token -> JSON list of the applications it may query (``"*"``: all)

Only a token's digest is stored: whoever reads Redis learns no token. ``meridian token add`` makes a token,
stores its digest and prints the token once; every gateway reads the hash again every few seconds
(`services.gateway.front`), so a revoked token stops working everywhere within that time.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shared.adapters.redis_text import text

if TYPE_CHECKING:
    import redis


def digest_of(token: str) -> str:
    """What is stored of ``token``: its SHA-256, hex (as ``MERIDIAN_GATEWAY_TOKENS`` holds it too)."""
    return hashlib.sha256(token.encode()).hexdigest()


class RedisTokenStore:
    """Token digests and their applications, around a ``redis.Redis`` client (either ``decode_responses``)."""

    def __init__(self, client: redis.Redis, *, prefix: str = "meridian:") -> None:
        self._redis = client
        self._key = f"{prefix}gateway:tokens"

    def add(self, applications: Sequence[str]) -> str:
        """A new token that may query ``applications``; only its digest is kept: the caller must keep the token."""
        if not applications:
            raise ValueError("a token needs at least one application (or '*')")
        token = secrets.token_urlsafe(32)
        self._redis.hset(self._key, digest_of(token), json.dumps(sorted(set(applications))))
        return token

    def revoke(self, token_or_digest: str) -> bool:
        """Forget a token (given as itself or as its digest); False: it was not stored."""
        removed = self._redis.hdel(self._key, token_or_digest.lower())
        return bool(removed or self._redis.hdel(self._key, digest_of(token_or_digest)))

    def read(self) -> dict[str, list[str]]:
        """Every stored digest and its applications."""
        return {text(digest): json.loads(apps) for digest, apps in self._redis.hgetall(self._key).items()}
