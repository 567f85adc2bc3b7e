"""Screenshots of the overview dashboard's queries, drawn by Prometheus' own graph page in headless Chromium.

Grafana cannot be installed here (no Docker, not in Debian), so the closest honest picture of a dashboard
is Prometheus' graph page (Prometheus 2.x: ``/graph?g0.expr=...``) showing, per panel, the very PromQL the
generated dashboard runs (``dashboards.expressions()``). ``check_png`` tells a real render from a blank or
broken picture, so ``make dashboards-shot`` and its test cannot pass on an empty file.

Run: ``python -m services.observability.screenshots [--prometheus URL] [--out DIR]`` (``make dashboards-shot``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from PIL import Image, ImageStat, UnidentifiedImageError

from services.observability import dashboards
from shared.settings import REPO_ROOT

OVERVIEW = "meridian-overview"
#: the binary of Debian's chromium-headless-shell package (infra/install.sh), then a full Chromium
CHROMIUM = ("chromium-headless-shell", "chromium")
OUT_DIR = REPO_ROOT / "var" / "dashboards"
WINDOW = (1400, 900)
#: extra height per extra query of a panel: Prometheus stacks one graph per query
GRAPH_HEIGHT = 700
#: Bootstrap's alert-danger background: Prometheus' "No datapoints found." and query errors
ALERT_RGB = (248, 215, 218)


class ScreenshotError(RuntimeError):
    """A screenshot could not be taken, or what was taken is not a real render."""


def graph_url(prometheus: str, exprs: list[str], range_input: str = "15m") -> str:
    """Prometheus 2.x's graph page with one graph tab per expression, the last ``range_input``."""
    params: dict[str, str] = {}
    for index, expr in enumerate(exprs):
        params.update({f"g{index}.expr": expr, f"g{index}.tab": "0", f"g{index}.stacked": "0",
                       f"g{index}.show_exemplars": "0", f"g{index}.range_input": range_input})
    return f"{prometheus.rstrip('/')}/graph?{urllib.parse.urlencode(params)}"


def panel_queries(uid: str = OVERVIEW) -> dict[str, list[str]]:
    """Panel title -> its expressions, in dashboard order, from the generated dashboard."""
    panels: dict[str, list[str]] = {}
    for board, title, expr in dashboards.expressions():
        if board == uid and not title.startswith("$"):  # "$name" is a template variable, not a panel
            panels.setdefault(title, []).append(expr)
    if not panels:
        raise ScreenshotError(f"no dashboard {uid!r} in services/observability/dashboards.py")
    return panels


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def chromium() -> str:
    for name in CHROMIUM:
        if path := shutil.which(name):
            return path
    raise ScreenshotError(f"no headless Chromium ({' or '.join(CHROMIUM)}) on PATH: run `make install`")


def screenshot(url: str, out: Path, *, window: tuple[int, int] = WINDOW, budget_ms: int = 8000,
               timeout_s: float = 90.0) -> Path:
    """Render ``url`` in headless Chromium into the PNG ``out``; the virtual-time budget lets the JS charts
    fetch their data and draw before the picture is taken."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)  # a stale file must not pass for this render
    command = [chromium(), "--headless", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
               f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={budget_ms}",
               f"--screenshot={out}", url]
    if os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ScreenshotError(f"Chromium took over {timeout_s:.0f} s to render {url}") from None
    if result.returncode != 0 or not out.exists():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScreenshotError(f"Chromium exited {result.returncode} without a screenshot of {url}: {last}")
    return out


def check_png(path: Path, *, min_bytes: int = 10_000, min_colours: int = 64, min_stddev: float = 8.0) -> None:
    """Raise unless ``path`` is a PNG with real content: big enough, decodable, many colours, not flat."""
    size = path.stat().st_size if path.exists() else 0
    if size < min_bytes:
        raise ScreenshotError(f"{path}: {size} bytes, under {min_bytes}: not a rendered page")
    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                raise ScreenshotError(f"{path}: a {image.format} image, not a PNG")
            rgb = image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ScreenshotError(f"{path}: not a decodable image ({exc})") from None
    colours = len(rgb.getcolors(maxcolors=1 << 24) or [])
    stddev = max(ImageStat.Stat(rgb).stddev)
    if colours < min_colours or stddev < min_stddev:
        raise ScreenshotError(f"{path}: {colours} colours, pixel stddev {stddev:.1f} (want >= {min_colours} and "
                              f">= {min_stddev}): a blank or uniform picture")


def shows_alert(path: Path, *, min_pixels: int = 2000) -> bool:
    """Prometheus drew its red alert box (no data, or a query error) instead of a chart."""
    with Image.open(path) as image:
        counts = {colour: count for count, colour in image.convert("RGB").getcolors(maxcolors=1 << 24) or []}
    return counts.get(ALERT_RGB, 0) >= min_pixels


def require_prometheus(prometheus: str) -> None:
    """Fail fast: Chromium would happily screenshot its own 'connection refused' page."""
    try:
        with urllib.request.urlopen(f"{prometheus.rstrip('/')}/-/ready", timeout=5):
            pass
    except OSError as exc:
        raise ScreenshotError(f"no Prometheus ready at {prometheus} ({exc}); start the stack and some load "
                              "first (`make stack-up`, then `make demo`)") from None


def shoot_overview(prometheus: str, out_dir: Path, range_input: str = "15m") -> list[Path]:
    """One checked PNG per overview panel in ``out_dir``."""
    require_prometheus(prometheus)
    paths = []
    for title, exprs in panel_queries().items():
        window = (WINDOW[0], WINDOW[1] + GRAPH_HEIGHT * (len(exprs) - 1))
        path = screenshot(graph_url(prometheus, exprs, range_input), out_dir / f"{slug(title)}.png", window=window)
        check_png(path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.observability.screenshots",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus base URL")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the PNGs")
    parser.add_argument("--range", default="15m", help="graph range, Prometheus syntax")
    args = parser.parse_args(argv)
    try:
        for path in shoot_overview(args.prometheus, args.out, args.range):
            print(f"{path}  (no data or a query error)" if shows_alert(path) else path)
    except ScreenshotError as exc:
        print(f"dashboards-shot: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
