"""The shared options: sampling flags declared once, defaults from SamplingParams, -f else --model."""

from __future__ import annotations

from pathlib import Path

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
from local_eagle.ollama.parameters import PARAMETERS
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
def test_help_comes_from_the_parameter_table(command: str) -> None:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    helps = {p.opts[0]: p.help for p in cmd.params}
    d = SamplingParams()
    assert helps["--temperature"] == f"{PARAMETERS['temperature'].help} Default {d.temperature}."
    assert helps["--top-k"] == f"{PARAMETERS['top_k'].help} Default {d.top_k}."
    assert helps["--repeat-penalty"] == f"{PARAMETERS['repeat_penalty'].help} Default 1."
    assert helps["--ctx"] == f"{PARAMETERS['num_ctx'].help} Default {PARAMETERS['num_ctx'].default}."
    assert all(flag in helps for flag in SAMPLING_FLAGS)
    max_tokens = {p.opts[0]: p for p in cmd.params}["--max-tokens"]
    assert max_tokens.default is None  # unchanged: generate's 128 and chat's -1 come from the command


def test_defaults_stay_the_commands_own() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert "Default 128." in {p.opts[0]: p.help for p in commands["generate"].params}["--max-tokens"]
    defaults = {p.opts[0]: p.default for p in commands["bench"].params}
    assert defaults["--max-tokens"] == 128 and defaults["--gpu-layers"] == -1 and defaults["--threads"] == 0
    fit_draft = next(p for p in commands["fit"].params if p.opts[0] == "--draft-max")
    assert fit_draft.default is None and "else 8" in fit_draft.help  # the Modelfile's, else the policy's (settings)


NO_MODEL = "/nonexistent/model.gguf"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "-m", NO_MODEL, "-p", "x", "--ctx", "1"], "--ctx: num_ctx must be between 16 and 1048576, got 1"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--ctx", "1000000000"], "--ctx: num_ctx must be between 16 and"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--threads", "100000"], "--threads: num_thread must be between 0 and"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--top-p", "2"], "--top-p: top_p must be between 0 and 1, got 2"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--max-tokens", "0"], "--max-tokens: num_predict must be at least 1"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--gpu-layers", "-2"], "--gpu-layers: num_gpu must be between 0 and"),
        (["generate", "-m", NO_MODEL, "-p", "x", "--repeat-last-n", "-5"], "--repeat-last-n: repeat_last_n must be"),
        (["chat", "-m", NO_MODEL, "--draft-max", "65"], "--draft-max: draft_num_predict must be between 0 and 64"),
        (["chat", "-m", NO_MODEL, "--min-p", "-0.5"], "--min-p: min_p must be between 0 and 1"),
        (["bench", "-m", NO_MODEL, "-d", NO_MODEL, "--prompts", "p", "--draft-max", "2", "--draft-max", "99"],
         "--draft-max: draft_num_predict must be between 0 and 64, got 99"),
        (["bench", "-m", NO_MODEL, "-d", NO_MODEL, "--prompts", "p", "--ctx", "8"], "--ctx: num_ctx must be"),
        (["serve", "-m", NO_MODEL, "--threads", "20000"], "--threads: num_thread must be between 0 and 512"),
        (["fit", "-m", NO_MODEL, "--ctx", "4", "--vram-gb", "8"], "--ctx: num_ctx must be between 16"),
        (["fit", "-m", NO_MODEL, "--gpu-layers", "-5", "--vram-gb", "8"], "--gpu-layers: num_gpu must be"),
        (["demo", "--draft-max", "100"], "--draft-max: draft_num_predict must be between 0 and 64"),
        (["train", "--target", NO_MODEL, "--prompts", "p", "--out", "o", "--threads", "513"], "--threads: num_thread"),
    ],
)  # fmt: skip
def test_options_are_checked_by_the_table_before_anything_loads(args: list[str], message: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "not found" not in r.output
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr, r.stderr


def test_a_negative_seed_is_random_as_in_ollama() -> None:
    assert sampling_params({"seed": -1}).seed is None
    assert sampling_params({"seed": 0}).seed == 0


def test_no_model_and_no_modelfile_is_an_error() -> None:
    with pytest.raises(LocalEagleError, match="give --model"):
        resolve_models(None, None, None)
    assert resolve_models(Path("t.gguf"), None, None) == ModelPair(Path("t.gguf"))
