"""The soak's plot: each process's resident memory, open files and sockets over the run,
the store's size, and the killed worker's memory at its deaths.

Reads only the JSON report (``bench/soak.py --out REPORT.json``), so any interpreter with
matplotlib can draw it: ``python bench/soak_plot.py REPORT.json OUT.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROCESSES = ("scheduler", "worker", "churn", "producer", "sandbox")


def draw(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    minutes = [s["at_s"] / 60 for s in samples]
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.6))
    for name in PROCESSES:
        axes[0].plot(minutes, [s[name]["rss_mb"] for s in samples], label=name)
        axes[1].plot(minutes, [s[name]["files"] for s in samples], label=name)
        axes[2].plot(minutes, [s[name]["sockets"] for s in samples], label=name)
    axes[3].plot(minutes, [s["store_mb"] for s in samples], label="store MB")
    if any(s["backends"] for s in samples):
        axes[3].plot(minutes, [s["backends"] for s in samples], label="PostgreSQL backends")
    for ax, title in zip(axes, ("resident memory, MB", "open files", "sockets",
                                "store"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.legend(fontsize=7)
    fig.suptitle(f"soak [{report['store']}]: {report['minutes']:g} min, {report['kills']} "
                 f"SIGKILLs, {report['intents']} intents ({report.get('commit', '')})")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
