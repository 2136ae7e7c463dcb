"""Greedy identity as the lossless tests assert it, on the CPU and on a GPU.

On the CPU the tests' engines run one thread, and llama.cpp's verify batches then give a 1-row decode's logits
bit for bit: the speculative output must equal the target alone's exactly. On a GPU (the kit runs these tests on
the CUDA build, docs/gpu.md) the kernels are chosen by batch shape and round differently, so where a tiny random
target's top two logits are almost equal the runs may part (the H100 run of 2026-11-26: 1 of 32 prompts of a
random pair, at token 62): there a difference passes only as the identity check's near-tie, replayed both ways.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from local_eagle.runtime.identity import IDENTICAL, NEAR_TIE, check_identity

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.rounds import GenerationResult, TokenLogprob


@cache
def kernels_vary_by_batch() -> bool:
    """Whether the tests' models run on a GPU device (a CUDA, Vulkan, Metal build that found one)."""
    from local_eagle.llamacpp.backends import backend_devices

    return any(d.kind in ("gpu", "igpu") for d in backend_devices())


def assert_greedy_identical(engine: Engine, prompt: str, base: GenerationResult, spec: GenerationResult,
                            what: object = None) -> None:  # fmt: skip
    """The speculative run emitted the target alone's tokens: exactly on the CPU, up to a near-tie on a GPU."""
    if spec.tokens == base.tokens:
        return
    assert kernels_vary_by_batch(), (what, "speculative output differs from the target alone's")
    check = check_identity(engine, prompt, base, spec)
    assert check.verdict in (IDENTICAL, NEAR_TIE), (what, check)


def logprob_gap(a: list[TokenLogprob], b: list[TokenLogprob], same_alternatives: bool = True) -> float:
    """The largest difference between two runs' log-probabilities (the token's and its top alternatives'), the
    tokens asserted the same: a rollback that left a state wrong moves them while the greedy tokens may not move.
    ``same_alternatives=False`` leaves the alternatives' order unchecked, for a graph whose verify batch is not
    batch-invariant (deepseek4 on the CPU) and may swap two near-equal ones."""
    gap = 0.0
    for x, y in zip(a, b, strict=True):
        assert x.token == y.token
        if same_alternatives:
            assert [i for i, _ in x.top] == [i for i, _ in y.top]
        gap = max(gap, abs(x.logprob - y.logprob), *(abs(p - q) for (_, p), (_, q) in zip(x.top, y.top, strict=True)))
    return gap
