"""The lend plan: which calls, what each carries against 64 MiB, and their minutes against the 15 of a lend.

One source for the device tool's limits and the plan's numbers: ``kit plan`` prints them, the
runner's deadlines come from them, the tests hold them to the bar (at most 2 calls, each at most
64 MiB, the first at most 6 minutes, everything with the machine's start at most 12) and each
call's stage budgets to its deadline: call 1 measures, call 2 runs the lossless tests (210 s on the
H100, a call of their own), on a fresh machine after the install and short if the full run no
longer fits.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from local_eagle.kit.cuda import MIB
from local_eagle.kit.gpu import RESERVE, STAGES, call_order

LEND_MINUTES = 15.0  # device time of a lend, the machine's start and idle waits included
START_MINUTES = 2.0  # a machine's start, as the device tool says (1-2 minutes)
CALL_BYTES = 64 * MIB
SLACK = 20  # seconds of a call's limit kept for the tool's own start of the command and the results' transfer
CALL_SECONDS = (360, 240)  # call 1 measures; call 2 runs the lossless tests, then what call 1 left or lost
COMMAND = "python3 -m local_eagle.kit gpu --seconds {seconds}{retry}"


@dataclass(frozen=True)
class Budget:
    """The stage budgets one case of a call must hold within its ``--seconds``: a stage starts only if its budget
    fits what is left, so a case that holds them all runs every one of them."""

    call: int
    case: str
    stages: tuple[tuple[str, float], ...]
    seconds: float

    @property
    def total(self) -> float:
        return sum(b for _, b in self.stages) + RESERVE

    def fits(self) -> bool:
        return self.total <= self.seconds

    def line(self) -> str:
        parts = ", ".join(f"{n} {b:.0f}" for n, b in self.stages)
        return f"{self.case}: {parts} + {RESERVE:.0f} to write results = {self.total:.0f} of {self.seconds:.0f} s"


def call_budgets() -> tuple[Budget, ...]:
    """Call 1's stages; call 2's on a warm machine (call 1 installed) and on a fresh one (it installs first, and
    runs a stage's short selection when the full one does not fit after the install's budget)."""
    one, two = (t - SLACK for t in CALL_SECONDS)
    first = tuple((s.name, s.budget) for s in STAGES if s.call == 1)
    last = [s for s in STAGES if s.call == 2]
    needs = tuple((s.name, s.budget) for s in call_order(retry=True, fresh=True) if s.call != 2)
    fresh: list[tuple[str, float]] = list(needs)
    for s in last:
        room = two - RESERVE - sum(b for _, b in fresh)
        fresh.append((s.name, s.budget) if s.budget <= room or not s.short else (f"{s.name} short", s.short))
    return (Budget(1, "call 1", first, one),
            Budget(2, "call 2, warm machine", tuple((s.name, s.budget) for s in last), two),
            Budget(2, "call 2, fresh machine", tuple(fresh), two))  # fmt: skip


@dataclass(frozen=True)
class Call:
    number: int
    command: str
    carry: tuple[str, ...]
    timeout_s: int
    bytes: int
    what: str
    budgets: tuple[Budget, ...] = ()

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
        calls = [{**asdict(c), "minutes": c.minutes, "mib": round(c.bytes / MIB, 1),
                  "budgets": [{**asdict(b), "total": b.total, "fits": b.fits()} for b in c.budgets]}
                 for c in self.calls]  # fmt: skip
        return {"calls": calls, "tree_bytes": self.tree_bytes, "bundle_bytes": self.bundle_bytes,
                "start_minutes": self.start_minutes, "minutes": self.minutes, "lend_minutes": LEND_MINUTES,
                "call_limit_bytes": CALL_BYTES, "reserve_seconds": RESERVE,
                "stage_budgets": {s.name: s.budget for s in STAGES},
                "stage_calls": {s.name: s.call for s in STAGES}, "fits": self.fits()}  # fmt: skip

    def fits(self) -> bool:
        """The bar, and every call's stages within its deadline (else the plan's stage lists would not be true)."""
        return (len(self.calls) <= 2 and all(c.bytes <= CALL_BYTES for c in self.calls)
                and self.calls[0].timeout_s <= 360 and self.minutes <= 12.0
                and all(b.fits() for c in self.calls for b in c.budgets))  # fmt: skip


def make_plan(tree_bytes: int, bundle_bytes: int, bundle: str = ".gpukit/call") -> Plan:
    budgets = call_budgets()
    last = ", ".join(f"{s.name} ({s.budget:.0f} s)" for s in STAGES if s.call == 2)
    whats = (f"the measuring stages in order of value, then {last} if it still fits what is left",
             f"{last} first (a fresh machine installs first, and runs the short selection if the full one no longer "
             "fits); then, on a warm machine, what call 1 left or lost, if it fits")  # fmt: skip
    calls = []
    for i, timeout in enumerate(CALL_SECONDS, 1):
        retry = " --retry" if i > 1 else ""
        calls.append(Call(i, COMMAND.format(seconds=timeout - SLACK, retry=retry), (bundle,), timeout,
                          tree_bytes + bundle_bytes, whats[i - 1], tuple(b for b in budgets if b.call == i)))
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
        lines.append(f"      {c.what}")
        lines += [f"      {b.line()}{'' if b.fits() else '  DOES NOT FIT'}" for b in c.budgets]
    lines.append(f"machine start ~{plan.start_minutes:.0f} min + calls = {plan.minutes:.1f} of {LEND_MINUTES:.0f} "
                 "minutes")  # fmt: skip
    lines.append("fits the bar" if plan.fits() else "DOES NOT FIT the bar (2 calls, 64 MiB each, call 1 <= 6 min, "
                 "<= 12 min with the start, each call's stages within its seconds)")  # fmt: skip
    return "\n".join(lines)
