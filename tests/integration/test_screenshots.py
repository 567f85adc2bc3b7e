"""``make dashboards-shot`` on the live stack: headless Chromium draws Prometheus' graph page for overview panels
while the module's pipeline serves queries, and the PNG check passes on that render but not on a blank one.
"""
from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from services.launcher import LocalLauncher
from services.observability import screenshots
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from tests.integration.helpers import digits_rows, make_query

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: overview panels whose data this module's pipeline produces
PANELS = ("Scrape targets up", "Results by application and status")


def has_data(prometheus: str, expr: str) -> bool:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        result = json.load(response)["data"]["result"]
    return any(not math.isnan(float(sample["value"][1])) for sample in result)


@pytest.fixture(scope="module")
def prometheus(pipeline: LocalLauncher, stack: LocalStack, settings) -> str:
    """Prometheus' URL once it holds a few seconds of the pipeline serving digits."""
    x, _ = digits_rows()
    rng = np.random.default_rng(3)
    with MeridianClient(settings) as client:
        sent = []
        for _ in range(150):
            query = make_query(x[rng.integers(0, len(x), size=2)])
            client.send(query)
            sent.append(query.query_id)
            time.sleep(0.02)
        client.flush()
        assert client.wait_for(sent, timeout_s=60), "queries unanswered"
    url = f"http://127.0.0.1:{stack.prometheus_port}"
    exprs = [expr for title in PANELS for expr in screenshots.panel_queries()[title]]
    deadline = time.monotonic() + 30
    while not all(has_data(url, expr) for expr in exprs):
        assert time.monotonic() < deadline, f"no data in Prometheus for {exprs}"
        time.sleep(1)
    time.sleep(4)  # two more scrapes and rule evaluations: a line, not a dot
    return url


@pytest.mark.parametrize("title", PANELS)
def test_overview_panel_screenshot_is_a_real_render(prometheus: str, title: str, tmp_path: Path) -> None:
    url = screenshots.graph_url(prometheus, screenshots.panel_queries()[title], range_input="5m")
    path = screenshots.screenshot(url, tmp_path / f"{screenshots.slug(title)}.png")
    screenshots.check_png(path)
    assert not screenshots.shows_alert(path), f"{path}: Prometheus drew 'No datapoints found' or an error"


def test_an_empty_query_shows_the_alert(prometheus: str, tmp_path: Path) -> None:
    """The other side of the check above: a query without data is drawn as Prometheus' red alert box."""
    path = screenshots.screenshot(screenshots.graph_url(prometheus, ["meridian_no_such_metric"]), tmp_path / "x.png")
    screenshots.check_png(path)  # a real render of a page, but not of a chart
    assert screenshots.shows_alert(path)


def test_check_rejects_a_uniform_png(tmp_path: Path) -> None:
    blank = tmp_path / "blank.png"
    Image.new("RGB", screenshots.WINDOW, "white").save(blank)
    with pytest.raises(screenshots.ScreenshotError, match="bytes|uniform"):
        screenshots.check_png(blank)
    noise = tmp_path / "flat-but-big.png"  # big enough to pass the size test: the colour test must catch it
    Image.frombytes("L", (1400, 900), np.random.default_rng(0).integers(120, 124, 1400 * 900, np.uint8).tobytes()
                    ).convert("RGB").save(noise)
    with pytest.raises(screenshots.ScreenshotError, match="uniform"):
        screenshots.check_png(noise)


def test_no_prometheus_is_a_clear_error() -> None:
    with pytest.raises(screenshots.ScreenshotError, match="no Prometheus ready at http://127.0.0.1:1"):
        screenshots.shoot_overview("http://127.0.0.1:1", Path("/nonexistent"))
