"""Synthetic drafters and machines to run the draft-shape policy against, without a model.

The chain simulator (``runtime.draftsim``) scores the draft-length policy against fixed draft lengths; this one
scores the whole default, the policy's chains and its priced trees (``runtime.policy.shapes``), against every fixed
shape, chains of k and trees of N nodes, on cost curves of real machines. Drafts live in a synthetic tree whose
truth is known: at every node the drafter reports slot probabilities and each slot has a true chance of being
the target's next token, so a round's expected tokens are scored exactly rather than sampled, while the policy
learns from sampled outcomes and noisy timings as it does in the engine. The rounds run the engine's own
decisions (``shapes.grow``, ``TreeChoice``, ``DraftLengthPolicy``), not a copy of them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from local_eagle.runtime.policy.defaults import IDLE_CONTEXT, PROBE_CONTEXT
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.shapes import TreeChoice, grow
from local_eagle.runtime.tree import DraftTree, TreeShape

ROWS = 65


def _table(points: dict[int, float], rows: int = ROWS) -> tuple[float, ...]:
    """Linear between the points, the last slope beyond them; index 0 unused."""
    xs = np.array(sorted(points), dtype=float)
    ys = np.array([points[int(x)] for x in xs])
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
    out = [float(np.interp(r, xs, ys)) if r <= xs[-1] else float(ys[-1] + slope * (r - xs[-1])) for r in range(rows)]
    return (0.0, *out[1:])


@dataclass(frozen=True)
class Machine:
    """Seconds of a target call by rows (``verify[r]``) and of a drafter call by rows (``drafter[r]``), and host
    seconds per round."""

    name: str
    verify: tuple[float, ...]
    drafter: tuple[float, ...]
    host: float = 0.0

    @classmethod
    def from_ms(cls, name: str, verify_ms: dict[int, float], drafter_ms: dict[int, float], host_ms: float = 0.0):
        """From tables in milliseconds at some row counts (a ``bench --measure-costs`` profile's)."""
        return cls(name, tuple(t / 1e3 for t in _table(verify_ms)), tuple(t / 1e3 for t in _table(drafter_ms)),
                   host_ms / 1e3)  # fmt: skip

    @classmethod
    def from_profile(cls, path: str, host_ms: float = 0.1):
        """From a cost profile file (``bench --measure-costs``, or a built-in one in ``bench/profiles``)."""
        raw = json.loads(Path(path).read_text())
        table = {name: {int(r): float(ms) for r, ms in raw[name].items()} for name in ("verify_ms", "drafter_ms")}
        host = raw.get("host_ms")
        return cls.from_ms(raw.get("name", Path(path).stem), table["verify_ms"], table["drafter_ms"],
                           host_ms if host is None else float(host))  # fmt: skip

    @property
    def target_rate(self) -> float:
        return 1.0 / (self.verify[1] + self.host)


#: a GPU running a small model (public RTX 4090 1B F32 figures: 64 rows ~1.5x one row), a partly offloaded
#: model, and this project's 2-core CPU with the Gemma 3 270M pair (measured, docs/gpu-results-cpu-dryrun.md)
GPU = Machine.from_ms("gpu", {1: 4.4, 2: 4.4, 8: 4.6, 16: 4.9, 32: 5.5, 64: 6.5}, {1: 0.3, 16: 0.32, 64: 0.4}, 0.1)
PARTIAL = Machine.from_ms("partial", {1: 60.0, 2: 78.0, 64: 60.0 * (1 + 0.3 * 63)}, {1: 3.0, 64: 3.0 * 20}, 0.5)
CPU = Machine.from_ms(
    "cpu",
    {1: 10.62, 2: 22.43, 3: 28.83, 4: 33.58, 8: 42.43, 12: 53.43, 16: 56.78, 32: 102.69, 64: 182.21},
    {1: 0.87, 2: 1.49, 4: 3.66, 8: 6.72, 16: 12.32, 32: 25.87, 64: 49.34},
    0.15,
)


@dataclass(frozen=True)
class Drafts:
    """A synthetic drafter: at each node the first choice is the target's token with chance u ~ Beta (mean
    ``alpha``), each later slot takes ``spread`` of the chance left by the slots before it (60% of it in the top
    ``width``); the drafter reports u ** (1 / overconfidence) for its first choice and the same shares of the rest,
    a monotone distortion the policy has to calibrate away."""

    alpha: float
    width: int = 8
    concentration: float = 2.0
    overconfidence: float = 1.5
    spread: float = 0.5

    def node(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One node's (reported slot probabilities, true slot chances), most probable reported first."""
        k = self.concentration
        u1 = float(rng.beta(self.alpha * k, (1.0 - self.alpha) * k))
        shares = self.spread * (1.0 - self.spread) ** np.arange(self.width - 1)
        shares = 0.6 * shares / shares.sum()
        q1 = u1 ** (1.0 / self.overconfidence)
        u = np.concatenate(([u1], (1.0 - u1) * shares))
        q = np.concatenate(([q1], (1.0 - q1) * shares))
        order = np.argsort(-q, kind="stable")
        return q[order], u[order]


@dataclass
class World:
    """One round's draft tree as the synthetic drafter grows it: node data drawn when a node is first expanded."""

    drafts: Drafts
    rng: np.random.Generator
    tree: DraftTree = field(default_factory=lambda: DraftTree(0))
    truth: dict[int, np.ndarray] = field(default_factory=dict)

    def expand(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        q, u = self.drafts.node(self.rng)
        self.truth[node] = u
        self.tree.add_children(node, list(range(len(q))), np.log(q), q)
        return q, u

    def reach(self, node: int) -> float:
        """The true chance that ``node`` is on the accepted path."""
        p = 1.0
        tree = self.tree
        while node > 0:
            parent = tree.parents[node]
            p *= float(self.truth[parent][tree.ranks[node]])
            node = parent
        return p

    def walk(self, verified: set[int]) -> list[int]:
        """A sampled outcome: the target picks each next slot with its true chance; the accepted path."""
        tree, node, path = self.tree, 0, []
        while node in self.truth:
            u = self.truth[node]
            pick = int(np.searchsorted(np.cumsum(u), self.rng.random(), side="right"))
            if pick >= len(u):
                break
            child = tree.children[node][pick]
            if child not in verified:
                break
            path.append(child)
            node = child
        return path


@dataclass
class Feed:
    """The drafter's queued rows as ``runtime.feed.DrafterFeed`` keeps them, counted: the first draft step of a round
    decodes every row committed since the drafter last ran (a catch-up that costs by its rows), a stretch whose
    features were not captured leaves nothing, and after either the drafter waits for a window of rows."""

    window: int = IDLE_CONTEXT
    pending: int = 1
    restart: bool = False

    def ready(self) -> bool:
        return self.pending > 0 and (not self.restart or self.pending >= self.window)

    def catch_up(self) -> int:
        rows, self.pending, self.restart = self.pending, 0, False
        return rows

    def commit(self, rows: int, captured: bool) -> None:
        if not captured:
            self.pending, self.restart = 0, True
            return
        self.pending += rows
        if self.pending > self.window:
            self.pending, self.restart = self.window, True


@dataclass
class Score:
    """Expected tokens (from the true chances) and seconds, summed over rounds; the rows verified."""

    tokens: float = 0.0
    seconds: float = 0.0
    rows: int = 0
    rounds: int = 0
    tree_rounds: int = 0

    def add(self, tokens: float, seconds: float, rows: int, tree: bool) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.rows += rows
        self.rounds += 1
        self.tree_rounds += tree

    def speedup(self, machine: Machine) -> float:
        return self.tokens / self.seconds / machine.target_rate


def _tree_round(world: World, machine: Machine, shape: TreeShape, n_nodes: int, prices) -> tuple:
    """Grow and choose a tree as the engine does; (verified nodes, the seconds of each drafter call after the first,
    the expected tokens when priced)."""
    world.expand(0)
    calls: list[float] = []

    def expand(depth: int, frontier: list[int]) -> None:
        for node in frontier:
            world.expand(node)
        calls.append(machine.drafter[len(frontier)])

    order, expected = grow(world.tree, shape, n_nodes, expand, greedy=True, prices=prices)
    return order, calls, expected


def fixed_tree(
    machine: Machine, drafts: Drafts, nodes: int, rounds: int, seed: int = 0, depth: int | None = None
) -> Score:
    """Every round a tree of ``nodes`` drafted nodes (``TreeShape.for_nodes``, as ``bench --tree N --fixed``)."""
    rng = np.random.default_rng(seed)
    shape = TreeShape.for_nodes(nodes, depth, width=min(drafts.width, nodes))
    score = Score()
    committed = 1
    for _ in range(rounds):
        world = World(drafts, rng)
        order, calls, _ = _tree_round(world, machine, shape, nodes, None)
        tokens = 1.0 + sum(world.reach(n) for n in order)
        seconds = machine.drafter[committed] + sum(calls) + machine.verify[len(order) + 1] + machine.host
        score.add(tokens, seconds, len(order) + 1, True)
        committed = 1 + len(world.walk(set(order)))
    return score


def fixed_chain(machine: Machine, drafts: Drafts, k: int, rounds: int, seed: int = 0) -> Score:
    """Every round a chain of ``k`` first choices."""
    rng = np.random.default_rng(seed)
    score = Score()
    committed = 1
    for _ in range(rounds):
        tokens, reach, accepted, alive = 1.0, 1.0, 0, True
        for _ in range(k):
            _, u = drafts.node(rng)
            reach *= float(u[0])
            tokens += reach
            alive = alive and rng.random() < u[0]
            accepted += alive
        first = machine.drafter[committed] if k else 0.0
        score.add(tokens, first + (k - 1) * machine.drafter[1] * (k > 0) + machine.verify[k + 1] + machine.host,
                  k + 1, False)  # fmt: skip
        committed = 1 + accepted
    return score


def policy_run(
    machine: Machine,
    drafts: Drafts | Callable[[int], Drafts],
    rounds: int,
    *,
    k_max: int = 8,
    tree_nodes: int = 63,
    seed: int = 0,
    noise: float = 0.1,
    choice: Callable[[TreeShape], TreeChoice] = TreeChoice,
    policy: DraftLengthPolicy | None = None,
    answer: int = 0,
) -> Score:
    """The engine's default on ``machine``: per round the draft-shape policy's choice of nothing, a chain (the
    draft-length policy) or a priced tree of up to ``tree_nodes`` nodes, ``k_max`` deep (``tree_nodes`` 0: chains
    only). As in the engine, a round's first drafter call catches the drafter up on every row committed since it
    last ran (:class:`Feed`), and a round that neither drafts nor may draft within the feed's window does not
    record the target's features (``policy.rounds.capture_wanted``). Timings the policies see carry log-normal
    ``noise``; the score uses the truth. ``drafts`` may change with the round (a callable). ``answer``: rounds per
    answer; each new answer's prompt reaches the drafter as ``Generation.prefill_chunks`` leaves it (all decoded
    where the policy drafted lately, else a window of rows to catch up on)."""
    rng = np.random.default_rng(seed)
    shape = TreeShape(max(tree_nodes, 1), k_max, min(Drafts(0.5).width, max(tree_nodes, 1)))
    policy = policy or DraftLengthPolicy(machine.verify[1], k_max)
    trees = choice(shape) if tree_nodes > 0 else None
    feed = Feed(window=max(IDLE_CONTEXT, k_max + 1))
    score = Score()

    def jitter() -> float:
        return float(rng.lognormal(0.0, noise))

    for r in range(rounds):
        now = drafts(r) if callable(drafts) else drafts
        world = World(now, rng)
        feed.window = PROBE_CONTEXT if policy.hopeless else max(IDLE_CONTEXT, k_max + 1)
        if answer and r % answer == 0 and r:
            idle = policy.idle_rounds >= IDLE_CONTEXT
            feed.pending, feed.restart = (feed.window, True) if idle else (1, False)
        if trees is not None and trees.prefer_tree(policy) and feed.ready():
            caught = feed.catch_up()
            first = machine.drafter[caught]
            order, calls, expected = _tree_round(world, machine, shape, tree_nodes, trees.prices(policy, tree_nodes))
            verified = set(order)
            path = world.walk(verified)
            rows = len(order) + 1
            tokens = 1.0 + sum(world.reach(n) for n in order)
            seconds = first + sum(calls) + machine.verify[rows] + machine.host
            score.add(tokens, seconds, rows, True)
            call = sum(calls) / len(calls) * jitter() if calls else None
            trees.observe(policy, expected, rows, len(calls), call)
            on_path = {0, *path}
            judged = [n for n in order if world.tree.parents[n] in on_path]
            outcomes = ([world.tree.probs[n] for n in judged], [n in on_path for n in judged])
            policy.end_tree_round(outcomes, rows, verify_seconds=machine.verify[rows] * jitter(),
                                  host_seconds=machine.host * jitter(), first_seconds=first * jitter(),
                                  first_rows=caught)  # fmt: skip
            feed.commit(1 + len(path), True)
            continue
        if trees is not None:
            trees.chose_chain()
        policy.begin_round(ready=feed.ready())
        k = paid = caught = 0
        reach, tokens, accepted, alive = 1.0, 1.0, 0, True
        while policy.extend():
            if paid == 0:
                caught = feed.catch_up()
            paid += 1
            q, u = now.node(rng)
            if not policy.take(float(q[0])):
                break
            k += 1
            reach *= float(u[0])
            tokens += reach
            if alive and rng.random() < u[0]:
                accepted += 1
            else:
                alive = False
        first = machine.drafter[caught] * jitter() if paid else 0.0
        later = (paid - 1) * machine.drafter[1] if paid else 0.0
        seconds = machine.drafter[caught] + later if paid else 0.0
        score.add(tokens, seconds + machine.verify[k + 1] + machine.host, k + 1, False)
        captured = k > 0 or policy.rounds_until_draft() <= feed.window
        policy.end_round(accepted, verify_seconds=machine.verify[k + 1] * jitter(),
                         draft_seconds=first + later * jitter(), draft_steps=paid, host_seconds=machine.host * jitter(),
                         first_seconds=first if paid else None, first_rows=caught)  # fmt: skip
        feed.commit(1 + accepted, captured)
    return score


TREE_SIZES = (3, 7, 15, 31, 63)


def best_fixed(machine: Machine, drafts: Drafts, rounds: int, *, k_max: int = 8, seed: int = 0,
               trees: bool = True) -> tuple[str, float]:  # fmt: skip
    """The best fixed shape's (label, speedup): chains of 0..k_max, trees of ``TREE_SIZES`` nodes (unless not
    ``trees``)."""
    best = ("k=0", 1.0)
    for k in range(1, k_max + 1):
        s = fixed_chain(machine, drafts, k, rounds, seed).speedup(machine)
        best = max(best, (f"k={k}", s), key=lambda x: x[1])
    for n in TREE_SIZES if trees else ():
        for depth in sorted({min(n, 32), min(n, k_max)}):
            s = fixed_tree(machine, drafts, n, rounds, seed, depth).speedup(machine)
            best = max(best, (f"tree {n} d{depth}", s), key=lambda x: x[1])
    return best


def table(machines=(GPU, PARTIAL, CPU), alphas=(0.4, 0.6, 0.8), rounds: int = 600, seed: int = 1) -> list[tuple]:
    """(machine, alpha, best fixed shape, its speedup, the policy's speedup, the policy's share of tree rounds)."""
    rows = []
    for machine in machines:
        for alpha in alphas:
            drafts = Drafts(alpha)
            label, fixed = best_fixed(machine, drafts, rounds // 2, seed=seed)
            run = policy_run(machine, drafts, rounds, seed=seed)
            rows.append((machine.name, alpha, label, fixed, run.speedup(machine), run.tree_rounds / run.rounds))
    return rows


if __name__ == "__main__":  # python -m local_eagle.runtime.treesim [PROFILE.json ...]
    machines = (GPU, *(Machine.from_profile(p) for p in sys.argv[1:]), PARTIAL, CPU)
    print("| machine | alpha | best fixed shape | its speedup | policy's speedup | policy / best fixed | tree rounds |")
    print("|---|---|---|---|---|---|---|")
    for name, alpha, label, fixed, pol, share in table(machines):
        print(f"| {name} | {alpha:.1f} | {label} | {fixed:.2f}x | {pol:.2f}x | {pol / fixed:.3f} | {share:.0%} |")
