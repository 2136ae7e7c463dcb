"""An EAGLE 3 / 3.1 drafter running on llama.cpp's ``eagle3`` graphs.

llama.cpp computes ``fc`` (encoder) and the decoder layer; the EAGLE 3.1 parts its graph
lacks are applied here on the host: the per-chunk FC norm before the encoder, and the
post-norm state (``norm(prenorm) * output_norm.weight``) fed to the next draft step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from local_eagle.errors import LocalEagleError
from local_eagle.gguf import (
    DRAFTER_ARCH,
    GGUFHeader,
    ModelInfo,
    field_value,
    model_info,
    open_gguf,
    read_model_info,
    require_drafter,
    tensor_f32,
)
from local_eagle.gguf import check_pair as gguf_check_pair
from local_eagle.gguf.keys import KEY_FC_NORM, KEY_FC_NORM_EPS, KEY_FC_NORM_WEIGHT, KEY_NORM_OUTPUT, KEY_RMS_EPS
from local_eagle.llamacpp.model import GGML_TYPE_F16, Context, ContextOptions, Model
from local_eagle.runtime.norms import fc_norm, rms_norm


@dataclass
class DrafterSpec:
    """What the host needs from a drafter GGUF beyond what llama.cpp reads."""

    target_layers: list[int]
    target_hidden_size: int
    n_embd: int
    n_vocab: int
    draft_vocab_size: int
    eps: float
    fc_norm_weight: np.ndarray | None
    norm_output: bool
    output_norm_weight: np.ndarray
    info: ModelInfo  # the header facts the pair check reads
    draft_ids: np.ndarray | None = None  # d2t: the target ids the draft vocabulary covers (None: all of them)


def read_spec(path: str | os.PathLike[str]) -> DrafterSpec:
    reader = open_gguf(path, "drafter GGUF", keep=lambda k: k == KEY_FC_NORM_WEIGHT)
    info = model_info(reader, Path(path), "drafter GGUF")
    if info.is_block_drafter:  # the engine opens a DFlash drafter as one (runtime.dflash), never as an EAGLE one
        raise LocalEagleError(f"{path}: a {info.family_name} block drafter, not an EAGLE 3 / 3.1 drafter")
    require_drafter(info)
    if info.target_layers is None or len(info.target_layers) != 3:
        raise LocalEagleError(f"{path}: {DRAFTER_ARCH}.target_layers must hold 3 layer ids")
    eps = float(field_value(reader, KEY_FC_NORM_EPS) or field_value(reader, KEY_RMS_EPS))
    w = None
    if field_value(reader, KEY_FC_NORM, False):
        raw = field_value(reader, KEY_FC_NORM_WEIGHT)
        ht = info.target_hidden_size or 0
        if raw is None or len(raw) != 3 * ht:
            raise LocalEagleError(
                f"{path}: {KEY_FC_NORM_WEIGHT} must hold 3 x {ht} floats, found {0 if raw is None else len(raw)}"
            )
        w = np.asarray(raw, dtype=np.float32)
    return DrafterSpec(
        target_layers=info.target_layers,
        target_hidden_size=int(info.target_hidden_size or 0),
        n_embd=info.n_embd,
        n_vocab=info.n_vocab,
        draft_vocab_size=int(info.draft_vocab_size or info.n_vocab),
        eps=eps,
        fc_norm_weight=w,
        norm_output=bool(field_value(reader, KEY_NORM_OUTPUT, False)),
        output_norm_weight=tensor_f32(reader, "output_norm.weight"),
        info=info,
        draft_ids=_draft_ids(reader),
    )


def _draft_ids(reader: GGUFHeader) -> np.ndarray | None:
    """The ``d2t`` tensor (I64 absolute target ids), or None when the drafter predicts the whole vocabulary.

    The eagle3 graph scatters its draft logits into a row of the target's size (-inf elsewhere); reading
    a draft's confidence over these ids only costs 8K values instead of 262K on Gemma.
    """
    t = reader.tensor("d2t")
    if t is None or t.type != GGMLQuantizationType.I64:
        return None
    raw = np.memmap(reader.path, dtype=np.int64, mode="r", offset=reader.data_offset + t.offset, shape=(t.ne[0],))
    return np.array(raw)


def check_pair(spec: DrafterSpec, target: Model) -> None:
    """Refuse a drafter made for another target before llama.cpp is asked to run the pair.

    Enabling capture of a layer the target lacks aborts llama.cpp, so this runs first; the
    check itself is ``local_eagle.gguf.check_pair``, the one the planner runs too.
    """
    gguf_check_pair(read_model_info(target.path, "target GGUF", splits=True), spec.info)


def read_row(ctx: Context, i: int, n_vocab: int, columns: np.ndarray | None, out: np.ndarray) -> None:
    """Output row ``i``'s logits into ``out``: the whole row, or only the ``columns`` (target ids) gathered straight
    into place. A drafter with a draft vocabulary writes -inf at every other id (llama.cpp's eagle3 graph fills the
    row, then sets the draft ids' logits), so its columns hold all it can draft: 32K of Llama 3's 128K."""
    row = ctx.logits_view(i, n_vocab)
    if columns is None:
        out[...] = row
    else:
        np.take(row, columns, out=out)


class Drafter:
    """The drafter's llama.cpp context bound to a target context (``ctx_other``)."""

    drafts_blocks = False  # one token a step (runtime.chain)

    def __init__(
        self,
        path: str | os.PathLike[str],
        target: Context,
        opts: ContextOptions | None = None,
        n_gpu_layers: int = -1,
        prefix_seqs: tuple[int, ...] = (),
    ) -> None:
        self.spec = read_spec(path)
        check_pair(self.spec, target.model)
        self.model = Model(path, n_gpu_layers=n_gpu_layers, what="drafter")
        # the drafter has one layer of KV: quantising it saves almost nothing, so it stays f16
        opts = replace(opts or ContextOptions(n_ctx=target.n_ctx), type_k=GGML_TYPE_F16, type_v=GGML_TYPE_F16)
        self.ctx = Context(self.model, opts, ctx_other=target)
        # without this the encoder output pointer is NULL (docs/architecture.md)
        self.ctx.set_embeddings_nextn(True, True)
        self.n_embd = self.model.n_embd
        self.n_vocab = self.model.n_vocab
        # sequences that hold every committed row beside sequence 0 (a tree's branch sequences): set, the catch-up
        # decodes its rows into all of them at once, so no round copies the new rows to each (a scan of the cache)
        self.prefix_seqs = prefix_seqs

    def prepare_features(self, features: np.ndarray) -> np.ndarray:
        """Apply EAGLE 3.1's per-chunk FC norm (a no-op for EAGLE 3 drafters)."""
        f = np.ascontiguousarray(features, dtype=np.float32)
        if self.spec.fc_norm_weight is not None:
            f = fc_norm(f, self.spec.fc_norm_weight, self.spec.eps)
        return f

    def encode(self, features: np.ndarray) -> np.ndarray:
        """Target features [T, 3*H_target] -> g [T, H_draft], in ubatch-sized chunks."""
        f = self.prepare_features(features)
        out = np.empty((len(f), self.n_embd), dtype=np.float32)
        step = self.ctx.n_ubatch
        for i in range(0, len(f), step):
            chunk = f[i : i + step]
            # the encoder ignores positions, but llama.cpp checks them against the cache
            first = self.ctx.pos_max() + 1
            self.ctx.encode_rows(chunk, np.arange(first, first + len(chunk)))
            out[i : i + len(chunk)] = self.ctx.embeddings_nextn(len(chunk), self.n_embd)
        return out

    def decode(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (token[P+1], g[P]) at positions P -> (logits [n, n_vocab], prenorm [n, H]); with ``columns`` only
        those target ids' logits, [n, len(columns)] (``read_row``).

        Every row is marked as an output and read by index: this llama.cpp's eagle3 decoder
        ignores the output selection in multi-row batches (docs/architecture.md).
        """
        n = len(tokens)
        logits = np.empty((n, self.n_vocab if columns is None else len(columns)), dtype=np.float32)
        prenorm = np.empty((n, self.n_embd), dtype=np.float32)
        step = self.ctx.n_batch
        for s in range(0, n, step):
            e = min(n, s + step)
            self.ctx.decode(tokens[s:e], positions[s:e], True, g[s:e], seq=seq)
            for i in range(e - s):
                read_row(self.ctx, i, self.n_vocab, columns, logits[s + i])
                prenorm[s + i] = self.ctx.embeddings_nextn_ith(i, self.n_embd)
        return logits, prenorm

    def decode_branches(
        self,
        tokens: np.ndarray,
        g: np.ndarray,
        positions: np.ndarray,
        seqs: list[list[int]],
        columns: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A draft tree's frontier, each row on its own sequence: (logits [n, len(columns)], prenorm [n, H]).

        ``columns`` (the draft vocabulary's target ids, or None for every id) are gathered from llama.cpp's
        rows in place: on Gemma a row is 262K logits, of which the drafter can only ever give 8K.
        """
        n = len(tokens)
        logits = np.empty((n, self.n_vocab if columns is None else len(columns)), dtype=np.float32)
        prenorm = np.empty((n, self.n_embd), dtype=np.float32)
        step = self.ctx.n_batch
        for s in range(0, n, step):
            e = min(n, s + step)
            self.ctx.decode(tokens[s:e], positions[s:e], True, g[s:e], seqs[s:e])
            for i in range(e - s):
                read_row(self.ctx, i, self.n_vocab, columns, logits[s + i])
                prenorm[s + i] = self.ctx.embeddings_nextn_ith(i, self.n_embd)
        return logits, prenorm

    def decode_rows(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seqs: list[int], wanted: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows of several sequences (row i on sequence ``seqs[i]``) in as few calls as the batch allows; the
        logits [len(wanted), n_vocab] and prenorm [len(wanted), H] of the rows ``wanted`` (ascending)."""
        n, step = len(tokens), self.ctx.n_batch
        logits = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        prenorm = np.empty((len(wanted), self.n_embd), dtype=np.float32)
        j = 0
        for s in range(0, n, step):
            e = min(n, s + step)
            self.ctx.decode(tokens[s:e], positions[s:e], True, g[s:e], [[q] for q in seqs[s:e]])
            while j < len(wanted) and wanted[j] < e:
                logits[j] = self.ctx.logits_view(int(wanted[j]) - s, self.n_vocab)
                prenorm[j] = self.ctx.embeddings_nextn_ith(int(wanted[j]) - s, self.n_embd)
                j += 1
        return logits, prenorm

    def decode_last(
        self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0, columns: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode rows and return only the last row's (logits [1, n_vocab], or [1, len(columns)] with ``columns``;
        prenorm [1, H]).

        Catching the drafter up after rounds it skipped needs the rows' cache entries and one next
        step: reading every row's 262K-wide logits back (as :meth:`decode` does) would cost more than
        the rows themselves. The eagle3 graph computes every row whatever the output marks say, so all
        rows stay marked and only the last is read.
        """
        n, step = len(tokens), self.ctx.n_batch
        last = (n - 1) // step * step
        if last:
            self.decode_kv(tokens[:last], g[:last], positions[:last], seq)
        self.ctx.decode(tokens[last:], positions[last:], True, g[last:], seqs=self._committed(n - last, seq), seq=seq)
        i = n - 1 - last
        logits = np.empty((1, self.n_vocab if columns is None else len(columns)), dtype=np.float32)
        read_row(self.ctx, i, self.n_vocab, columns, logits[0])
        return logits, self.ctx.embeddings_nextn_ith(i, self.n_embd)[None, :]

    def decode_kv(self, tokens: np.ndarray, g: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        """Decode real rows whose outputs nobody reads: only their cache entries matter."""
        step = self.ctx.n_batch
        for s in range(0, len(tokens), step):
            rows = tokens[s : s + step]
            self.ctx.decode(rows, positions[s : s + step], False, g[s : s + step], seqs=self._committed(len(rows), seq),
                            seq=seq)  # fmt: skip

    def _committed(self, n: int, seq: int) -> list[list[int]] | None:
        """Each committed row's sequences: ``seq``'s, and with ``prefix_seqs`` theirs too (rows of sequence 0)."""
        return [[seq, *self.prefix_seqs]] * n if self.prefix_seqs and seq == 0 else None

    def feedback(self, prenorm: np.ndarray) -> np.ndarray:
        """The state the next draft step takes as g: post-norm under EAGLE 3.1's norm_output."""
        if self.spec.norm_output:
            return rms_norm(prenorm, self.spec.output_norm_weight, self.spec.eps)
        return prenorm

    def prime(self, token: int, seq: int = 0) -> None:
        """Nothing to do: an EAGLE drafter's first row is the prompt's (an MTP head has a row before it)."""

    def remove_from(self, pos: int, seq: int = 0) -> None:
        self.ctx.remove_from(pos, seq)

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
