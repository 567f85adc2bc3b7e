#!/usr/bin/env bash
# Install (Debian's prometheus), start, stop and health-check Prometheus on 127.0.0.1.
#   prometheus.sh install|start|stop|health|status
# Settings (env): MERIDIAN_PROMETHEUS_PORT (9090), MERIDIAN_VAR_DIR (var/ under the repo).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${MERIDIAN_PROMETHEUS_PORT:-9090}"
var="${MERIDIAN_VAR_DIR:-$root/var}"
state="$var/prometheus-$port"
pidfile="$state/prometheus.pid"
# shellcheck source=../lib.sh
. "$here/../lib.sh"

install() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  echo "installing Debian's prometheus"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
}

health() { python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/-/ready', timeout=2)" 2>/dev/null; }

start() {
  install
  if health; then echo "prometheus already running on 127.0.0.1:$port"; return 0; fi
  mkdir -p "$state/data" "$var/prometheus/targets"
  sed -e "s|@TARGETS_DIR@|$var/prometheus/targets|g" -e "s|@RULES_DIR@|$here/rules|g" \
    "$here/prometheus.local.yml.template" > "$state/prometheus.yml"
  promtool check config "$state/prometheus.yml" >/dev/null
  nohup prometheus --config.file="$state/prometheus.yml" --storage.tsdb.path="$state/data" \
    --web.listen-address="127.0.0.1:$port" --storage.tsdb.retention.time=6h > "$state/prometheus.log" 2>&1 &
  echo $! > "$pidfile"
  wait_healthy prometheus "$pidfile" 100 0.3 "$state/prometheus.log" health || exit 1
  echo "prometheus up on 127.0.0.1:$port"
}

stop() { stop_pidfile prometheus "$pidfile"; }

status() { if health; then echo up; else echo down; exit 1; fi; }

run_command "$@"
