"""A path longer than the system allows, given to any command, is one line naming it, never a traceback.

Python raises ``OSError(ENAMETOOLONG)`` from ``stat``, ``open`` and even ``Path.exists``; each command's
own checks would otherwise let it through as a traceback.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app

runner = CliRunner()
LONG = "/tmp/" + "a" * 5000  # one component over NAME_MAX (255)
DEEP = "/tmp/" + "/".join(["b" * 200] * 30)  # every component fine, the whole over PATH_MAX (4096)


def commands(p: str, tmp: str) -> list[list[str]]:
    return [
        ["inspect", p],
        ["convert", p, "--target", p, "-o", f"{tmp}/x.gguf"],
        ["export", p, "-o", f"{tmp}/e"],
        ["generate", "-m", p, "-p", "hi"],
        ["train", "--target", p, "--prompts", p, "--out", f"{tmp}/o"],
        ["create", "x", "-f", p],
        ["show", p],
        ["modelfile", "show", "-f", p],
        ["fit", "-m", p],
    ]


@pytest.mark.parametrize("which", ["long", "deep"])
@pytest.mark.parametrize("i", range(9))
def test_an_overlong_path_is_one_line(tmp_path, which, i) -> None:
    p = LONG if which == "long" else DEEP
    args = commands(p, str(tmp_path))[i]
    r = runner.invoke(app, args)
    assert r.exception is None or isinstance(r.exception, SystemExit), (args[0], repr(r.exception))
    assert r.exit_code == 2, (args[0], r.output[-500:])
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output[-500:]
