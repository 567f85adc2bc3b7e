#!/usr/bin/env bash
# Install (Debian's redis-server), start, stop and health-check Redis on 127.0.0.1 (or MERIDIAN_REDIS_HOST).
#   redis.sh install|start|stop|health|status
# Settings (env): MERIDIAN_REDIS_PORT (6379), MERIDIAN_REDIS_HOST (127.0.0.1: the one address it listens on),
#                 MERIDIAN_REDIS_PASSWORD (optional, enables AUTH; Redis refuses other hosts without one),
#                 MERIDIAN_VAR_DIR (var/ under the repo) for data, log and pid file.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${MERIDIAN_REDIS_PORT:-6379}"
host="${MERIDIAN_REDIS_HOST:-127.0.0.1}"
var="${MERIDIAN_VAR_DIR:-$root/var}"
state="$var/redis-$port"
pidfile="$state/redis.pid"
# shellcheck source=../lib.sh
. "$here/../lib.sh"

cli() {
  if [ -n "${MERIDIAN_REDIS_PASSWORD:-}" ]; then
    REDISCLI_AUTH="$MERIDIAN_REDIS_PASSWORD" redis-cli -h "$host" -p "$port" "$@"
  else
    redis-cli -h "$host" -p "$port" "$@"
  fi
}

install() {
  command -v redis-server >/dev/null && return 0
  echo "installing Debian's redis-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
}

health() { [ "$(cli ping 2>/dev/null)" = "PONG" ]; }

start() {
  install
  if health; then echo "redis already running on $host:$port"; return 0; fi
  mkdir -p "$state"
  args=(--bind "$host" --port "$port" --dir "$state" --daemonize yes --pidfile "$pidfile"
    --logfile "$state/redis.log" --save "" --appendonly yes --appendfsync everysec --protected-mode yes)
  if [ -n "${MERIDIAN_REDIS_PASSWORD:-}" ]; then args+=(--requirepass "$MERIDIAN_REDIS_PASSWORD"); fi
  redis-server "${args[@]}"
  wait_healthy redis "$pidfile" 50 0.2 "$state/redis.log" health || exit 1
  echo "redis up on $host:$port"
}

stop() { stop_pidfile redis "$pidfile"; }

status() { if health; then echo up; else echo down; exit 1; fi; }

run_command "$@"
