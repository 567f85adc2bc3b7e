#!/usr/bin/env bash
# Install what Meridian needs on a fresh Debian machine: Python packages, the Kafka broker's jars (Maven
# Central), Redis and Prometheus (Debian). Idempotent; run by `make install` (and so by `make demo` / `make test`).
#   infra/install.sh          the runtime: serve, the client, the CLI (no torch)
#   infra/install.sh dev      the runtime plus building models (torch) and the tests' packages
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p var
log=var/install.log
: >"$log"
exec 3>&1  # the terminal, for the lines a step shows while it runs

# One line when a step starts and one when it ends, so a slow download is never silence; pip's own
# "Downloading <wheel> (<size>)" lines pass through, everything else goes to the log.
step() {
  local title=$1; shift
  local started=$SECONDS
  echo "install: $title ..."
  if ! "$@" >>"$log" 2>&1; then
    echo "install: $title failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  echo "install: $title done in $((SECONDS - started)) s"
}

pip_install() {
  # onnxruntime-gpu and onnxruntime share one folder: never have both.
  if python3 -m pip show onnxruntime >/dev/null 2>&1; then python3 -m pip uninstall -y onnxruntime; fi
  python3 -m pip install --progress-bar off "$@" 2>&1 | while IFS= read -r line; do
    echo "$line"
    case $line in *Downloading*) echo "  ${line#"${line%%[![:space:]]*}"}" >&3 ;; esac
  done
  return "${PIPESTATUS[0]}"
}

if [ "${1:-runtime}" = dev ]; then
  step "Python packages for building models and testing (torch: ~5 GB on a first install)" pip_install -e ".[models,test]"
  exit 0
fi
step "Python packages (the runtime, no torch)" pip_install -e .

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v chromium-headless-shell >/dev/null || missing+=(chromium-headless-shell)  # make dashboards-shot
if [ ${#missing[@]} -gt 0 ]; then
  step "Debian packages: ${missing[*]}" bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' _ "${missing[@]}"
fi
step "the Kafka broker's jars (Maven Central)" bash infra/kafka/kafka.sh install
