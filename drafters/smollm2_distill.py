"""Self-distillation stage of the SmolLM2-135M-Instruct chat drafter recipe (see drafters/README.md).

python drafters/smollm2_distill.py OUT_DIR FIRST N [ANSWER_TOKENS] [THREADS]
The first question of ShareGPT conversations FIRST..FIRST+N-1 (kept records), rendered through the
GGUF's ChatML template with its default system prompt, answered by the target itself (greedy, up to
ANSWER_TOKENS). What the drafter drafts at run time is the target's own answers, and a drafter
trained on teacher-forced ShareGPT predicts those worse than the questions around them: this stage
adds the target's own answers cheaply (short prompts, long answers). Keep FIRST..FIRST+N-1 apart
from smollm2_capture.py's 0..N-1 and below 17,000 (the stability benchmark's prompts).
"""

from __future__ import annotations

import json
import sys

from local_eagle.assets import smollm2_target
from local_eagle.train.chat import capture_chat, read_conversations

LAYERS = [2, 15, 27]


def first_exchange(conv: list[dict]) -> list[dict] | None:
    """The conversation up to its first answered user turn (None when no user turn is answered)."""
    for i in range(1, len(conv)):
        if conv[i]["role"] == "assistant" and conv[i - 1]["role"] == "user":
            return conv[: i + 1]
    return None


def main(out_dir: str, first: int, n: int, answer_tokens: int = 256, threads: int = 2) -> dict:
    convs = [x for c in read_conversations("sharegpt", skip=first, limit=n) if (x := first_exchange(c))]
    return capture_chat(smollm2_target(), convs, LAYERS, out_dir, max_tokens=768, answer_tokens=answer_tokens,
                        self_distill_every=1, n_threads=threads, progress=False)  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], *(int(a) for a in sys.argv[2:]))))
