"""The lend plan: which calls, what each carries against 64 MiB, and their minutes against the 15 of a lend.

One source for the device tool's limits and the plan's numbers: ``kit plan`` prints them, the
runner's deadlines come from them, the tests hold them to the bar (at most 2 calls, each at most
64 MiB, the first at most 6 minutes, everything with the machine's start at most 12).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from local_eagle.kit.cuda import MIB
from local_eagle.kit.gpu import BUDGET, RESERVE, STAGES

LEND_MINUTES = 15.0  # device time of a lend, the machine's start and idle waits included
START_MINUTES = 2.0  # a machine's start, as the device tool says (1-2 minutes)
CALL_BYTES = 64 * MIB
SLACK = 20  # seconds of a call's limit kept for the tool's own start of the command and the results' transfer
CALL_SECONDS = (360, 240)  # call 1 measures everything; call 2 is the margin (what call 1 left or lost)
COMMAND = "python3 -m local_eagle.kit gpu --seconds {seconds}{retry}"


@dataclass(frozen=True)
class Call:
    number: int
    command: str
    carry: tuple[str, ...]
    timeout_s: int
    bytes: int
    what: str

    @property
    def minutes(self) -> float:
        return self.timeout_s / 60


@dataclass(frozen=True)
class Plan:
    calls: tuple[Call, ...]
    tree_bytes: int
    bundle_bytes: int
    start_minutes: float = START_MINUTES

    @property
    def minutes(self) -> float:
        return self.start_minutes + sum(c.minutes for c in self.calls)

    def to_dict(self) -> dict:
        return {"calls": [{**asdict(c), "minutes": c.minutes, "mib": round(c.bytes / MIB, 1)} for c in self.calls],
                "tree_bytes": self.tree_bytes, "bundle_bytes": self.bundle_bytes,
                "start_minutes": self.start_minutes, "minutes": self.minutes, "lend_minutes": LEND_MINUTES,
                "call_limit_bytes": CALL_BYTES, "stage_budgets": {s.name: s.budget for s in STAGES},
                "stages_seconds": BUDGET, "fits": self.fits()}  # fmt: skip

    def fits(self) -> bool:
        return (len(self.calls) <= 2 and all(c.bytes <= CALL_BYTES for c in self.calls)
                and self.calls[0].timeout_s <= 360 and self.minutes <= 12.0)  # fmt: skip


def make_plan(tree_bytes: int, bundle_bytes: int, bundle: str = ".gpukit/call") -> Plan:
    calls = []
    for i, timeout in enumerate(CALL_SECONDS, 1):
        seconds = timeout - SLACK
        retry = " --retry" if i > 1 else ""
        what = ("everything, in order of value: machine, install, doctor, selfcheck, lossless, 8B pair, costs, fit, "
                "bench, replay") if i == 1 else "the margin: what call 1 did not finish or lost, on a warm machine "  \
               "from its results, on a fresh one from the start"  # fmt: skip
        calls.append(Call(i, COMMAND.format(seconds=seconds, retry=retry), (bundle,), timeout,
                          tree_bytes + bundle_bytes, what))  # fmt: skip
    return Plan(tuple(calls), tree_bytes, bundle_bytes)


def plan_from_kit(root: Path, repo: Path) -> Plan:
    """The plan for the kit made under ``root`` and today's tree (which the device tool sends every call)."""
    from local_eagle.kit.make import BUNDLE, KitError, tree_bytes

    bundle = root / BUNDLE
    try:
        json.loads((bundle / "kit.json").read_text())
    except (OSError, ValueError):
        raise KitError(f"{bundle}: no kit made yet (python -m local_eagle.kit make)") from None
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    return make_plan(tree_bytes(repo), size, f"{root.name}/{BUNDLE}")


def render(plan: Plan) -> str:
    lines = [f"{'call':>4}  {'MiB':>11}  {'minutes':>7}  command (carry)"]
    for c in plan.calls:
        lines.append(f"{c.number:>4}  {c.bytes / MIB:5.1f} of 64  {c.minutes:7.1f}  {c.command}  "
                     f"(carry {', '.join(c.carry)}, timeout_s {c.timeout_s})")  # fmt: skip
    lines.append(f"machine start ~{plan.start_minutes:.0f} min + calls = {plan.minutes:.1f} of {LEND_MINUTES:.0f} "
                 f"minutes; stages' budgets {BUDGET:.0f} s + {RESERVE:.0f} s to write results "
                 f"(call 1: {CALL_SECONDS[0] - SLACK} s)")  # fmt: skip
    lines.append("fits the bar" if plan.fits() else "DOES NOT FIT the bar (2 calls, 64 MiB each, call 1 <= 6 min, "
                 "<= 12 min with the start)")  # fmt: skip
    return "\n".join(lines)
