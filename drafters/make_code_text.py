"""Write Python source text for the demo drafter's training: the standard library, cut into samples.

HumanEval has 164 problems, 130 of them for training: far too few tokens for a drafter. The standard
library of the Python that runs this script is real, permissively licensed Python in the style of
HumanEval's prompts (functions with docstrings), and on every machine. Each file is cut at blank lines
between top-level statements into pieces of at most ``MAX_CHARS`` characters, the pieces of all files
are shuffled (seed 0), and written as ``{"text": ...}`` lines (teacher-forced: the target's top-k
distribution at every position is the label) after the HumanEval training prompts (answered by the
target itself). Test suites and generated tables are left out.

With N_PROMPTS, that many standard-library functions' signatures and docstrings
(``make_code_prompts.py``) follow the HumanEval prompts, for the target to write the bodies of.

Usage: python drafters/make_code_text.py OUT.jsonl N_CHARS [N_PROMPTS]
"""

from __future__ import annotations

import json
import random
import sys
import sysconfig
from pathlib import Path

from make_code_prompts import function_prompts, stdlib_sources  # type: ignore[import-not-found]

MAX_CHARS = 2000  # about 550 Gemma 3 tokens of Python
MIN_CHARS = 200


def pieces(text: str) -> list[str]:
    """Consecutive blocks that start at a top-level line after a blank line, packed up to MAX_CHARS."""
    blocks, current = [], []
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        top = line[:1] not in (" ", "\t", "\n", "#", "") and i > 0 and lines[i - 1].strip() == ""
        if top and current:
            blocks.append("".join(current))
            current = []
        current.append(line)
    if current:
        blocks.append("".join(current))
    out, acc = [], ""
    for b in blocks:
        if len(b) > MAX_CHARS:
            b = b[:MAX_CHARS]
        if acc and len(acc) + len(b) > MAX_CHARS:
            out.append(acc)
            acc = ""
        acc += b
    if acc:
        out.append(acc)
    return [p for p in out if len(p) >= MIN_CHARS]


def main(out: Path, n_chars: int, n_prompts: int = 0) -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p for text in stdlib_sources(root) if text.isascii() for p in pieces(text)]
    random.Random(0).shuffle(texts)
    here = Path(__file__).parent
    lines = (here / "prompts" / "humaneval-train.jsonl").read_text().splitlines()
    lines += [json.dumps({"prompt": p}) for p in function_prompts(root)[:n_prompts]]
    n_head = len(lines)
    total = 0
    for t in texts:
        if total >= n_chars:
            break
        lines.append(json.dumps({"text": t}))
        total += len(t)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"{out}: {n_head} prompts (130 HumanEval) + {len(lines) - n_head} stdlib pieces, {total} characters "
          f"(of {sum(map(len, texts))} available)")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:]))
