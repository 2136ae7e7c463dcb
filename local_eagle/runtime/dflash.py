"""A DFlash block drafter: one forward pass proposes a whole block of drafts.

Transcribed from the pinned llama.cpp's ``draft-dflash`` (``common/speculative.cpp`` of llama-cpp-python 0.3.36,
``common_speculative_impl_draft_dflash``, from line 923) and the loop that drives it
(``examples/speculative-simple``):

- **Context.** ``process()`` gathers, for each row the target decoded, the inputs of the drafter's target layers
  (``llama_model_target_layer_ids``; layer id k = input of layer k, what :class:`~local_eagle.runtime.capture.
  LayerCapture` captures), concatenated in that order, and decodes them as an embedding batch on the drafter, in
  ``n_ubatch`` chunks at the rows' own positions: the drafter fuses them (``fc`` + ``hidden_norm``) and writes their
  K/V. llama.cpp injects every verified row and then cuts the rejected ones off (``llama_memory_seq_rm`` at
  ``n_past``); :meth:`BlockDrafter.push` takes the committed rows only, which leaves the same cache.
- **Block.** ``draft()`` decodes ``[id_last, <mask> x n_max]`` at positions ``pos0 = n_past ...``, every row an
  output, with non-causal attention unless ``dflash.attention.causal`` says otherwise (``llama_set_causal_attn``);
  ``n_max`` is clamped to ``block_size - 1`` (``dflash.block_size``, 16 when absent). The mask token is
  ``llama_vocab_mask``. The target's context lends its embeddings and head (``ctx_other``).
- **Drafts.** DFlash denoises in place: the row at ``n_past + i`` (i >= 1) predicts the token at that position, so
  the drafts are read from rows 1..n_max (``sample_from_anchor`` only changes DSpark, which reads from row 0). Each
  row goes through a top-k 10 sampler and its first candidate is taken: the greedy token; drafting stops at the
  first row whose candidate's probability (softmax over the 10) is below ``p_min``, and a draft shorter than
  ``n_min`` is dropped (:meth:`Block.drafts`).
- **After.** The loop removes the drafter's cells from ``n_past`` on before the verify
  (``llama_memory_seq_rm(ctx_dft, seq, ckpt.pos_max + 1, -1)``): :meth:`BlockDrafter.propose` does it itself.

llama.cpp drafts greedily. For lossless sampling a round needs the distribution each draft was drawn from:
:meth:`Block.probs` gives one per block row, and since every row comes from the same single pass (no row depends
on another row's draw), drafts drawn from them independently (:meth:`Block.sample`) may be checked by ordinary
rejection sampling, position by position.

**DSpark** (``draft-dspark``, picked by llama.cpp when the drafter has a Markov head, ``markov_w1``) is the same
pass with a Markov head in the graph (``src/models/dflash.cpp``, ``build_dspark_markov_head``): block row i's
logits get a bias ``markov_w2 . markov_w1[prev]``, ``prev`` the anchor for the first drafted row and the previous
row's argmax after it, chained inside the graph, so the logits llama.cpp hands back are already biased. With
``sample_from_anchor`` (the default) the block is anchor-first: ``[id_last, <mask> x (n_max - 1)]``, ``n_max``
rows, the drafts read from rows 0..n_max-1 and ``n_max`` clamped to ``block_size``; without it the block is
DFlash's (``[id_last, <mask> x n_max]``, rows 1.., the anchor row unbiased, ``n_max <= block_size - 1``).
:attr:`Block.logits` row i predicts the token at ``n_past + 1 + i`` either way. A reduced draft vocabulary
(``d2t``) needs nothing more: the graph scatters both the draft logits and the Markov bias to the target's rows
(-inf off the draft vocabulary), so the logits cover the target's vocabulary as DFlash's do. draft-dspark cuts a
draft at ``p_min`` by its **confidence head**, not by the rows' probabilities: with a head (``conf_proj``) the graph
puts ``sigmoid(conf_proj . [h_i; markov_w1[prev]] + b)`` of every block row in the nextn output, broadcast over
``n_embd`` columns, and draft-dspark reads column 0 of the row (``llama_get_embeddings_nextn``, staged masked: one
row per output, and every block row is one). :class:`BlockDrafter` stages it the same way and keeps each drafted
row's value (:attr:`Block.confidence`); the chain cuts at the first row below ``p_min`` and the draft-length policy
weighs the same number. A DSpark drafter without a head and ``draft_p_min > 0`` is refused at stream time, as
draft-dspark refuses it (``check_block_p_min``).

Lossless sampling with DSpark: the in-graph chain conditions row i on row i-1's *greedy* token, whatever was drawn
there, so every row's distribution is still fixed by the one pass; drawing each row's draft independently from
its own row (:meth:`Block.sample`) is a valid proposal, and rejection sampling needs only the q each draft was
drawn from, which is that row. (The drafts are just less likely to be accepted off the greedy path.)

**DFlash2** (a selector, ``llama_model_dflash_selector_top_k`` > 0) is the DFlash pass with a selector in the
graph (``src/models/dflash.cpp``, ``build_dflash2_selector``), and draft-dflash reads no logits from it: the
context stages the selector's lattice unmasked (``llama_set_embeddings_nextn(ctx_dft, true, false)``, every row
of the batch, none an output), and block row i >= 1 of the lattice (``n_embd`` floats) holds row i's top-k
candidate token ids (k = ``selector_top_k``, as floats) and then, for each of row i-1's candidates, the k scores of
row i's candidates after it (row 1's scores follow the anchor alone, repeated). The draft is a greedy walk:
``predecessor`` starts at 0, row i's scores after it are ``row[k + predecessor * k :][:k]``, their argmax is the
new ``predecessor`` and ``row[predecessor]`` the draft; with ``p_min`` the walk stops at the first row whose
softmax of those scores at the argmax is below it. :meth:`BlockDrafter.propose` makes the walk and hands the chain
each step's k scores as a logits row over the target vocabulary (-inf off the candidates): its argmax is the
walk's token and its top probability the softmax llama.cpp compares with ``p_min``, so the chain's cut is the
same. A selector's scores are not a proposal distribution llama.cpp draws from (it drafts greedily), so sampling
with a DFlash2 drafter is refused at stream time (``check_block_sampling``), and so are trees (one path is
selected, not a distribution per row: the engine's ``tree_refusal``).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, replace

import numpy as np
from gguf import Keys

from local_eagle.errors import LocalEagleError
from local_eagle.gguf import GGUFHeader, field_value, open_gguf
from local_eagle.gguf.keys import (
    BLOCK_DRAFTER_ARCH,
    KEY_DFLASH_BLOCK_SIZE,
    KEY_DFLASH_CAUSAL,
    KEY_DFLASH_SAMPLE_FROM_ANCHOR,
    KEY_DFLASH_SELECTOR_TOP_K,
    KEY_DFLASH_TARGET_HIDDEN,
    KEY_DFLASH_TARGET_LAYERS,
)
from local_eagle.llamacpp.lib import C
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.llamacpp.staging import staging

ARCH = BLOCK_DRAFTER_ARCH
DEFAULT_BLOCK_SIZE = 16  # draft-dflash's value when the GGUF has no dflash.block_size
SAMPLER_TOP_K = 10  # draft-dflash's per-row sampler: top-k 10, its first candidate taken


@dataclass(frozen=True)
class BlockSpec:
    """What ``draft-dflash`` reads from a drafter's GGUF, and what a round reads from ``drafter.spec``."""

    block_size: int  # the trained block: the anchor and block_size - 1 masks
    mask_token: int
    causal: bool  # dflash.attention.causal: attention inside the block (false for DFlash)
    sample_from_anchor: bool  # dflash.sample_from_anchor: DSpark's layout (anchor-first); DFlash reads rows 1..
    target_layers: tuple[int, ...]  # layer ids whose inputs the target must capture (LayerCapture's ids)
    target_hidden_size: int
    n_embd: int
    n_vocab: int
    draft_ids: np.ndarray | None = None  # the drafter's logits cover the whole target vocabulary (d2t is scattered)
    dspark: bool = False  # a Markov head (markov_w1): llama.cpp drafts it with draft-dspark
    confidence_head: bool = False  # DSpark's conf_proj: the p_min cut and the policy read it per block row
    selector_top_k: int = 0  # DFlash2's selector (llama_model_dflash_selector_top_k): drafts from its lattice

    @property
    def dflash2(self) -> bool:
        """A DFlash2 drafter: its drafts are the selector's greedy walk (draft-dflash's ``is_dflash2``)."""
        return self.selector_top_k > 0

    @property
    def anchor_first(self) -> bool:
        """DSpark's anchor-first layout: the anchor's own row is the first draft (``sample_from_anchor``)."""
        return self.dspark and self.sample_from_anchor

    @property
    def n_draft_max(self) -> int:
        """Drafts one block can give: in-place denoising of ``[last, <mask> x (block_size - 1)]``, or, anchor-first
        DSpark, the whole block (draft-dspark's ``n_draft_max``)."""
        return self.block_size if self.anchor_first else self.block_size - 1

    @property
    def width(self) -> int:
        """Width of one pushed row: the target layers' inputs side by side."""
        return len(self.target_layers) * self.target_hidden_size


def _meta(model: Model, key: str) -> str | None:
    """A GGUF key as llama.cpp prints it (``llama_model_meta_val_str``), None when absent: draft-dflash's reading."""
    buf = ctypes.create_string_buffer(64)
    if C.llama_model_meta_val_str(model.ptr, key.encode(), buf, len(buf)) < 0:
        return None
    return buf.value.decode()


def block_target_layers(path: str | os.PathLike[str]) -> list[int]:
    """The layer ids a DFlash drafter's target must capture, from its header alone: the engine makes the target's
    ``LayerCapture`` (in callback mode, the target context's ``cb_eval``) before the drafter, which needs that
    context (``ctx_other``)."""
    key = KEY_DFLASH_TARGET_LAYERS
    header = open_gguf(path, "DFlash drafter GGUF", keep=lambda k: k == key)
    layers = field_value(header, key)
    if not layers:
        raise LocalEagleError(f"{path}: no {key}")
    return [int(k) for k in layers]


def is_block_drafter(path: str | os.PathLike[str]) -> bool:
    """Whether a drafter GGUF is of llama.cpp's block-drafter architecture (``dflash``), from its header."""
    key = Keys.General.ARCHITECTURE
    return field_value(open_gguf(path, "drafter GGUF", keep=lambda k: k == key), key) == ARCH


def open_block_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """The drafter's header, refused before llama.cpp loads it unless it is of the block drafters' architecture
    (DFlash; DSpark, a Markov head, drafted as draft-dspark; DFlash2, a selector, drafted from its lattice)."""
    header = open_gguf(path, "DFlash drafter GGUF")
    arch = field_value(header, Keys.General.ARCHITECTURE)
    if arch != ARCH:
        raise LocalEagleError(f"{path}: not a DFlash drafter (architecture '{arch}', not '{ARCH}')")
    return header


def is_dflash2_drafter(path: str | os.PathLike[str]) -> bool:
    """Whether a block drafter GGUF is DFlash2 (a selector: ``dflash.selector_top_k`` > 0), from its header: the
    engine refuses trees before it loads the drafter."""
    key = KEY_DFLASH_SELECTOR_TOP_K
    return int(field_value(open_gguf(path, "DFlash drafter GGUF", keep=lambda k: k == key), key, 0) or 0) > 0


def read_block_spec(model: Model, header: GGUFHeader) -> BlockSpec:
    """The block drafter's facts, read as ``draft-dflash``'s constructor reads them (``open_block_header`` first)."""
    path = model.path
    block = _meta(model, KEY_DFLASH_BLOCK_SIZE)
    mask = int(C.llama_vocab_mask(model.vocab))
    if not 0 <= mask < model.n_vocab:
        raise LocalEagleError(f"{path}: no mask token (tokenizer.ggml.mask_token_id) in the vocabulary")
    layers = tuple(model.target_layer_ids())
    if not layers:
        raise LocalEagleError(f"{path}: no {KEY_DFLASH_TARGET_LAYERS}")
    spec = BlockSpec(
        block_size=int(block) if block is not None else DEFAULT_BLOCK_SIZE,
        mask_token=mask,
        causal=_meta(model, KEY_DFLASH_CAUSAL) == "true",
        sample_from_anchor=_meta(model, KEY_DFLASH_SAMPLE_FROM_ANCHOR) != "false",
        target_layers=layers,
        target_hidden_size=int(field_value(header, KEY_DFLASH_TARGET_HIDDEN, model.n_embd)),
        n_embd=model.n_embd,
        n_vocab=model.n_vocab,
        dspark=header.tensor("markov_w1.weight") is not None,
        confidence_head=header.tensor("markov_w1.weight") is not None and header.tensor("conf_proj.weight") is not None,
        selector_top_k=int(staging.model_dflash_selector_top_k(model.ptr)),
    )
    if spec.dflash2 and spec.n_embd < spec.selector_top_k * (spec.selector_top_k + 1):
        raise LocalEagleError(f"{path}: DFlash2 width {spec.n_embd} cannot hold its selector lattice")
    if spec.block_size < 2:
        raise LocalEagleError(f"{path}: {KEY_DFLASH_BLOCK_SIZE} {spec.block_size} leaves no room for a draft")
    return spec


def check_block_pair(spec: BlockSpec, target: Model, path: str | os.PathLike[str]) -> None:
    """Refuse a drafter made for another target before llama.cpp runs the pair (a capture of a layer the target
    lacks aborts llama.cpp; a width mismatch would feed the fusion garbage)."""
    if spec.target_hidden_size != target.n_embd:
        raise LocalEagleError(
            f"{path}: made for a target {spec.target_hidden_size} wide, {target.path.name} is {target.n_embd}"
        )
    if spec.n_vocab != target.n_vocab:
        raise LocalEagleError(f"{path}: vocabulary of {spec.n_vocab}, {target.path.name} has {target.n_vocab}")
    check_block_layers(spec.target_layers, target, path)


def check_block_p_min(spec: BlockSpec, p_min: float) -> None:
    """draft-dspark cuts a draft below ``p_min`` by the DSpark confidence head only: a drafter without one has no
    cut, and llama.cpp refuses the pair (``DSpark draft has no confidence head``); so does this."""
    if spec.dspark and not spec.confidence_head and p_min > 0.0:
        raise LocalEagleError(f"draft_p_min {p_min} with a DSpark drafter that has no confidence head; use 0")


def check_block_sampling(spec: BlockSpec, greedy: bool) -> None:
    """draft-dflash drafts DFlash2 greedily: its selector's scores are no distribution a draft was drawn from, so
    a sampling round (which checks each draft against the q it came from) has none to check against: refused."""
    if spec.dflash2 and not greedy:
        raise LocalEagleError("sampling with a DFlash2 drafter: its selector drafts greedily only; use temperature 0")


def check_block_layers(layers: list[int] | tuple[int, ...], target: Model, path: str | os.PathLike[str]) -> None:
    """Refuse target layers the target lacks before anything captures them (such a capture aborts llama.cpp)."""
    bad = [k for k in layers if not 1 <= k < target.n_layer]
    if bad:
        raise LocalEagleError(f"{path}: target layers {bad} outside 1..{target.n_layer - 1} of {target.path.name}")


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of ``logits / temperature`` in float64 (rows of -inf outside a draft vocabulary are fine)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Block:
    """One proposed block: the logits of its mask rows, row i predicting the token at ``n_past + 1 + i``.

    ``anchor`` (the last committed token) sits at ``n_past``; its own row is not a draft in DFlash.
    """

    anchor: int
    n_past: int
    logits: np.ndarray  # [n_draft, n_vocab] float32; from propose, llama.cpp's buffer until the drafter decodes again
    selected: np.ndarray | None = None  # DFlash2: the selector's greedy walk (its logits rows are the walk's scores)
    confidence: np.ndarray | None = None  # DSpark's confidence head, one value per drafted row

    @property
    def tokens(self) -> np.ndarray:
        """Each row's greedy token (draft-dflash's first candidate; DFlash2: the walk's), whatever its probability."""
        if self.selected is not None:
            return self.selected
        return self.logits.argmax(axis=-1)

    def top_p(self, rows: slice = slice(None)) -> np.ndarray:
        """Each row's greedy token's probability as draft-dflash compares it with ``p_min``: the softmax over the
        row's top 10 logits (its sampler is top-k 10, then a distribution over what is left)."""
        logits = self.logits[rows]
        if self.selected is not None:  # DFlash2: the softmax of the walk's scores at its argmax
            return softmax(logits).max(axis=-1)
        k = min(SAMPLER_TOP_K, logits.shape[-1])
        top = np.partition(logits, -k, axis=-1)[:, -k:]
        return softmax(top).max(axis=-1)

    def cut_confidence(self) -> np.ndarray:
        """Each row's number draft-dflash / draft-dspark compares with ``p_min``: DSpark's confidence head where it
        has one, else :meth:`top_p`."""
        return self.confidence if self.confidence is not None else self.top_p()

    def row_cut(self, i: int) -> float:
        """:meth:`cut_confidence` of row ``i`` alone: a chain that stops early pays for the rows it took only (a
        row's top 10 is a pass over the vocabulary)."""
        return float(self.confidence[i] if self.confidence is not None else self.top_p(slice(i, i + 1))[0])

    def drafts(self, p_min: float = 0.0, n_min: int = 0, n_max: int | None = None) -> np.ndarray:
        """draft-dflash's draft: the greedy tokens up to the first row below ``p_min``, none if fewer than
        ``n_min`` remain, at most ``n_max`` (the loop truncates a longer one)."""
        tokens = self.tokens
        if p_min > 0.0:
            low = np.flatnonzero(self.cut_confidence() < p_min)
            if len(low):
                tokens = tokens[: int(low[0])]
        if n_max is not None:
            tokens = tokens[:n_max]
        return tokens if len(tokens) >= n_min else tokens[:0]

    def probs(self, temperature: float = 1.0) -> np.ndarray:
        """Each row's distribution [n_draft, n_vocab] (rows sum to 1): the proposal q a lossless round checks its
        drafts against; temperature 0 is the greedy draft's one-hot."""
        if temperature <= 0.0:
            out = np.zeros(self.logits.shape, dtype=np.float64)
            out[np.arange(len(out)), self.tokens] = 1.0
            return out
        return softmax(self.logits, temperature)

    def sample(self, rng: np.random.Generator, temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Drafts drawn row by row from :meth:`probs`, independently (one pass made every row): (tokens, q)."""
        q = self.probs(temperature)
        return np.array([rng.choice(q.shape[-1], p=row) for row in q], dtype=np.int64), q


class BlockDrafter:
    """The DFlash drafter's llama.cpp context, bound to the target's context (``ctx_other``: its embeddings and
    head), fed the committed rows' target features, proposing one block per call.

    It speaks the loop's drafter seam (``runtime.seams.DraftModel``) where a round touches it (``spec.draft_ids``,
    ``ctx``, ``prime``, ``remove_from``); ``drafts_blocks`` sends a chain's steps to :meth:`propose` instead
    (``runtime.chain.draft_chains``)."""

    drafts_blocks = True
    prefix_seqs: tuple[int, ...] = ()  # no branch sequences: a block's tree is read off one pass (runtime.blocktree)

    def __init__(
        self,
        path: str | os.PathLike[str],
        target: Context,
        opts: ContextOptions | None = None,
        n_gpu_layers: int = -1,
    ) -> None:
        header = open_block_header(path)
        self.model = Model(path, n_gpu_layers=n_gpu_layers, what="DFlash drafter")
        try:
            self.spec = read_block_spec(self.model, header)
            check_block_pair(self.spec, target.model, path)
            opts = opts or ContextOptions(n_ctx=target.n_ctx, n_seq_max=target.n_seq_max)
            # the block must sit in one ubatch: split, its first rows would not see its last (non-causal attention)
            if opts.n_ubatch < self.spec.block_size:
                opts = replace(opts, n_ubatch=self.spec.block_size, n_batch=max(opts.n_batch, self.spec.block_size))
            self.ctx = Context(self.model, opts, ctx_other=target)
        except Exception:
            self.model.close()
            raise
        C.llama_set_causal_attn(self.ctx.ptr, self.spec.causal)
        if self.spec.dflash2:  # DFlash2 reads its selector lattice from h_nextn, every row (unmasked)
            self.ctx.set_embeddings_nextn(True, False)
        elif self.spec.confidence_head:  # DSpark's confidences: one nextn row per output (masked), as draft-dspark
            self.ctx.set_embeddings_nextn(True, True)
        self.target = target
        self.n_vocab = self.model.n_vocab
        # DFlash2's block rows: -inf but on the last block's candidates, which the next block sets back (_scores)
        self._scores: np.ndarray | None = None
        self._scored: list[tuple[int, np.ndarray]] = []

    @property
    def target_layers(self) -> list[int]:
        """The layer ids to capture on the target (``LayerCapture.create(model, drafter.target_layers)``)."""
        return list(self.spec.target_layers)

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    def push(self, positions: np.ndarray, features: np.ndarray, seq: int = 0) -> None:
        """Inject committed rows: their target features [n, width] (``LayerCapture.features``, the drafter's
        layers in its order) at their positions, in ``n_ubatch`` chunks as ``process()`` does.

        Only rows the target kept belong here (a rejected draft's row is never pushed), each once, in order: a
        position at or below what the cache holds for ``seq`` is refused, as it would be attended twice.
        """
        rows = np.ascontiguousarray(features, dtype=np.float32)
        pos = np.asarray(positions, dtype=np.int64)
        if rows.ndim != 2 or rows.shape[1] != self.spec.width or len(rows) != len(pos):
            raise LocalEagleError(
                f"DFlash push: expected [{len(pos)}, {self.spec.width}] features, got {list(rows.shape)}"
            )
        if not len(pos):
            return
        if int(pos[0]) <= self.ctx.pos_max(seq) or (len(pos) > 1 and (np.diff(pos) <= 0).any()):
            raise LocalEagleError(
                f"DFlash push: positions must rise past the cache's last ({self.ctx.pos_max(seq)}), got {pos.tolist()}"
            )
        step = self.ctx.n_ubatch
        for s in range(0, len(rows), step):
            self.ctx.decode_rows(rows[s : s + step], pos[s : s + step], seq)

    def propose(self, last_token: int, n_past: int, seq: int = 0, n_draft: int | None = None) -> Block:
        """One pass over ``[last_token, <mask> x n_draft]`` at ``n_past ...`` (``n_draft`` clamped to
        ``spec.n_draft_max``, its default), rows 1..n_draft read; anchor-first DSpark: over ``[last_token, <mask> x
        (n_draft - 1)]``, rows 0..n_draft-1 read (draft-dspark's ``n_block_tokens``, ``i_draft_beg``). The block's
        cells are removed again before this returns.

        ``n_past`` is the anchor's position: the cache should hold ``seq``'s committed rows below it and none at or
        above it (a stale cell there would be attended by the block).

        The block's logits are llama.cpp's output rows themselves, not a copy (15 rows of a 128K vocabulary are
        7.7 MB a round): read them before the drafter decodes again, as the chain and the block tree do.
        """
        n = self.spec.n_draft_max if n_draft is None else max(1, min(int(n_draft), self.spec.n_draft_max))
        if self.ctx.pos_max(seq) >= n_past:
            raise LocalEagleError(
                f"DFlash propose at {n_past}: the drafter's cache holds rows up to {self.ctx.pos_max(seq)}"
            )
        first = 0 if self.spec.anchor_first else 1  # the first row read (i_draft_beg)
        tokens = np.array([int(last_token)] + [self.spec.mask_token] * (n - 1 + first))
        if self.spec.dflash2:
            return self._propose_selected(tokens, n_past, seq)
        confidence = None
        try:
            # every row an output, as draft-dflash marks them; DFlash's anchor row is not read
            self.ctx.decode(tokens, np.arange(n_past, n_past + len(tokens)), True, seq=seq)
            logits = self.ctx.logits_rows(first, n, self.n_vocab)
            if self.spec.confidence_head:  # column 0 of each output's nextn row (the value fills the row)
                nextn = self.ctx.embeddings_nextn(len(tokens), self.spec.n_embd, copy=False)
                confidence = nextn[first : first + n, 0].copy()
        finally:
            self.ctx.remove_from(n_past, seq)
        return Block(anchor=int(last_token), n_past=int(n_past), logits=logits, confidence=confidence)

    def _propose_selected(self, tokens: np.ndarray, n_past: int, seq: int) -> Block:
        """DFlash2: the block decoded with no outputs, its lattice read and walked greedily (draft-dflash's
        ``is_dflash2`` branch). Row i - 1 of the block's logits is row i's scores after the walk's predecessor, set
        on their candidates' ids (-inf elsewhere); ``Block.selected`` holds the walk's tokens."""
        k = self.spec.selector_top_k
        n = len(tokens) - 1
        try:
            self.ctx.decode(tokens, np.arange(n_past, n_past + len(tokens)), False, seq=seq)
            lattice = self.ctx.embeddings_nextn(len(tokens), self.spec.n_embd, copy=False)  # read before a decode
        finally:
            self.ctx.remove_from(n_past, seq)
        logits = self._score_rows(n)
        selected = np.empty(n, dtype=np.int64)
        predecessor = 0
        for i in range(1, len(tokens)):
            row = lattice[i]
            scores = row[k + predecessor * k : k + (predecessor + 1) * k]
            predecessor = int(np.argmax(scores))  # the first of equal maxima, as std::max_element
            candidates = row[:k].astype(np.int64)  # (llama_token) row[j]
            if not ((candidates >= 0) & (candidates < self.n_vocab)).all():
                raise LocalEagleError(f"DFlash2 lattice row {i}: candidates {candidates.tolist()} off the vocabulary")
            logits[i - 1, candidates] = scores
            self._scored.append((i - 1, candidates))
            selected[i - 1] = candidates[predecessor]
        return Block(anchor=int(tokens[0]), n_past=int(n_past), logits=logits, selected=selected)

    def _score_rows(self, n: int) -> np.ndarray:
        """``n`` rows of -inf for a DFlash2 block's scores: one buffer kept across blocks, only the last block's
        candidates set back, instead of n x n_vocab floats filled every round. Like a DFlash block's logits, valid
        until the next block."""
        if self._scores is None:
            self._scores = np.full((self.spec.n_draft_max, self.n_vocab), -np.inf, dtype=np.float32)
        for row, candidates in self._scored:
            self._scores[row, candidates] = -np.inf
        self._scored.clear()
        return self._scores[:n]

    def encode(self, features: np.ndarray) -> np.ndarray:
        """The rows as pushed: the drafter's own graph fuses them (``fc`` + ``hidden_norm``)."""
        return features

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        """The feed's flush of committed rows (``runtime.feed``): their features injected; the tokens are not
        the drafter's input (the block's anchor is)."""
        self.push(positions, g, seq)

    def prime(self, token: int, seq: int = 0) -> None:
        """Nothing to do: the first row the drafter takes is the prompt's first."""

    def remove_from(self, pos: int, seq: int = 0) -> None:
        """Drop ``seq``'s injected rows at positions >= ``pos`` (a rollback the round decides)."""
        self.ctx.remove_from(pos, seq)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
