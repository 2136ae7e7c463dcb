"""Token log-probabilities in the shapes both APIs answer them (``logprobs`` / ``top_logprobs``).

The engine gives each generated token's log-probability under the target, from the logits of the call that
verified it, with the ``n`` likeliest alternatives there (``Engine.stream(logprobs=n)``, ``TokenLogprob``); here
token ids become their text and bytes (the model's own pieces, control tokens written out) and are laid out as
OpenAI's chat (``choices[].logprobs.content``), OpenAI's legacy completions (``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``) and Ollama 0.12+ (``logprobs: [{token, logprob, bytes, top_logprobs}]``) write
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_eagle.serve.errors import ApiError

MAX_TOP = 20  # OpenAI's and Ollama's bound on top_logprobs, and the engine's


@dataclass
class Alternative:
    token: str
    bytes: bytes
    logprob: float

    def as_dict(self) -> dict[str, Any]:
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes)}


@dataclass
class TokenEntry(Alternative):
    """A generated token, with the likeliest tokens at its place (most likely first)."""

    top: list[Alternative] = field(default_factory=list)


def resolve(logprobs: Sequence[Any], pieces: Callable[[list[int]], list[bytes]], text: str | None = None
            ) -> list[TokenEntry]:  # fmt: skip
    """``TokenLogprob``s as entries with the tokens' texts (``pieces`` maps ids to bytes, asked once for all of
    them). With ``text`` (the answer), tokens past its end are left out: a stop string's tokens end the generation
    but are not part of the answer."""
    ids = sorted({int(lp.token) for lp in logprobs} | {int(t) for lp in logprobs for t, _ in lp.top})
    by_id = dict(zip(ids, pieces(ids), strict=True)) if ids else {}

    def alt(token: int, logprob: float) -> Alternative:
        b = by_id.get(int(token), b"")
        return Alternative(b.decode("utf-8", "replace"), b, float(logprob))

    out = []
    limit = None if text is None else len(text.encode("utf-8", "surrogatepass"))
    at = 0
    for lp in logprobs:
        if limit is not None and at >= limit:
            break
        a = alt(lp.token, lp.logprob)
        out.append(TokenEntry(a.token, a.bytes, a.logprob, [alt(t, v) for t, v in lp.top]))
        at += len(a.bytes)
    return out


def top_count(value: Any, name: str) -> int:
    """A request's ``top_logprobs`` (or legacy ``logprobs``): an integer 0..20, else a 400 naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP:
        raise ApiError(400, f"{name} must be between 0 and {MAX_TOP}")
    return value


def ollama_logprobs(entries: Sequence[TokenEntry]) -> list[dict[str, Any]]:
    """Ollama's ``logprobs`` (``api.Logprob``): token, logprob, bytes and ``top_logprobs`` where asked for."""
    out = []
    for e in entries:
        d = e.as_dict()
        if e.top:
            d["top_logprobs"] = [a.as_dict() for a in e.top]
        out.append(d)
    return out


def openai_chat_logprobs(entries: Sequence[TokenEntry]) -> dict[str, Any]:
    """A chat choice's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}``."""
    content = [e.as_dict() | {"top_logprobs": [a.as_dict() for a in e.top]} for e in entries]
    return {"content": content, "refusal": None}


def openai_legacy_logprobs(entries: Sequence[TokenEntry], offset: int = 0) -> dict[str, Any]:
    """A completion choice's ``logprobs`` in the legacy shape; ``text_offset`` counts characters from ``offset``
    (the answer's start, or where a stream's earlier chunks left it)."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{a.token: a.logprob for a in e.top} for e in entries],
        "text_offset": offsets,
    }
