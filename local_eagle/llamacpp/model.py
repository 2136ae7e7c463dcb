"""A loaded model and a context, fed through one reusable ``llama_batch_ext`` each.

Everything above this module speaks numpy arrays. Every buffer and callback handed to
llama.cpp is kept referenced by its Python owner for as long as llama.cpp may read it.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import Keys

from local_eagle import DEFAULT_CTX
from local_eagle.errors import LlamaError
from local_eagle.gguf.info import check_gguf
from local_eagle.llamacpp.backends import gpu_offload_supported
from local_eagle.llamacpp.lib import C, init_backend, last_log_error
from local_eagle.llamacpp.staging import staging

_clock = time.perf_counter

ENCODE = 0  # LLAMA_PROCESS_TYPE_ENCODE
DECODE = 1  # LLAMA_PROCESS_TYPE_DECODE

FLASH_ATTN_AUTO = -1  # LLAMA_FLASH_ATTN_TYPE_AUTO: llama.cpp enables it where every layer's device supports it
FLASH_ATTN_DISABLED = 0
FLASH_ATTN_ENABLED = 1
GGML_TYPE_F16 = 1

_f32_pointer = ctypes.POINTER(ctypes.c_float)


class Model:
    """A loaded GGUF model. ``use_extra_bufts`` stays off on CPU builds (AMX repack segfault).

    The file is checked before llama.cpp opens it (``check_gguf``): llama.cpp aborts the process on some
    crafted headers (``block_count`` 513, an unknown RoPE scaling type, a ``d2t`` of the wrong type), and a
    server must answer those with an error, not die.
    """

    def __init__(
        self, path: str | os.PathLike[str], n_gpu_layers: int = -1, what: str = "model", load_mtp: bool = False
    ) -> None:
        init_backend()
        file = Path(path)
        if not file.is_file():
            raise LlamaError(f"{file}: {what} file not found")
        check_gguf(file)
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers if gpu_offload_supported() else 0
        if not gpu_offload_supported():
            params.use_extra_bufts = False
        params.load_mtp = load_mtp  # also load the NextN (MTP) blocks, for a context of type MTP
        self._params = params
        ptr = C.llama_model_load_from_file(str(file).encode(), params)
        if not ptr:
            detail = last_log_error()
            raise LlamaError(f"{file}: llama.cpp could not load the {what}" + (f" ({detail})" if detail else ""))
        self.ptr = ptr
        self.path = file
        self.vocab = C.llama_model_get_vocab(ptr)
        self.n_embd = int(C.llama_model_n_embd(ptr))
        self.n_layer = int(C.llama_model_n_layer(ptr))
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))
        self.n_layer_nextn = int(C.llama_model_n_layer_nextn(ptr))  # NextN (MTP) blocks after the n_layer trunk
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self._eog: dict[int, bool] = {}

    def arch(self) -> str:
        buffer = ctypes.create_string_buffer(128)
        C.llama_model_meta_val_str(self.ptr, Keys.General.ARCHITECTURE.encode(), buffer, len(buffer))
        return buffer.value.decode()

    def target_layer_ids(self) -> list[int]:
        n_ids = int(staging.model_target_layer_ids_n(self.ptr))
        ids = staging.model_target_layer_ids(self.ptr)
        return [int(ids[i]) for i in range(n_ids)]

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        data = text.encode("utf-8") if isinstance(text, str) else text
        return tokenize_bytes(self.vocab, data, add_special, parse_special)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The token's bytes; kept once asked for (a vocabulary's pieces never change, and every emitted token asks)."""
        key = (int(token), bool(special))
        piece = self._pieces.get(key)
        if piece is None:
            buffer = ctypes.create_string_buffer(64)
            n_bytes = C.llama_token_to_piece(self.vocab, key[0], buffer, len(buffer), 0, special)
            if n_bytes < 0:
                buffer = ctypes.create_string_buffer(-n_bytes)
                n_bytes = C.llama_token_to_piece(self.vocab, key[0], buffer, len(buffer), 0, special)
            piece = self._pieces[key] = buffer.raw[:n_bytes]
        return piece

    def is_eog(self, token: int) -> bool:
        """Does the token end a generation? Kept once asked for: every emitted and drafted token asks."""
        token = int(token)
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(C.llama_vocab_is_eog(self.vocab, token))
        return eog

    def bos(self) -> int:
        return int(C.llama_vocab_bos(self.vocab))

    @property
    def attention_on_cpu(self) -> bool:
        """Does some layer's attention run on the CPU (a CPU build, or layers left off the GPU)?"""
        n = self._params.n_gpu_layers
        return not gpu_offload_supported() or 0 <= n < self.n_layer

    @property
    def gpu_share(self) -> float:
        """The share of the model's layers on a GPU: 0 on a CPU build or with ``n_gpu_layers`` 0, 1 with all of them
        offloaded (-1, or at least ``n_layer``), else ``n_gpu_layers / n_layer``. ``/api/ps`` reports ``size_vram``
        as this share of the size, so that a CPU-only machine shows 0 where Ollama's clients read "100% GPU" from
        ``size_vram == size``."""
        n = self._params.n_gpu_layers
        if not gpu_offload_supported() or n == 0:
            return 0.0
        return 1.0 if n < 0 or n >= self.n_layer else n / max(self.n_layer, 1)

    def branching_refusal(self) -> str | None:
        """Why this model cannot verify a draft tree (None when it can): recurrent and hybrid models keep one
        state per sequence, so sequences cannot share a cached prefix and branch from it."""
        if C.llama_model_is_recurrent(self.ptr):
            return "a recurrent model keeps one state per sequence and cannot branch a cached prefix"
        if C.llama_model_is_hybrid(self.ptr):
            return "a hybrid model's recurrent layers keep one state per sequence and cannot branch a cached prefix"
        return None

    def close(self) -> None:
        if getattr(self, "ptr", None):
            C.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


@dataclass
class ContextOptions:
    n_ctx: int = DEFAULT_CTX
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0  # 0: all cores
    flash_attn: bool | None = None  # None: LLAMA_FLASH_ATTN_TYPE_AUTO, on where the backend supports it
    type_k: int = GGML_TYPE_F16  # KV cache element types (ggml_type)
    type_v: int = GGML_TYPE_F16
    n_seq_max: int = 1  # sequences the cache holds; above 1 the cache is unified (one buffer, shared prefixes)
    mtp: bool = False  # LLAMA_CONTEXT_TYPE_MTP: the model's NextN block(s) only (a model loaded with load_mtp)
    n_rs_seq: int = 0  # recurrent-state snapshots per sequence (llama_context_params.n_rs_seq): a recurrent or hybrid
    # cache can then drop up to this many of the last decode's positions (the families llama.cpp allows; else 0)
    outputs_per_seq: int = 0  # output rows a sequence may have in one call under a backend sampler (0: llama.cpp's)


class Context:
    """A llama_context plus the batch it is fed through."""

    def __init__(
        self,
        model: Model,
        opts: ContextOptions | None = None,
        ctx_other: Context | None = None,
        cb_eval: Callable | None = None,
    ) -> None:
        opts = opts or ContextOptions()
        params = C.llama_context_default_params()
        params.n_ctx = opts.n_ctx
        params.n_batch = opts.n_batch
        params.n_ubatch = min(opts.n_ubatch, opts.n_batch)
        params.n_seq_max = opts.n_seq_max
        params.kv_unified = opts.n_seq_max > 1  # tree verify couples sequences in one batch, which needs it
        threads = usable_threads(opts.n_threads)
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        if opts.flash_attn is None:
            params.flash_attn_type = FLASH_ATTN_AUTO
        else:
            params.flash_attn_type = FLASH_ATTN_ENABLED if opts.flash_attn else FLASH_ATTN_DISABLED
        params.type_k = opts.type_k
        params.type_v = opts.type_v
        params.n_rs_seq = opts.n_rs_seq
        if opts.mtp:
            params.ctx_type = C.LLAMA_CONTEXT_TYPE_MTP
        if opts.outputs_per_seq:
            params.n_outputs_max_per_seq = opts.outputs_per_seq
        if ctx_other is not None:
            params.ctx_other = ctx_other.ptr
        if cb_eval is not None:
            params.cb_eval = cb_eval
            params.cb_eval_user_data = None
        self._cb_eval = cb_eval  # keep alive
        self._ctx_other = ctx_other  # the other context must outlive this one
        self.model = model
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            detail = last_log_error()
            raise LlamaError(f"{model.path}: llama.cpp could not create a context" + (f" ({detail})" if detail else ""))
        self.ptr = ptr
        self.n_ctx = int(C.llama_n_ctx(ptr))
        self.n_batch = int(C.llama_n_batch(ptr))
        self.n_ubatch = int(C.llama_n_ubatch(ptr))
        self.mem = C.llama_get_memory(ptr)
        self.batch = C.llama_batch_ext_init(ptr)
        self.n_seq_max = int(C.llama_n_seq_max(ptr))
        # what llama.cpp granted: it clamps n_rs_seq to 0 for a family without recurrent rollback
        # (llm_arch_supports_rs_rollback, src/llama-arch.cpp)
        self.n_rs_seq = int(C.llama_n_rs_seq(ptr))
        self.n_calls = 0  # llama_process calls so far: a reader of this call's outputs can tell they are still there
        # seconds inside llama.cpp (calls until their outputs are on the host, cache edits): a loop's wall time less
        # this is its own Python, what a faster device leaves as it is
        self.llama_seconds = 0.0
        self._pos = ctypes.c_int32(0)
        self._pos_ptr = ctypes.pointer(self._pos)  # made once: a byref per row is a measurable share of a round
        self._batch_arg = ctypes.c_void_p(self.batch)  # passed as is, not converted from an int on every call
        # one llama_embd for every row: its data pointer rewritten in place (a cast per row costs more than the call)
        self._embd = C.llama_embd(None, 1, 0)
        self._embd_data = ctypes.c_size_t.from_buffer(self._embd, C.llama_embd.data.offset)
        self._samplers: dict[int, object] = {}  # backend sampler chains by sequence: llama.cpp holds no reference

    # backend sampling (llama.cpp's experimental API) ------------------------------------------

    def set_greedy_sampler(self, seq: int = 0) -> bool:
        """Sample ``seq``'s output rows greedily inside the call (on the device where it can): only each row's token
        comes back (:meth:`sampled_token`), not its logits. False where llama.cpp cannot offload it (the sampler
        is then not set)."""
        self.clear_sampler(seq)
        chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
        if not C.llama_set_sampler(self.ptr, seq, chain):
            C.llama_sampler_free(chain)
            return False
        self._samplers[seq] = chain
        return True

    def clear_sampler(self, seq: int = 0) -> None:
        chain = self._samplers.pop(seq, None)
        if chain is not None:
            C.llama_set_sampler(self.ptr, seq, None)
            C.llama_sampler_free(chain)

    def sampled_token(self, i: int) -> int:
        """Output row i's token from the backend sampler of the last call."""
        return int(C.llama_get_sampled_token_ith(self.ptr, i))

    # batches ------------------------------------------------------------------------------------

    def _add_embd(self, row: np.ndarray, pos: int, output: bool, seq: int = 0) -> None:
        e = C.llama_embd(row.ctypes.data_as(_f32_pointer), 1, row.shape[-1])
        idx = C.llama_batch_ext_add_embd(self.batch, seq, e)
        if idx < 0:
            raise LlamaError(f"batch rejected an embedding row of width {row.shape[-1]} (code {idx})")
        self._pos.value = pos
        C.llama_batch_ext_set_pos(self.batch, idx, ctypes.byref(self._pos))
        if output:
            C.llama_batch_ext_set_output_logits(self.batch, idx, True)

    def _run(self, kind: int, what: str) -> None:
        """One llama.cpp call, waited for: on a GPU ``llama_process`` returns once the work is queued, and every
        caller reads the outputs next, which waits the same, so the wait moves into ``llama_seconds``, none is added."""
        self.n_calls += 1
        started = _clock()
        rc = C.llama_process(self.ptr, kind, self.batch)
        if rc == 0:
            C.llama_synchronize(self.ptr)
        self.llama_seconds += _clock() - started
        if rc != 0:
            hint = " (context full)" if rc == 1 else ""
            raise LlamaError(f"llama.cpp {what} failed with code {rc}{hint}: {last_log_error()}")

    def decode(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        outputs: np.ndarray | bool = False,
        embd: np.ndarray | None = None,
        seqs: list[list[int]] | None = None,
        seq: int = 0,
    ) -> None:
        """Decode rows (token, position[, embedding]); ``outputs`` marks rows whose logits are kept; ``seqs`` gives
        each row's sequence ids (default: every row on ``seq``), a row attending to its first sequence's cells."""
        n = len(tokens)
        if n > self.n_batch:
            raise LlamaError(f"batch of {n} rows exceeds n_batch={self.n_batch}")
        flags = np.asarray(outputs, dtype=bool)
        if flags.ndim == 0:
            out = [bool(flags)] * n
        else:
            out = np.broadcast_to(flags, (n,)).tolist()
        batch, pos, pos_ptr = self._batch_arg, self._pos, self._pos_ptr
        add_token, set_pos, set_output = C.llama_batch_ext_add_token, C.llama_batch_ext_set_pos, \
            C.llama_batch_ext_set_output_logits  # fmt: skip
        token_list, position_list = _ints(tokens), _ints(positions)
        embd_arg, embd_data = self._embd, self._embd_data
        width = base = 0
        if embd is not None:
            embd = np.ascontiguousarray(embd, dtype=np.float32)  # held until the call below has run
            width, base = embd.shape[-1], embd.ctypes.data
            embd_arg.n_embd = width
        first_seq = seq if seqs is None else 0  # a row given no ids goes on sequence 0
        C.llama_batch_ext_clear(batch)
        for i in range(n):
            token = token_list[i]
            row_seqs = seqs[i] if seqs is not None else None
            idx = add_token(batch, row_seqs[0] if row_seqs else first_seq, token)
            if idx < 0:
                raise LlamaError(f"batch rejected token {token} (code {idx}; batch holds at most {self.n_batch})")
            if row_seqs is not None and len(row_seqs) > 1:
                for other in row_seqs[1:]:
                    if not C.llama_batch_ext_add_seq(batch, idx, other):
                        raise LlamaError(f"batch rejected sequence {other} (the context holds {self.n_seq_max})")
            pos.value = position_list[i]
            set_pos(batch, idx, pos_ptr)
            if base:
                embd_data.value = base + i * width * 4
                if not C.llama_batch_ext_set_embd_token(batch, idx, embd_arg):
                    raise LlamaError(f"batch rejected an embedding of width {width}: {last_log_error()}")
            if out[i]:
                set_output(batch, idx, True)
        self._run(DECODE, "decode")

    def _timed(self, function: Callable, *args: object) -> object:
        """A llama.cpp call whose time counts in ``llama_seconds`` (cache edits and state copies)."""
        started = _clock()
        out = function(*args)
        self.llama_seconds += _clock() - started
        return out

    def graphs_reused(self) -> int:
        """Calls so far that reused the previous call's graph rather than building one (llama.cpp's own count): a
        loop whose calls change shape from one to the next rebuilds it every call, host time a GPU waits on."""
        return int(C.llama_perf_context(self.ptr).n_reused)

    def synchronize(self) -> None:
        """Wait until the last call's work is done and its outputs are on the host.

        On a GPU ``llama_process`` returns once the work is queued; a timing that stops there misses the call.
        Every output read (``llama_get_logits_ith``, the staging getters) waits the same way, so calling this just
        before such a read only moves the wait, it adds none. A no-op on a CPU build.
        """
        C.llama_synchronize(self.ptr)

    def decode_rows(self, rows: np.ndarray, positions: np.ndarray, seq: int = 0) -> None:
        """Decode embedding rows on ``seq`` with no outputs: a DFlash drafter fuses rows of its target's captured
        hidden states (``len(target_layers) * n_embd`` wide) and injects them into its K/V cache so, as
        ``draft-dflash`` does."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        C.llama_batch_ext_clear(self.batch)
        for i in range(len(rows)):
            self._add_embd(rows[i], int(positions[i]), False, seq)
        self._run(DECODE, "decode")

    def encode_rows(self, rows: np.ndarray, positions: np.ndarray) -> None:
        """Run the encoder graph over embedding rows (every row is an output)."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        C.llama_batch_ext_clear(self.batch)
        for i in range(len(rows)):
            self._add_embd(rows[i], int(positions[i]), True)
        self._run(ENCODE, "encode")

    # outputs ------------------------------------------------------------------------------------

    def logits(self, i: int, n_vocab: int) -> np.ndarray:
        ptr = C.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            raise LlamaError(f"llama.cpp has no logits for output row {i}")
        return float_view(ptr, (n_vocab,)).copy()

    def logits_view(self, i: int, n_vocab: int) -> np.ndarray:
        """Output row i's logits as a view, valid until the next decode (to gather a few columns, not copy 262K)."""
        ptr = C.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            raise LlamaError(f"llama.cpp has no logits for output row {i}")
        return float_view(ptr, (n_vocab,))

    def logits_rows(self, first: int, n: int, n_vocab: int) -> np.ndarray:
        """Output rows ``first .. first + n - 1`` as one [n, n_vocab] view, valid until the next decode: a block's
        rows read without copying them (15 rows of a 128K vocabulary are 7.7 MB). llama.cpp keeps a decode's output
        rows in batch order, one after another; where they are not (its ids say otherwise), a copy."""
        base = C.llama_get_logits_ith(self.ptr, first)
        last = C.llama_get_logits_ith(self.ptr, first + n - 1)
        if not base or not last:
            raise LlamaError(f"llama.cpp has no logits for output rows {first}..{first + n - 1}")
        start = ctypes.addressof(base.contents)
        if ctypes.addressof(last.contents) == start + 4 * (n - 1) * n_vocab:
            return float_view(base, (n, n_vocab))
        return np.stack([self.logits_view(first + i, n_vocab) for i in range(n)])

    def embeddings_nextn(self, n_rows: int, width: int, *, copy: bool = True) -> np.ndarray:
        """The staged nextn rows; ``copy=False``: a view of llama.cpp's buffer, valid until the next decode (a caller
        reading a few columns of each row, not n_rows x width floats copied a round)."""
        ptr = staging.get_embeddings_nextn(self.ptr)
        if not ptr:
            raise LlamaError("llama.cpp returned no nextn embeddings (was set_embeddings_nextn called?)")
        rows = float_view(ptr, (n_rows, width))
        return rows.copy() if copy else rows

    def embeddings_nextn_ith(self, i: int, width: int) -> np.ndarray:
        ptr = staging.get_embeddings_nextn_ith(self.ptr, i)
        if not ptr:
            raise LlamaError(f"llama.cpp returned no nextn embedding for output row {i}")
        return float_view(ptr, (width,)).copy()

    def set_embeddings_nextn(self, value: bool, masked: bool) -> None:
        staging.set_embeddings_nextn(self.ptr, value, masked)

    def set_layer_capture(self, layer: int, value: bool) -> None:
        staging.set_embeddings_layer_inp(self.ptr, layer, value)

    def layer_input(self, layer: int, n_rows: int, width: int) -> np.ndarray:
        ptr = staging.get_embeddings_layer_inp(self.ptr, layer)
        if not ptr:
            raise LlamaError(f"llama.cpp captured no input for layer {layer}")
        return float_view(ptr, (n_rows, width)).copy()

    # memory -------------------------------------------------------------------------------------

    def remove_from(self, pos: int, seq: int = 0) -> None:
        """Drop ``seq``'s KV entries at positions >= pos."""
        if not self._timed(C.llama_memory_seq_rm, self.mem, seq, pos, -1):
            raise LlamaError(f"llama.cpp could not roll its cache back to position {pos}")

    def clear(self) -> None:
        C.llama_memory_clear(self.mem, True)

    def seq_copy(self, src: int, dst: int, start: int = -1, end: int = -1) -> None:
        """Sequence ``dst`` also holds every cell of ``src`` (at positions in [start, end); -1: unbounded). In a
        unified cache: one more id on each cell, and one more entry in ``dst``'s position map per cell, so the
        cost grows with the cells copied."""
        self._timed(C.llama_memory_seq_cp, self.mem, src, dst, start, end)

    def seq_keep(self, seq: int) -> None:
        """Drop every cell not in ``seq``, and every other sequence's id from the cells kept."""
        self._timed(C.llama_memory_seq_keep, self.mem, seq)

    def seq_remove(self, seq: int, start: int = -1, end: int = -1) -> None:
        """Drop ``seq``'s cells at positions in [start, end) (-1: unbounded); cells other sequences hold stay."""
        if not self._timed(C.llama_memory_seq_rm, self.mem, seq, start, end):
            raise LlamaError(f"llama.cpp could not remove sequence {seq} from position {start}")

    def pos_max(self, seq: int = 0) -> int:
        return int(C.llama_memory_seq_pos_max(self.mem, seq))

    def checkpoint(self, seq: int = 0) -> ctypes.Array:
        """``seq``'s recurrent state, to put back with :meth:`restore` where the cache cannot drop a suffix.

        ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: a hybrid cache writes its recurrent part alone
        (``llama_memory_hybrid::state_write``), the part ``remove_from`` cannot cut; the attention cells stay.
        """
        flags = C.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(C.llama_state_seq_get_size_ext(self.ptr, seq, flags))
        buf = (ctypes.c_uint8 * size)()
        if int(self._timed(C.llama_state_seq_get_data_ext, self.ptr, buf, size, seq, flags)) != size:
            raise LlamaError(f"llama.cpp could not save sequence {seq}'s recurrent state ({size} bytes)")
        return buf

    def restore(self, state: ctypes.Array, seq: int = 0) -> None:
        """Put back a :meth:`checkpoint` of ``seq``: its recurrent state and position as they were saved (the
        attention cells after it are still there for ``remove_from`` to drop)."""
        flags = C.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        if int(self._timed(C.llama_state_seq_set_data_ext, self.ptr, state, len(state), seq, flags)) != len(state):
            raise LlamaError(f"llama.cpp could not restore sequence {seq}'s recurrent state")

    def close(self) -> None:
        if getattr(self, "batch", None):
            C.llama_batch_ext_free(self.batch)
            self.batch = None
        if getattr(self, "ptr", None):
            for seq in list(getattr(self, "_samplers", {})):
                self.clear_sampler(seq)
            C.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass


def tokenize_bytes(vocab: ctypes.c_void_p, data: bytes, add_special: bool = False,
                   parse_special: bool = False) -> np.ndarray:  # fmt: skip
    """llama.cpp's tokenize of ``data`` over ``vocab``, its buffer grown once to the size llama.cpp asks for."""
    n_max = len(data) + 16
    buffer = (ctypes.c_int32 * n_max)()
    n_tokens = C.llama_tokenize(vocab, data, len(data), buffer, n_max, add_special, parse_special)
    if n_tokens < 0:  # the buffer was too small; -n_tokens is the size it needs
        n_max = -n_tokens
        buffer = (ctypes.c_int32 * n_max)()
        n_tokens = C.llama_tokenize(vocab, data, len(data), buffer, n_max, add_special, parse_special)
    if n_tokens < 0:
        raise LlamaError("llama.cpp failed to tokenize the prompt")
    return np.frombuffer(buffer, dtype=np.int32, count=n_tokens).copy()  # np.ctypeslib: 5 ms to import at first use


PREFIX_MARGIN = 16  # tokens past a limit a prefix must give, so that its cut lies past the tokens that count
_CHARS_PER_TOKEN = 4  # a first guess at a text's characters per token; a prefix too short for it is doubled


def prefix_tokens(tokenize: Callable[[str], np.ndarray], text: str, limit: int) -> np.ndarray:
    """``text``'s tokens, or those of a prefix of it that already gives more than ``limit + PREFIX_MARGIN``: a
    prefix of ``(limit + PREFIX_MARGIN) * 4`` characters first, doubled while it gives fewer, so that a text far past
    a context costs what one of the context's length does (llama.cpp's tokenizer takes time with the text, on long
    words more than in proportion). A prefix's first ``limit`` tokens are the whole text's (a cut changes only the
    tokens next to it), and its count already says the text has more than ``limit``. A text no longer than twice the
    prefix is tokenized whole; the work is at most twice the whole text's."""
    size = (limit + PREFIX_MARGIN) * _CHARS_PER_TOKEN
    while True:
        whole = len(text) <= 2 * size
        tokens = tokenize(text if whole else text[:size])
        if whole or len(tokens) > limit + PREFIX_MARGIN:
            return tokens
        size *= 2


def float_view(ptr: ctypes._Pointer, shape: tuple[int, ...]) -> np.ndarray:
    """llama.cpp's float buffer at ``ptr`` (not NULL) as a numpy view of ``shape``, valid while llama.cpp keeps it.

    ``np.ctypeslib.as_array`` does the same at twice the cost (it builds a ctypes array type per shape), and a round
    reads several such rows.
    """
    n = shape[0] if len(shape) == 1 else int(np.prod(shape))
    view = np.frombuffer((ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents)), dtype=np.float32)
    return view if len(shape) == 1 else view.reshape(shape)


def layer_input_view(ctx: Context, layer: int, n_rows: int, width: int) -> np.ndarray:
    """llama.cpp's staged input of ``layer`` for the last decode, as a view valid until the next decode.

    The caller must know the staging buffer exists (layer enabled before a decode that ran), or
    llama.cpp aborts the process.
    """
    ptr = staging.get_embeddings_layer_inp(ctx.ptr, layer)
    if not ptr:
        raise LlamaError(f"llama.cpp captured no input for layer {layer}")
    return float_view(ptr, (n_rows, width))


def eval_callback_of(ctx: Context) -> object | None:
    """The cb_eval a Context was created with (None if none), so a capture can check it is the one it owns."""
    return ctx._cb_eval


def usable_threads(n: int) -> int:
    """The thread count llama.cpp gets: 0 (or less) means every core, and never more than the
    cores present, since extra threads only spin (and 10^5 of them crashed llama.cpp)."""
    cores = os.cpu_count() or 1
    return cores if n <= 0 else min(n, cores)


def _ints(values: np.ndarray | list[int]) -> list[int]:
    """Row values as Python ints, converted in one call (``tolist``) rather than one ``int()`` per row."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False).tolist()
    return [int(v) for v in values]
