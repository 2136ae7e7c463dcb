"""Acceptance only (no timing): acceptance length and per-position acceptance at k=4, greedy.

Used for the EAGLE 3 vs EAGLE 3.1 comparison in README.md, where timing was not needed:
python drafters/acceptance.py DRAFTER.gguf PROMPTS.jsonl N_TOKENS
"""

import json
import sys

import numpy as np

from local_eagle.assets import demo_target
from local_eagle.engine import Engine, EngineOptions

G = demo_target()
draft, prompts_file, n_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
prompts = [json.loads(l)["prompt"] for l in open(prompts_file)]
eng = Engine(G, draft, EngineOptions(n_ctx=4096, n_threads=2))
verified = calls = 0
acc = np.zeros(4)
dr = np.zeros(4)
for p in prompts:
    st = eng.generate(p, max_tokens=n_tokens, draft_max=4).stats
    verified += st.generated_tokens - 1
    calls += st.target_calls
    acc += st.accepted_per_position
    dr += st.drafted_per_position
print(
    json.dumps(
        {
            "draft": draft,
            "prompts": prompts_file,
            "n": len(prompts),
            "tokens": n_tokens,
            "acceptance_length": verified / calls,
            "per_position": (acc / np.maximum(dr, 1)).round(3).tolist(),
        }
    )
)
