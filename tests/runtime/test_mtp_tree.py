"""A model's own MTP head drafts trees through the EAGLE drafter's tree rounds, losslessly, on an attention target.

The tree phases are ``runtime.treeround``'s, unchanged: the MTP context gets the drafter's branch sequences and
``MtpDrafter.decode_branches`` shifts each level's positions by one (``runtime.mtp``). A hybrid target drafts chains.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpCapture, MtpDrafter
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.runtime.treeround import drafter_sequences
from local_eagle.testing.chisquare import chisquare_pvalue, target_joint
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_cycle_glm4moe_mtp, write_tiny_glm4moe_mtp

OPTS = EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=16, tree_width=4)
SHAPES = [TreeShape(4, 4, 1), TreeShape(4, 2, 2), TreeShape(8, 4, 3), TreeShape(15, 5, 4)]
IDS = [np.array(p, dtype=np.int32) for p in ([1, 5, 9, 13, 2], [3, 3, 3], [7, 1, 30, 12, 8, 4, 4], [200, 17])]
LETTERS = ["xyzA", "hello", "DEF", "P", "abcK", "Ixx"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtp-tree")
    return {
        "random": write_tiny_glm4moe_mtp(d / "random.gguf", TinyGlm4MoeSpec(), seed=3),
        # wrong after C and J, the right letter its second choice there: siblings pay
        "runner-up": write_cycle_glm4moe_mtp(d / "runner-up.gguf", head_misses="CJ", runner_up=0.9),
    }


def full_rounds(res, shape: TreeShape, max_tokens: int) -> tuple[int, int]:
    """(rounds that verified ``shape.nodes`` nodes, rounds with room for the whole tree): a round drafts fewer only
    where max_tokens leaves it less depth than the shape's."""
    st = res.spec_stats
    left = max_tokens - 1
    full = room = 0
    for (tree, _), accepted in zip(st.trace_trees, st.trace_accepted, strict=True):
        if left - 1 >= shape.depth:
            room += 1
            full += tree.drafted == shape.nodes
        left -= accepted + 1
    return full, room


@pytest.mark.parametrize("name", ["random", "runner-up"])
def test_mtp_tree_greedy_is_the_target_alones(models, name):
    """Every shape (a width-one chain among them): the target's tokens exactly, every round a tree of the shape's
    nodes while the length allows it, drafted by the head."""
    prompts = IDS if name == "random" else LETTERS
    with Engine(models[name], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.trees and eng.tree_refusal is None
        assert eng.drafter.ctx.n_seq_max == drafter_sequences(4) and eng.ctx.n_seq_max == 16
        assert "trees up to 16 nodes" in (eng.mtp_note or "")
        accepted = 0
        for prompt in prompts:
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            for shape in SHAPES:
                res = eng.generate(prompt, max_tokens=40, tree=shape)
                assert res.tokens == base.tokens, (prompt, shape)
                st = res.spec_stats
                assert len(st.trace_trees) == res.stats.target_calls, (prompt, shape)
                full, room = full_rounds(res, shape, 40)
                assert room > 0 and full == room, (prompt, shape, full, room)
                accepted += res.stats.accepted_tokens
        assert accepted > (0 if name == "random" else 500)


def test_tree_levels_decode_what_chains_decode(models):
    """Each node of a tree level, on its own branch sequence, gets the logits and state a chain along its path gets:
    it sees its ancestors and not its cousins, at the head's positions (the loop's plus one), fed its parent's state
    (on the random model the state moves the head's logits)."""
    model = Model(models["random"], n_gpu_layers=0, load_mtp=True)
    opts = ContextOptions(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=1)
    target = Context(model, opts)
    capture = MtpCapture(model)
    capture.attach(target)
    tree = MtpDrafter(target, replace(opts, n_seq_max=drafter_sequences(2)))
    chain = MtpDrafter(target, opts)
    try:
        prompt = IDS[2]
        n = len(prompt)
        target.decode(prompt, np.arange(n), np.arange(n) == n - 1)
        h = capture.features(n)
        rows = np.append(prompt[1:], int(np.argmax(target.logits(n - 1, model.n_vocab)))).astype(np.int32)
        for d in (tree, chain):
            d.prime(int(prompt[0]))
            d.decode_kv(rows[:-1], h[:-1], np.arange(n - 1))
        root, state = tree.decode_last(rows[-1:], h[-1:], np.array([n - 1]))
        chain.decode_kv(rows[-1:], h[-1:], np.array([n - 1]))
        kids = np.argsort(-root[0])[:2].astype(np.int32)  # the root's two best children, sequences 1 and 2
        for seq in (1, 2):
            tree.ctx.seq_copy(0, seq)
        first, first_state = tree.decode_branches(kids, np.repeat(state, 2, axis=0), np.full(2, n), [[1], [2]], None)
        grand = first.argmax(axis=1).astype(np.int32)  # each child's best child, sequences 3 and 4
        tree.ctx.seq_copy(1, 3)
        tree.ctx.seq_copy(2, 4)
        second, second_state = tree.decode_branches(grand, first_state, np.full(2, n + 1), [[3], [4]], None)
        assert not np.allclose(first_state[0], first_state[1], atol=1e-3)  # two paths, two states
        for i in range(2):
            chain.remove_from(n)
            logits, h1 = chain.decode(kids[i : i + 1], state, np.array([n]))
            np.testing.assert_allclose(first[i], logits[0], rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(first_state[i], h1[0], rtol=1e-4, atol=1e-4)
            logits, h2 = chain.decode(grand[i : i + 1], h1, np.array([n + 1]))
            np.testing.assert_allclose(second[i], logits[0], rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(second_state[i], h2[0], rtol=1e-4, atol=1e-4)
        with pytest.raises(LocalEagleError, match="whole vocabulary"):
            tree.decode_branches(kids, first_state, np.full(2, n), [[1], [2]], np.arange(4))
    finally:
        tree.close()
        chain.close()
        target.close()
        model.close()


def test_a_width_one_mtp_tree_is_the_chain(models):
    with Engine(models["runner-up"], None, OPTS) as eng:
        for prompt in LETTERS:
            chain = eng.generate(prompt, max_tokens=40, draft_max=4)
            tree = eng.generate(prompt, max_tokens=40, tree=TreeShape(4, 4, 1))
            assert tree.tokens == chain.tokens
            assert tree.spec_stats.trace_accepted == chain.spec_stats.trace_accepted
            assert tree.spec_stats.trace_drafted == chain.spec_stats.trace_drafted


def tokens_per_call(eng: Engine, prompts: list[str], **kw) -> float:
    """Tokens per target call over the rounds (the prefill's first token left out), the output checked."""
    tokens = calls = 0
    for prompt in prompts:
        base = eng.generate(prompt, max_tokens=64, draft_max=0)
        res = eng.generate(prompt, max_tokens=64, **kw)
        assert res.tokens == base.tokens, (prompt, kw)
        tokens += len(res.tokens) - 1
        calls += res.stats.target_calls
    return tokens / calls


def test_mtp_trees_accept_more_per_target_call_than_chains_as_deep(models):
    """Where the head's second choice is right at its misses, a tree as deep as a chain yields more per target call
    (on this model: chain of 4, 3.90; tree of 8 nodes 4 deep, 4.85; chain of 5, 3.94; 15 nodes 5 deep, 5.73)."""
    with Engine(models["runner-up"], None, EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=16,
                                                         tree_width=8)) as eng:  # fmt: skip
        for depth, shape in [(4, TreeShape(8, 4, 2)), (3, TreeShape(8, 3, 3)), (5, TreeShape(15, 5, 4))]:
            chain = tokens_per_call(eng, LETTERS, draft_max=depth)
            tree = tokens_per_call(eng, LETTERS, tree=shape)
            assert tree > 1.15 * chain, (shape, tree, chain)


def test_mtp_tree_sampling_with_seed_is_reproducible_and_keeps_the_penalty(models):
    with Engine(models["runner-up"], None, OPTS) as eng:
        sp = SamplingParams(temperature=0.3, top_k=5, top_p=1.0, min_p=0.0, seed=42)
        a = eng.generate("ABCDEFGHIJ", max_tokens=32, sampling=sp, tree=TreeShape(15, 5, 4))
        b = eng.generate("ABCDEFGHIJ", max_tokens=32, sampling=sp, tree=TreeShape(15, 5, 4))
        assert a.tokens == b.tokens and a.stats.accepted_tokens > 0
        greedy_penalty = SamplingParams(temperature=0.0, repeat_penalty=1.5, repeat_last_n=16)
        for prompt in LETTERS[:4]:
            base = eng.generate(prompt, max_tokens=40, sampling=greedy_penalty, draft_max=0)
            spec = eng.generate(prompt, max_tokens=40, sampling=greedy_penalty, tree=TreeShape(15, 5, 4))
            assert spec.tokens == base.tokens, prompt


def test_mtp_tree_sampling_matches_the_target_distribution(tmp_path):
    """tests/runtime/test_tree_sampling.py's check with the head drafting: a blurred cycle whose head is right
    often, not always; three tokens, the last two through a tree round; their joint is the target's (chi-square)."""
    path = write_cycle_glm4moe_mtp(tmp_path / "blurred.gguf", margin=0.75, noise=0.1, head_noise=0.1, seed=4)
    sp = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    with Engine(path, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=16, tree_width=3)) as eng:
        joint = target_joint(eng, "xyzA", sp, 3)
        n = 2500
        counts: dict[tuple[int, ...], int] = {}
        drafted = accepted = trees = 0
        for seed in range(n):
            res = eng.generate("xyzA", max_tokens=4, sampling=SamplingParams(**{**sp.__dict__, "seed": seed}),
                               tree=TreeShape(8, 3, 3))  # fmt: skip
            key = tuple(res.tokens[:3])
            counts[key] = counts.get(key, 0) + 1
            drafted += res.stats.drafted_tokens
            accepted += res.stats.accepted_tokens
            trees += len(res.spec_stats.trace_trees)
    assert 0 < accepted < drafted and trees >= n
    assert chisquare_pvalue(counts, joint, n) > 1e-3


def test_a_hybrid_target_keeps_chains_with_a_tree_asked(tmp_path):
    """qwen35 keeps one recurrent state per sequence: with ``--tree 8`` its head drafts chains (``tree_refusal``
    says why, the note says chains), the output the target alone's."""
    from local_eagle.testing.tiny_mtp import write_tiny_qwen35_mtp

    path = write_tiny_qwen35_mtp(tmp_path / "qwen35.gguf", seed=3)
    opts = EngineOptions(n_ctx=256, n_batch=32, n_threads=1, tree_nodes=8, tree_width=8, rollback=8)
    with Engine(path, None, opts) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and not eng.trees and eng.tree_refusal is not None
        assert eng.drafter.ctx.n_seq_max == 1 and eng.ctx.n_seq_max == 1
        assert "chains of at most 8" in (eng.mtp_note or "") and "trees" not in (eng.mtp_note or "")
        for prompt in IDS:
            base = eng.generate(prompt, max_tokens=24, draft_max=0)
            res = eng.generate(prompt, max_tokens=24, tree=TreeShape.for_nodes(8))
            assert res.tokens == base.tokens, prompt
            assert res.spec_stats.trace_trees == [] and res.stats.drafted_tokens > 0


def test_generate_tree_fixed_drafts_that_tree_every_round_with_the_head(models, monkeypatch):
    """``generate --tree 8 --fixed`` on a model with its own head: a tree of 8 nodes every round (fewer only where
    the length ends), the output ``--draft-max 0``'s."""
    from local_eagle.cli.app import app

    runner = CliRunner()

    def generate(*args: str) -> dict:
        r = runner.invoke(app, ["generate", "-m", str(models["runner-up"]), "-p", "xyzA", "-n", "40", "--json",
                                "--threads", "1", "--temperature", "0", *args])  # fmt: skip
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    opened: list[Engine] = []
    init = Engine.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        opened.append(self)

    monkeypatch.setattr(Engine, "__init__", spy)
    plain = generate("--draft-max", "0")
    got = generate("--tree", "8", "--fixed")
    assert got["tokens"] == plain["tokens"] and got["text"] == plain["text"]
    assert isinstance(opened[-1].drafter, MtpDrafter) and opened[-1].trees
    rounds = got["draft_lengths_by_round"]
    assert max(rounds) == 8 and rounds.count(8) >= len(rounds) - 1, rounds


def test_adaptive_calls_draft_mtp_trees_where_rows_are_cheap(models):
    """``--tree auto`` is the draft-shape policy's: an adaptive call on an engine opened for trees drafts the default
    tree with the head where a 16-row call costs about one row (a GPU), never where calls cost in proportion to
    their rows (this CPU); the output is the target's either way, and the identity check replays the trees."""
    from local_eagle.runtime.identity import IDENTICAL, check_identity
    from local_eagle.testing.costs import FrozenOverhead, deciding_on

    with Engine(models["runner-up"], None, EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=32,
                                                         tree_width=4)) as eng:  # fmt: skip
        shape = eng.default_tree(4)
        for ratios, wanted in [([1.0 + 0.01 * r for r in range(40)], True), (list(range(1, 41)), False)]:
            with deciding_on(eng, ratios, 5e-5, FrozenOverhead(shape)):
                trees = rounds = 0
                for prompt in LETTERS:
                    base = eng.generate(prompt, max_tokens=48, draft_max=0)
                    spec = eng.generate(prompt, max_tokens=48, draft_max=4, adaptive=True)
                    assert spec.tokens == base.tokens, (prompt, ratios[1])
                    if wanted and prompt == LETTERS[0]:
                        assert check_identity(eng, prompt, base, spec).verdict == IDENTICAL
                    trees += len(spec.spec_stats.trace_trees)
                    rounds += spec.stats.target_calls
            assert trees > 0.5 * rounds if wanted else trees == 0, (trees, rounds)
