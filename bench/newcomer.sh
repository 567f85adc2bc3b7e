#!/usr/bin/env bash
# A new user's first `make demo`, measured (run by hand, alone: it starts the demo's stack on the default
# ports): a fresh clone of this checkout's HEAD in a temporary folder, a fresh virtual environment, empty
# pip and Maven caches. Prints JSON (also written to bench/results/newcomer.json): bytes downloaded by pip
# (the sum of the sizes pip prints for its downloads) and by Maven (its fresh local repository), the
# environment's size, and the wall time of the install and of the whole `make demo`.
# Debian packages (Java, Redis, Prometheus) are taken as the machine has them: they are not measured.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d /tmp/meridian-newcomer.XXXXXX)"
trap 'rm -rf "$work"' EXIT

git clone -q "$root" "$work/meridian"
ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"  # the materials sit beside a checkout, as in CI
python3 -m venv "$work/venv"
# everything from the registries: no wheel folder (PIP_FIND_LINKS) and empty caches
unset PIP_FIND_LINKS
export PATH="$work/venv/bin:$PATH" PIP_CACHE_DIR="$work/pip-cache" MAVEN_OPTS="-Dmaven.repo.local=$work/m2"
mkdir -p "$work/pip-cache" "$work/m2"

cd "$work/meridian"
started=$(date +%s.%N)
make install 2>&1 | tee "$work/install.out"
installed=$(date +%s.%N)
set +e
make demo 2>&1 | tee "$work/demo.out"
demo_rc=${PIPESTATUS[0]}
set -e
finished=$(date +%s.%N)

mkdir -p "$root/bench/results"
python3 - "$work" "$started" "$installed" "$finished" "$demo_rc" <<'EOF' | tee "$root/bench/results/newcomer.json"
import json, pathlib, re, sys

work, started, installed, finished, demo_rc = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5])
work = pathlib.Path(work)


def size(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
downloads = re.findall(r"Downloading \S+ \(([\d.]+) (\w+)\)", (work / "install.out").read_text())
torch = any((work / "venv").rglob("site-packages/torch"))
bill = re.findall(r"^bill: .*$", (work / "demo.out").read_text(), flags=re.M)
print(json.dumps({
    "pip_downloads": len(downloads),
    "pip_downloaded_bytes": round(sum(float(n) * UNITS[unit] for n, unit in downloads)),
    "maven_downloaded_bytes": size(work / "m2"),
    "environment_bytes": size(work / "venv"),
    "torch_installed": torch,
    "install_wall_s": round(installed - started, 1),
    "make_demo_wall_s": round(finished - started, 1),
    "demo_exit_code": demo_rc,
    "demo_bill_line": bill[-1] if bill else None,
}, indent=2))
EOF
