"""The default draft-shape policy against every fixed shape on real machines' cost curves (synthetic drafters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_eagle.runtime.treesim import CPU, GPU, Drafts, Machine, best_fixed, fixed_chain, fixed_tree, policy_run

PROFILES = Path(__file__).parents[2] / "local_eagle" / "bench" / "profiles"
RTX4090_8B = Machine.from_profile(str(PROFILES / "rtx4090-8b-q4.json"))


@pytest.mark.parametrize("machine", [GPU, RTX4090_8B, CPU], ids=lambda m: m.name)
@pytest.mark.parametrize("alpha", [0.4, 0.6, 0.8])
def test_the_policy_is_within_5_percent_of_the_best_fixed_shape(machine, alpha):
    """Chains of 1-8 and trees of 3-63 nodes (as deep as a chain of that size, or 8): whichever is best on this
    machine for this drafter, the policy, which knows neither, gets within 5% of it (often above: it sizes
    every round's tree on that round's drafts)."""
    drafts = Drafts(alpha)
    label, fixed = best_fixed(machine, drafts, 300, seed=1)
    run = policy_run(machine, drafts, 600, seed=1)
    assert run.speedup(machine) >= 0.95 * fixed, (label, fixed, run.speedup(machine))
    share = run.tree_rounds / run.rounds
    if machine is CPU:
        assert share == 0 and label == "k=0"
    elif alpha >= 0.6:
        assert share > 0.4 and label.startswith("tree"), (label, share)  # deep chains come close at 0.8


def test_trees_beat_chains_where_rows_are_cheap_and_lose_where_they_cost():
    drafts = Drafts(0.6)
    assert fixed_tree(GPU, drafts, 15, 300).speedup(GPU) > 1.1 * fixed_chain(GPU, drafts, 15, 300).speedup(GPU)
    assert fixed_tree(CPU, drafts, 15, 300).speedup(CPU) < fixed_chain(CPU, drafts, 2, 300).speedup(CPU) < 1.0


def test_machine_tables_interpolate_and_extend():
    m = Machine.from_ms("m", {1: 1.0, 3: 3.0}, {1: 0.5}, 0.0)
    assert m.verify[2] == pytest.approx(2e-3) and m.verify[5] == pytest.approx(5e-3)
    assert m.drafter[64] == pytest.approx(0.5e-3)


AMX = Machine.from_profile(str(PROFILES / "intel-amx-2core-gemma3-270m.json"), host_ms=0.5)
H100_8B = Machine.from_profile(str(PROFILES / "h100-8b-q4.json"))


@pytest.mark.parametrize("machine", [AMX, CPU, H100_8B, RTX4090_8B], ids=lambda m: m.name)
def test_the_default_pays_every_catch_up_and_still_matches_the_best_chain(machine):
    """Issue 44's bar on the demo pair's drafter (kept ~0.7 of the time at each depth), on four machines' measured or
    published costs, every round's first drafter call charged for the rows it catches up on and each 64-token
    answer's prompt left to catch up on as the engine leaves it: the default within 5% of the best fixed chain of
    1-4 (or of the target alone where no chain pays: the AMD VM, where it must also draft almost nothing)."""
    drafts = Drafts(0.7)
    best = max([1.0] + [fixed_chain(machine, drafts, k, 400, seed=1).speedup(machine) for k in range(1, 5)])
    run = policy_run(machine, drafts, 600, seed=1, answer=37)
    assert run.speedup(machine) >= 0.95 * best, (best, run.speedup(machine))
    if machine is CPU:
        assert best == 1.0 and run.rows / run.rounds < 1.05
    else:
        assert best > 1.3 and run.rows / run.rounds > 2.0  # drafts every round
