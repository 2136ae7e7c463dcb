"""EAGLE 3 vs EAGLE 3.1 stability on the SmolLM2 chat pair: acceptance only (no timing), k=4, greedy.

python drafters/stability.py DRAFTER.gguf [N_PROMPTS] [N_TOKENS] [THREADS] [CONDITIONS] > result.json

CONDITIONS picks some of the four, comma-separated (default all): ``chat`` alone with more prompts is the
issue's bar, cheaper than the long-context documents.

Four conditions, the prompts drawn from ShareGPT conversations the recipe never trains on
(kept records from 17,000 on; training uses the first few thousand):

- chat: the GGUF's ChatML template with its default system prompt (what the drafter was trained on);
- plain: no template at all, the question as raw text followed by a blank line;
- system: the chat template with a long custom system prompt (about 600 tokens) instead of the default;
- long: a 3K-6K-token document (held-out assistant answers joined) and a question about it, through
  the chat template.

Like drafters/acceptance.py, it runs through the engine, so the numbers are the runtime's own.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from local_eagle.assets import smollm2_target
from local_eagle.ollama.prompt import render_prompt
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.train.chat import read_conversations

HELDOUT_FROM = 17000
SYSTEM = (
    "You are Orion, the support assistant of Northwind Outfitters, a mid-sized retailer of hiking, camping and "
    "climbing equipment with stores in twelve cities and an online shop. Follow these rules in every answer. "
    "Be polite, direct and concise; prefer short paragraphs and numbered steps when you explain a procedure. "
    "Never invent order numbers, prices, stock levels or delivery dates: if the customer asks for one, explain "
    "how they can look it up in their account or ask them for the information you need. Our return policy: "
    "unused items can be returned within 60 days with the receipt; used items only when they are defective, "
    "within two years of purchase; sale items within 14 days. Refunds go back to the original payment method "
    "within ten business days. Shipping is free above 75 dollars; express shipping costs 15 dollars and arrives "
    "in two business days in the continental United States. Gift cards never expire and cannot be exchanged for "
    "cash. When a customer is upset, acknowledge the problem first, apologise once, and then offer a concrete "
    "next step. When a question is about safety in the mountains (avalanches, weather, altitude sickness, rope "
    "work), give general, conservative advice and recommend a certified guide or course; never present yourself "
    "as a substitute for training. When a question is outside outdoor equipment and our services, you may still "
    "help with general knowledge, but keep it brief and friendly. Do not discuss competitors' prices. Always end "
    "with one sentence that invites the customer to ask a follow-up question. Remember that many customers read "
    "your answers on a phone, so avoid wide tables and long code blocks, and use plain words instead of jargon. "
    "If the customer writes in another language, answer in that language. Our stores are open from 9 am to 8 pm "
    "on weekdays and from 10 am to 6 pm on weekends; the phone line is open from 8 am to 10 pm every day. Members "
    "of the Northwind Trail Club get 10 percent off full-price items, early access to sales and free repairs of "
    "tents and backpacks bought from us. Repairs take about three weeks."
)


def prompts(n: int) -> dict[str, list[str]]:
    """The four conditions' prompt texts, from held-out conversations only."""
    gguf = smollm2_target()
    convs = read_conversations("sharegpt", skip=HELDOUT_FROM, limit=4 * n + 60)
    questions = [c[0]["content"].strip()[:1200] for c in convs if c[0]["role"] == "user"][: 2 * n]
    questions = [q for q in questions if q][:n]
    answers = [m["content"] for c in convs[n:] for m in c if m["role"] == "assistant" and len(m["content"]) > 1500]
    docs = []
    for k in range(max(1, n // 2)):
        parts, size = [], 0
        for a in answers[k * 8 :]:
            parts.append(a)
            size += len(a)
            if size > 16000:  # about 3.5K-4K tokens of English
                break
        docs.append("\n\n".join(parts))
    one = [{"role": "user", "content": ""}]
    return {
        "chat": [render_prompt([{**one[0], "content": q}], gguf_path=gguf) for q in questions],
        "plain": [q + "\n\n" for q in questions],
        "system": [render_prompt([{**one[0], "content": q}], system=SYSTEM, gguf_path=gguf) for q in questions],
        "long": [
            render_prompt(
                [{"role": "user", "content": f"{d}\n\nSummarize the text above in a few sentences."}], gguf_path=gguf
            )
            for d in docs
        ],  # fmt: skip
    }


def main(draft: str, n: int = 8, n_tokens: int = 64, threads: int = 2, conditions: str = "") -> dict:
    result: dict = {"draft": draft, "n_prompts": n, "tokens": n_tokens, "conditions": {}}
    wanted = set(conditions.split(",")) if conditions else None
    with Engine(smollm2_target(), draft, EngineOptions(n_ctx=8192, n_threads=threads)) as eng:
        for name, texts in prompts(n).items():
            if wanted is not None and name not in wanted:
                continue
            verified = calls = 0
            accepted = np.zeros(4)
            drafted = np.zeros(4)
            lengths = []
            for p in texts:
                lengths.append(len(eng.tokenize(p)))
                st = eng.generate(p, max_tokens=n_tokens, draft_max=4).stats
                verified += st.generated_tokens - 1
                calls += st.target_calls
                accepted += st.accepted_per_position
                drafted += st.drafted_per_position
            result["conditions"][name] = {
                "prompts": len(texts),
                "prompt_tokens_mean": float(np.mean(lengths)),
                "acceptance_length": verified / max(calls, 1),
                "per_position": (accepted / np.maximum(drafted, 1)).round(3).tolist(),
            }
            print(name, json.dumps(result["conditions"][name]), file=sys.stderr, flush=True)
    return result


if __name__ == "__main__":
    a = sys.argv
    print(json.dumps(main(a[1], *(int(x) for x in a[2:5]), *a[5:6])))
