"""Capture of the target's hidden states that an EAGLE drafter is conditioned on.

A drafter reads, for every target row, the *input* of a few target layers (layer id k = input of
layer k = output of layer k-1), concatenated low|mid|high. llama.cpp stages those natively only for
architectures whose graph registers ``t_layer_inp``; enabling the staging API on any other
architecture hits a GGML_ASSERT and aborts the process. Those architectures are served by an eval
callback that copies the ``l_out-(k-1)`` graph tensors while the graph runs.

Usage (the callback must be handed to the Context when it is created)::

    cap = LayerCapture.create(model, [2, n // 2, n - 3])
    ctx = Context(model, opts, cb_eval=cap.callback)
    cap.attach(ctx)
    ctx.decode(tokens, positions, outputs)
    feats = cap.features(len(tokens))  # [len(tokens), 3 * n_embd], batch order

Rows: every row of the decode call is captured, whatever ``outputs`` marks (the graph prunes rows
to the marked outputs only in its last layer, and layer ids are kept below that). A decode split
into several ubatches is captured whole in both modes (up to ``n_batch`` rows), in batch order:
Context builds single-sequence batches, which llama.cpp splits in order.

Cost of the callback: the scheduler asks about every graph node (one 8-byte name read each), and
each captured tensor ends a compute segment, so a graph runs in len(layers)+1 pieces.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.llamacpp.callback import EvalCallback, f32_matrix_shape, make_capture_callback, tensor_get_into
from local_eagle.llamacpp.model import Context, Model, eval_callback_of, layer_input_view

Mode = Literal["auto", "native", "callback"]

# general.architecture values whose graph (vendor/llama.cpp/src/models/*.cpp of llama-cpp-python
# 0.3.36) sets res->t_layer_inp[il] for every layer, mapped through llama_model_mapping() in
# src/llama-model.cpp and the names in src/llama-arch.cpp. Left out on purpose: qwen4exp (its
# t_layer_inp is the hc-wide residual, which extract_layer_inputs rejects with an assert) and
# the drafter architectures (dflash, eagle3). Note that gemma3n is NOT among them.
NATIVE_CAPTURE_ARCHS: frozenset[str] = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",  # src/models/openai-moe.cpp
        "hunyuan-dense",  # reuses llama_model_hunyuan_vl::graph
        "hunyuan_vl",
        "lfm2",
        "lfm2moe",  # reuses llama_model_lfm2::graph
        "llama",
        "llama-embed",  # reuses llama_model_llama::graph
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "nemotron_h_moe",  # reuses llama_model_nemotron_h::graph
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
    }
)


class LayerCapture:
    """Per-row target hidden states at fixed layer ids, for the rows of the last decode call.

    Build it with :meth:`create` before the target Context (a callback-mode capture must be passed
    as that Context's ``cb_eval``), then :meth:`attach` it to the Context before its first decode.
    """

    def __init__(self, model: Model, layers: tuple[int, ...], mode: Literal["native", "callback"]) -> None:
        self.model = model
        self.layers = layers
        self.mode = mode
        self.n_embd = model.n_embd
        self.width = len(layers) * model.n_embd
        self._ctx: Context | None = None
        self._enabled = False
        self._paused = False
        self._unique = tuple(sorted(set(layers)))
        self._order = [self._unique.index(k) for k in layers]
        # callback-mode state: rows of consecutive ubatches, one buffer per distinct layer
        self._names = [f"l_out-{k - 1}" for k in self._unique]
        self._slot_of = {name.encode(): i for i, name in enumerate(self._names)}
        self._buf: np.ndarray | None = None
        self._n_batch = 0
        self._end = 0
        self._bounds: list[int] = [0]
        self._pending: set[int] = set()
        self._ub_rows = 0
        self._error: str | None = None
        self.callback: EvalCallback | None = None
        self._idle = [True]  # not enabled, or paused: the callback declines every node at once
        if mode == "callback":
            self.callback = make_capture_callback(self._slot_of, self._on_tensor, self._idle)

    @classmethod
    def create(cls, model: Model, layers: list[int], mode: Mode = "auto") -> LayerCapture:
        """Validate the layer ids and choose how to capture: native staging where the graph supports it.

        ``mode="native"`` on an architecture without native support raises instead of reaching the
        llama.cpp abort; ``"callback"`` works on every architecture whose graph names its layer
        outputs ``l_out-<il>`` with one row per token.
        """
        if mode not in ("auto", "native", "callback"):
            raise LocalEagleError(f"capture mode must be auto, native or callback, not {mode!r}")
        n_layer = model.n_layer
        if not layers:
            raise LocalEagleError("no target layer ids to capture")
        for k in layers:
            if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= int(k) < n_layer:
                raise LocalEagleError(
                    f"target layer id {k!r} is out of range for {model.path.name} ({n_layer} layers): "
                    f"ids must be 1..{n_layer - 1} (id k is the input of layer k, the output of layer k-1)"
                )
        arch = model.arch()
        native = arch in NATIVE_CAPTURE_ARCHS
        if mode == "native" and not native:
            raise LocalEagleError(
                f"{model.path.name}: llama.cpp cannot stage layer inputs natively for architecture '{arch}' "
                "(its graph does not set them; enabling it would abort); use capture mode auto or callback"
            )
        use_native = mode == "native" or (mode == "auto" and native)
        return cls(model, tuple(int(k) for k in layers), "native" if use_native else "callback")

    # attaching ------------------------------------------------------------------------------------

    def attach(self, ctx: Context) -> None:
        """Start capturing on ``ctx`` (native: switch llama.cpp's staging on; callback: start recording).

        Must happen while the context's memory is empty (before its first decode, or after
        ``clear()``): native staging buffers only exist after a decode that follows, and reading
        them earlier aborts llama.cpp. The same rule holds in callback mode, so that code written
        against one mode works with the other.
        """
        if self._ctx is not None:
            raise LocalEagleError("this LayerCapture is already attached to a context")
        if ctx.model.ptr != self.model.ptr:
            raise LocalEagleError("the context belongs to another model than the LayerCapture")
        if self.mode == "callback" and eval_callback_of(ctx) is not self.callback:
            raise LocalEagleError("callback mode needs the target Context created with cb_eval=capture.callback")
        if ctx.pos_max() >= 0:
            raise LocalEagleError("attach the LayerCapture before the context's first decode (or after clear())")
        self._ctx = ctx
        self._enabled = False
        self.set_enabled(True)

    def set_enabled(self, on: bool) -> None:
        """Turn capturing on or off, e.g. off for target-only generation.

        Native: toggles llama.cpp's staging (each real change costs one graph re-reserve, so a
        no-op call is free). Turning it on requires empty context memory, as for :meth:`attach`.
        Callback: recording stops, but the callback is still asked about every graph node (about
        half a microsecond each); for an overhead-free target create the Context without it.
        """
        ctx = self._ctx
        if ctx is None:
            raise LocalEagleError("LayerCapture.set_enabled() before attach()")
        on = bool(on)
        if self._paused:
            self.pause(False)
        if on == self._enabled:
            return
        if on and ctx.pos_max() >= 0:
            raise LocalEagleError(
                "enable the LayerCapture while the context is empty (before a decode, or after clear())"
            )
        if self.mode == "native":
            for k in self._unique:
                ctx.set_layer_capture(k, on)
        elif on:
            self._buf = np.zeros((len(self._unique), 2 * ctx.n_batch, self.n_embd), dtype=np.float32)
            self._n_batch = ctx.n_batch
            self._end, self._bounds, self._pending, self._error = 0, [0], set(), None
        self._enabled = on
        self._idle[0] = not on or self._paused

    @property
    def can_pause(self) -> bool:
        """Whether :meth:`pause` works: callback mode only (native staging is part of the graph, and
        switching it needs empty context memory)."""
        return self.mode == "callback"

    def pause(self, paused: bool) -> None:
        """Stop or restart recording between two decodes of one sequence (callback mode).

        Recording splits every target graph at the captured layers and copies their rows out: about 8%
        of a 1-row decode of Gemma 3 270M on a 2-core CPU. A drafter that is not going to draft soon
        needs no features, so the engine pauses recording while it idles. Restarting forgets what was
        recorded before.
        """
        if self._ctx is None or not self._enabled:
            raise LocalEagleError("LayerCapture.pause() while capturing is not enabled")
        paused = bool(paused)
        if paused == self._paused:
            return
        if self.mode != "callback":
            raise LocalEagleError("native layer capture cannot be paused within a sequence")
        if not paused:
            self._end, self._bounds, self._pending, self._error = 0, [0], set(), None
        self._paused = paused
        self._idle[0] = paused or not self._enabled

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def enabled(self) -> bool:
        """Whether decodes are being captured (set by :meth:`attach` and :meth:`set_enabled`)."""
        return self._enabled

    # reading --------------------------------------------------------------------------------------

    def features(self, n_rows: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The captured rows of the last decode call, ``[n_rows, len(layers) * n_embd]`` float32, batch order.

        ``n_rows`` must be the number of rows that decode call had (slice the result for fewer).
        Callback mode checks that it ends a run of whole ubatches; native mode cannot check it.
        After a failed decode the result is undefined. The array is a fresh copy the caller owns.
        ``rows`` (indices into those ``n_rows``) reads only them, ``features(n_rows)[rows]`` without the copy of
        the rest: a round keeps the accepted path's few rows of a verify that may hold 64.
        """
        ctx = self._ctx
        if ctx is None:
            raise LocalEagleError("LayerCapture.features() before attach()")
        if not self._enabled or self._paused:
            raise LocalEagleError("LayerCapture.features() while capturing is disabled or paused")
        n_batch = ctx.n_batch
        if not 1 <= n_rows <= n_batch:
            raise LocalEagleError(f"cannot read features of {n_rows} rows: a decode holds 1..{n_batch} rows")
        out = np.empty((n_rows if rows is None else len(rows), self.width), dtype=np.float32)
        e = self.n_embd
        if self.mode == "native":
            if all(ctx.pos_max(seq) < 0 for seq in range(ctx.n_seq_max)):
                raise LocalEagleError("no decode has run since capturing was enabled")
            for j, k in enumerate(self.layers):
                staged = layer_input_view(ctx, k, n_rows, e)
                out[:, j * e : (j + 1) * e] = staged if rows is None else staged[rows]
            return out
        if self._error is not None:
            raise LlamaError(f"hidden-state capture failed: {self._error}")
        if self._end == 0:
            raise LocalEagleError("no decode has run since capturing was enabled")
        if self._pending:
            raise LlamaError("the last target graph did not reach every captured layer (interrupted decode?)")
        start = self._end - n_rows
        if start < 0 or start not in self._bounds:
            sizes = np.diff(self._bounds[-4:]).tolist()
            raise LocalEagleError(
                f"features({n_rows}) does not match the last decode call (last ubatches captured: {sizes} rows); "
                "pass the number of rows the last decode had"
            )
        assert self._buf is not None
        for j, s in enumerate(self._order):
            staged = self._buf[s, start : self._end]
            out[:, j * e : (j + 1) * e] = staged if rows is None else staged[rows]
        return out

    # eval callback ------------------------------------------------------------------------------

    def _on_tensor(self, slot: int, t: int, ask: bool) -> bool:
        if not self._enabled or self._paused:
            return False
        if not ask:
            try:
                self._receive(slot, t)
            except Exception as err:  # must not unwind into llama.cpp; reported by features()
                self._error = self._error or str(err)
        return True

    def _receive(self, slot: int, t: int) -> None:
        assert self._buf is not None
        rows, width = f32_matrix_shape(t)
        name = self._names[slot]
        if width != self.n_embd:
            raise LlamaError(f"graph tensor {name} has width {width}, expected {self.n_embd}")
        if slot in self._pending:
            self._pending.clear()  # the previous graph stopped before its last captured layer
        if not self._pending:
            if rows > self._n_batch:
                raise LlamaError(f"a ubatch of {rows} rows exceeds n_batch={self._n_batch}")
            self._make_room(rows)
            self._ub_rows = rows
        elif rows != self._ub_rows:
            raise LlamaError(
                f"graph tensor {name} has {rows} rows where another captured layer had "
                f"{self._ub_rows} (rows pruned before this layer?)"
            )
        tensor_get_into(t, self._buf[slot, self._end : self._end + rows])
        self._pending.add(slot)
        if len(self._pending) == len(self._unique):
            self._pending.clear()
            self._end += rows
            self._bounds.append(self._end)

    def _make_room(self, rows: int) -> None:
        """Keep at most n_batch rows of whole ubatches so the next ubatch fits in the 2*n_batch buffer."""
        assert self._buf is not None
        if self._end + rows <= self._buf.shape[1]:
            return
        drop = next(b for b in self._bounds if self._end - b <= self._n_batch)
        keep = self._end - drop
        self._buf[:, :keep] = self._buf[:, drop : self._end].copy()
        self._bounds = [b - drop for b in self._bounds if b >= drop]
        self._end = keep
