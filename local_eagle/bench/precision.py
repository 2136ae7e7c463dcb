"""Which precision to run a drafter at: what a q8_0 drafter saves on this machine against what it loses in acceptance.

The saving is a machine's: a drafter call of a few rows reads every weight once, so on a GPU a
q8_0 drafter (8.5 bits a weight against f16's 16) may cost well under the f16 one's call, while on
a CPU the dequantisation can eat the gain. The kit times both side by side (``bench.costs``,
``others``). The loss is the drafter's: quantising moves its logits a little and may change a
drafted token where two candidates are close. That is measured once on the demo pair on the CPU
(an EAGLE 3.1 drafter trained here, converted at f16 and at q8_0 from the same checkpoint) and kept
in ``acceptance/precision-gemma3-270m.json``.

The two meet in a round of a chain of ``k``: its tokens scale with the acceptance length, its time
is a verify of ``k + 1`` rows plus ``k`` one-row drafter calls, so the q8_0 drafter's speed against
the f16 one's is (its acceptance / f16's) / (its round's time / f16's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ACCEPTANCE = Path(__file__).parent / "acceptance" / "precision-gemma3-270m.json"
CHAIN = 3  # the chain a round is priced on: the demo pair's best fixed length on the machines measured so far


@dataclass(frozen=True)
class Kept:
    """One precision's acceptance on the demo pair: acceptance length and per position at a fixed chain."""

    precision: str
    acceptance_length: float
    per_position: tuple[float, ...]


def measured_acceptance(path: Path = ACCEPTANCE) -> dict[str, Kept]:
    """Each precision's acceptance, keyed by its quantization's name as GGUF files give it (F16, Q8_0)."""
    raw = json.loads(path.read_text())
    return {k.upper(): Kept(k.upper(), float(v["acceptance_length"]), tuple(v["per_position"]))
            for k, v in raw["precisions"].items()}  # fmt: skip


def _at(curve: dict, rows: int) -> float | None:
    """A curve's figure at ``rows`` (keys ints or a file's strings), else at the nearest row count above it."""
    got = {int(k): float(v) for k, v in curve.items()}
    above = [r for r in sorted(got) if r >= rows]
    return got[above[0]] if above else None


def chain_speed(
    verify_ms: dict, base_ms: dict, other_ms: dict, base: Kept, other: Kept, k: int = CHAIN
) -> float | None:
    """The other drafter's speed against the base's on a chain of ``k``: acceptance ratio over round-time ratio."""
    verify, d0, d1 = _at(verify_ms, k + 1), _at(base_ms, 1), _at(other_ms, 1)
    if verify is None or d0 is None or d1 is None or base.acceptance_length <= 0:
        return None
    return (other.acceptance_length / base.acceptance_length) / ((verify + k * d1) / (verify + k * d0))


def advice(base_name: str, base_ms: dict, other_name: str, other_ms: dict, verify_ms: dict,
           types: dict[str, str] | None = None, kept: dict[str, Kept] | None = None) -> str | None:  # fmt: skip
    """One sentence on which of two drafter files to run, from their calls timed side by side on this machine and
    each precision's acceptance on the demo pair; None when the curve or the measured acceptance lacks one."""
    types = types or {}
    kept = measured_acceptance() if kept is None else kept
    t0, t1 = types.get(base_name, "").upper(), types.get(other_name, "").upper()
    d0, d1 = _at(base_ms, 1), _at(other_ms, 1)
    if t0 not in kept or t1 not in kept or not d0 or not d1:
        return None
    speed = chain_speed(verify_ms, base_ms, other_ms, kept[t0], kept[t1])
    one = _at(verify_ms, 1)
    share = f" ({d0 / one:.0%} and {d1 / one:.0%} of a 1-row target call)" if one else ""
    a0, a1 = kept[t0].acceptance_length, kept[t1].acceptance_length
    text = (f"Drafter precision: a 1-row call of `{other_name}` ({t1}) costs {d1:.2f} ms against {d0:.2f} ms for "
            f"`{base_name}` ({t0}), {d1 / d0:.2f}x{share}; on the demo pair {t1} kept an acceptance length of "
            f"{a1:.3f} against {t0}'s {a0:.3f} (chain 4, CPU).")  # fmt: skip
    if speed is None:
        return text
    better = other_name if speed > 1.0 else base_name
    return text + (f" Priced on a chain of {CHAIN} here, {t1} runs at {speed:.2f}x {t0}'s speed: run `{better}`.")


def measured_call_ratio(path: Path = ACCEPTANCE) -> float | None:
    """The q8_0 drafter's 1-row call against the f16 one's where the acceptance was measured (a CPU)."""
    c = json.loads(path.read_text()).get("cpu_costs") or {}
    f16 = (c.get("drafter_ms") or {}).get("1")
    q8 = next((ms.get("1") for name, ms in (c.get("others_ms") or {}).items() if "q8_0" in name), None)
    return q8 / f16 if f16 and q8 else None


def fit_note(matrices: str, now_bytes: int, q8_bytes: int, kept: dict[str, Kept] | None = None,
             call_ratio: float | None = None) -> str:  # fmt: skip
    """``fit``'s line for a drafter whose matrices are floats: what q8_0 would weigh, and what it kept in acceptance
    and cost a call where that was measured; a GPU's own call cost is the kit's to time."""
    kept = measured_acceptance() if kept is None else kept
    call_ratio = measured_call_ratio() if call_ratio is None else call_ratio
    f16, q8 = kept.get("F16"), kept.get("Q8_0")
    mib = 1024 * 1024
    text = f"drafter: its matrices are {matrices}, {now_bytes / mib:.0f} MiB; at q8_0 {q8_bytes / mib:.0f} MiB"
    if f16 is None or q8 is None:
        return text + " (local-eagle convert --outtype q8_0)"
    share = q8.acceptance_length / f16.acceptance_length
    call = f" and its call cost {call_ratio:.2f}x f16's on a 2-core CPU" if call_ratio else ""
    return (text + f". On the demo pair a q8_0 drafter kept {share:.1%} of f16's acceptance length "
            f"({q8.acceptance_length:.3f} against {f16.acceptance_length:.3f}){call}: prefer q8_0 (local-eagle "
            "convert --outtype q8_0); local-eagle bench -d with each file times both on this GPU")  # fmt: skip
