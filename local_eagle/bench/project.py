"""Projected speed on another machine: a run's own rounds priced on that machine's cost curve.

Acceptance does not depend on the device, costs do. So a run's per-round records (rows verified,
tokens accepted, drafter calls and their rows) replayed on a cost profile (a target call by rows,
a drafter call by rows, host time per round) give the speed the same run would have there. It is a
projection, printed next to the measured speed, never instead of it. Profiles are small JSON files:
the built-in ones (``profiles/``) come from public figures with their sources inside;
``bench --measure-costs FILE`` writes one of this machine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from local_eagle.errors import LocalEagleError

if TYPE_CHECKING:
    from local_eagle.runtime.policy.draftcost import FixedCosts

PROFILES = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class CostProfile:
    name: str
    verify_ms: dict[int, float]  # one target call of R rows, logits of every row read
    drafter_ms: dict[int, float]  # one drafter call of R rows
    host_ms: float | None  # host time per round; None: the run's own
    kind: str = ""

    def verify(self, rows: int) -> float:
        return _interp(self.verify_ms, rows)

    def drafter(self, rows: float) -> float:
        return _interp(self.drafter_ms, rows)

    def fixed_costs(self, rows: int = 256, host_ms: float = 0.1) -> FixedCosts:
        """The profile as the policy's costs (seconds), so it decides as it would on that machine; a profile
        without a host time gets ``host_ms``."""
        from local_eagle.runtime.policy.draftcost import FixedCosts

        host = self.host_ms if self.host_ms is not None else host_ms
        verify = [0.0] + [self.verify(r) / 1e3 for r in range(1, rows + 1)]
        drafter = [0.0] + [self.drafter(r) / 1e3 for r in range(1, rows + 1)]
        return FixedCosts(verify, drafter, host / 1e3)


def _interp(table: dict[int, float], x: float) -> float:
    """Linear between the measured points; beyond the last one, the last slope (costs keep growing)."""
    xs = np.array(sorted(table), dtype=float)
    ys = np.array([table[int(k)] for k in xs])
    if len(xs) == 1 or x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return float(ys[-1] + slope * (x - xs[-1]))


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.json"))


def load_profile(name_or_path: str | os.PathLike[str]) -> CostProfile:
    """A built-in profile by name, or a profile file; bad files are one line naming the file and the field."""
    p = Path(name_or_path)
    if not p.is_file():
        p = PROFILES / f"{name_or_path}.json"
        if not p.is_file():
            raise LocalEagleError(f"--cost-profile {name_or_path}: no such file and no built-in profile of that name "
                                  f"(built in: {', '.join(builtin_profiles())})")  # fmt: skip
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise LocalEagleError(f"{p}: not a cost profile ({type(e).__name__}: {e})") from None
    return profile_from(raw, str(p), p.stem)


def profile_from(raw: object, where: str, default_name: str = "profile") -> CostProfile:
    """A profile from its JSON object (a profile file's, or a cost curve ``bench.costs`` measured)."""
    try:
        assert isinstance(raw, dict), "not an object"
        verify = {int(k): float(v) for k, v in raw["verify_ms"].items()}
        drafter = {int(k): float(v) for k, v in raw["drafter_ms"].items()}
        host = raw.get("host_ms")
        host = None if host is None else float(host)
    except (AssertionError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LocalEagleError(f"{where}: not a cost profile (verify_ms and drafter_ms: objects of rows -> ms; "
                              f"{type(e).__name__}: {e})") from None  # fmt: skip
    if 1 not in verify or not drafter or min(verify) < 1 or any(v <= 0 for v in (*verify.values(), *drafter.values())):
        raise LocalEagleError(f"{where}: verify_ms needs the 1-row call and every figure must be a positive ms")
    return CostProfile(str(raw.get("name", default_name)), verify, drafter, host, str(raw.get("kind", "")))


def write_profile(path: str | os.PathLike[str], curve: dict, host_ms: float | None, name: str) -> Path:
    """A profile of this machine from a measured cost curve (``bench.costs``), written atomically."""
    data = {"name": name, "kind": "measured by local-eagle bench --measure-costs", "target": curve.get("target"),
            "drafter": curve.get("drafter"), "verify_ms": curve["verify_ms"], "drafter_ms": curve["drafter_ms"],
            "host_ms": host_ms}  # fmt: skip
    return save_profile(path, data)


def save_profile(path: str | os.PathLike[str], data: dict) -> Path:
    """A profile's JSON, written atomically (a profile that would not load is refused first)."""
    from local_eagle.files import atomic_output

    profile_from(data, str(path))
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
    return Path(path)


def projected_ms(rounds: list[tuple[int, int, int, int, int]], profile: CostProfile, host_ms: float) -> float:
    """What the rounds would cost on ``profile``: each round's verify, its drafter calls and the host's share.

    A round's first drafter call decodes its catch-up rows (at least one); the later calls share the
    round's remaining drafter rows evenly (a chain's 1 each; a tree's frontiers).
    """
    total = 0.0
    for rows, _accepted, steps, catch_up, draft_rows in rounds:
        total += profile.verify(rows) + host_ms
        if steps:
            total += profile.drafter(max(1, catch_up))
            if steps > 1:
                total += (steps - 1) * profile.drafter(draft_rows / (steps - 1))
    return total


def projected_speedup(rounds: list[tuple[int, int, int, int, int]], profile: CostProfile, host_ms: float) -> float:
    """Tokens the rounds emitted at one target call each, against the rounds themselves, both on ``profile``."""
    tokens = sum(1 + accepted for _, accepted, *_ in rounds)
    spec = projected_ms(rounds, profile, host_ms)
    return tokens * (profile.verify(1) + host_ms) / spec if spec else 0.0
