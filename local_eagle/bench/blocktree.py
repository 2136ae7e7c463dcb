"""Tokens per target call of a DFlash block drafted as a chain and as a tree, at equal verify rows, on tiny
random models (``runtime.blocktree``; the table in docs/block-drafters.md).

A chain of n drafts and a tree of n nodes both verify n + 1 rows in one target call, and both come from one
``propose``: the chain takes each row's first choice, the tree the n most probable prefixes of the rows' product.
The pair is generated on the spot (the tests' tiny target, a random DFlash drafter of block 16), so the figures
say how the two shapes compare when the drafter is weak, not what a trained drafter gives: greedily a random
drafter's first choice is almost never the target's, while at temperature 1 two random distributions overlap
and rejection sampling keeps a share of the drafts.

    python -m local_eagle.bench.blocktree [--budgets 3 7 15] [--seeds 4] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

from local_eagle.runtime.sampling import GREEDY, SamplingParams
from local_eagle.runtime.tree import TreeShape

PROMPTS = ["The quick brown fox", "def add(a, b):", "1, 2, 3, 4,", "Once upon a time", "SELECT * FROM"]
TEMPERATURE_1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def tiny_pair(folder: Path, block_size: int = 16) -> tuple[Path, Path]:
    """The tests' tiny target and a random DFlash drafter for it (``tests/runtime/test_block_tree.py``'s shape)."""
    from converters.dflash_gguf import convert_dflash
    from local_eagle.testing.tiny import TinyTargetSpec, write_tiny_target
    from local_eagle.testing.tiny_dflash import TinyDFlashSpec, write_dflash_checkpoint

    target = write_tiny_target(folder / "target.gguf", TinyTargetSpec())
    ckpt = write_dflash_checkpoint(folder / "ckpt", TinyDFlashSpec(block_size=block_size, target_layers=(1, 3, 4)), 3)
    return target, convert_dflash(ckpt, target, folder / "dflash.gguf", outtype="f32").outfile


def tokens_per_call(engine, sampling: SamplingParams, seeds: int, max_tokens: int, **kw) -> tuple[float, int]:
    """Tokens per target call over every prompt and seed (1 + accepted drafts per verify), and the calls."""
    accepted = calls = 0
    for prompt in PROMPTS:
        for seed in range(seeds if not sampling.greedy else 1):
            res = engine.generate(prompt, max_tokens=max_tokens, sampling=replace(sampling, seed=seed),
                                  adaptive=False, **kw)  # fmt: skip
            accepted += res.stats.accepted_tokens
            calls += res.stats.target_calls
    return 1.0 + accepted / calls, calls


def main(argv: list[str] | None = None) -> None:
    from local_eagle.runtime.engine import Engine, EngineOptions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[3, 7, 15], help="drafted rows per call")
    parser.add_argument("--width", type=int, default=4, help="a tree node's children (its row's top candidates)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per prompt when sampling")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        target, drafter = tiny_pair(Path(d))
        opts = EngineOptions(n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=0, tree_nodes=max(args.budgets),
                             tree_width=args.width)  # fmt: skip
        with Engine(target, drafter, opts) as engine:
            print("| sampling | drafted rows | chain: tokens / call | tree: tokens / call | calls (chain, tree) |")
            print("| --- | --- | --- | --- | --- |")
            for name, sampling in (("greedy", GREEDY), ("temperature 1", TEMPERATURE_1)):
                for n in args.budgets:
                    chain, chain_calls = tokens_per_call(engine, sampling, args.seeds, args.max_tokens, draft_max=n)
                    shape = TreeShape(n, n, min(args.width, n))
                    tree, tree_calls = tokens_per_call(engine, sampling, args.seeds, args.max_tokens, tree=shape)
                    print(f"| {name} | {n} | {chain:.3f} | {tree:.3f} | {chain_calls}, {tree_calls} |")


if __name__ == "__main__":
    main()
