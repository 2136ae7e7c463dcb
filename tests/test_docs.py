"""The README and docs/ name only commands and flags the CLI accepts, so the docs cannot drift from the code.

Every ``local-eagle CMD [SUB] ...`` (or ``python -m local_eagle ...``) in a fenced code block or an inline
code span of README.md and docs/*.md is looked up in the click tree typer builds from the app, and each
``--flag`` / ``-f`` after it must be an option of that command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from local_eagle.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)  # a span may wrap a line
# the program name as a word of its own: not in paths (~/.local-eagle/, local-eagle/gemma3-270m) or pip specs
START = re.compile(r"(?:(?<=^)|(?<=[\s(`]))(?:local-eagle|python3? -m local_eagle)(?=[ \t]|$)", re.M)
QUOTED = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'")
FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*$")
ENDS = {"&&", "||", ";", ">", ">>", "<", "2>", "&"}


@dataclass
class Invocation:
    """One command line found in the docs: where, the command path, the flags given to it."""

    where: str
    path: list[str]
    flags: list[str]


def _tokens(rest: str) -> list[str]:
    """Shell-ish words of one command line up to where another command starts (a pipe, &&, a comment)."""
    rest = QUOTED.sub("ARG", rest.split("\n", 1)[0]).split("`", 1)[0]  # a span quoted inside a block ends it
    out: list[str] = []
    depth = 0
    for word in rest.split():
        if word.startswith("#") or word in ENDS or (word == "|" and depth <= 0):
            break
        depth += word.count("(") + word.count("[") - word.count(")") - word.count("]")
        if depth < 0:  # the end of a $( ... ) the command sat in
            out.append(word.rstrip(")]"))
            break
        out.append(word)
    return out


def find_invocations(text: str, where: str, commands: frozenset[str] = frozenset()) -> list[Invocation]:
    """Every local-eagle command line in the code of a markdown text (fenced blocks and inline spans).

    An inline span that starts with one of ``commands`` and gives it a flag (`bench --tree N`) counts too.
    """
    text = re.sub(r"\\\n\s*", " ", text)  # shell line continuations
    pieces = [m.group(1) for m in FENCE.finditer(text)]
    for m in SPAN.finditer(FENCE.sub("", text)):
        span = " ".join(m.group(2).split())
        first = span.split(" ", 1)[0]
        pieces.append(f"local-eagle {span}" if first in commands and re.search(r"\s-", span) else span)
    found = []
    for piece in pieces:
        for line in piece.splitlines():
            if line.lstrip().startswith("#"):  # a shell or Modelfile comment
                continue
            for m in START.finditer(line):
                words = _tokens(line[m.end() :])
                path: list[str] = []
                flags: list[str] = []
                for w in words:
                    for part in re.split(r"[/|]", w.strip("[](){},.:;'\"").split("=", 1)[0]):
                        part = part.strip("[](){}")
                        if FLAG.match(part):
                            flags.append(part)
                        elif not flags and re.fullmatch(r"[a-z][a-z0-9-]*", part) and part == w.strip("`,.;:()"):
                            path.append(part)
                found.append(Invocation(where, path, flags))
    return found


def _options(cmd: Any) -> set[str]:
    names = {"--help"}
    for p in cmd.params:
        if p.param_type_name == "option":
            names.update(p.opts)
            names.update(p.secondary_opts)
    return names


def check(inv: Invocation, root: Any) -> list[str]:
    """The problems of one invocation: an unknown command or subcommand, a flag its command does not take."""
    cmd, used = root, []
    for word in inv.path:
        sub = getattr(cmd, "commands", None)
        if sub is None:
            break  # the rest are arguments (a model name, a file)
        if word not in sub:
            return [f"{inv.where}: `local-eagle {' '.join([*used, word])}`: no such command"]
        cmd = sub[word]
        used.append(word)
    if getattr(cmd, "commands", None) is not None and inv.flags and inv.flags != ["--help"]:
        return [f"{inv.where}: `local-eagle {' '.join(used)}` is a group; flags need a subcommand"]
    known = _options(cmd)
    name = " ".join(["local-eagle", *used])
    return [f"{inv.where}: `{name}` has no option {f}" for f in inv.flags if f not in known]


def check_text(text: str, where: str = "text") -> tuple[list[Invocation], list[str]]:
    root = typer.main.get_command(app)
    shell_words = {"cp", "rm", "ls", "list", "run", "show"}  # also shell commands, or words of other tools
    commands = frozenset(n for n, c in root.commands.items() if not c.hidden and n not in shell_words)
    invs = find_invocations(text, where, commands)
    return invs, [e for inv in invs for e in check(inv, root)]


@pytest.fixture(scope="module")
def everything() -> tuple[list[Invocation], list[str]]:
    invs: list[Invocation] = []
    errors: list[str] = []
    for doc in DOCS:
        i, e = check_text(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))
        invs += i
        errors += e
    return invs, errors


def test_docs_commands_and_flags_exist(everything: tuple[list[Invocation], list[str]]) -> None:
    invs, errors = everything
    assert not errors, "\n".join(errors)
    assert len(invs) > 60, f"only {len(invs)} command lines found: the checker has stopped seeing them"
    assert sum(len(i.flags) for i in invs) > 150


def test_every_command_is_documented(everything: tuple[list[Invocation], list[str]]) -> None:
    """Each command (and each modelfile subcommand) appears as a command line somewhere in the docs."""
    root = typer.main.get_command(app)
    shown = {tuple(i.path[:2]) for i in everything[0]} | {tuple(i.path[:1]) for i in everything[0]}
    missing = []
    for name, cmd in root.commands.items():
        if cmd.hidden:
            continue
        subs = getattr(cmd, "commands", None)
        if subs:
            missing += [f"{name} {s}" for s in subs if (name, s) not in shown]
        elif (name,) not in shown:
            missing.append(name)
    assert not missing, f"commands no doc shows: {missing}"


def test_planted_unknown_flag_is_caught() -> None:
    text = "Run `local-eagle bench --no-such-flag` and\n\n```bash\nlocal-eagle generate -m x.gguf -Z\n```\n"
    invs, errors = check_text(text)
    assert len(invs) == 2
    assert any("bench` has no option --no-such-flag" in e for e in errors)
    assert any("generate` has no option -Z" in e for e in errors)


def test_planted_unknown_commands_are_caught() -> None:
    _, errors = check_text("`local-eagle frobnicate --json` and `python -m local_eagle modelfile nope -f M`")
    assert any("local-eagle frobnicate`: no such command" in e for e in errors)
    assert any("local-eagle modelfile nope`: no such command" in e for e in errors)


def test_flags_of_the_right_command() -> None:
    """A flag real on one command but not another is caught, subcommands and continuations included."""
    ok = (
        "```bash\nlocal-eagle modelfile render -f M --messages - --raw | cat -A\n"
        "local-eagle fit -m T.gguf --flash-attn/--no-flash-attn \\\n    [--gpu rtx4090 | --vram-gb G]\n"
        "local-eagle train --chat --target \"$(python -c 'print(1)')\" --out d  # --not-checked\n```\n"
    )
    invs, errors = check_text(ok)
    assert errors == []
    assert [i.path for i in invs] == [["modelfile", "render"], ["fit"], ["train"]]
    assert invs[1].flags == ["-m", "--flash-attn", "--no-flash-attn", "--gpu", "--vram-gb"]
    _, errors = check_text("`local-eagle serve --tree-depth 4` or `local-eagle modelfile show --raw`")
    assert len(errors) == 2
    invs, errors = check_text("as `bench --tree N` shows, and `serve --plot x`; `pip install -e .` is not ours")
    assert [i.path for i in invs] == [["bench"], ["serve"]]
    assert errors == ["text: `local-eagle serve` has no option --plot"]


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    heads = re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_docs_links_resolve() -> None:
    """Relative links (and #anchors) in the README and docs resolve, and links from the README reach every page."""
    broken = []
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target) if target else doc
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, broken
    seen, todo = {DOCS[0]}, [DOCS[0]]  # every page is reachable from the README through links
    while todo:
        doc = todo.pop()
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            path = (doc.parent / target).resolve()
            if path in DOCS and path not in seen:
                seen.add(path)
                todo.append(path)
    unreached = [p.name for p in DOCS if p not in seen]
    assert not unreached, f"no link from the README leads to {unreached}"
