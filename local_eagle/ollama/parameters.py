"""Ollama's model parameters in one table: name, type, default, valid range and help text.

A Modelfile's PARAMETER lines, the CLI's options, chat's ``/set parameter`` and the server's
request ``options`` all check values here, so one value gets one answer everywhere, and no value
llama.cpp may crash on (a thread count of 100000, a context of 10^9 tokens) gets past the door.
Names and Go types follow Ollama's ``api.Options`` / ``api.Runner``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from local_eagle import DEFAULT_CTX
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.template import go_float
from local_eagle.runtime.sampling import SamplingParams

_SAMPLING = SamplingParams()
_FLOAT32_MAX = 3.4028234663852886e38
_INT64 = 2**63

# llama.cpp refuses more than GGML_MAX_N_THREADS (512) and slows to a crawl far below that
MAX_THREADS = 512
# a context bigger than any model's trained one; the engine also clamps to the model's own
MAX_CTX = 1 << 20
# a draft longer than this never pays: acceptance falls geometrically with depth
MAX_DRAFT = 64
MIN_CTX = 16
# every stop string is looked for after every token (100,000 of them made 200 tokens take 22 s instead of 0.07 s,
# holding the model); OpenAI takes 4, Modelfiles a handful
MAX_STOPS = 256


class ParameterError(LocalEagleError):
    """A parameter value of the wrong type or outside its range; the message names the parameter."""


@dataclass(frozen=True)
class Parameter:
    """One parameter: what it is, what local-eagle uses when nothing sets it, what it accepts."""

    name: str
    type: type
    help: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    special: tuple[Any, ...] = ()
    used: bool = True
    load: bool = False  # takes effect only when the model is loaded again

    def problem(self, value: Any) -> str:
        """Why ``value`` (already of the right type) cannot run; empty when it can. A list's ``maximum`` bounds its
        length."""
        if self.type is list:
            if self.maximum is not None and len(value) > self.maximum:
                return f"{self.name} takes at most {format_value(self.maximum)} strings, got {len(value)}"
            return ""
        if self.type is bool or value in self.special:
            return ""
        if isinstance(value, float) and math.isnan(value):
            return f"{self.name} must be a number, got nan"
        low, high = self.minimum, self.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{self.name} must be {self.range_text()}, got {format_value(value)}"
        return ""

    def range_text(self) -> str:
        extra = "".join(f" or {format_value(s)}" for s in self.special)
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f"between {format_value(low)} and {format_value(high)}{extra}"
        if low is not None:
            return f"at least {format_value(low)}{extra}"
        if high is not None:
            return f"at most {format_value(high)}{extra}"
        return "any value"


def _p(name: str, type_: type, help_: str, default: Any = None, lo: float | None = None, hi: float | None = None,
       special: tuple[Any, ...] = (), used: bool = True, load: bool = False) -> Parameter:  # fmt: skip
    return Parameter(name, type_, help_, default, lo, hi, special, used, load)


PARAMETERS: dict[str, Parameter] = {
    p.name: p
    for p in (
        _p("temperature", float, "0 or less = greedy (token-identical to the target alone).", _SAMPLING.temperature),
        _p("top_k", int, "Keep the k most likely tokens (0 or less = all).", _SAMPLING.top_k),
        _p("top_p", float, "Keep the smallest set of tokens whose probability reaches p.", _SAMPLING.top_p, 0.0, 1.0),
        _p("min_p", float, "Drop tokens below min_p times the top probability.", _SAMPLING.min_p, 0.0, 1.0),
        _p("repeat_penalty", float, "Penalise recent tokens (1 = off).", _SAMPLING.repeat_penalty, 1e-6),
        _p(
            "repeat_last_n",
            int,
            "How many recent tokens the penalty reads (-1 = the context).",
            _SAMPLING.repeat_last_n,
            0,
            None,
            (-1,),
        ),  # fmt: skip
        _p("seed", int, "Sampling seed (negative = random).", None),
        _p("num_predict", int, "Most tokens per answer (-1 = until the context is full).", -1, 1, None, (-1,)),
        _p("stop", list, "Stop string (repeatable); it is never emitted.", None, None, MAX_STOPS),
        _p("num_ctx", int, "Context length in tokens.", DEFAULT_CTX, MIN_CTX, MAX_CTX, load=True),
        _p("num_thread", int, "CPU threads (0 = all cores).", 0, 0, MAX_THREADS, load=True),
        _p("num_batch", int, "Ollama: prompt tokens per batch.", None, used=False),
        _p("num_gpu", int, "Layers offloaded to the GPU (-1 = all).", -1, 0, 1 << 16, (-1,), load=True),
        _p("draft_num_predict", int, "Most tokens drafted per step (0 = no drafting).", 4, 0, MAX_DRAFT),
        _p("num_keep", int, "Ollama: tokens kept when the context shifts.", None, used=False),
        _p("main_gpu", int, "Ollama: the GPU for small tensors.", None, used=False),
        _p("typical_p", float, "Ollama: locally typical sampling.", None, used=False),
        _p("presence_penalty", float, "Ollama: presence penalty.", None, used=False),
        _p("frequency_penalty", float, "Ollama: frequency penalty.", None, used=False),
        _p("use_mmap", bool, "Ollama: map the model file.", None, used=False),
    )
}

UNUSED = frozenset(p.name for p in PARAMETERS.values() if not p.used)
LOAD = frozenset(p.name for p in PARAMETERS.values() if p.load)
LISTS = frozenset(p.name for p in PARAMETERS.values() if p.type is list)

# Ollama warns "parameter X is deprecated" and drops these
DEPRECATED = frozenset(
    {"penalize_newline", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mlock", "mirostat"}
    | {"mirostat_tau", "mirostat_eta"}
)


def format_value(value: Any) -> str:
    """A typed value as text: ints in decimal, floats like Go's ``%v``, bools as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def lookup(name: str) -> Parameter:
    """The parameter called ``name``, or an error that suggests the closest name."""
    import difflib

    if name in PARAMETERS:
        return PARAMETERS[name]
    close = difflib.get_close_matches(name, sorted(PARAMETERS), n=1)
    raise ParameterError(f"unknown parameter {name!r}" + (f"; did you mean {close[0]}?" if close else ""))


def check(name: str, value: Any) -> Any:
    """``value`` if parameter ``name`` accepts it (JSON-typed: an int where a float is wanted is fine)."""
    p = lookup(name)
    if p.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = (
        isinstance(value, list) and all(isinstance(s, str) for s in value)
        if p.type is list
        else isinstance(value, p.type) and (p.type is bool or not isinstance(value, bool))
    )
    if not ok:
        want = {int: "an integer", float: "a number", bool: "true or false", list: "a list of strings"}[p.type]
        shown = repr(value)
        raise ParameterError(f"{name} must be {want}, got {shown if len(shown) <= 80 else shown[:77] + '...'}")
    problem = p.problem(value)
    if problem:
        raise ParameterError(problem)
    return value


_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
_BOOLS = {"1": True, "t": True, "T": True, "true": True, "TRUE": True, "True": True}
_BOOLS |= {"0": False, "f": False, "F": False, "false": False, "FALSE": False, "False": False}


def parse_text(name: str, raw: str) -> Any:
    """A value from text (a Modelfile line, ``/set parameter``) by Go's ParseInt / ParseFloat(32) /
    ParseBool rules, then checked against the parameter's range."""
    p = lookup(name)
    if p.type is int:
        if not _INT_RE.fullmatch(raw) or not -_INT64 <= int(raw) < _INT64:
            raise ParameterError(f"{name} expects an integer, got {raw!r}")
        value: Any = int(raw)
    elif p.type is float:
        if not _FLOAT_RE.fullmatch(raw):
            raise ParameterError(f"{name} expects a number, got {raw!r}")
        value = float(raw)
        if math.isfinite(value) and abs(value) > _FLOAT32_MAX * (1 + 2**-24):
            raise ParameterError(f"{name} is out of range for a 32-bit float: {raw!r}")
    elif p.type is bool:
        if raw not in _BOOLS:
            raise ParameterError(f"{name} expects true or false, got {raw!r}")
        value = _BOOLS[raw]
    else:
        value = [raw]
    return check(name, value)
