"""Capture stage of the SmolLM2-135M-Instruct chat drafter recipe (see drafters/README.md).

python drafters/smollm2_capture.py OUT_DIR N_CONVERSATIONS [MAX_TOKENS] [THREADS]
ShareGPT conversations 0..N-1 (kept records), rendered through the GGUF's ChatML template with its
default system prompt, every 8th answered by the target itself. A rerun with a larger N keeps
the samples already captured and adds the rest. Conversations from 17,000 on are
never trained on: the stability benchmark draws its prompts there.
"""

from __future__ import annotations

import json
import sys

from local_eagle.assets import smollm2_target
from local_eagle.train.chat import capture_chat, read_conversations

LAYERS = [2, 15, 27]  # [2, n/2, n-3] for 30 layers


def main(out_dir: str, n: int, max_tokens: int = 2048, threads: int = 2) -> dict:
    convs = read_conversations("sharegpt", limit=n)
    stats = capture_chat(smollm2_target(), convs, LAYERS, out_dir, max_tokens=max_tokens, answer_tokens=128,
                         self_distill_every=8, n_threads=threads, progress=False)  # fmt: skip
    return stats


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), *(int(a) for a in sys.argv[3:]))))
