"""``meridian token``: the gateway's bearer tokens kept in Redis, added and revoked while gateways run.

    meridian token add --application digits [--application photos]   prints a new token, once
    meridian token revoke TOKEN_OR_DIGEST
    meridian token list                                              digests and their applications

Only a token's SHA-256 is stored (`shared.adapters.token_store`); gateways started with
``MERIDIAN_GATEWAY_REDIS_TOKENS=true`` read them every ``MERIDIAN_GATEWAY_TOKEN_REFRESH_S`` (5 s).
"""
from __future__ import annotations

import argparse

import redis

from services.cli.common import CommandError, summary
from shared.adapters.token_store import RedisTokenStore
from shared.settings import Settings


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("token", help="add, revoke or list the gateway's bearer tokens kept in Redis",
                                 description=summary(__doc__), epilog=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="make a token for some applications and print it once")
    add.add_argument("--application", action="append", required=True,
                     help="an application the token may query ('*': all); repeat for more")
    revoke = actions.add_parser("revoke", help="forget a token, given as itself or its digest")
    revoke.add_argument("token")
    actions.add_parser("list", help="the stored digests and their applications")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    if not settings.gateway_redis_tokens:
        print("note: MERIDIAN_GATEWAY_REDIS_TOKENS is not set here; gateways read these tokens only with it")
    store = RedisTokenStore(redis.Redis.from_url(settings.redis_url, socket_timeout=5.0))
    try:
        if args.action == "add":
            print(store.add(args.application))
        elif args.action == "revoke":
            if not store.revoke(args.token):
                raise CommandError("no such token is stored", code=1)
            print("revoked")
        else:
            for digest, applications in sorted(store.read().items()):
                print(f"{digest}  {', '.join(applications)}")
    except redis.RedisError as exc:
        raise CommandError(f"Redis at {settings.redis_url}: {exc}", code=1) from None
    return 0
