"""Byte units and the one way byte counts are written for people.

In the base layer so that every part that prints a size (the planner's tables, the CLI, the
doctor) writes it the same way; binary units throughout, as llama.cpp and ``nvidia-smi`` use.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def human_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit below it: "1.50 GiB", "12.0 MiB", "512 B"; negative keeps its sign."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.1f} MiB"
    if n >= KiB:
        return f"{sign}{n / KiB:.1f} KiB"
    return f"{sign}{int(n)} B"
