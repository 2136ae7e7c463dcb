"""A model's own MTP (NextN) head as a drafter, on llama.cpp's ``LLAMA_CONTEXT_TYPE_MTP`` context.

What the pinned llama.cpp does, and this module mirrors (docs/mtp.md has the references):

- The target model is loaded with ``load_mtp`` so its NextN block(s) are read; the MTP context is a second
  context on that same model, of type ``LLAMA_CONTEXT_TYPE_MTP``: its graph is the NextN block alone
  (``graph_mtp``), its KV cache holds only the NextN layer(s).
- The target context stages its last hidden state for every row (``llama_set_embeddings_nextn(ctx_tgt, true,
  false)``: unmasked); that state ``h`` is what the head reads, not EAGLE's three layer captures.
- The head's row at position ``q`` is (token ``x_q``, ``h[q-1]``): ``h[q-1]`` is the target state that predicted
  ``x_q``, the row's logits predict ``x_{q+1}``, and its own staged output (``llama_get_embeddings_nextn_ith`` on
  the MTP context, masked) is the ``h`` the next draft step pairs with its draft.

So the row the EAGLE loop queues at position ``P`` (``token[P+1]``, features at ``P``) is the head's row at
``P + 1``: :class:`MtpDrafter` takes the loop's positions and shifts them by one, so ``runtime.feed`` and
``runtime.chain`` drive it as they drive :class:`~local_eagle.runtime.drafter.Drafter`, and :class:`MtpCapture`
stands in for the layer capture (its features are ``h``, ``n_embd`` wide). llama.cpp also decodes the prompt's
first token at position 0 with a zero state; :meth:`MtpDrafter.prime` does the same.

Trees (``runtime.treeround``) go the same way on an attention target: the engine opens the MTP context with the
EAGLE drafter's branch sequences (``treeround.drafter_sequences``) in one unified cache, and each level of a tree is
one call of :meth:`MtpDrafter.decode_branches`, every row on its own sequence copied from its parent's, at the
level's loop position plus one. A hybrid target keeps one recurrent state per sequence and drafts chains.

A hybrid target (``qwen35``, ``qwen35moe``: gated-delta-net layers beside attention; ``nemotron_h_moe``: Mamba 2;
``bailingmoe3``: Kimi delta attention) keeps one recurrent state per sequence, which cannot drop its last positions
by itself. Its context is opened with
``n_rs_seq`` = the longest chain (``EngineOptions.rollback``): each decode then also writes the state after each of
its last ``n_rs_seq`` rows, and ``llama_memory_seq_rm`` of up to that many trailing positions selects that snapshot
for the next decode (``src/llama-memory-recurrent.cpp`` ``seq_rm``), the attention layers dropping their cells as
usual. So the engine's ordinary rollback (``TreeBatch.keep``) is exact there too, as for llama.cpp's own
``draft-mtp`` (``common_params_speculative::need_n_rs_seq``). A hybrid family llama.cpp keeps no snapshots for
(``qwen3next``: ``llm_arch_supports_rs_rollback``) rolls back by checkpoints instead, as ``speculative-simple``
does (:data:`CHECKPOINT_ROLLBACK_ARCHS`).

One head here: a model with several chained heads (``step35``) drafts step k on head k with that head's cache rebuilt
over the draft (``llama_set_nextn_layer_offset``), which ``runtime.mtp_chain.ChainedMtpDrafter`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.lib import C
from local_eagle.llamacpp.model import GGML_TYPE_F16, Context, ContextOptions, Model
from local_eagle.llamacpp.staging import staging

MTP_ARCHS = frozenset(
    {"glm4moe", "glm-dsa", "deepseek2", "deepseek32", "deepseek4", "qwen35", "qwen35moe", "qwen3next", "bailingmoe3",
     "nemotron_h_moe", "cohere2moe", "mimo2", "hy_v3", "step35"}
)  # fmt: skip
"""The families whose model builds an MTP graph in llama-cpp-python 0.3.36 (docs/mtp.md): an MTP context on any
other would reach an assertion, which aborts the process."""

RS_ROLLBACK_ARCHS = frozenset(
    {"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2",
     "lfm2moe", "bailingmoe3"}
)  # fmt: skip
"""The families whose recurrent state llama.cpp 0.3.36 can roll back by snapshots (``llm_arch_supports_rs_rollback``,
``src/llama-arch.cpp:1123``); for any other it clamps ``n_rs_seq`` to 0 (``src/llama-context.cpp:106``)."""

CHECKED_ROLLBACK_ARCHS = frozenset({"qwen35", "qwen35moe", "nemotron_h_moe", "bailingmoe3", "deepseek4"})
"""The hybrid MTP families whose snapshot rollback local-eagle has checked, each by a tiny model's lossless tests:
``qwen35`` and ``qwen35moe`` build their recurrent layers with ``llm_build_delta_net_base`` (``build_conv_state``,
``build_recurrent_attn``; ``testing.tiny_mtp``); ``nemotron_h_moe`` writes its snapshots in
``llm_build_mamba_base::build_mamba2_layer`` (the conv planes and ``ggml_ssm_scan`` with K = 1 + n_rs_seq);
``bailingmoe3`` in its own q/k/v short convolutions and ``build_recurrent_attn`` (``testing.tiny_mtp_hybrid``);
``deepseek4`` snapshots its compressors' running state by the DSV4 cache's restore/snapshot plans
(``llama-kv-cache-dsv4.cpp``; ``testing.tiny_mtp_dsv4``)."""


CHECKPOINT_ROLLBACK_ARCHS = frozenset({"qwen3next"})
"""The hybrid MTP families llama.cpp keeps no snapshots for whose rounds roll back by checkpoints instead
(``speculative-simple``'s ``use_ckpt_tgt``): the recurrent state saved before each verify with a draft
(``Context.checkpoint``), restored on a partial acceptance and the kept rows decoded again (``rounds.Generation``).
Each checked exact on a tiny model (``testing.tiny_mtp_hybrid``: the next logits bitwise a fresh context's)."""


CHAINED_HEAD_ARCHS = frozenset({"step35", "mimo2", "hy_v3"})
"""The families whose several NextN heads local-eagle drafts with, chained (``runtime.mtp_chain``): ``step35``, the
chained-heads family of docs/mtp.md, and ``mimo2`` (MiMo V2 ships 3 NextN blocks) and ``hy_v3``, whose graphs take a
block offset too; each run by the tests on a tiny generated model."""


def mtp_refusal(model: Model) -> str | None:
    """Why ``model`` cannot draft with its own MTP head (None when it can)."""
    if model.n_layer_nextn <= 0:
        return f"{model.path.name} has no NextN (MTP) layers"
    if model.arch() not in MTP_ARCHS:
        return f"{model.path.name}: llama.cpp 0.3.36 builds no MTP graph for architecture '{model.arch()}'"
    if not model._params.load_mtp:
        return f"{model.path.name} was loaded without its MTP layers (Model(..., load_mtp=True))"
    if model.n_layer_nextn > 1 and model.arch() not in CHAINED_HEAD_ARCHS:
        return (
            f"{model.path.name} has {model.n_layer_nextn} chained MTP heads; local-eagle drafts with chained heads "
            f"only for {', '.join(sorted(CHAINED_HEAD_ARCHS))} so far (runtime.mtp_chain)"
        )
    return None


def rollback_refusal(model: Model, rollback: int) -> str | None:
    """Why rejected drafts could not be dropped from ``model``'s cache with ``rollback`` snapshots (None: they can).

    An attention cache drops any suffix; a recurrent or hybrid one only the last ``n_rs_seq`` positions it kept
    snapshots for, and llama.cpp keeps them for a few families only.
    """
    if model.branching_refusal() is None:
        return None
    arch = model.arch()
    if arch in CHECKPOINT_ROLLBACK_ARCHS:
        return None
    if arch not in RS_ROLLBACK_ARCHS:
        return (
            f"{model.path.name}: llama.cpp 0.3.36 keeps no recurrent-state snapshots for architecture '{arch}', so "
            "a rejected draft cannot be dropped from its recurrent layers"
        )
    if arch not in CHECKED_ROLLBACK_ARCHS:
        return (
            f"{model.path.name}: llama.cpp 0.3.36 rolls '{arch}' recurrent state back by snapshots in code "
            "local-eagle has not checked on any model yet, so its own head does not draft"
        )
    if rollback < 1:
        return f"{model.path.name} has recurrent layers and no snapshots were allowed to roll a draft back (rollback 0)"
    return None


def mtp_note(model: Model, rollback: int | None, tree_nodes: int = 0, checkpoints: bool = False) -> str:
    """How the head drafts and how a rejected draft leaves the target's cache, for ``--verbose``.

    ``tree_nodes``: the largest tree the engine verifies (0 or 1: it was opened for chains only). ``checkpoints``:
    rounds roll back by a saved recurrent state (:data:`CHECKPOINT_ROLLBACK_ARCHS`), which costs a state copy a round
    and the kept rows decoded again after a rejection.
    """
    head = f"drafting with {model.path.name}'s own MTP (NextN) head, chains"
    if checkpoints:
        return (
            f"{head}; llama.cpp keeps no recurrent-state snapshots for '{model.arch()}', so each round with drafts "
            "saves the target's recurrent state first and rolls back by that checkpoint: a round that rejects a "
            "draft restores it, drops the rejected rows from the attention cache and decodes the kept rows again, "
            "in front of the next round's verify (a call of their own only after rejections in a row)"
        )
    if model.n_layer_nextn > 1 and rollback is None:  # chained heads (runtime.mtp_chain): no trees
        n = model.n_layer_nextn
        return (
            f"drafting with {model.path.name}'s own {n} chained MTP (NextN) heads, draft k by head k: chains of at "
            f"most {n} drafts; rejected drafts are dropped from the target's KV cache and every head's"
        )
    if rollback is None:
        shapes = f"{head} and trees up to {tree_nodes} nodes" if tree_nodes > 1 else head
        return shapes + "; rejected drafts are dropped from the target's KV cache"
    return (
        f"{head} of at most {rollback} drafts; rejected drafts are rolled back in the hybrid target's recurrent "
        f"layers to llama.cpp's per-token state snapshots (n_rs_seq={rollback}) and dropped from its attention cache"
    )


def state_width(model: Model) -> int:
    """The width of the state the head reads: ``n_embd``, or all the residual streams of a trunk that keeps several
    (deepseek4's 4 hyper-connection streams): llama.cpp sizes an MTP context's input rows by ``n_embd_out``
    (``llama_batch_ext_select_n_embd_inp``) and stages ``h_nextn`` that wide."""
    return int(C.llama_model_n_embd_out(model.ptr)) or model.n_embd


class MtpCapture:
    """The target's last hidden state per row (``h_nextn``), in the interface of ``runtime.capture.LayerCapture``.

    llama.cpp stages it where the graph sets ``t_h_nextn`` (every family with an MTP graph does), unmasked: one
    row per batch row, whatever the output marks.
    """

    mode = "native"
    can_pause = False
    paused = False
    callback = None  # staged by the graph: no eval callback

    def __init__(self, model: Model) -> None:
        self.model = model
        self.n_embd = self.width = state_width(model)
        self._ctx: Context | None = None
        self._enabled = False

    def attach(self, ctx: Context) -> None:
        if self._ctx is not None:
            raise LocalEagleError("this MtpCapture is already attached to a context")
        if ctx.model.ptr != self.model.ptr:
            raise LocalEagleError("the context belongs to another model than the MtpCapture")
        self._ctx = ctx
        self.set_enabled(True)

    def set_enabled(self, on: bool) -> None:
        if self._ctx is None:
            raise LocalEagleError("MtpCapture.set_enabled() before attach()")
        on = bool(on)
        if on != self._enabled:
            self._ctx.set_embeddings_nextn(on, False)
            self._enabled = on

    def pause(self, paused: bool) -> None:
        if paused:
            raise LocalEagleError("the target's MTP state is staged by its graph and cannot be paused")

    @property
    def enabled(self) -> bool:
        return self._enabled

    def features(self, n_rows: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The staged rows of the last decode call, ``[n_rows, n_embd]`` float32 (``rows`` of them: an MTP state
        is narrow and a verify short, so all are read), a copy the caller owns."""
        ctx = self._ctx
        if ctx is None or not self._enabled:
            raise LocalEagleError("MtpCapture.features() while capturing is not enabled")
        if not 1 <= n_rows <= ctx.n_batch:
            raise LocalEagleError(f"cannot read features of {n_rows} rows: a decode holds 1..{ctx.n_batch} rows")
        if all(ctx.pos_max(seq) < 0 for seq in range(ctx.n_seq_max)):
            raise LocalEagleError("no decode has run since capturing was enabled")
        staged = ctx.embeddings_nextn(n_rows, self.n_embd)
        return staged if rows is None else staged[rows]


@dataclass
class MtpSpec:
    """The few facts the loop reads from ``drafter.spec``."""

    n_embd: int
    n_vocab: int
    n_layer_nextn: int
    draft_ids: np.ndarray | None = None  # the head predicts the whole vocabulary
    norm_output: bool = False


class MtpDrafter:
    """The MTP context of a target model loaded with ``load_mtp``, in :class:`Drafter`'s interface.

    Positions in and out are the loop's (a row at ``P`` holds ``token[P+1]`` and the target's state at ``P``); the
    MTP context holds that row at ``P + 1``, as llama.cpp's ``draft-mtp`` does.
    """

    drafts_blocks = False  # one token a step (runtime.chain)

    prefix_seqs: tuple[int, ...] = ()  # its committed rows go to sequence 0 alone; trees share them by copies

    def __init__(self, target: Context, opts: ContextOptions | None = None) -> None:
        model = target.model
        refusal = mtp_refusal(model)
        if refusal is not None:
            raise LocalEagleError(refusal)
        self.model = model  # shared with the target: close() leaves it open
        opts = replace(opts or ContextOptions(n_ctx=target.n_ctx), type_k=GGML_TYPE_F16, type_v=GGML_TYPE_F16)
        self.ctx = Context(model, replace(opts, mtp=True), ctx_other=target)
        self.ctx.set_embeddings_nextn(True, True)  # the head's own state, for the rows marked as outputs
        self.n_embd = state_width(model)
        self.n_vocab = model.n_vocab
        self.spec = MtpSpec(self.n_embd, self.n_vocab, model.n_layer_nextn)

    # the loop's drafter interface --------------------------------------------------------------------------

    def encode(self, features: np.ndarray) -> np.ndarray:
        """The head takes the target's state as it is: no encoder."""
        return np.ascontiguousarray(features, dtype=np.float32)

    def feedback(self, prenorm: np.ndarray) -> np.ndarray:
        """The state the next step pairs with its draft: the head's staged output, as llama.cpp feeds it."""
        return prenorm

    def prime(self, token: int, seq: int = 0) -> None:
        """The prompt's first token at MTP position 0 with a zero state, as llama.cpp's catch-up decodes it.

        Call it on an empty sequence before the prompt's rows (loop position 0 onwards) are decoded.
        """
        self.ctx.decode(np.array([token]), np.array([0]), False, np.zeros((1, self.n_embd), np.float32), seq=seq)

    def decode(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (token[P+1], h[P]) at loop positions P -> (logits [n, n_vocab], state [n, n_embd])."""
        _no_columns(columns)
        n = len(tokens)
        return self.decode_rows(tokens, g, positions, [seq] * n, np.arange(n))

    def decode_rows(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows of several sequences in as few calls as the batch allows; the (logits, state) of rows ``wanted``."""
        return self._decode_outputs(tokens, g, positions, [[q] for q in seqs], np.asarray(wanted))

    def _decode_outputs(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[list[int]], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (row i on the sequences ``seqs[i]``) at loop positions, chunked by the batch; the (logits, state) of
        the rows ``wanted`` (ascending)."""
        n, step = len(tokens), self.ctx.n_batch
        logits = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        state = np.empty((len(wanted), self.n_embd), dtype=np.float32)
        positions = np.asarray(positions) + 1
        j = 0
        for s in range(0, n, step):
            e = min(n, s + step)
            # every row of a chunk with a wanted row is an output: most families' graph_mtp set t_h_nextn before
            # selecting the output rows, and the masked copy then takes the first n_outputs rows of the batch
            # (docs/mtp.md), so a state is only right where the outputs are all the rows
            out = bool(((wanted >= s) & (wanted < e)).any())
            self.ctx.decode(tokens[s:e], positions[s:e], out, g[s:e], seqs[s:e])
            while j < len(wanted) and wanted[j] < e:
                i = int(wanted[j]) - s
                logits[j] = self.ctx.logits_view(i, self.n_vocab)
                state[j] = self.ctx.embeddings_nextn_ith(i, self.n_embd)
                j += 1
        return logits, state

    def decode_last(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode rows (a catch-up) and return only the last row's (logits [1, n_vocab], state [1, n_embd])."""
        _no_columns(columns)
        n = len(tokens)
        return self.decode_rows(tokens, g, positions, [seq] * n, np.array([n - 1]))

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        """Decode rows whose outputs nobody reads: only their cache entries matter."""
        step = self.ctx.n_batch
        positions = np.asarray(positions) + 1
        for s in range(0, len(tokens), step):
            self.ctx.decode(tokens[s : s + step], positions[s : s + step], False, g[s : s + step], seq=seq)

    def decode_branches(
        self,
        tokens: np.ndarray,
        g: np.ndarray,
        positions: np.ndarray,
        seqs: list[list[int]],
        columns: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A draft tree's frontier, each row on its own branch sequence (``runtime.treeround``): (logits [n,
        n_vocab], state [n, n_embd]).

        Every row is an output, so the masked state copy reads each row's own (docs/mtp.md, the quirk); the head
        predicts the whole vocabulary, so ``columns`` is always None.
        """
        _no_columns(columns)
        return self._decode_outputs(tokens, g, positions, seqs, np.arange(len(tokens)))

    def remove_from(self, pos: int, seq: int = 0) -> None:
        """Drop the rows at loop positions >= ``pos`` (MTP positions >= ``pos + 1``)."""
        self.ctx.remove_from(pos + 1, seq)

    def close(self) -> None:
        self.ctx.close()


def _no_columns(columns: np.ndarray | None) -> None:
    if columns is not None:
        raise LocalEagleError("an MTP head drafts over the whole vocabulary: no draft columns")


def head_offset(ctx: Context, offset: int) -> None:
    """Select which NextN block an MTP context's graph runs (``il = n_layer + offset``), for chained heads."""
    staging.set_nextn_layer_offset(ctx.ptr, int(offset))
