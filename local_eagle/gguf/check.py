"""Every GGUF, and every drafter checkpoint's ``config.json``, checked before llama.cpp or our shape code reads it.

Why a checker of our own: the pinned llama.cpp (llama-cpp-python 0.3.36) trusts parts of a GGUF header and
stops the whole process on others with a ``GGML_ASSERT`` (a server with it): ``block_count`` outside 1..512
(``LLAMA_MAX_LAYERS`` in ``src/llama-hparams.h``), more than 1024 experts, an unknown ``rope.scaling.type``, a
``d2t`` that is not I64. Our own planner (``local_eagle.vram``) loops and allocates per layer from
``block_count`` (10^5 layers took 74 s and 1.35 GiB in ``fit``), and the runtime divides by a norm epsilon or
indexes with ``d2t`` values taken from the file. So each file is judged here first, against what llama.cpp
asserts on and what the GGUF spec says a key holds, and every failure is one line naming the file, the key and
what was expected (``GGUFError`` / ``CheckpointError``: the CLI prints it, the server answers 4xx).

Three levels, each run where its inputs are at hand:

- :func:`check_keys`, from the header parser itself (``read_header``), on every file anything reads: key types
  and numeric ranges, per-layer arrays as long as ``block_count``, tokenizer arrays, norm epsilons.
- :func:`check_model`, from ``model_info`` and the planner's ``read_shape``: what needs the tensor table of all
  splits (``block_count`` equal to the distinct ``blk.N`` indices) and a drafter's ``d2t`` values.
- :func:`check_gguf`, from ``llamacpp.Model`` just before llama.cpp opens a file: both of the above.

Nothing here allocates in proportion to a number it has not bounded first.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf import Keys

from local_eagle.errors import CheckpointError, GGUFError
from local_eagle.gguf.keys import DRAFTER_ARCH, KEY_FC_NORM_EPS, KEY_RMS_EPS, KEY_VOCAB_SIZE

if TYPE_CHECKING:
    from local_eagle.gguf.reader import GGUFHeader, Tensor

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (src/llama-hparams.h): a larger block_count is a GGML_ASSERT abort
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS (same file): also an abort
MAX_NAME = 63  # GGML_MAX_NAME is 64 with the terminating NUL; longer tensor names are refused by gguf.cpp
MAX_DIMS = 4  # GGML_MAX_DIMS
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # anything else: GGML_ASSERT in llama_model::load_hparams
MAX_WIDTH = 1 << 20  # embedding / head sizes: 64x the widest published model, far below what overflows a plan
MAX_FF = 1 << 24
MAX_HEADS = 1 << 16
MAX_VOCAB = (1 << 31) - 1  # token ids are int32
MAX_CONTEXT = (1 << 32) - 1  # n_ctx_train is a uint32
MAX_JSON_DEPTH = 64  # a config.json nests 3 levels; Python's parser recurses (10^5 levels: RecursionError)

# GGUF value types (gguf-py's GGUFValueType)
UINT32, FLOAT32, BOOL, STRING, ARRAY, FLOAT64 = 4, 6, 7, 8, 9, 12
INTS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
FLOATS = frozenset({FLOAT32, FLOAT64})
TYPE_NAMES = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32", 7: "BOOL",
              8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64"}  # fmt: skip

# {arch}.KEY -> (lowest, highest) of an integer hyper-parameter llama.cpp reads into a uint32
ARCH_INTS: dict[str, tuple[int, int]] = {
    "block_count": (1, MAX_LAYERS),
    "context_length": (0, MAX_CONTEXT),
    "embedding_length": (1, MAX_WIDTH),
    "vocab_size": (1, MAX_VOCAB),
    "expert_count": (0, MAX_EXPERTS),
    "expert_group_count": (0, MAX_EXPERTS),
    "expert_group_used_count": (0, MAX_EXPERTS),
    "nextn_predict_layers": (0, MAX_LAYERS),
    "attention.key_length": (0, MAX_WIDTH),
    "attention.value_length": (0, MAX_WIDTH),
    "attention.key_length_swa": (0, MAX_WIDTH),
    "attention.value_length_swa": (0, MAX_WIDTH),
    "attention.key_length_mla": (0, MAX_WIDTH),
    "attention.value_length_mla": (0, MAX_WIDTH),
    "attention.sliding_window": (0, MAX_CONTEXT),
    "rope.dimension_count": (0, MAX_WIDTH),
    "ssm.conv_kernel": (0, MAX_HEADS),  # the recurrent-state sizes the planner multiplies out
    "ssm.inner_size": (0, MAX_FF),
    "ssm.state_size": (0, MAX_WIDTH),
    "ssm.group_count": (0, MAX_HEADS),
    "ssm.time_step_rank": (0, MAX_WIDTH),
    "wkv.head_size": (0, MAX_WIDTH),
    "token_shift_count": (0, MAX_HEADS),
    "target_hidden_size": (1, MAX_WIDTH),  # eagle3
    "draft_vocab_size": (1, MAX_VOCAB),  # eagle3
}
# {arch}.KEY -> (lowest, highest): one integer, or one per layer (an array exactly block_count long)
PER_LAYER: dict[str, tuple[int, int]] = {
    "feed_forward_length": (0, MAX_FF),
    "attention.head_count": (0, MAX_HEADS),
    "attention.head_count_kv": (0, MAX_HEADS),
    "expert_used_count": (0, MAX_EXPERTS),
}
ARCH_BOOLS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")  # eagle3 flags: BOOL only
TOKEN_IDS = re.compile(r"tokenizer\.ggml\.\w+_token_id")
TOKEN_FLAGS = re.compile(r"tokenizer\.ggml\.add_\w+")


def _describe(t: int, sub: int | None, value: Any) -> str:
    """A key's value and type as a message shows it: short, whatever the file put there."""
    if t == ARRAY:
        return f"an array of {len(value)} {TYPE_NAMES.get(sub or -1, f'type {sub}')}"
    shown = repr(value)
    return f"{shown[:40] + '...' if len(shown) > 43 else shown} ({TYPE_NAMES.get(t, f'type {t}')})"


def _fail(path: Path, what: str, key: str, t: int, sub: int | None, value: Any, expected: str) -> GGUFError:
    return GGUFError(f"{path}: {what} key '{key}' is {_describe(t, sub, value)}, expected {expected}")


def _int(path: Path, what: str, key: str, t: int, sub: int | None, value: Any, lo: int, hi: int) -> int:
    """``value`` as a checked integer: an integer type (not BOOL, not a string, not a float) within [lo, hi]."""
    if t not in INTS or not lo <= value <= hi:
        raise _fail(path, what, key, t, sub, value, f"an integer from {lo} to {hi}")
    return int(value)


def _float(path: Path, what: str, key: str, t: int, value: Any, positive: bool) -> None:
    """A float hyper-parameter: a float type, finite (NaN or inf poisons every norm), positive where asked."""
    ok = t in FLOATS and math.isfinite(value) and (value > 0 or not positive)
    if not ok:
        want = "a finite positive float" if positive else "a finite float"
        raise _fail(path, what, key, t, None, value, want)


def check_keys(path: Path, what: str, kv: dict[str, Any], types: dict[str, tuple[int, int | None]]) -> None:
    """The key/values of one GGUF file, as llama.cpp and the GGUF spec type them; called by the header parser.

    Unknown keys pass: only what llama.cpp or local-eagle reads is judged. Arrays already bounded by the file's
    size (the parser refuses counts the file cannot hold) are only measured, never copied.
    """

    def typed(key: str) -> tuple[int, int | None, Any]:
        t, sub = types[key]
        return t, sub, kv[key]

    if Keys.General.ARCHITECTURE in kv:
        t, sub, v = typed(Keys.General.ARCHITECTURE)
        if t != STRING or not v:
            raise _fail(path, what, Keys.General.ARCHITECTURE, t, sub, v, "a non-empty STRING")
    for key in (Keys.General.NAME, Keys.Tokenizer.MODEL, Keys.Tokenizer.PRE):
        if key in kv and types[key][0] != STRING:
            raise _fail(path, what, key, *typed(key), "a STRING")
    for key in (Keys.Split.LLM_KV_SPLIT_COUNT, Keys.Split.LLM_KV_SPLIT_NO):
        if key in kv:
            _int(path, what, key, *typed(key), 0, 99_999)  # split files are numbered with 5 digits
    arch = kv.get(Keys.General.ARCHITECTURE)
    n_layer: int | None = None
    if isinstance(arch, str):
        pre = f"{arch}."
        if pre + "block_count" in kv:
            n_layer = _int(path, what, pre + "block_count", *typed(pre + "block_count"), *ARCH_INTS["block_count"])
        for name, (lo, hi) in ARCH_INTS.items():
            if pre + name in kv:
                _int(path, what, pre + name, *typed(pre + name), lo, hi)
        for name, (lo, hi) in PER_LAYER.items():
            key = pre + name
            if key not in kv:
                continue
            t, sub, v = typed(key)
            if t != ARRAY:
                _int(path, what, key, t, sub, v, lo, hi)
                continue
            if sub not in INTS or len(v) > MAX_LAYERS or (n_layer is not None and len(v) != n_layer):
                want = f"an integer or an array of {n_layer if n_layer is not None else 'block_count'} integers"
                raise _fail(path, what, key, t, sub, v, want)
            bad = [x for x in v if not lo <= x <= hi]
            if bad:
                raise GGUFError(f"{path}: {what} key '{key}' holds {bad[0]}, expected integers from {lo} to {hi}")
        key = pre + "attention.sliding_window_pattern"
        if key in kv:
            t, sub, v = typed(key)
            if t == ARRAY and (sub not in INTS | {BOOL} or (n_layer is not None and len(v) != n_layer)):
                raise _fail(path, what, key, t, sub, v, f"an integer or an array of {n_layer} BOOL")
            if t != ARRAY:
                _int(path, what, key, t, sub, v, 0, MAX_LAYERS)
        _check_arch_floats(path, what, kv, types, pre)
        key = pre + "rope.scaling.type"
        if key in kv:
            t, sub, v = typed(key)
            if t != STRING or v not in ROPE_SCALING_TYPES:
                raise _fail(path, what, key, t, sub, v, f"one of {', '.join(ROPE_SCALING_TYPES)}")
        _check_expert_counts(path, what, kv, pre, n_layer)
        if arch == "eagle3":
            _check_eagle3_keys(path, what, kv, types, pre)
    _check_tokenizer(path, what, kv, types)


def _check_arch_floats(
    path: Path, what: str, kv: dict[str, Any], types: dict[str, tuple[int, int | None]], pre: str
) -> None:
    """Every float scalar of the architecture finite; epsilons and the RoPE base positive as well."""
    for key, (t, _) in types.items():
        if not key.startswith(pre) or t == ARRAY:
            continue
        positive = key.endswith("epsilon") or key.endswith("rope.freq_base") or key.endswith("rope.freq_base_swa")
        if positive or t in FLOATS:
            _float(path, what, key, t, kv[key], positive)


def _check_expert_counts(path: Path, what: str, kv: dict[str, Any], pre: str, n_layer: int | None) -> None:
    """The expert counts llama.cpp asserts on: used experts within the experts, none used without experts."""
    n_expert = int(kv.get(pre + "expert_count", 0) or 0)
    used = kv.get(pre + "expert_used_count", 0) or 0
    n_used = max(used) if isinstance(used, list) and used else int(used or 0)
    if n_used > n_expert:
        raise GGUFError(
            f"{path}: {what} key '{pre}expert_used_count' is {n_used}, expected at most {pre}expert_count ({n_expert})"
        )
    if n_expert and not n_used:
        raise GGUFError(
            f"{path}: {what} key '{pre}expert_used_count' is 0, expected at least 1 with {n_expert} experts"
        )
    nextn = int(kv.get(pre + "nextn_predict_layers", 0) or 0)
    if n_layer is not None and nextn > n_layer:
        raise GGUFError(
            f"{path}: {what} key '{pre}nextn_predict_layers' is {nextn}, expected at most block_count ({n_layer})"
        )


def _check_eagle3_keys(
    path: Path, what: str, kv: dict[str, Any], types: dict[str, tuple[int, int | None]], pre: str
) -> None:
    """The drafter's own keys: BOOL flags (a STRING 'false' is truthy), layer ids, the FC norm's weights."""
    for name in ARCH_BOOLS:
        key = pre + name
        if key in kv and types[key][0] != BOOL:
            raise _fail(path, what, key, *types[key], kv[key], "a BOOL")
    key = pre + "target_layers"
    if key in kv:
        t, sub = types[key]
        v = kv[key]
        if t != ARRAY or sub not in INTS or len(v) != 3 or not all(0 <= x < MAX_LAYERS for x in v):
            raise _fail(path, what, key, t, sub, v, f"an array of 3 integers from 0 to {MAX_LAYERS - 1}")
    key = pre + "fc_norm.weight"
    if key in kv:
        t, sub = types[key]
        v = kv[key]
        if t != ARRAY or sub not in FLOATS or (isinstance(v, list) and not all(math.isfinite(x) for x in v)):
            raise _fail(path, what, key, t, sub, v, "an array of finite floats")  # a long one is checked when kept


def _check_tokenizer(path: Path, what: str, kv: dict[str, Any], types: dict[str, tuple[int, int | None]]) -> None:
    """The vocabulary arrays as llama-vocab.cpp reads them: strings, then scores and types at least as long."""
    key = Keys.Tokenizer.LIST
    n_tokens = None
    if key in kv:
        t, sub = types[key]
        if t != ARRAY or sub != STRING or not 0 < len(kv[key]) <= MAX_VOCAB:
            raise _fail(path, what, key, t, sub, kv[key], "a non-empty array of STRING")
        n_tokens = len(kv[key])
    for key, subs, want in (
        (Keys.Tokenizer.SCORES, {FLOAT32, 5}, "FLOAT32 or INT32"),
        (Keys.Tokenizer.TOKEN_TYPE, {5}, "INT32"),
    ):
        if key not in kv:
            continue
        t, sub = types[key]
        if t != ARRAY or sub not in subs or (n_tokens is not None and len(kv[key]) < n_tokens):
            n = f"{n_tokens} " if n_tokens is not None else ""
            raise _fail(path, what, key, t, sub, kv[key], f"an array of {n}{want}")
    key = Keys.Tokenizer.MERGES
    if key in kv and types[key] != (ARRAY, STRING):
        raise _fail(path, what, key, *types[key], kv[key], "an array of STRING")
    for key in kv:
        t, sub = types[key]
        if TOKEN_IDS.fullmatch(key) and t not in INTS:  # out of range is llama.cpp's warning, not an error
            raise _fail(path, what, key, t, sub, kv[key], "an integer token id")
        if TOKEN_FLAGS.fullmatch(key) and t != BOOL:  # bool('false') is True
            raise _fail(path, what, key, t, sub, kv[key], "a BOOL")


def check_tensor_info(path: Path, what: str, name: str, ne: tuple[int, ...], seen: set[str]) -> None:
    """One tensor-table entry as gguf.cpp and the model loader take it: a short unique name, 1 to 4 dimensions
    each at least 1 (a 0 trips ``GGML_ASSERT(ne >= 1)`` when the loader creates the tensor)."""
    if len(name) > MAX_NAME or not name:
        raise GGUFError(f"{path}: {what} has a tensor name of {len(name)} characters, expected 1 to {MAX_NAME}")
    if name in seen:
        raise GGUFError(f"{path}: {what} has the tensor {name!r} twice")
    seen.add(name)
    if any(n < 1 for n in ne):
        raise GGUFError(f"{path}: {what} tensor {name!r} has shape {list(ne)}, expected every dimension at least 1")


def check_alignment(path: Path, what: str, kv: dict[str, Any], types: dict[str, tuple[int, int | None]]) -> int:
    """``general.alignment``: a UINT32 power of two (gguf.cpp refuses anything else), 32 when absent."""
    key = Keys.General.ALIGNMENT
    if key not in kv:
        return 32
    t, sub = types[key]
    v = kv[key]
    if t != UINT32 or v <= 0 or v & (v - 1):
        raise _fail(path, what, key, t, sub, v, "a UINT32 power of two")
    return int(v)


def layer_indices(tensors: Iterable[Tensor]) -> set[int]:
    """The distinct N of the ``blk.N.*`` tensors."""
    return {t.layer for t in tensors if t.layer is not None}


def check_model(header: GGUFHeader, what: str = "GGUF", path: Path | None = None) -> None:
    """What needs the whole tensor table: ``block_count`` equal to the layers that have tensors, and a
    drafter's ``d2t`` (I64, one dimension, values inside the vocabulary the drafter shares with its target).

    The layer count is judged only where every split's tensors are in ``header`` (``splits_read``) or the
    file is not split; a file without tensors (a header-only sketch) has no layers to count.
    """
    path = path or header.path
    kv = header.kv
    arch = kv.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        return
    split = int(kv.get(Keys.Split.LLM_KV_SPLIT_COUNT, 0) or 0) > 1
    block_count = Keys.LLM.BLOCK_COUNT.format(arch=arch)
    n_layer = kv.get(block_count)
    if n_layer is not None and header.tensors and (header.splits_read or not split):
        found = layer_indices(header.tensors)
        if len(found) != n_layer or max(found, default=-1) >= n_layer:
            have = f"blk.{min(found)} to blk.{max(found)}" if found else "no blk.N tensors"
            raise GGUFError(
                f"{path}: {what} key '{block_count}' is {n_layer}, but the file has tensors for "
                f"{len(found)} layers ({have}); expected one blk.N for each layer"
            )
    if arch == DRAFTER_ARCH:
        _check_d2t(header, what, path, split)


def _check_d2t(header: GGUFHeader, what: str, path: Path, split: bool) -> None:
    """``d2t`` maps draft ids to absolute target ids: llama.cpp asserts on its type and scatters logits by its
    values, and the runtime indexes the target's vocabulary with them."""
    eps = KEY_RMS_EPS
    if eps not in header.kv and KEY_FC_NORM_EPS not in header.kv:
        raise GGUFError(f"{path}: {what} lacks the key '{eps}' (the drafter's RMSNorm epsilon)")
    t = header.tensor("d2t")
    if t is None or split:
        return
    tokens = header.kv.get(Keys.Tokenizer.LIST)
    n_vocab = len(tokens) if tokens is not None else int(header.kv.get(KEY_VOCAB_SIZE, 0) or 0)
    if t.type != 27 or len(t.ne) != 1:  # GGML_TYPE_I64
        raise GGUFError(f"{path}: {what} tensor 'd2t' has ggml type {t.type} and shape {list(t.ne)}, expected 1-D I64")
    if n_vocab and t.ne[0] > n_vocab:
        raise GGUFError(
            f"{path}: {what} tensor 'd2t' maps {t.ne[0]} draft tokens, more than the {n_vocab} of the vocabulary"
        )
    raw = np.memmap(header.path, dtype=np.int64, mode="r", offset=header.data_offset + t.offset, shape=(t.ne[0],))
    bad = np.flatnonzero((raw < 0) | (raw >= max(n_vocab, 1)))
    if len(bad):
        i = int(bad[0])
        raise GGUFError(
            f"{path}: {what} tensor 'd2t' maps draft token {i} to target id {int(raw[i])}, expected an id from 0 to "
            f"{n_vocab - 1} (the vocabulary has {n_vocab} tokens)"
        )


# --- checkpoint config.json --------------------------------------------------------------------------------------

# field -> (lowest, highest) for the integers of a drafter checkpoint's config (None: optional)
CONFIG_INTS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, MAX_WIDTH),
    "intermediate_size": (1, MAX_FF),
    "num_attention_heads": (1, MAX_HEADS),
    "num_key_value_heads": (1, MAX_HEADS),
    "head_dim": (1, MAX_WIDTH),
    "vocab_size": (1, MAX_VOCAB),
    "draft_vocab_size": (1, MAX_VOCAB),
    "target_hidden_size": (1, MAX_WIDTH),
    "max_position_embeddings": (1, MAX_CONTEXT),
    "num_hidden_layers": (1, MAX_LAYERS),
}
CONFIG_FLOATS = ("rms_norm_eps", "rope_theta")  # finite and positive


def json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, counted without parsing (the parser itself recurses)."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def read_json(path: Path, what: str = "config.json", error: type[Exception] = CheckpointError) -> Any:
    """A JSON file of a checkpoint, nested at most ``MAX_JSON_DEPTH`` deep; every failure one ``error`` line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read the {what} ({getattr(e, 'strerror', None) or e})") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise error(f"{path}: the {what} nests deeper than {MAX_JSON_DEPTH} levels; expected a plain JSON object")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise error(f"{path}: not valid JSON ({e})") from None


def check_config(cfg: dict[str, Any], path: Path) -> None:
    """A drafter checkpoint's hyper-parameters (its flattened config) before anything is built from them:
    integers that are integers (not lists, strings, BOOL or 1e30) within sane bounds, epsilons finite and
    positive. Absent fields pass (the caller applies its defaults and requirements)."""
    for name, (lo, hi) in CONFIG_INTS.items():
        if name not in cfg or cfg[name] is None:
            continue
        v = cfg[name]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise CheckpointError(f"{path}: '{name}' is {json.dumps(v)[:40]}, expected an integer from {lo} to {hi}")
    for name in CONFIG_FLOATS:
        if name not in cfg or cfg[name] is None:
            continue
        v = cfg[name]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        if not ok:
            raise CheckpointError(f"{path}: '{name}' is {json.dumps(v)[:40]}, expected a finite positive number")
    layers = cfg.get("eagle_aux_hidden_state_layer_ids")
    if layers is not None and (
        not isinstance(layers, list)
        or len(layers) > MAX_LAYERS
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_LAYERS for x in layers)
    ):
        raise CheckpointError(
            f"{path}: 'eagle_aux_hidden_state_layer_ids' is {json.dumps(layers)[:40]}, expected a list of layer ids "
            f"from 0 to {MAX_LAYERS - 1}"
        )
