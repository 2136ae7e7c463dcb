"""``local-eagle chat``: an ``ollama run``-style conversation with a target and its EAGLE drafter.

:class:`ChatSession` holds what a conversation is made of (history, parameters, system prompt,
template, verbosity, running statistics) and answers slash commands without a terminal, so the
command language is unit-testable. :func:`run_repl` is the thin terminal loop around it: it
reads lines, joins ``\"\"\"`` blocks, streams answers and turns Ctrl+C into "stop this answer".

Every turn re-renders the whole conversation through the template and the engine prefills it
again, as Ollama does (leaving out the oldest exchanges when it outgrows the context); an
interrupted answer is dropped together with the question that
started it (Ollama drops the partial answer but keeps the question, which leaves two user
turns in a row that strict chat templates refuse).
"""

from __future__ import annotations

import difflib
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from local_eagle.cli.chat_help import (
    COMMANDS,
    HELP,
    PARAMETER_HELP,
    SET_HELP,
    SHORTCUTS_HELP,
    SHOW_HELP,
    UNSUPPORTED_SET,
)
from local_eagle.errors import LocalEagleError
from local_eagle.ollama import parameters
from local_eagle.ollama.modelfile import (
    Message,
    Modelfile,
    format_modelfile,
    format_parameter,
)
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.stats import GenerationTotals
from local_eagle.settings import DEFAULT_CTX, DraftMode, Settings

_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of bytes that are not UTF-8

# parameters fixed when the engine is created: changing one reloads the model
LOAD_PARAMETERS = parameters.LOAD
UNUSED_PARAMETERS = parameters.UNUSED


@dataclass
class Reply:
    """What the terminal loop should do after one line: print ``output``, send ``message`` to the
    model, or exit."""

    output: str = ""
    message: str | None = None
    exit: bool = False


class SessionStats(GenerationTotals):
    """Statistics summed over every completed answer of the session."""

    def report(self) -> str:
        if not self.answers:
            return "No answers yet in this session.\n"
        total = self.total
        prompt_rate = f"{total.prompt_tokens_per_second:.2f} tokens/s"
        generated_rate = f"{total.tokens_per_second:.2f} tokens/s"
        lines = [
            f"answers:                 {self.answers}",
            f"prompt tokens:           {total.prompt_tokens} in {total.prefill_seconds:.2f}s ({prompt_rate})",
            f"generated tokens:        {total.generated_tokens} in {total.decode_seconds:.2f}s ({generated_rate})",
            f"target calls:            {total.target_calls}",
            f"drafted tokens:          {total.drafted_tokens}",
            f"accepted tokens:         {total.accepted_tokens}",
            f"acceptance length:       {self.acceptance_length:.2f}",
        ]
        if total.drafted_per_position:
            per = " ".join(f"{a:.2f}" for a in total.acceptance_drafted)
            lines.append(f"acceptance per position: {per}")
        return "\n".join(lines) + "\n"


def go_duration(seconds: float) -> str:
    """A duration the way Go's ``time.Duration`` prints it (``1.5s``, ``36.4ms``, ``834µs``), to the
    microsecond, so the verbose stats read like ``ollama run --verbose``."""

    def trim(x: float, digits: int) -> str:
        return f"{x:.{digits}f}".rstrip("0").rstrip(".")

    if seconds >= 1.0:
        return trim(seconds, 6) + "s"
    if seconds >= 1e-3:
        return trim(seconds * 1e3, 3) + "ms"
    if seconds > 0:
        return trim(seconds * 1e6, 0) + "µs"
    return "0s"


def verbose_report(st: Any, total_seconds: float, load_seconds: float) -> str:
    """``ollama run --verbose``'s statistics for one answer, plus the speculative decoding counts."""
    prompt_rate = st.prompt_tokens / st.prefill_seconds if st.prefill_seconds > 0 else 0.0
    lines = [
        f"total duration:       {go_duration(total_seconds)}",
        f"load duration:        {go_duration(load_seconds)}",
        f"prompt eval count:    {st.prompt_tokens} token(s)",
        f"prompt eval duration: {go_duration(st.prefill_seconds)}",
        f"prompt eval rate:     {prompt_rate:.2f} tokens/s",
        f"eval count:           {st.generated_tokens} token(s)",
        f"eval duration:        {go_duration(st.decode_seconds)}",
        f"eval rate:            {st.tokens_per_second:.2f} tokens/s",
        f"drafted tokens:       {st.drafted_tokens}",
        f"accepted tokens:      {st.accepted_tokens}",
        f"acceptance length:    {st.acceptance_length:.2f}",
    ]
    if getattr(st, "adaptive", False):  # rounds by the number of tokens the policy chose to draft
        lines.append(f"draft lengths:        {' '.join(f'{k}:{n}' for k, n in enumerate(st.draft_lengths) if n)}")
    return "\n".join(lines) + "\n"


class ChatSession:
    """One conversation's state and its slash commands; knows nothing about terminals or engines.

    ``parameters`` use Ollama's names and types (the Modelfile's, then command-line flags, then
    ``/set parameter``), so ``/show parameters`` and ``/show modelfile`` print what is in force.
    """

    def __init__(
        self,
        model: Path,
        draft: Path | None = None,
        parameters: dict[str, Any] | None = None,
        system: str | None = None,
        template: str | None = None,
        messages: list[Message] | None = None,
        verbose: bool = False,
        mode: DraftMode | None = None,
    ) -> None:
        self.model = Path(model)
        self.draft = Path(draft) if draft is not None else None
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.system = system
        self.template = template
        self.messages = list(messages or [])
        self.verbose = verbose
        self.mode = mode or DraftMode()  # --fixed, --tree, --draft-p-min: adaptive chains and trees by default
        self.beyond_training = False  # --ctx-beyond-training
        self.grammar: Any = None  # run --format json: a runtime.grammar.GrammarSpec every answer follows
        # the model's own MTP head (cli.loading.own_head): True where it drafts (no drafter named), False where
        # --no-mtp or DRAFT none turned it off, None where there is none to speak of (or a drafter drafts instead)
        self.mtp: bool | None = None
        self.history: list[dict[str, str]] = []
        self.stats = SessionStats()
        self.reload_needed = False
        self.loaded: dict[str, Any] = {}  # the load parameters the engine was created with
        self.engine_ctx: int | None = None  # its context, which may be capped below num_ctx

    @classmethod
    def from_modelfile(cls, m: Modelfile, model: Path, draft: Path | None, **kw: Any) -> ChatSession:
        """A session from a parsed Modelfile, with the resolved GGUF paths of its FROM and DRAFT."""
        session = cls(model, draft, dict(m.parameters), m.system, m.template, list(m.messages), **kw)
        session.mtp = False if m.draft_off and draft is None else None
        return session

    # --- what the engine needs ----------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        """The engine's context once loaded (capped at the model's trained one), else num_ctx."""
        return self.engine_ctx or int(self.parameters.get("num_ctx", DEFAULT_CTX))

    @property
    def n_gpu_layers(self) -> int:
        return int(self.parameters.get("num_gpu", -1))

    @property
    def n_threads(self) -> int:
        return int(self.parameters.get("num_thread", 0))

    def sampling(self) -> SamplingParams:
        """The sampler for the parameters in force; those not set keep SamplingParams' defaults."""
        return self.settings().sampling()

    def settings(self) -> Settings:
        """The settings in force (``local_eagle.settings``): the parameters as ``/show parameters`` prints them, the
        draft mode of the command line."""
        drafts = self.draft is not None or self.mtp is True  # a drafter, or the model's own MTP head
        return Settings(self.parameters, self.mode, drafts=drafts, mtp=self.mtp is not False,
                        beyond_training=self.beyond_training)  # fmt: skip

    def stream_options(self) -> dict[str, Any]:
        """Keyword arguments for :meth:`Engine.stream`: an answer runs to EOS, a stop string,
        num_predict tokens or the end of the context (Ollama's default num_predict is -1)."""
        options = self.settings().stream_options(self.n_ctx)
        return options | ({"grammar": self.grammar} if self.grammar is not None else {})

    def _draft_text(self) -> str:
        s = self.settings()
        return f"up to {s.draft_max}, as many as pay" if s.mode.adaptive else f"{s.draft_max}, every round"

    def conversation(self, user: str, skip: int = 0) -> list[dict[str, str]]:
        return [*self.history[2 * skip :], {"role": "user", "content": user}]

    def prompt(self, user: str, skip: int = 0) -> str:
        """The conversation so far (less its ``skip`` oldest turns) plus ``user``, rendered as the target expects."""
        from local_eagle.ollama.prompt import render_prompt

        return render_prompt(
            self.conversation(user, skip), system=self.system, template=self.template, gguf_path=self.model,
            history=[m.to_dict() for m in self.messages],
        )  # fmt: skip

    def fit_prompt(self, user: str, tokenize: Callable[[str], Any]) -> tuple[Any, int]:
        """The prompt's tokens and how many old turns were left out so that it fits the context.

        Like Ollama, the oldest turns go first; the system message, MESSAGE history and the new
        message always stay (if they alone overflow, the engine says so). The turns stay in
        ``history``: only this request's prompt is shortened.
        """
        turns = len(self.history) // 2
        skip = 0
        while True:
            tokens = tokenize(self.prompt(user, skip))
            if len(tokens) < self.n_ctx or skip >= turns:
                return tokens, skip
            skip += 1

    def record(self, user: str, answer: str, stats: Any) -> None:
        """Keep a completed turn in the history and its numbers in the session statistics."""
        self.history += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        self.stats.add(stats)

    # --- commands -----------------------------------------------------------------------------

    def handle(self, line: str) -> Reply:
        """One line typed at ``>>> ``: a slash command, or a message for the model."""
        text = line.strip()
        if not text:
            return Reply()
        if not text.startswith("/"):
            return Reply(message=line)
        cmd, _, rest = text.partition(" ")
        args = rest.split()
        if cmd in ("/bye", "/exit"):
            return Reply(exit=True)
        if cmd in ("/?", "/help"):
            return Reply(self._help(args))
        if cmd == "/clear":
            self.history.clear()
            return Reply("Cleared session context\n")
        if cmd == "/stats":
            return Reply(self.stats.report())
        if cmd == "/set":
            return Reply(self._set(rest.strip()))
        if cmd == "/show":
            return Reply(self._show(args))
        close = difflib.get_close_matches(cmd, COMMANDS, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]}?" if close else ""
        return Reply(f"Unknown command '{cmd}'.{hint} Type /? for help\n")

    def set_system(self, text: str) -> str:
        self.system = text if text else None
        return "Set system message.\n"

    def _help(self, args: list[str]) -> str:
        topic = args[0] if args else ""
        if topic in ("set", "/set"):
            return SET_HELP
        if topic in ("show", "/show"):
            return SHOW_HELP
        if topic in ("shortcut", "shortcuts"):
            return SHORTCUTS_HELP
        return HELP

    def _set(self, rest: str) -> str:
        what, _, value = rest.partition(" ")
        if what == "":
            return SET_HELP
        if what == "parameter":
            return self._set_parameter(value.split())
        if what == "system":
            return self.set_system(value.strip())
        if what == "verbose":
            self.verbose = True
            return "Set 'verbose' mode.\n"
        if what == "quiet":
            self.verbose = False
            return "Set 'quiet' mode.\n"
        if what in UNSUPPORTED_SET:
            return f"'/set {what}' is not supported by local-eagle chat.\n"
        return f"Unknown command '/set {what}'. Type /? set for help\n"

    def _set_parameter(self, args: list[str]) -> str:
        if len(args) < 2:
            return PARAMETER_HELP
        name, values = args[0], args[1:]
        if name in parameters.DEPRECATED:
            return f"Couldn't set parameter: {name} is deprecated and ignored (as in Ollama)\n"
        try:
            if name in parameters.LISTS:
                value: Any = parameters.check(name, list(values))
            elif len(values) != 1:
                return f"Couldn't set parameter: {name} takes one value, got {len(values)}\n"
            else:
                value = parameters.parse_text(name, values[0])
        except parameters.ParameterError as e:
            return f"Couldn't set parameter: {e}\n"
        if name in parameters.LISTS:
            self.parameters[name] = value
            return f"Set parameter '{name}' to '{', '.join(values)}'\n"
        old = self.parameters.get(name)
        self.parameters[name] = value
        note = ""
        if name in LOAD_PARAMETERS and old != value:
            self.reload_needed, self.engine_ctx = True, None
            note = " (the model reloads before the next answer)"
        elif name in UNUSED_PARAMETERS:
            note = f" (local-eagle does not use {name})"
        return f"Set parameter '{name}' to '{format_parameter(value)}'{note}\n"

    def _show(self, args: list[str]) -> str:
        what = args[0] if args else ""
        if what == "info":
            return self._info()
        if what == "modelfile":
            return self.modelfile_text()
        if what in ("parameters", "parameter", "params"):
            return self._parameters()
        if what == "system":
            return (self.system + "\n") if self.system else "No system message was specified for this model.\n"
        if what == "template":
            return self.template_text() + "\n"
        if what == "":
            return SHOW_HELP
        return f"Unknown command '/show {what}'. Type /? show for help\n"

    def _parameters(self) -> str:
        if not self.parameters:
            return "No parameters were specified for this model.\n"
        lines = ["Parameters:"]
        for name in sorted(self.parameters):
            value = self.parameters[name]
            for v in value if isinstance(value, list) else [value]:
                shown = f'"{v}"' if isinstance(v, str) else format_parameter(v)
                lines.append(f"{name:<30} {shown}")
        return "\n".join(lines) + "\n"

    def modelfile_text(self) -> str:
        """The session as a Modelfile (FROM, DRAFT, TEMPLATE, SYSTEM, parameters, MESSAGE)."""
        m = Modelfile(
            model=self.model, draft=self.draft, parameters=self.parameters, template=self.template,
            system=self.system, messages=self.messages, draft_off=self.draft is None and self.mtp is False,
        )  # fmt: skip
        return '# Modelfile generated by "local-eagle chat"\n\n' + format_modelfile(m)

    def template_text(self) -> str:
        """The template in use: the Modelfile's TEMPLATE, else the GGUF's chat template, else Ollama's default."""
        from local_eagle.ollama.prompt import DEFAULT_TEMPLATE, read_chat_template

        if self.template is not None:
            return self.template
        ct = read_chat_template(self.model)
        return ct.template if ct.template is not None else DEFAULT_TEMPLATE

    def _info(self) -> str:
        from local_eagle.gguf import read_model_info

        t = read_model_info(self.model)
        rows = [
            "  Model",
            f"    {'file':<22}{self.model}",
            f"    {'architecture':<22}{t.arch}",
            f"    {'layers':<22}{t.n_layer}",
            f"    {'embedding length':<22}{t.n_embd}",
            f"    {'vocabulary':<22}{t.n_vocab}",
            f"    {'quantization':<22}{t.quantization or '?'}",
            f"    {'context length':<22}{self.n_ctx}",
        ]
        if self.draft is not None:
            d = read_model_info(self.draft)
            rows += [
                "",
                "  Drafter",
                f"    {'file':<22}{self.draft}",
                f"    {'kind':<22}EAGLE {d.eagle_version}",
                f"    {'target layers':<22}{d.target_layers}",
                f"    {'draft vocabulary':<22}{d.draft_vocab_size}",
                f"    {'draft tokens/round':<22}{self._draft_text()}",
            ]
        elif self.mtp is True:
            rows += ["", "  Drafter", "    the model's own MTP (NextN) head",
                     f"    {'draft tokens/round':<22}{self._draft_text()}"]  # fmt: skip
        elif self.mtp is False:
            rows += ["", "  Drafter", "    none (DRAFT none or --no-mtp: the target decodes alone)"]
        else:
            rows += ["", "  Drafter", "    none (the target decodes alone)"]
        return "\n".join(rows) + "\n"


class MultilineReader:
    """Joins ``\"\"\"`` blocks the way ``ollama run`` does.

    A line starting with ``\"\"\"`` (or ``/set system \"\"\"``) opens a block that runs to the next
    line ending in ``\"\"\"``; the quotes are removed and the lines joined with newlines.
    """

    def __init__(self) -> None:
        self._parts: list[str] | None = None
        self._kind = ""

    @property
    def open(self) -> bool:
        return self._parts is not None

    def reset(self) -> None:
        self._parts = None

    def feed(self, line: str) -> tuple[str, str] | None:
        """Returns ``(kind, text)`` once an input is complete (kind ``line``, ``message`` or
        ``system``), or None while a block is open."""
        if self._parts is None:
            for prefix, kind in (('"""', "message"), ('/set system """', "system")):
                if line.startswith(prefix):
                    body = line[len(prefix) :]
                    if body.endswith('"""'):
                        return kind, body[:-3]
                    self._parts, self._kind = [body], kind
                    return None
            return "line", line
        if line.rstrip().endswith('"""'):
            self._parts.append(line.rstrip()[:-3])
            text = "\n".join(self._parts)
            self._parts = None
            return self._kind, text
        self._parts.append(line)
        return None


def _setup_input() -> None:
    """Line editing on a terminal; and stdin decoded with ``surrogateescape``, so that bytes that
    are not UTF-8 (a Latin-1 file piped in) reach :func:`_read_line` instead of killing ``input()``."""
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="surrogateescape")


def _read_line(read: Callable[[str], str], prompt: str, err: TextIO) -> str:
    """One line of input; undecodable bytes become U+FFFD (and the user is told), not a crash."""
    line = read(prompt)
    clean = _UNDECODABLE.sub("\ufffd", line)
    if clean != line:
        err.write("warning: the input is not UTF-8 text; its undecodable bytes were replaced by U+FFFD\n")
        err.flush()
    return clean


def run_repl(
    session: ChatSession,
    open_engine: Callable[[ChatSession], Any],
    out: TextIO | None = None,
    err: TextIO | None = None,
    read: Callable[[str], str] = input,
) -> None:
    """The interactive loop: ``>>> `` prompts, streamed answers, Ctrl+C stops an answer, Ctrl+D exits."""
    out = out or sys.stdout
    err = err or sys.stderr
    if read is input:
        _setup_input()
    engine, load_seconds = _load(session, open_engine, err)
    reader = MultilineReader()
    try:
        while True:
            try:
                line = _read_line(read, "... " if reader.open else ">>> ", err)
            except EOFError:
                out.write("\n")
                return
            except KeyboardInterrupt:
                reader.reset()
                out.write("\nUse Ctrl + d or /bye to exit.\n\n")
                continue
            got = reader.feed(line)
            if got is None:
                continue
            kind, text = got
            if kind == "system":
                out.write(session.set_system(text))
                continue
            if kind == "message" and not text.strip():
                continue
            try:
                reply = Reply(message=text) if kind == "message" else session.handle(text)
            except LocalEagleError as e:
                err.write(f"error: {e}\n")
                err.flush()
                continue
            if reply.output:
                out.write(reply.output)
                out.flush()
            if reply.exit:
                return
            if reply.message is None:
                continue
            if session.reload_needed:
                engine, seconds = _load(session, open_engine, err, engine)
                load_seconds += seconds
            _answer(session, engine, reply.message, load_seconds, out, err)
            load_seconds = 0.0
    finally:
        engine.close()


def _load(
    session: ChatSession, open_engine: Callable[[ChatSession], Any], err: TextIO, old: Any = None
) -> tuple[Any, float]:
    """The engine for the parameters in force (closing ``old``), and the seconds it took.

    When a reload fails (say, a num_ctx this machine cannot hold), the session says why and goes
    back to the settings that loaded: a ``/set parameter`` ends in one line, not the session.
    """
    t0 = time.perf_counter()
    if old is not None:
        old.close()
    try:
        engine = open_engine(session)
    except LocalEagleError as e:
        if old is None:
            raise
        err.write(f"error: {e}\n(back to the settings that loaded)\n")
        err.flush()
        previous = {name: value for name, value in session.loaded.items() if value is not None}
        session.parameters = {k: v for k, v in session.parameters.items() if k not in LOAD_PARAMETERS} | previous
        engine = open_engine(session)
    session.reload_needed = False
    session.loaded = {name: session.parameters.get(name) for name in LOAD_PARAMETERS}
    session.engine_ctx = getattr(engine, "n_ctx", None)
    return engine, time.perf_counter() - t0


def _answer(session: ChatSession, engine: Any, user: str, load_seconds: float, out: TextIO, err: TextIO) -> None:
    """Stream one answer; on Ctrl+C stop it and leave the turn out of the history."""
    t0 = time.perf_counter()
    stream = None
    wrote = ""
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        # a flag, not an exception: an exception raised inside a ctypes callback would be lost
        nonlocal interrupted
        interrupted = True

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        tokens, skipped = session.fit_prompt(user, engine.tokenize)
        if skipped:
            err.write(f"(the {skipped} oldest exchange(s) left out of the prompt to fit the context)\n")
            err.flush()
        stream = engine.stream(tokens, **session.stream_options())
        for piece in stream:
            out.write(piece)
            out.flush()
            wrote = piece or wrote
            if interrupted:
                raise KeyboardInterrupt
        if interrupted:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        if stream is not None:
            stream.close()
        out.write("\n\n")
        out.flush()
        return
    except LocalEagleError as e:
        err.write(f"error: {e}\n")
        if "context" in str(e):
            err.write("(/clear starts a new conversation; /set parameter num_ctx N gives a larger context)\n")
        err.flush()
        return
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    res = stream.result
    out.write("\n\n" if not wrote.endswith("\n") else "\n")
    out.flush()
    session.record(user, res.text, res.stats)
    if session.verbose:
        err.write(verbose_report(res.stats, time.perf_counter() - t0 + load_seconds, load_seconds))
        err.write("\n")
        err.flush()
