"""The options several commands share, and what they turn into.

Option types are declared here once so that ``--model``, ``--ctx`` or ``--top-k`` read the same in
every command. The options that are Ollama parameters take their help, defaults and valid ranges
from :mod:`local_eagle.ollama.parameters`, the table the Modelfile, chat's ``/set parameter`` and
the server check against, and :func:`checked_options` checks them there before a command runs,
so a bad value is one line and exit status 2 before any model loads. :func:`resolve_models` is
the one reading of "``-f Modelfile``, else ``--model``".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from local_eagle.cli.console import warn
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.parameters import PARAMETERS, ParameterError, check, format_value
from local_eagle.runtime.policy.lengths import AUTO_TREE_NODES
from local_eagle.runtime.tree import MAX_SEQ
from local_eagle.settings import (  # noqa: F401 - read here too
    DEFAULT_CTX,
    DraftMode,
    Settings,
    TreeSetting,
    offloads,
    resolve,
    sampling_params,
)

if TYPE_CHECKING:
    from local_eagle.ollama.modelfile import Modelfile

# the command keywords that are Ollama parameters; each one's flag is --keyword-with-dashes
OPTION_PARAMETERS = {
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
    "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n", "seed": "seed",
    "max_tokens": "num_predict", "draft_max": "draft_num_predict", "ctx": "num_ctx", "threads": "num_thread",
    "gpu_layers": "num_gpu",
}  # fmt: skip


def table_help(name: str, default: Any = None) -> str:
    """An option's help from the parameter table, with ``default`` (else the table's) for options
    whose unset value is None, where typer shows no default of its own."""
    p = PARAMETERS[name]
    value = p.default if default is None else default
    return p.help + (f" Default {format_value(value)}." if value is not None else "")


_MODEL_HELP = "Target model GGUF, model name, or hf.co/USER/REPO[:QUANT]."
_DRAFT_HELP = "EAGLE 3 / 3.1 drafter GGUF, or hf.co/USER/REPO (a drafter GGUF or checkpoint)."

ModelOpt = Annotated[Path, typer.Option("--model", "-m", help=_MODEL_HELP)]
OptionalModelOpt = Annotated[Path | None, typer.Option("--model", "-m", help=_MODEL_HELP)]
DraftOpt = Annotated[Path | None, typer.Option("--draft", "-d", help=_DRAFT_HELP)]
RequiredDraftOpt = Annotated[Path, typer.Option("--draft", "-d", help=_DRAFT_HELP)]
MtpOpt = Annotated[
    bool,
    typer.Option(
        "--mtp/--no-mtp",
        help="With no --draft, the model's own MTP (NextN) head drafts where its GGUF has one; --no-mtp runs the "
        "target alone (as DRAFT none in a Modelfile).",
    ),
]
"""The one --no-mtp: ``generate``, ``chat``, ``serve`` turn the head off with it, ``fit`` prices the target alone."""
ModelfileOpt = Annotated[
    Path | None, typer.Option("--file", "-f", help="Ollama Modelfile: model, DRAFT, parameters, template.")
]

OptionalCtxOpt = Annotated[int | None, typer.Option("--ctx", help=table_help("num_ctx"))]
GpuOpt = Annotated[int, typer.Option("--gpu-layers", help=PARAMETERS["num_gpu"].help)]
ThreadsOpt = Annotated[int, typer.Option("--threads", help=PARAMETERS["num_thread"].help)]
OptionalGpuOpt = Annotated[int | None, typer.Option("--gpu-layers", help=table_help("num_gpu"))]
OptionalThreadsOpt = Annotated[int | None, typer.Option("--threads", help=table_help("num_thread"))]
"""Where a Modelfile may give num_gpu / num_thread: a flag not given leaves its value (``settings.resolve``)."""
PARALLEL_ENV = "OLLAMA_NUM_PARALLEL"
MAX_PARALLEL = 64  # runtime.tree.MAX_SEQ: the sequences one engine's caches hold
ParallelOpt = Annotated[
    int | None,
    typer.Option(
        "--parallel", envvar=PARALLEL_ENV, min=1, max=MAX_PARALLEL, show_default=False,
        help="Requests a loaded model serves at once, each up to --ctx tokens, all verified in one target call a "
        f"round; more wait their turn (Ollama's {PARALLEL_ENV}). Default: 4 where their caches fit the free "
        "memory, else 1, as Ollama's; 1 with --tree.",
    ),
]  # fmt: skip

_DRAFT_MAX = PARAMETERS["draft_num_predict"]
DraftMaxOpt = Annotated[
    int | None,
    typer.Option(
        "--draft-max", help=f"{_DRAFT_MAX.help} Default: the Modelfile's draft_num_predict, else {_DRAFT_MAX.default}."
    ),
]
DraftPMinOpt = Annotated[float, typer.Option("--draft-p-min", help="Stop drafting below this probability.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
FormatOpt = Annotated[
    str | None, typer.Option("--format", help='Constrain the output: "json", any JSON object (as `ollama run`).')
]
JsonSchemaOpt = Annotated[
    Path | None, typer.Option("--json-schema", help="Constrain the output to this JSON schema (a .json file).")
]
GrammarOpt = Annotated[
    Path | None, typer.Option("--grammar", help="Constrain the output to this grammar (llguidance's Lark syntax).")
]


def grammar_option(output_format: str | None, json_schema: Path | None = None, grammar: Path | None = None) -> Any:
    """The one constraint --format, --json-schema and --grammar ask for (a runtime.grammar.GrammarSpec), or None;
    a bad value, file, schema or grammar is a one-line error naming the option."""
    from local_eagle.files import read_text_input
    from local_eagle.runtime.grammar import GrammarSpec

    given = [name for name, v in (("--format", output_format), ("--json-schema", json_schema), ("--grammar", grammar))
             if v is not None]  # fmt: skip
    if len(given) > 1:
        raise LocalEagleError(f"give one of {' and '.join(given)}, not both")
    if output_format is not None:
        if output_format != "json":
            raise LocalEagleError(f'--format must be "json", got {output_format!r}')
        return GrammarSpec.from_ollama_format("json", "--format")
    if json_schema is not None:
        return GrammarSpec.json_schema(read_text_input(json_schema, "JSON schema file"), f"--json-schema {json_schema}")
    if grammar is not None:
        return GrammarSpec.lark(read_text_input(grammar, "grammar file"), f"--grammar {grammar}")
    return None


# Ollama parameter name -> option; the names are SamplingParams' fields (and --stop).
_SAMPLING_OPTIONS: dict[str, Any] = {
    name: Annotated[PARAMETERS[name].type | None, typer.Option("--" + name.replace("_", "-"), help=table_help(name))]
    for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed")
}
_SAMPLING_OPTIONS["stop"] = Annotated[list[str] | None, typer.Option("--stop", help=PARAMETERS["stop"].help)]

F = TypeVar("F", bound=Callable[..., Any])
def check_option(keyword: str, value: Any) -> Any:
    """``value`` of the option ``keyword`` (an Ollama parameter) if the parameter table accepts it;
    else one line naming the flag and what it takes."""
    try:
        return check(OPTION_PARAMETERS[keyword], value)
    except ParameterError as e:
        raise LocalEagleError(f"--{keyword.replace('_', '-')}: {e}") from None


PROBABILITY_OPTIONS = ("draft_p_min",)
"""Command keywords that are probabilities but no Ollama parameter: checked by :func:`checked_options` too."""


def check_probability(keyword: str, value: float | None) -> None:
    """A probability flag from 0 to 1; NaN (which typer parses from ``nan``) compares false with every
    bound, so it would silently switch the check it feeds off."""
    if value is not None and not 0.0 <= value <= 1.0:
        raise LocalEagleError(f"--{keyword.replace('_', '-')}: expected a probability from 0 to 1, got {value}")


def checked_options(fn: F) -> F:
    """Check a command's options that are Ollama parameters by the parameter table before it runs.

    The one place a flag value meets its range: no command loads a model with ``--ctx 1`` or
    ``--threads 100000``. Options not given (None) are left to the Modelfile and the defaults; a
    repeatable option is checked value by value; ``--draft-p-min`` is checked as a probability.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for keyword, value in kwargs.items():
            if keyword in OPTION_PARAMETERS and value is not None:
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, str):  # --draft-max: 'auto' or a number
                        v = parse_draft_max(v, "--" + keyword.replace("_", "-"))
                    if v is not None:
                        check_option(keyword, v)
        for keyword in PROBABILITY_OPTIONS:
            check_probability(keyword, kwargs.get(keyword))
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class SamplingFlags:
    """The sampling flags given on a command line, by their Ollama parameter names."""

    values: dict[str, Any] = field(default_factory=dict)
    """temperature, top_k, ... seed: only the flags that were given."""
    stop: list[str] = field(default_factory=list)


NO_SAMPLING_FLAGS = SamplingFlags()
"""The placeholder default of a ``sampling`` parameter; :func:`sampling_options` always passes the real one."""


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
    name: str | None = None  # the model name it was given by, when it came from a store
    mtp: bool = True
    """With no drafter, whether the target's own MTP head may draft: off with ``--no-mtp`` or ``DRAFT none``."""

    own_draft: bool = True
    """The drafter is the Modelfile's own (its DRAFT, or its model's MTP head): ``--draft`` did not replace it, so
    the Modelfile's draft_num_predict bounds it."""

    def settings(
        self, flags: Mapping[str, Any], mode: DraftMode, *, defaults: Mapping[str, Any] | None = None,
        parallel: int = 1, beyond_training: bool = False,
    ) -> Settings:  # fmt: skip
        """The settings in force for this pair (``local_eagle.settings.resolve``): ``defaults``, the Modelfile's
        parameters, then ``flags`` (:func:`given`)."""
        return resolve(
            self.parameters, flags, defaults=defaults, mode=mode, own_draft=self.own_draft,
            drafts=self.draft is not None or self.mtp, parallel=parallel, mtp=self.mtp,
            beyond_training=beyond_training,
        )  # fmt: skip


def given(sampling: SamplingFlags | None = None, **keywords: Any) -> dict[str, Any]:
    """The flags given (None: not given), by their Ollama parameter names (``OPTION_PARAMETERS``): the flags layer
    of ``local_eagle.settings.resolve``."""
    flags = {OPTION_PARAMETERS[k]: v for k, v in keywords.items() if v is not None}
    if sampling is not None:
        flags |= sampling.values
        if sampling.stop:
            flags["stop"] = list(sampling.stop)
    return flags


def draft_mode(fixed: bool, tree: str | None, p_min: float = 0.0) -> DraftMode:
    """``--fixed``, ``--tree`` and ``--draft-p-min`` as the draft mode every front end resolves with."""
    return DraftMode(fixed, parse_tree(tree), p_min)


def resolve_models(model: Path | None, draft: Path | None, modelfile: Path | None, mtp: bool = True) -> ModelPair:
    """``-f Modelfile`` gives model, drafter and parameters; ``--model`` / ``--draft`` override it.

    The Modelfile's DRAFT may be a checkpoint directory: it is converted once and cached. ``mtp`` False
    (``--no-mtp``) or the Modelfile's ``DRAFT none`` keeps the target's own MTP head from drafting; ``--draft``
    still names a drafter. Its warnings go to stderr. Without either a Modelfile or ``--model`` there is nothing to run.
    """
    pair = _resolve_models(model, draft, modelfile)
    pair.mtp = mtp and not (pair.modelfile is not None and pair.modelfile.draft_off)
    return pair


def _resolve_models(model: Path | None, draft: Path | None, modelfile: Path | None) -> ModelPair:
    if modelfile is None:
        if model is None:
            raise LocalEagleError("give --model (or -f Modelfile)")
        from local_eagle.store import is_model_name

        if is_model_name(model):
            return named_pair(str(model), draft)
        return ModelPair(model, hub_draft(draft, model))
    from local_eagle.ollama.modelfile import parse_file, resolve_draft, resolve_model
    from local_eagle.store import NamedStores

    m = parse_file(modelfile, store=NamedStores())  # FROM a name of local-eagle's store, as of Ollama's
    for w in m.warnings:
        warn(w)
    mf_draft = resolve_draft(m) if m.draft is not None else None
    mf_model = resolve_model(m)  # checked even under --model: a Modelfile whose FROM is broken is refused
    if model is not None:
        from local_eagle.hub import is_hub_name

        model = named_pair(str(model), None).model if is_hub_name(str(model)) else model
    return ModelPair(model or mf_model, hub_draft(draft, model or mf_model) or mf_draft, dict(m.parameters), m,
                     own_draft=draft is None)


def hub_draft(draft: Path | None, target: Path) -> Path | None:
    """``--draft hf.co/USER/REPO``: the drafter GGUF it names, or its checkpoint converted against ``target`` (once,
    cached as a Modelfile's DRAFT checkpoint is); ``--draft auto`` as a Modelfile's ``DRAFT auto``; a shipped
    drafter's name (``local-eagle/gemma3-270m-eagle31``) its GGUF; any other ``--draft`` as given."""
    from local_eagle.assets import shipped_file
    from local_eagle.hub import is_hub_name

    if draft is not None and not draft.exists() and (shipped := shipped_file(str(draft))) is not None:
        return shipped
    if draft is None or not (is_hub_name(str(draft)) or str(draft) == "auto"):
        return draft
    from local_eagle.ollama.modelfile import parse, resolve_draft
    from local_eagle.ollama.modelfile_syntax import ModelfileError

    try:
        return resolve_draft(parse(f"FROM {target}\nDRAFT {draft}\n", source="--draft"))
    except ModelfileError as e:
        raise LocalEagleError("--draft " + str(e).removeprefix("--draft:2: DRAFT ")) from None


def named_pair(name: str, draft: Path | None) -> ModelPair:
    """The pair a model name stands for (local-eagle's store, then Ollama's); ``--draft`` overrides its drafter."""
    from local_eagle.ollama.modelfile import resolve_draft, resolve_model
    from local_eagle.store import resolve_name

    m = resolve_name(name)
    for w in m.warnings:
        warn(w)
    mf_draft = resolve_draft(m) if m.draft is not None and draft is None else None
    target = resolve_model(m)
    return ModelPair(target, hub_draft(draft, target) or mf_draft, dict(m.parameters), m, name, not m.draft_off,
                     own_draft=draft is None)


# --- draft length: adaptive by default, fixed for benchmarks ---------------------------------------------

AUTO = "auto"

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


# --- draft trees: as large as pays by default, off for chains only ---------------------------------------

OFF = "off"

TreeOpt = Annotated[
    str,
    typer.Option(
        "--tree",
        help=f"Draft trees: 'auto' (up to {AUTO_TREE_NODES} nodes per target call, where the measured costs favour "
        "a tree over a chain), N (up to N nodes; with --fixed, a tree of exactly N every round) or 'off' (chains "
        "only, and no multi-sequence KV cache).",
    ),
]


def parse_tree(value: str | None, flag: str = "--tree") -> TreeSetting:
    """``auto`` (or nothing): trees up to AUTO_TREE_NODES where they pay; ``off`` or 0: chains only; else N nodes."""
    text = AUTO if value is None else value.strip().lower()
    if text == AUTO:
        return TreeSetting(AUTO_TREE_NODES)
    if text == OFF:
        return TreeSetting(0, explicit=True)
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n < MAX_SEQ:
        raise LocalEagleError(f"{flag} must be 'auto', 'off' or a number of nodes (0 to {MAX_SEQ - 1}), got {value!r}")
    return TreeSetting(n, explicit=True)
