"""The options several commands share, and what they turn into.

Option types are declared here once so that ``--model``, ``--ctx`` or ``--top-k`` read the same in
every command. The sampling defaults are :class:`~local_eagle.runtime.sampling.SamplingParams`'
own: the help texts quote them and :func:`sampling_params` leaves unset values to them, so
there is one place to change a default. :func:`resolve_models` is the one reading of
"``-f Modelfile``, else ``--model``".
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from local_eagle.cli.console import err
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.sampling import SamplingParams

if TYPE_CHECKING:
    from local_eagle.ollama.modelfile import Modelfile
    from local_eagle.runtime.engine import Engine

DEFAULT_CTX = 4096
"""Context length when neither a flag nor the Modelfile's num_ctx gives one."""

_MODEL_HELP = "Target model GGUF."
_DRAFT_HELP = "EAGLE 3 / 3.1 drafter GGUF."

ModelOpt = Annotated[Path, typer.Option("--model", "-m", help=_MODEL_HELP)]
OptionalModelOpt = Annotated[Path | None, typer.Option("--model", "-m", help=_MODEL_HELP)]
DraftOpt = Annotated[Path | None, typer.Option("--draft", "-d", help=_DRAFT_HELP)]
RequiredDraftOpt = Annotated[Path, typer.Option("--draft", "-d", help=_DRAFT_HELP)]
ModelfileOpt = Annotated[
    Path | None, typer.Option("--file", "-f", help="Ollama Modelfile: model, DRAFT, parameters, template.")
]

CtxOpt = Annotated[int, typer.Option("--ctx", help="Context length (tokens).")]
OptionalCtxOpt = Annotated[int | None, typer.Option("--ctx", help=f"Context length (default {DEFAULT_CTX}).")]
GpuOpt = Annotated[int, typer.Option("--gpu-layers", help="Layers to offload to the GPU (-1: all).")]
ThreadsOpt = Annotated[int, typer.Option("--threads", help="CPU threads (0: all cores).")]

DraftMaxOpt = Annotated[int | None, typer.Option("--draft-max", help="Most tokens drafted per step (k).")]
DraftPMinOpt = Annotated[float, typer.Option("--draft-p-min", help="Stop drafting below this probability.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

_D = SamplingParams()
# Ollama parameter name -> option; the names are SamplingParams' fields (and --stop).
_SAMPLING_OPTIONS: dict[str, Any] = {
    "temperature": Annotated[float | None, typer.Option(help=f"0 = greedy. Default {_D.temperature}.")],
    "top_k": Annotated[int | None, typer.Option("--top-k", help=f"Default {_D.top_k}.")],
    "top_p": Annotated[float | None, typer.Option("--top-p", help=f"Default {_D.top_p}.")],
    "min_p": Annotated[float | None, typer.Option("--min-p", help=f"Default {_D.min_p}.")],
    "repeat_penalty": Annotated[
        float | None, typer.Option("--repeat-penalty", help=f"Default {_D.repeat_penalty} (off).")
    ],
    "repeat_last_n": Annotated[int | None, typer.Option("--repeat-last-n", help=f"Default {_D.repeat_last_n}.")],
    "seed": Annotated[int | None, typer.Option(help="Sampling seed.")],
    "stop": Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")],
}
_SAMPLING_FIELDS = tuple(f.name for f in dataclasses.fields(SamplingParams))


def sampling_params(parameters: Mapping[str, Any]) -> SamplingParams:
    """The sampler for Ollama-named ``parameters``; what they leave out keeps SamplingParams' default."""
    return SamplingParams(**{name: parameters[name] for name in _SAMPLING_FIELDS if name in parameters})


@dataclass(frozen=True)
class SamplingFlags:
    """The sampling flags given on a command line, by their Ollama parameter names."""

    values: dict[str, Any] = field(default_factory=dict)
    """temperature, top_k, ... seed: only the flags that were given."""
    stop: list[str] = field(default_factory=list)

    def flags(self) -> list[tuple[str, str, Any]]:
        """(parameter, flag, value) for each given value, so that an error can name the flag."""
        return [(name, "--" + name.replace("_", "-"), value) for name, value in self.values.items()]


NO_SAMPLING_FLAGS = SamplingFlags()
"""The placeholder default of a ``sampling`` parameter; :func:`sampling_options` always passes the real one."""


F = TypeVar("F", bound=Callable[..., Any])


def sampling_options(fn: F) -> F:
    """Give a command the sampling flags in place of its ``sampling: SamplingFlags`` parameter.

    typer reads options off a function's signature, so without this every command that samples
    would list the same eight parameters and copy them into a dict. The flags appear in
    ``--help`` where ``sampling`` stands in the signature, and reach the command as one
    :class:`SamplingFlags`.
    """
    sig = inspect.signature(fn, eval_str=True)
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name != "sampling":
            params.append(p)
            continue
        params += [inspect.Parameter(n, p.kind, default=None, annotation=a) for n, a in _SAMPLING_OPTIONS.items()]
    if len(params) == len(sig.parameters):
        raise TypeError(f"{fn.__name__} has no 'sampling' parameter")

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _SAMPLING_OPTIONS}
        stop = given.pop("stop") or []
        values = {name: value for name, value in given.items() if value is not None}
        return fn(sampling=SamplingFlags(values, list(stop)), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
    return wrapper  # type: ignore[return-value]


@dataclass
class ModelPair:
    """The target, the drafter and the Modelfile parameters a command runs with."""

    model: Path
    draft: Path | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    modelfile: Modelfile | None = None

    def draft_max(self, flag: int | None, default: int = 4) -> int:
        """--draft-max, else the Modelfile's draft_num_predict when its DRAFT is used, else ``default``."""
        if flag is not None:
            return flag
        if self.modelfile is not None and self.modelfile.draft is not None:
            return self.modelfile.draft_num_predict
        return default


def resolve_models(model: Path | None, draft: Path | None, modelfile: Path | None) -> ModelPair:
    """``-f Modelfile`` gives model, drafter and parameters; ``--model`` / ``--draft`` override it.

    The Modelfile's DRAFT may be a checkpoint directory: it is converted once and cached.
    Its warnings go to stderr. Without either a Modelfile or ``--model`` there is nothing to run.
    """
    if modelfile is None:
        if model is None:
            raise LocalEagleError("give --model (or -f Modelfile)")
        return ModelPair(model, draft)
    from local_eagle.ollama.modelfile import parse_file, resolve_draft, resolve_model

    m = parse_file(modelfile)
    for w in m.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)
    mf_draft = resolve_draft(m) if m.draft is not None else None
    mf_model = resolve_model(m)  # checked even under --model: a Modelfile whose FROM is broken is refused
    return ModelPair(model or mf_model, draft or mf_draft, dict(m.parameters), m)


def open_engine(model: Path, draft: Path | None, ctx: int, gpu_layers: int, threads: int) -> Engine:
    """An engine for the pair with the --ctx, --gpu-layers and --threads values."""
    from local_eagle.runtime.engine import Engine, EngineOptions

    return Engine(model, draft, EngineOptions(n_ctx=ctx, n_gpu_layers=gpu_layers, n_threads=threads))


# --- draft length: adaptive by default, fixed for benchmarks ---------------------------------------------

AUTO = "auto"
FIXED_DRAFT_MAX = 4
"""--fixed's draft length when neither --draft-max N nor the Modelfile gives one (Ollama's draft_num_predict)."""

DraftLengthOpt = Annotated[
    str,
    typer.Option(
        "--draft-max",
        help="Most tokens drafted per round: 'auto' (the Modelfile's draft_num_predict, else 8) or N. "
        "The cost-aware policy drafts as many of them as pay on this machine, possibly none; with --fixed, all.",
    ),
]
FixedOpt = Annotated[
    bool, typer.Option("--fixed", help="Draft exactly --draft-max tokens every round (benchmarks), not adaptively.")
]


def parse_draft_max(value: str | None, flag: str = "--draft-max") -> int | None:
    """``auto`` (or nothing) -> None: the bound comes from the Modelfile or the default; else the number.

    Its range is checked where it is used (the engine, or chat's Ollama parameter table).
    """
    if value is None or value.strip().lower() == AUTO:
        return None
    try:
        return int(value)
    except ValueError:
        raise LocalEagleError(f"{flag} must be 'auto' or a number of tokens, got {value!r}") from None


def draft_bound(pair: ModelPair, value: str | None, fixed: bool) -> int:
    """The draft length's bound: --draft-max N, else the Modelfile's ``draft_num_predict`` parameter (when its
    DRAFT is used), else 4 with --fixed and 8 for the adaptive policy (which drafts that deep only where it pays)."""
    from local_eagle.runtime.lengths import AUTO_DRAFT_MAX

    n = parse_draft_max(value)
    if n is not None:
        return n
    if pair.modelfile is not None and pair.modelfile.draft is not None and "draft_num_predict" in pair.parameters:
        return int(pair.parameters["draft_num_predict"])
    return FIXED_DRAFT_MAX if fixed else AUTO_DRAFT_MAX
