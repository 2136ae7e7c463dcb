"""Acceptance only (no timing): acceptance length and per-position acceptance at k=4, greedy.

Used for the EAGLE 3 vs EAGLE 3.1 comparison in README.md, where timing was not needed:
python drafters/acceptance.py DRAFTER.gguf PROMPTS.jsonl N_TOKENS
"""

from __future__ import annotations

import json
import sys

import numpy as np

from local_eagle.assets import demo_target
from local_eagle.bench.run import read_prompts
from local_eagle.runtime.engine import Engine, EngineOptions


def main(draft: str, prompts_file: str, n_tokens: int) -> dict:
    prompts = read_prompts(prompts_file)
    verified = calls = 0
    accepted = np.zeros(4)
    drafted = np.zeros(4)
    with Engine(demo_target(), draft, EngineOptions(n_ctx=4096, n_threads=2)) as eng:
        for p in prompts:
            st = eng.generate(p, max_tokens=n_tokens, draft_max=4).stats
            verified += st.generated_tokens - 1
            calls += st.target_calls
            accepted += st.accepted_per_position
            drafted += st.drafted_per_position
    return {
        "draft": draft,
        "prompts": prompts_file,
        "n": len(prompts),
        "tokens": n_tokens,
        "acceptance_length": verified / calls,
        "per_position": (accepted / np.maximum(drafted, 1)).round(3).tolist(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
