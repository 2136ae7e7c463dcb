"""The shared options: sampling flags declared once, defaults from SamplingParams, -f else --model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.cli.options import (
    NO_SAMPLING_FLAGS,
    ModelPair,
    SamplingFlags,
    resolve_models,
    sampling_options,
    sampling_params,
)
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.sampling import SamplingParams

runner = CliRunner()
SAMPLING_FLAGS = ["--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "--seed",
                  "--stop"]  # fmt: skip


def test_unset_parameters_keep_the_sampler_defaults() -> None:
    assert sampling_params({}) == SamplingParams()
    sp = sampling_params({"top_k": 5, "seed": 3, "num_ctx": 99, "stop": ["x"]})
    assert sp == SamplingParams(top_k=5, seed=3)


def _probe() -> tuple[typer.Typer, list[SamplingFlags]]:
    seen: list[SamplingFlags] = []

    @sampling_options
    def probe(before: int = 0, sampling: SamplingFlags = NO_SAMPLING_FLAGS, after: int = 0) -> None:
        seen.append(sampling)

    probe_app = typer.Typer()
    probe_app.command()(probe)
    probe_app.command("other")(lambda: None)  # two commands, so that "probe" is a sub-command
    return probe_app, seen


def test_sampling_flags_reach_the_command_as_one_object() -> None:
    probe_app, seen = _probe()
    r = runner.invoke(probe_app, ["probe", "--top-k", "5", "--temperature", "0", "--stop", "a", "--stop", "b"])
    assert r.exit_code == 0, r.output
    assert seen[-1] == SamplingFlags({"temperature": 0.0, "top_k": 5}, ["a", "b"])
    assert seen[-1].flags() == [("temperature", "--temperature", 0.0), ("top_k", "--top-k", 5)]
    r = runner.invoke(probe_app, ["probe"])
    assert r.exit_code == 0, r.output
    assert seen[-1] == SamplingFlags()


def test_sampling_flags_stand_where_the_sampling_parameter_does() -> None:
    probe_app, _ = _probe()
    cmd = typer.main.get_command(probe_app).commands["probe"]  # type: ignore[attr-defined]
    names = [p.opts[0] for p in cmd.params]
    assert names == ["--before", *SAMPLING_FLAGS, "--after"]


def test_a_command_without_a_sampling_parameter_is_refused() -> None:
    with pytest.raises(TypeError, match="no 'sampling' parameter"):
        sampling_options(lambda x=0: None)


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_help_quotes_the_sampler_defaults(command: str) -> None:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    helps = {p.opts[0]: p.help for p in cmd.params}
    d = SamplingParams()
    assert helps["--temperature"] == f"0 = greedy. Default {d.temperature}."
    assert helps["--top-k"] == f"Default {d.top_k}."
    assert helps["--repeat-penalty"] == f"Default {d.repeat_penalty} (off)."
    assert all(flag in helps for flag in SAMPLING_FLAGS)


def test_no_model_and_no_modelfile_is_an_error() -> None:
    with pytest.raises(LocalEagleError, match="give --model"):
        resolve_models(None, None, None)
    assert resolve_models(Path("t.gguf"), None, None) == ModelPair(Path("t.gguf"))


def test_draft_max_comes_from_the_flag_then_a_drafting_modelfile() -> None:
    drafting = SimpleNamespace(draft=Path("d.gguf"), draft_num_predict=7)
    not_drafting = SimpleNamespace(draft=None, draft_num_predict=7)
    pair = ModelPair(Path("t.gguf"), Path("d.gguf"), modelfile=drafting)  # type: ignore[arg-type]
    assert pair.draft_max(2) == 2
    assert pair.draft_max(None) == 7
    assert ModelPair(Path("t.gguf")).draft_max(None) == 4
    assert ModelPair(Path("t.gguf"), Path("d.gguf"), modelfile=not_drafting).draft_max(None) == 4  # type: ignore[arg-type]
