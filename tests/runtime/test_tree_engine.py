"""Draft trees in the loop: exactly the target's tokens, more accepted per target call than a chain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from converters import convert, write_checkpoint
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.identity import IDENTICAL, NEAR_TIE, check_identity
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.costs import FrozenOverhead, deciding_on
from local_eagle.testing.tiny import make_drafter, write_tiny_target
from local_eagle.testing.tiny_pair import LAYERS, N_VOCAB, SPEC, make_cycle_drafter, write_cycle_target

OPTS = EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=32, tree_width=4)


def _drafter_gguf(model, target: Path, out: Path) -> Path:
    ckpt = write_checkpoint(model.state_dict(), model.cfg.to_dict(), out.with_suffix(".ckpt"))
    return convert(ckpt, target, out, outtype="f32").outfile


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    d = tmp_path_factory.mktemp("tree-pairs")
    random_target = write_tiny_target(d / "random-target.gguf", SPEC, seed=5)
    noisy = write_cycle_target(d / "noisy-target.gguf", noise=0.35, seed=2)
    cycle = write_cycle_target(d / "cycle-target.gguf")
    pairs = {
        "random-3.1": (
            random_target,
            _drafter_gguf(
                make_drafter(N_VOCAB, SPEC.n_embd, LAYERS, eagle31=True, draft_vocab=128, seed=11),
                random_target,
                d / "r31.gguf",
            ),
        ),  # fmt: skip
        "noisy-3.1": (noisy, _drafter_gguf(make_cycle_drafter(True, noise=0.05, seed=3), noisy, d / "n31.gguf")),
        "noisy-3": (noisy, _drafter_gguf(make_cycle_drafter(False, noise=0.02, seed=4), noisy, d / "n3.gguf")),
        "cycle-3.1": (cycle, _drafter_gguf(make_cycle_drafter(True), cycle, d / "c31.gguf")),
        "unsure-3.1": (noisy, _drafter_gguf(make_cycle_drafter(True, noise=0.2, seed=3), noisy, d / "u31.gguf")),
    }
    opened = {name: Engine(t, dr, OPTS) for name, (t, dr) in pairs.items()}
    yield opened
    for e in opened.values():
        e.close()


def prompts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    alphabet = list("ABCDEFGHIJKLMNOP") + list("abcxyz ,.!?") + ["é", "ß", "→"]
    return ["".join(rng.choice(alphabet, size=rng.integers(1, 20))) for _ in range(n)]


SHAPES = [TreeShape(4, 4, 1), TreeShape(6, 3, 3), TreeShape(15, 5, 4), TreeShape(31, 6, 4)]


@pytest.mark.parametrize("name", ["noisy-3.1", "noisy-3", "random-3.1", "cycle-3.1"])
def test_tree_greedy_is_lossless(engines, name):
    """Every shape, chains (width 1) included: the target's tokens exactly.

    The random pair's logits have near-ties that a verify batch and a 1-row decode (flash attention's kernels
    differ by 2e-4 of the logits' range even on one thread) resolve differently: a chain of 4 parts from the
    target at the same token of the prompt " B" there. Such a part is allowed only at a near-tie that small."""
    eng = engines[name]
    accepted = drafted = near_ties = 0
    for prompt in prompts(10, seed=17):
        base = eng.generate(prompt, max_tokens=48, draft_max=0)
        for shape in SHAPES:
            spec = eng.generate(prompt, max_tokens=48, tree=shape)
            check = check_identity(eng, prompt, base, spec)
            d = check.divergence
            assert check.verdict == IDENTICAL or (check.verdict == NEAR_TIE and d.noise <= 1e-3 * d.scale), (
                prompt, shape, check,
            )  # fmt: skip
            near_ties += check.verdict == NEAR_TIE
            accepted += spec.stats.accepted_tokens
            drafted += spec.stats.drafted_tokens
    assert drafted > accepted > (100 if name != "random-3.1" else -1)
    assert near_ties <= (4 if name == "random-3.1" else 0)


def test_a_width_one_tree_is_the_chain(engines):
    eng = engines["noisy-3.1"]
    for prompt in prompts(4, seed=5):
        chain = eng.generate(prompt, max_tokens=40, draft_max=4)
        tree = eng.generate(prompt, max_tokens=40, tree=TreeShape(4, 4, 1))
        assert tree.tokens == chain.tokens
        assert tree.spec_stats.trace_accepted == chain.spec_stats.trace_accepted
        assert tree.spec_stats.trace_drafted == chain.spec_stats.trace_drafted


def test_trees_accept_more_per_target_call_than_chains_of_the_same_rows(engines):
    """A drafter blurred enough to miss the target's token at its first choice, not always at its second: siblings
    pay. Where the drafter is nearly always right (the noisy pair) the best 15 nodes are the chain's."""
    for name, better in [("unsure-3.1", True), ("noisy-3.1", False)]:
        eng = engines[name]
        chain = tree = 0.0
        for prompt in prompts(8, seed=23):
            chain += eng.generate(prompt, max_tokens=64, draft_max=15).stats.acceptance_length
            tree += eng.generate(prompt, max_tokens=64, tree=TreeShape(15, 15, 4)).stats.acceptance_length
        assert tree > 1.05 * chain if better else tree == pytest.approx(chain), (name, tree, chain)


def test_tree_rounds_respect_max_tokens_and_context(engines):
    eng = engines["cycle-3.1"]
    for n in (1, 2, 5, 17):
        res = eng.generate("hi", max_tokens=n, tree=TreeShape(15, 5, 4))
        assert len(res.tokens) == n
    assert eng.generate("hi", max_tokens=40, tree=TreeShape(15, 5, 4)).text.startswith("PABCDEFGHIJKLMNOP")


def test_a_tree_the_engine_was_not_opened_for_is_a_clear_error(engines):
    eng = engines["cycle-3.1"]
    with pytest.raises(LocalEagleError, match="needs an engine opened for it"):
        eng.generate("hi", max_tokens=4, tree=TreeShape(40, 4, 4))


def test_tree_sampling_with_seed_is_reproducible_and_keeps_the_penalty(engines):
    eng = engines["noisy-3.1"]
    sp = SamplingParams(temperature=0.3, top_k=5, top_p=1.0, min_p=0.0, seed=42)
    a = eng.generate("ABCDEFGHIJ", max_tokens=32, sampling=sp, tree=TreeShape(15, 5, 4))
    b = eng.generate("ABCDEFGHIJ", max_tokens=32, sampling=sp, tree=TreeShape(15, 5, 4))
    assert a.tokens == b.tokens and a.stats.accepted_tokens > 0
    greedy_penalty = SamplingParams(temperature=0.0, repeat_penalty=1.5, repeat_last_n=16)
    for prompt in prompts(4, seed=21):
        base = eng.generate(prompt, max_tokens=40, sampling=greedy_penalty, draft_max=0)
        spec = eng.generate(prompt, max_tokens=40, sampling=greedy_penalty, tree=TreeShape(15, 5, 4))
        assert spec.tokens == base.tokens


def test_trees_on_a_sliding_window_target_through_the_callback_capture(tmp_path):
    """Gemma 3's interleaved sliding-window cache (window 8 here, shorter than the text) and the eval-callback
    features: tree rows are masked by position in both caches, and the output stays the target's."""
    from local_eagle.testing.tiny import TinyGemma3Spec, write_tiny_gemma3_target

    spec = TinyGemma3Spec()
    target = write_tiny_gemma3_target(tmp_path / "gemma3.gguf", spec)
    model = make_drafter(N_VOCAB, spec.n_embd, [2, 4, 5], eagle31=True, draft_vocab=100, seed=2)
    draft = _drafter_gguf(model, target, tmp_path / "d.gguf")
    options = EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=16, tree_width=4)
    with Engine(target, draft, options) as eng:
        assert eng.capture.mode == "callback" and eng.tree_refusal is None
        for prompt in prompts(4, seed=1):
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            for shape in (TreeShape(6, 3, 3), TreeShape(15, 5, 4)):
                assert eng.generate(prompt, max_tokens=40, tree=shape).tokens == base.tokens, (prompt, shape)


def test_the_identity_check_replays_the_verify_trees(engines):
    """A tree run's batched replay decodes its recorded trees again: the logits it chose from come back exactly,
    so a corrupted token is a divergence, with no float noise between the replays."""
    from local_eagle.runtime.engine import GenerationResult
    from local_eagle.runtime.identity import DIVERGENT

    eng = engines["unsure-3.1"]
    prompt = "ABCD xyz"
    base = eng.generate(prompt, max_tokens=32, draft_max=0)
    spec = eng.generate(prompt, max_tokens=32, tree=TreeShape(15, 5, 4))
    assert len(spec.spec_stats.trace_trees) == spec.stats.target_calls
    assert check_identity(eng, prompt, base, spec).verdict == IDENTICAL
    tokens = list(spec.tokens)
    tokens[12] = (tokens[12] + 1) % N_VOCAB
    wrong = GenerationResult(spec.text, tokens, spec.stats, spec.spec_stats)
    check = check_identity(eng, prompt, base, wrong)
    d = check.divergence
    assert check.verdict == DIVERGENT and d.index == 12 and not d.reproduced
    assert d.noise <= 1e-3 * d.scale


def test_calibrated_tree_scores_learn_from_the_rounds_and_stay_lossless(engines):
    from local_eagle.runtime.tree import SlotCalibration

    eng = engines["unsure-3.1"]
    eng.tree_calibration = SlotCalibration()
    try:
        for prompt in prompts(4, seed=29):
            base = eng.generate(prompt, max_tokens=48, draft_max=0)
            assert eng.generate(prompt, max_tokens=48, tree=TreeShape(15, 6, 4)).tokens == base.tokens
        cal = eng.tree_calibration
        assert cal.tried.sum() > 100 and 0 < cal.accepted.sum() < cal.tried.sum()
    finally:
        eng.tree_calibration = None


def test_adaptive_rounds_choose_trees_where_rows_are_cheap_and_chains_where_they_cost(engines):
    """With a tree allowed, an adaptive run drafts trees where a 16-row call costs about one row (a GPU) and never
    where calls cost in proportion to their rows (this CPU); the output is the target's either way."""
    eng = engines["noisy-3.1"]  # right often: a tree 15 deep yields far more than the policy's chains of up to 4
    shape = TreeShape(15, 15, 4)
    for ratios, trees_wanted in [([1.0 + 0.01 * r for r in range(16)], True), (list(range(1, 17)), False)]:
        with deciding_on(eng, ratios, 5e-5, FrozenOverhead(shape)):
            tree_rounds = rounds = 0
            for prompt in prompts(4, seed=37):
                base = eng.generate(prompt, max_tokens=48, draft_max=0)
                spec = eng.generate(prompt, max_tokens=48, draft_max=4, adaptive=True, tree=shape)
                assert spec.tokens == base.tokens, (prompt, ratios[1])
                tree_rounds += len(spec.spec_stats.trace_trees)
                rounds += spec.stats.target_calls
        if trees_wanted:
            assert tree_rounds > 0.5 * rounds, (tree_rounds, rounds)
        else:
            assert tree_rounds == 0


def test_an_engine_opened_for_trees_offers_them_to_adaptive_calls_that_name_none(engines):
    """The default: an adaptive call on an engine opened with ``tree_nodes`` may draft the engine's default tree
    (as deep as its draft bound, as many nodes as the engine allows), priced per round: on GPU-like costs it does,
    and the output is the target's."""
    eng = engines["noisy-3.1"]
    shape = eng.default_tree(4)
    assert shape == TreeShape(32, 4, 4)
    with deciding_on(eng, [1.0 + 0.01 * r for r in range(40)], 5e-5, FrozenOverhead(shape)):
        trees, rounds = [], 0
        for prompt in prompts(4, seed=41):
            base = eng.generate(prompt, max_tokens=48, draft_max=0)
            spec = eng.generate(prompt, max_tokens=48, draft_max=4, adaptive=True)
            assert spec.tokens == base.tokens, prompt
            trees += [t for t, _ in spec.spec_stats.trace_trees]
            rounds += spec.stats.target_calls
        assert len(trees) > 0.5 * rounds, (len(trees), rounds)
        assert max(t.drafted for t in trees) > 4 and max(int(t.depths.max()) for t in trees) <= 4  # bushy, 4 deep
    assert eng.generate("hello", max_tokens=8, draft_max=4, adaptive=False).spec_stats.trace_trees == []


class EveryOtherRound(FrozenOverhead):
    """Trees and chains in turn (whether a round is a tree is decided before it, so any rule stays lossless)."""

    def prefer_tree(self, policy) -> bool:
        self.flip = not getattr(self, "flip", False)
        return self.flip


def test_the_identity_check_replays_an_adaptive_run_that_mixes_chains_and_trees(engines):
    """An adaptive run's rounds are chains and trees in turn: the batched replay decodes each round as it ran (a
    replay of every round as a tree read the wrong cache and called a near-tie at the end of a chat a divergence)."""
    from local_eagle.runtime.engine import GenerationResult
    from local_eagle.runtime.identity import DIVERGENT

    eng = engines["unsure-3.1"]
    shape = TreeShape(15, 6, 4)
    with deciding_on(eng, [1.0 + 0.01 * r for r in range(16)], 5e-5, EveryOtherRound(shape)):
        checked = 0
        for prompt in prompts(6, seed=43):
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            spec = eng.generate(prompt, max_tokens=40, draft_max=4, adaptive=True, tree=shape)
            st = spec.spec_stats
            trees = set(st.trace_tree_rounds)
            chains = [r for r in range(st.rounds) if r not in trees]
            if not trees or not chains or len(spec.tokens) < 30:
                continue
            assert check_identity(eng, prompt, base, spec).verdict == IDENTICAL
            j = min(len(spec.tokens) - 1, 1 + sum(1 + a for a in st.trace_accepted[: max(trees | {chains[-1]})]))
            tokens = list(spec.tokens)
            tokens[j] = (tokens[j] + 1) % N_VOCAB
            check = check_identity(eng, prompt, base, GenerationResult(spec.text, tokens, spec.stats, st))
            d = check.divergence
            assert check.verdict == DIVERGENT and d.index == j and not d.reproduced, (prompt, check)
            assert d.noise <= 1e-3 * d.scale, (prompt, d)  # the replay decoded the very batches the run did
            checked += 1
        assert checked >= 2, checked


def test_trees_verify_at_most_63_rows_where_attention_runs_on_the_cpu(engines):
    """llama.cpp's CPU flash attention tiles 64+ query rows with other rounding (runtime.tree.CPU_TREE_NODES)."""
    from dataclasses import replace

    from local_eagle.runtime.policy.plan import default_tree
    from local_eagle.runtime.tree import CPU_TREE_NODES, MAX_SEQ

    eng = engines["noisy-3.1"]
    assert CPU_TREE_NODES == 62
    if not eng.model.attention_on_cpu:  # a GPU build with every layer offloaded (the GPU kit's test run)
        assert eng.max_tree_nodes == MAX_SEQ - 1
        return
    assert eng.max_tree_nodes == CPU_TREE_NODES
    assert eng.fit_tree(TreeShape(99, 10, 8)) == TreeShape(62, 10, 8)
    assert eng.fit_tree(TreeShape(15, 5, 4)) == TreeShape(15, 5, 4)
    wide = replace(eng.draft_limits, tree_nodes=200, max_tree_nodes=CPU_TREE_NODES)
    assert default_tree(wide, 8).nodes == 62


def test_branch_sequences_get_the_prefix_as_it_is_decoded_and_lose_the_tree_in_one_edit(engines, monkeypatch):
    """Each cache edit scans llama.cpp's whole cache (12 us at 8K cells, 24-42 us at 32K): the committed rows are
    decoded into every branch sequence at once rather than copied to each every round, and a round's branches go in
    one edit. The drafts are the same as with copies: every drafter row sees the same cells."""
    eng = engines["unsure-3.1"]
    branches = tuple(range(1, 1 + 2 * OPTS.tree_width))
    assert eng.drafter.prefix_seqs == branches
    ctx, edits = eng.drafter.ctx, []

    def logged(name: str):
        edit = getattr(ctx, name)

        def call(*args):
            edits.append((name, args))
            return edit(*args)

        return call

    for name in ("seq_copy", "seq_remove"):
        monkeypatch.setattr(ctx, name, logged(name))
    runs = {}
    try:
        for shared in (True, False):
            eng.drafter.prefix_seqs = branches if shared else ()
            edits.clear()
            results = [eng.generate(p, max_tokens=48, tree=TreeShape(15, 15, 4)) for p in prompts(4, seed=31)]
            runs[shared] = results, [*edits]
    finally:
        eng.drafter.prefix_seqs = branches
    (decoded, with_decode), (copied, with_copies) = runs[True], runs[False]
    for a, b in zip(decoded, copied, strict=True):
        assert a.tokens == b.tokens
        assert a.spec_stats.trace_drafted == b.spec_stats.trace_drafted
        assert a.spec_stats.trace_accepted == b.spec_stats.trace_accepted
    assert not [e for e in with_decode if e[0] == "seq_copy" and e[1][0] == 0]  # no prefix copied
    assert [e for e in with_copies if e[0] == "seq_copy" and e[1][0] == 0]
    rounds = sum(r.spec_stats.rounds for r in decoded)
    assert 0 < len([e for e in with_decode if e[1][0] == -1]) <= rounds  # a tree round's branches: one edit
    assert len(with_decode) < len(with_copies)
