"""What PromQL expressions refer to, checked against what Meridian exports.

Every metric name a dashboard or rule may read is one of: a sample of a metric object in
``shared.metrics`` (``_total``/``_created`` of counters, ``_bucket``/``_sum``/``_count`` of histograms), a
recording rule of ``infra/prometheus/rules/*.yml``, or a standard series (``up``, ``python_*``,
``process_*``). A renamed metric then fails a test instead of silently emptying a panel.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase

from shared import metrics
from shared.settings import REPO_ROOT

RULES_DIR = REPO_ROOT / "infra" / "prometheus" / "rules"
STANDARD_NAMES = frozenset({"up"})
STANDARD_PREFIXES = ("python_", "process_")

#: sample-name suffixes per metric type, as the text exposition writes them
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "enum": ("",),
}
_KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                       "offset", "bool", "inf", "nan", "atan2"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_CLAUSES = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_DURATIONS = re.compile(r"(?<![\w:])\d+(?:ms|[smhdwy])\b")
_NUMBERS = re.compile(r"(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s*,\s*\w+\s*\)\s*$")


def referenced_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and labels left out).

    >>> sorted(referenced_metric_names(
    ...     'sum by (application) (rate(meridian_results_total{status="ok"}[5m])) / on () group_left () up'))
    ['meridian_results_total', 'up']
    >>> sorted(referenced_metric_names('histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m]))) > 1e3'))
    ['x_bucket']
    >>> sorted(referenced_metric_names('label_values(meridian_results_total, application)'))
    ['meridian_results_total']
    """
    grafana_query = _LABEL_VALUES.match(expr)
    if grafana_query:
        expr = grafana_query.group(1)
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _CLAUSES.sub(" ", text)
    text = _VARIABLES.sub(" ", text)
    text = _DURATIONS.sub(" ", text)
    text = _NUMBERS.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group(0)
        if name.lower() in _KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue  # a keyword, or a function/aggregation call
        names.add(name)
    return names


def exported_sample_names(module: object = metrics) -> set[str]:
    """Every sample name the metric objects of ``module`` (default: ``shared.metrics``) expose."""
    names = set()
    for obj in vars(module).values():
        if isinstance(obj, MetricWrapperBase):
            for family in obj.describe():
                names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.yml"))


def iter_rules(files: Iterable[Path] | None = None) -> Iterator[tuple[Path, dict]]:
    """``(file, rule)`` for every recording and alerting rule."""
    for path in rule_files() if files is None else files:
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            for rule in group.get("rules", []):
                yield path, rule


def recording_rule_names(files: Iterable[Path] | None = None) -> set[str]:
    return {rule["record"] for _, rule in iter_rules(files) if "record" in rule}


def alert_names(files: Iterable[Path] | None = None) -> set[str]:
    return {rule["alert"] for _, rule in iter_rules(files) if "alert" in rule}


def is_standard(name: str) -> bool:
    return name in STANDARD_NAMES or name.startswith(STANDARD_PREFIXES)


def unknown_metric_names(expr: str, known: set[str]) -> set[str]:
    """Names ``expr`` selects that are neither in ``known`` nor standard."""
    return {name for name in referenced_metric_names(expr) if name not in known and not is_standard(name)}


def known_names(files: Iterable[Path] | None = None) -> set[str]:
    """Exported sample names plus recording rule names."""
    return exported_sample_names() | recording_rule_names(files)
