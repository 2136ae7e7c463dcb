"""The lossless EAGLE 3 / 3.1 draft-verify loop on llama.cpp.

Invariant at the start of every round, with t_L the last emitted token at position L:
the target's cache holds positions 0..L-1 (t_L is not decoded yet); the drafter's cache holds
the real rows 0..L-2, row P being (t[P+1], g[P]) with g the projected target features at P;
``g_prev`` = g[L-1]. A round drafts a chain starting with the row (t_L, g[L-1]) at L-1,
verifies [t_L, d1..dk] in one target decode, keeps the accepted prefix in both caches and
feeds the accepted positions' features to the drafter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.bindings import Context, ContextOptions, Model
from local_eagle.runtime.drafter import Drafter, check_pair, read_spec
from local_eagle.runtime.sampling import (
    GREEDY,
    SamplingParams,
    apply_repeat_penalty,
    probabilities,
    sample,
    verify_greedy,
    verify_stochastic,
)
from local_eagle.runtime.textstream import TextStream

STOP_EOS = "eos"
STOP_STRING = "stop"
STOP_LENGTH = "length"
STOP_CONTEXT = "context"
STOP_CANCELLED = "cancelled"
NO_HISTORY = np.zeros(0, dtype=np.int64)


@dataclass
class EngineOptions:
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = -1
    n_threads: int = 0
    flash_attn: bool | None = None
    capture: str = "auto"  # "auto" | "native" | "callback"


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    target_calls: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    draft_steps: int = 0
    prefill_seconds: float = 0.0
    target_seconds: float = 0.0
    drafter_seconds: float = 0.0
    decode_seconds: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_length(self) -> float:
        """Tokens emitted per target verify call (1.0 without a drafter)."""
        verified = self.generated_tokens - 1
        return verified / self.target_calls if self.target_calls else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position, strict=True)]

    @property
    def host_seconds(self) -> float:
        return max(0.0, self.decode_seconds - self.target_seconds - self.drafter_seconds)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            acceptance_length=self.acceptance_length,
            acceptance_per_position=self.acceptance_per_position,
            host_seconds=self.host_seconds,
            tokens_per_second=self.tokens_per_second,
        )
        return d


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    stats: GenerationStats


class Stream:
    """Iterate for text pieces; ``result`` holds the tokens and stats once iteration ends."""

    def __init__(self, gen: Iterator[str]) -> None:
        self._gen = gen
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        self.result = yield from self._gen

    def close(self) -> None:
        self._gen.close()


class Engine:
    """A target GGUF and an optional EAGLE drafter GGUF on llama.cpp."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        draft: str | os.PathLike[str] | None = None,
        options: EngineOptions | None = None,
    ) -> None:
        from local_eagle.runtime.capture import LayerCapture

        self.options = opts = options or EngineOptions()
        self.model = Model(model, n_gpu_layers=opts.n_gpu_layers, what="target")
        self.n_vocab = self.model.n_vocab
        ctx_opts = ContextOptions(
            n_ctx=opts.n_ctx, n_batch=opts.n_batch, n_ubatch=opts.n_batch, n_threads=opts.n_threads,
            flash_attn=opts.flash_attn,
        )  # fmt: skip
        self.capture = None
        self.drafter: Drafter | None = None
        if draft is not None:
            spec = read_spec(draft)
            check_pair(spec, self.model, draft)
            self.capture = LayerCapture.create(self.model, spec.target_layers, opts.capture)
        self.ctx = Context(self.model, ctx_opts, cb_eval=self.capture.callback if self.capture is not None else None)
        if self.capture is not None:
            self.capture.attach(self.ctx)
            self.drafter = Drafter(draft, self.ctx, ctx_opts, n_gpu_layers=opts.n_gpu_layers)
        self.n_ctx = self.ctx.n_ctx
        self.n_ub = self.ctx.n_ubatch

    @property
    def model_path(self) -> Path:
        return self.model.path

    def tokenize(self, text: str) -> np.ndarray:
        return self.model.tokenize(text, add_special=True, parse_special=True)

    def generate(self, prompt: str | np.ndarray, **kw) -> GenerationResult:
        s = self.stream(prompt, **kw)
        for _ in s:
            pass
        assert s.result is not None
        return s.result

    def stream(
        self,
        prompt: str | np.ndarray,
        max_tokens: int = 128,
        sampling: SamplingParams = GREEDY,
        draft_max: int = 4,
        draft_p_min: float = 0.0,
        stop: list[str] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Stream:
        """``cancelled`` is asked between prefill chunks: a long prompt's prefill can take minutes, and a
        server must be able to drop it (client gone, shutdown) before the first token; pieces end a stream
        at any other time. A cancelled prefill ends the stream with no text and stop reason "cancelled"."""
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else np.asarray(prompt, dtype=np.int32)
        if len(tokens) == 0:
            raise LocalEagleError("the prompt is empty")
        if len(tokens) >= self.n_ctx:
            raise LocalEagleError(
                f"the prompt has {len(tokens)} tokens, more than the context of {self.n_ctx} allows; raise --ctx"
            )
        if max_tokens < 1:
            raise LocalEagleError(f"max tokens must be at least 1, got {max_tokens}")
        if draft_max < 0:
            raise LocalEagleError(f"draft max must be >= 0, got {draft_max}")
        k = draft_max if self.drafter is not None else 0
        return Stream(self._run(tokens, max_tokens, sampling, k, draft_p_min, stop or [], cancelled))

    # ------------------------------------------------------------------------------------------

    def _choose(
        self, logits: np.ndarray, history: np.ndarray, sp: SamplingParams, rng
    ) -> tuple[int, np.ndarray | None]:
        x = apply_repeat_penalty(logits, history, sp.repeat_penalty, sp.repeat_last_n)
        if sp.greedy:
            return int(np.argmax(x)), None
        p = probabilities(x, sp)
        return sample(p, rng), p

    def _run(
        self,
        prompt: np.ndarray,
        max_tokens: int,
        sp: SamplingParams,
        k: int,
        p_min: float,
        stop: list[str],
        cancelled: Callable[[], bool] | None = None,
    ) -> Iterator[str]:
        st = GenerationStats(prompt_tokens=len(prompt))
        st.drafted_per_position = [0] * k
        st.accepted_per_position = [0] * k
        rng = np.random.default_rng(sp.seed)
        tgt, dft, cap = self.ctx, self.drafter, self.capture
        use_draft = dft is not None and cap is not None and k > 0
        V = self.n_vocab
        clock = time.perf_counter
        text = TextStream(stop)
        penalized = sp.repeat_penalty != 1.0  # the token history is only read by the repeat penalty
        out_tokens: list[int] = []
        history = list(int(t) for t in prompt)

        tgt.clear()
        if dft is not None:
            dft.ctx.clear()
        if cap is not None:
            cap.set_enabled(use_draft)

        # prefill -----------------------------------------------------------------------------
        t0 = clock()
        n = len(prompt)
        feats = []
        for s in range(0, n, self.n_ub):
            if cancelled is not None and cancelled():
                st.stop_reason = STOP_CANCELLED
                return GenerationResult(text="", tokens=[], stats=st)
            chunk = prompt[s : s + self.n_ub]
            last = s + len(chunk) == n
            outputs = np.zeros(len(chunk), dtype=bool)
            outputs[-1] = last
            tgt.decode(chunk, np.arange(s, s + len(chunk)), outputs)
            if use_draft:
                feats.append(cap.features(len(chunk)))
        logits = tgt.logits(len(prompt) - 1 - (n - 1) // self.n_ub * self.n_ub, V)
        tok, _ = self._choose(logits, np.asarray(history), sp, rng)
        g_prev = None
        if use_draft:
            g = dft.encode(np.concatenate(feats))
            if n > 1:
                dft.decode_kv(prompt[1:], g[:-1], np.arange(n - 1))
            g_prev = g[-1]
        st.prefill_seconds = clock() - t0

        # decode ------------------------------------------------------------------------------
        t_start = clock()
        L = n
        reason = ""
        pending = [tok]  # tokens chosen but not yet emitted
        primed = None  # the drafter's first step of the next round, when already computed

        def emit(toks: list[int]) -> Iterator[str]:
            nonlocal reason
            for t in toks:
                if self.model.is_eog(t):
                    reason = STOP_EOS
                    return
                out_tokens.append(t)
                piece = text.push(self.model.token_to_piece(t))
                if piece:
                    yield piece
                if text.stopped:
                    reason = STOP_STRING
                    return
                if len(out_tokens) >= max_tokens:
                    reason = STOP_LENGTH
                    return

        try:
            while True:
                yield from emit(pending)
                if reason:
                    break
                if L >= self.n_ctx:
                    reason = STOP_CONTEXT
                    break
                t_L = pending[-1]
                remaining = max_tokens - len(out_tokens)
                k_eff = min(k, self.n_ctx - L - 1, remaining - 1) if use_draft else 0
                drafts: list[int] = []
                qs: list[np.ndarray] = []
                step1_cached = primed is not None or k_eff > 0  # is row L-1 in the drafter's cache
                if k_eff > 0:
                    td = clock()
                    if primed is None:
                        lg, pre = dft.decode(np.array([t_L]), g_prev[None, :], np.array([L - 1]))
                    else:
                        lg, pre = primed
                    for i in range(k_eff):
                        row = lg[0]
                        if p_min > 0.0:
                            m = np.max(row)
                            top = 1.0 / np.sum(np.exp(row[np.isfinite(row)] - m))
                            if top < p_min:
                                break
                        recent = np.asarray(history + [t_L] + drafts) if penalized else NO_HISTORY
                        d, q = self._choose(row, recent, sp, rng)
                        drafts.append(d)
                        if q is not None:
                            qs.append(q)
                        st.draft_steps += 1
                        if i + 1 == k_eff:
                            break
                        lg, pre = dft.decode(np.array([d]), dft.feedback(pre), np.array([L + i]))
                    st.drafter_seconds += clock() - td

                # verify
                tv = clock()
                batch = np.array([t_L] + drafts, dtype=np.int32)
                nb = len(batch)
                tgt.decode(batch, np.arange(L, L + nb), True)
                rows = np.stack([tgt.logits(i, V) for i in range(nb)])
                new_feats = cap.features(nb) if use_draft else None
                st.target_seconds += clock() - tv
                st.target_calls += 1

                hist = np.asarray(history + [t_L] + drafts) if penalized else NO_HISTORY
                if sp.greedy:
                    if sp.repeat_penalty != 1.0:
                        tops = [
                            int(np.argmax(apply_repeat_penalty(rows[i], hist[: len(history) + 1 + i], sp.repeat_penalty,
                                                               sp.repeat_last_n)))
                            for i in range(nb)
                        ]  # fmt: skip
                        argmax = np.array(tops)
                    else:
                        argmax = np.argmax(rows, axis=1)
                    n_acc = verify_greedy(np.array(drafts, dtype=np.int64), argmax)
                    t_new = int(argmax[n_acc])
                else:
                    ps = [
                        probabilities(
                            apply_repeat_penalty(
                                rows[i], hist[: len(history) + 1 + i], sp.repeat_penalty, sp.repeat_last_n
                            ),
                            sp,
                        )
                        for i in range(nb)
                    ]
                    n_acc, t_new = verify_stochastic(np.array(drafts, dtype=np.int64), qs, ps, rng)

                for i in range(len(drafts)):
                    st.drafted_per_position[i] += 1
                    if i < n_acc:
                        st.accepted_per_position[i] += 1
                st.drafted_tokens += len(drafts)
                st.accepted_tokens += n_acc

                accepted = drafts[:n_acc] + [t_new]
                tr = clock()
                tgt.remove_from(L + 1 + n_acc)
                st.target_seconds += clock() - tr
                primed = None
                if use_draft:
                    td = clock()
                    dft.remove_from(L)
                    g_new = dft.encode(new_feats[: n_acc + 1])
                    # the accepted rows and the next round's first draft step in one decode
                    toks, gs, first = np.array(accepted), g_new, L
                    if not step1_cached:
                        toks, gs, first = np.array([t_L, *accepted]), np.vstack([g_prev[None, :], g_new]), L - 1
                    lg, pre = dft.decode(toks, gs, np.arange(first, L + n_acc + 1))
                    primed = (lg[-1:], pre[-1:])
                    g_prev = g_new[n_acc]
                    st.drafter_seconds += clock() - td
                history.extend([t_L] + drafts[:n_acc])
                L += 1 + n_acc
                pending = accepted
        finally:
            st.decode_seconds = clock() - t_start
        tail = text.finish()
        if tail:
            yield tail
        st.generated_tokens = len(out_tokens)
        st.stop_reason = reason
        return GenerationResult(text=text.text, tokens=out_tokens, stats=st)

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
