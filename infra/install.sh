#!/usr/bin/env bash
# Install everything Meridian needs on a fresh Debian machine: Python packages, the Kafka broker's jars
# (Maven Central), Redis and Prometheus (Debian). Idempotent; run by `make install` (and so by `make demo` / `make test`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# onnxruntime-gpu and onnxruntime share one folder: never have both.
if python3 -m pip show onnxruntime >/dev/null 2>&1; then python3 -m pip uninstall -y onnxruntime; fi
python3 -m pip install -q -e ".[test]"

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v chromium-headless-shell >/dev/null || missing+=(chromium-headless-shell)  # make dashboards-shot
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash infra/kafka/kafka.sh install
