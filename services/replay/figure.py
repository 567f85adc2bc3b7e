"""The comparison as a picture: SLO attainment and effective accuracy over time, one panel per policy."""
from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path


def plot_over_time(panels: Mapping[str, Mapping[str, Mapping[str, list[float]]]], path: Path, *, title: str) -> Path:
    """``panels``: panel title -> line label (``live``, ``simulated`` ...) -> an `over_time` series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(panels), figsize=(3.4 * len(panels) + 0.6, 5.2), sharex=True, squeeze=False)
    for column, (name, lines) in enumerate(panels.items()):
        attainment, accuracy = axes[0][column], axes[1][column]
        for label, series in lines.items():
            style = "-" if label == "live" else "--"
            # a bin holding a few stragglers (the run's last fraction of a second) says nothing
            kept = [k for k, sent in enumerate(series["sent"]) if sent >= 0.1 * max(series["sent"])]
            t = [series["t_s"][k] for k in kept]
            attainment.plot(t, [100 * series["slo_attainment"][k] for k in kept], style, label=label)
            accuracy.plot(t, [series["effective_accuracy"][k] for k in kept], style, label=label)
        attainment.set_title(name)
        attainment.set_ylim(0, 101)
        accuracy.set_xlabel("seconds")
        if column == 0:
            attainment.set_ylabel("SLO attainment, %")
            accuracy.set_ylabel("effective accuracy, %")
            attainment.legend(fontsize=8)
    fig.suptitle(textwrap.fill(title, 40 * len(panels) + 20), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
