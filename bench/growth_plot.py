"""The growth benchmark's plot: each figure of a report against the ledger's size.

Reads only the JSON report (no tidings import), so any interpreter with matplotlib can
draw it: ``python bench/growth_plot.py REPORT.json OUT.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def draw(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(report["sizes"].values(), key=lambda s: s["intents"])
    figures = [name for name in report["figures"] if any(
        s["figures"].get(name) is not None for s in sizes)]
    cols = 4
    rows = (len(figures) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, name in zip(axes.flat, figures, strict=False):
        xs = [s["intents"] / 1e6 for s in sizes if s["figures"].get(name) is not None]
        ys = [s["figures"][name] for s in sizes if s["figures"].get(name) is not None]
        ax.plot(xs, ys, marker="o")
        ax.set_title(f"{name} ({report['figures'][name]['unit']})", fontsize=9)
        ax.set_xlabel("retained intents (millions)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(figures):]:
        ax.set_visible(False)
    fig.suptitle(f"tidings growth, {report['store']} ({report['date']}, "
                 f"{report['tidings'].get('commit', '?')})", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    draw(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
