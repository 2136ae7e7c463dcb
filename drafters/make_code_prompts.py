"""Write HumanEval-style prompts from the standard library: a function's signature and docstring.

The target writes each body itself (greedily), so the drafter learns the target's own code, which is
what it drafts at run time; HumanEval has only 130 training problems of that kind. Functions come
from the standard library of the Python that runs this script (test suites left out), shuffled with
seed 0; nested functions and docstrings shorter than ``MIN_DOC`` characters are skipped.

Usage: python drafters/make_code_prompts.py OUT.jsonl N_PROMPTS
"""

from __future__ import annotations

import ast
import json
import random
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SKIP_PARTS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "__pycache__", "encodings", "pydoc_data"}
MIN_DOC = 40
MAX_CHARS = 1500


def prompts(text: str) -> list[str]:
    """``def`` line(s) through the closing docstring line of each top-level or method function."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not node.body:
            continue
        doc = node.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            continue
        if len(doc.value.value) < MIN_DOC or len(node.body) < 2:
            continue
        start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        src = "".join(lines[start - 1 : doc.end_lineno])
        indent = len(src) - len(src.lstrip())
        src = "".join(line[indent:] if line[:indent].isspace() else line for line in src.splitlines(keepends=True))
        if len(src) <= MAX_CHARS and src.isascii():
            out.append(src)
    return out


def stdlib_sources(root: Path) -> Iterator[str]:
    """The text of each standard-library module under ``root``, in path order, test suites left out."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_PARTS & set(rel.parts) or rel.name.startswith("test_"):
            continue
        try:
            yield path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def function_prompts(root: Path) -> list[str]:
    """Every usable function of the standard library under ``root``, shuffled with seed 0."""
    found = [p for text in stdlib_sources(root) for p in prompts(text)]
    random.Random(0).shuffle(found)
    return found


def main(out: Path, n: int) -> None:
    found = function_prompts(Path(sysconfig.get_paths()["stdlib"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in found[:n]))
    print(f"{out}: {min(n, len(found))} of {len(found)} standard-library functions")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
