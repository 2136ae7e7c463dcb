"""``bench --plot``: tokens per target call against rows per call, chains beside trees.

Where a target call costs about the same for 4 rows as for 64 (a GPU), tokens per call is the speedup's
numerator, and this picture shows what a draft tree buys over a chain at the same rows.
"""

from __future__ import annotations

import os
import textwrap

from local_eagle.bench.run import BenchRow
from local_eagle.errors import LocalEagleError
from local_eagle.files import atomic_output


def plot_rows(rows: list[BenchRow], path: str | os.PathLike[str], title: str) -> None:
    """Draw the rows (chains, trees, adaptive runs) into a PNG at ``path``, written atomically."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LocalEagleError("--plot needs matplotlib (pip install matplotlib)") from None
    fixed = sorted((r for r in rows if not r.adaptive), key=lambda r: r.mean_verify_rows)
    series = {
        "chain": [r for r in fixed if r.tree_nodes is None],
        "tree": [r for r in fixed if r.tree_nodes is not None],
    }
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for (label, points), style in zip(series.items(), ("o-", "s-"), strict=True):
        if points:
            ax.plot([r.mean_verify_rows for r in points], [r.acceptance_length for r in points], style, label=label)
    adaptive = [r for r in rows if r.adaptive]
    if adaptive:
        ax.plot([r.mean_verify_rows for r in adaptive], [r.acceptance_length for r in adaptive], "^", label="adaptive")
        for r in adaptive:
            ax.annotate(r.label, (r.mean_verify_rows, r.acceptance_length), fontsize=7)
    ax.set_xscale("log", base=2)
    xs = [r.mean_verify_rows for r in rows] or [1.0]
    ax.set_xlim(min(xs) / 1.25, max(xs) * 1.25)
    ticks = [2**k for k in range(9) if min(xs) / 1.25 <= 2**k <= max(xs) * 1.25] or [round(min(xs), 1)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("rows per target call (mean)")
    ax.set_ylabel("tokens per target call")
    ax.set_title(textwrap.fill(title, 70), fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        with atomic_output(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
