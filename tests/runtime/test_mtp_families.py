"""The other attention families the pinned llama.cpp builds an MTP graph for: a tiny generated target of each
(``testing.tiny_mtp_families``) drafts with its own head by default, chains and trees, greedy output the target
alone's; a letter-cycle one whose head agrees is accepted (more than one token per target call)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from local_eagle.llamacpp.model import Model
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.mtp import MtpDrafter, mtp_refusal
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.chisquare import sampling_check
from local_eagle.testing.tiny_mtp_families import (
    FAMILIES,
    Cycle,
    tiny_family_spec,
    write_cycle_family_mtp,
    write_tiny_family_mtp,
)

OPTS = EngineOptions(n_ctx=256, n_batch=32, n_threads=1)
TREE_OPTS = EngineOptions(n_ctx=512, n_batch=64, n_threads=1, tree_nodes=16, tree_width=4)
IDS = [np.array(p, dtype=np.int32) for p in ([1, 5, 9, 13, 2], [3, 3, 3], [7, 1, 30, 12, 8, 4, 4])]
LETTERS = ["xyzA", "hello", "DEF", "P"]
SHAPES = [TreeShape(4, 2, 2), TreeShape(8, 4, 3)]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    arch = request.param
    d = tmp_path_factory.mktemp(f"mtp-{arch}")
    return {
        "arch": arch,
        "random": write_tiny_family_mtp(d / "random.gguf", arch, seed=3),
        "cycle": write_cycle_family_mtp(d / "cycle.gguf", arch),
        # its own head, wrong after C and J with the right letter second: rejections at known places
        "misses": write_cycle_family_mtp(
            d / "misses.gguf", arch, Cycle(head_misses="CJ", runner_up=0.9), own_head=True
        ),
    }


def test_loads_with_its_nextn_block(family):
    spec = tiny_family_spec(family["arch"])
    m = Model(family["random"], n_gpu_layers=0, load_mtp=True)
    try:
        assert m.arch() == family["arch"] and m.n_layer == spec.n_layer and m.n_layer_nextn == 1
        assert mtp_refusal(m) is None and m.branching_refusal() is None
    finally:
        m.close()
    plain = Model(family["random"], n_gpu_layers=0)
    try:
        assert plain.n_layer_nextn == 1 and "without its MTP layers" in (mtp_refusal(plain) or "")
    finally:
        plain.close()


def test_the_head_drafts_chains_and_the_output_is_the_target_alones(family):
    with Engine(family["random"], None, OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.mtp_refusal is None
        drafted = 0
        for prompt in IDS:
            base = eng.generate(prompt, max_tokens=24, draft_max=0)
            for k, adaptive in ((1, False), (3, False), (3, True)):
                res = eng.generate(prompt, max_tokens=24, draft_max=k, adaptive=adaptive)
                assert res.tokens == base.tokens, (prompt, k, adaptive)
                drafted += res.stats.drafted_tokens
        assert drafted > 0


@pytest.mark.parametrize("name", ["random", "misses"])
def test_the_head_drafts_trees_and_the_output_is_the_target_alones(family, name):
    prompts = IDS if name == "random" else LETTERS[:2]
    with Engine(family[name], None, TREE_OPTS) as eng:
        assert isinstance(eng.drafter, MtpDrafter) and eng.trees and eng.tree_refusal is None
        for prompt in prompts:
            base = eng.generate(prompt, max_tokens=24, draft_max=0)
            for shape in SHAPES:
                res = eng.generate(prompt, max_tokens=24, tree=shape)
                assert res.tokens == base.tokens, (prompt, shape)
                assert res.stats.drafted_tokens > 0 and len(res.spec_stats.trace_trees) == res.stats.target_calls


def test_a_head_that_agrees_with_its_target_is_accepted(family):
    with Engine(family["cycle"], None, OPTS) as eng:
        for prompt in LETTERS:
            base = eng.generate(prompt, max_tokens=40, draft_max=0)
            assert base.tokens[-16:] == sorted(base.tokens[-16:], key=lambda t: (t - base.tokens[-16]) % 16)
            res = eng.generate(prompt, max_tokens=40, draft_max=3, adaptive=False)
            assert res.tokens == base.tokens, prompt
            assert res.stats.acceptance_length > 0.9 * 4, (prompt, res.stats.acceptance_length)
    with Engine(family["misses"], None, OPTS) as eng:
        base = eng.generate("xyzA", max_tokens=48, draft_max=0)
        res = eng.generate("xyzA", max_tokens=48, draft_max=3, adaptive=False)
        assert res.tokens == base.tokens
        assert 0 < res.stats.accepted_tokens < res.stats.drafted_tokens and res.stats.acceptance_length > 1.8


def test_sampling_with_the_head_keeps_the_targets_distribution(family, tmp_path):
    """A blurred cycle whose head is right often, not always: accepted and resampled drafts, and the first two tokens
    follow the target alone's joint distribution (chi-square over 1200 seeds)."""
    blur = Cycle(margin=0.75, noise=0.1, head_noise=0.1)
    path = write_cycle_family_mtp(tmp_path / "blurred.gguf", family["arch"], blur, seed=4, own_head=True)
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    with Engine(path, None, OPTS) as eng:
        check = sampling_check(eng, "xyzA", sp, 1200, n_tokens=2, max_tokens=3, draft_max=3, adaptive=False)
    assert 0 < check.accepted < check.drafted
    assert check.pvalue > 1e-3


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


def test_a_tree_catches_what_a_chain_misses(family):
    """The head wrong after C and J, the right letter its second choice: a tree of 8 nodes 4 deep yields more per
    target call than a chain of 4 (on every family, as on glm4moe: 3.90 and 4.85 over six prompts)."""
    with Engine(family["misses"], None, TREE_OPTS) as eng:
        chain = tokens_per_call(eng, LETTERS, draft_max=4, adaptive=False)
        tree = tokens_per_call(eng, LETTERS, tree=TreeShape(8, 4, 2))
        assert chain > 3.5 and tree > 1.15 * chain, (chain, tree)


@pytest.mark.parametrize("arch", ["mimo2", "hy_v3"])
def test_several_nextn_blocks_draft_as_chained_heads(arch, tmp_path):
    """Their graphs load 1 or more NextN blocks (MiMo V2 ships 3), which llama.cpp's ``draft-mtp`` drafts as chained
    heads, one per step (``runtime.mtp_chain``, as step35's): random heads, rejected often, so every rollback path
    runs, and the output is the target alone's."""
    from local_eagle.runtime.mtp_chain import ChainedMtpDrafter

    path = write_tiny_family_mtp(tmp_path / f"{arch}-3.gguf", tiny_family_spec(arch, n_nextn=3), seed=3)
    with Engine(path, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1, mtp=False)) as alone:
        base = [alone.generate(p, max_tokens=16).tokens for p in IDS]
    with Engine(path, None, OPTS) as eng:
        assert eng.model.n_layer_nextn == 3 and isinstance(eng.drafter, ChainedMtpDrafter), eng.mtp_refusal
        for k in (1, 2, 3, 8):
            out = [eng.generate(p, max_tokens=16, draft_max=k, adaptive=False) for p in IDS]
            assert [r.tokens for r in out] == base, k
            assert sum(r.stats.drafted_tokens for r in out) > 0
            assert all(max((i for i, n in enumerate(r.stats.draft_lengths) if n), default=0) <= 3 for r in out)


@pytest.mark.parametrize("arch", ["mimo2", "hy_v3"])
def test_agreeing_chained_heads_yield_a_token_per_head(arch, tmp_path):
    """Three heads that follow the cycle: a chain of 3 a round, all kept (3.94 tokens per target call on glm4moe's
    single head at k=3, the same here with one head per step)."""
    path = write_cycle_family_mtp(tmp_path / f"{arch}-3-cycle.gguf", arch, n_nextn=3)
    with Engine(path, None, OPTS) as eng:
        assert tokens_per_call(eng, LETTERS, draft_max=3, adaptive=False) > 0.9 * 4
