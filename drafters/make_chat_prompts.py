"""Held-out chat prompts for the SmolLM2 pair, rendered through its ChatML template, for ``local-eagle bench``.

python drafters/make_chat_prompts.py [N] > drafters/prompts/chat-heldout.jsonl

``bench`` takes raw prompt text; the chat drafter was trained on conversations through the GGUF's
template with its default system prompt, so the prompts are rendered the way ``chat`` renders them
(drafters/stability.py's "chat" condition): first questions of ShareGPT conversations from kept
record 17,000 on, which the recipe never trains on. Needs the chat-recipe extra.
"""

from __future__ import annotations

import json
import sys

from local_eagle.assets import smollm2_target
from local_eagle.ollama.prompt import render_prompt
from local_eagle.train.chat import read_conversations

HELDOUT_FROM = 17000


def main(n: int = 32) -> None:
    gguf = smollm2_target()
    convs = read_conversations("sharegpt", skip=HELDOUT_FROM, limit=4 * n + 60)
    questions = [c[0]["content"].strip()[:1200] for c in convs if c and c[0]["role"] == "user"]
    for q in [q for q in questions if q][:n]:
        print(json.dumps({"prompt": render_prompt([{"role": "user", "content": q}], gguf_path=gguf)}))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
