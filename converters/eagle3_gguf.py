"""Pack an EAGLE 3 / 3.1 drafter checkpoint into a GGUF for llama.cpp's ``eagle3`` architecture.

The pinned llama.cpp refuses unknown tensors, so the EAGLE 3.1 parts that its graph lacks
(the per-chunk FC norms and the post-norm feedback flag) travel as metadata under the
``eagle3.`` prefix; local-eagle applies them on the host (see ``local_eagle.runtime.drafter``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, Keys, LlamaFileType
from gguf.quants import quantize

from converters.formats import Checkpoint, checkpoint_files, read_checkpoint
from local_eagle.errors import CheckpointError, LocalEagleError
from local_eagle.files import atomic_output, check_output_file
from local_eagle.gguf import ModelInfo, copy_fields, eagle_version, model_info, open_gguf, tensor_f32
from local_eagle.gguf.keys import (
    DRAFTER_ARCH,
    KEY_DRAFT_VOCAB,
    KEY_FC_NORM,
    KEY_FC_NORM_EPS,
    KEY_FC_NORM_WEIGHT,
    KEY_NORM_BEFORE_FC,
    KEY_NORM_BEFORE_RESIDUAL,
    KEY_NORM_OUTPUT,
    KEY_RMS_EPS,
    KEY_SOURCE_FORMAT,
    KEY_SOURCE_ROPE_SCALING,
    KEY_TARGET_HIDDEN,
    KEY_TARGET_LAYERS,
    KEY_VOCAB_SIZE,
)

ARCH = DRAFTER_ARCH
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
# The checkpoint's rope_scaling as JSON, so that `export` can write it back (llama3's shows only as rope_freqs).
KEY_ROPE_SCALING = KEY_SOURCE_ROPE_SCALING


TENSOR_NAMES = {
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",
    "embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
    "norm.weight": "output_norm.weight",
    "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
    "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}

FILE_TYPES = {
    "f32": LlamaFileType.ALL_F32,
    "f16": LlamaFileType.MOSTLY_F16,
    "bf16": LlamaFileType.MOSTLY_BF16,
    "q8_0": LlamaFileType.MOSTLY_Q8_0,
}


@dataclass
class ConvertResult:
    outfile: Path
    format: str
    eagle_version: str
    target_layers: list[int]
    draft_vocab_size: int
    tensor_count: int
    nbytes: int


def permute_for_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder q/k rows from HF's rotate-half layout to llama.cpp's interleaved rope."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def default_target_layers(n_layer: int) -> list[int]:
    return [2, n_layer // 2, n_layer - 3]


def parse_target_layers(text: str) -> list[int]:
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise LocalEagleError(f"--target-layers: expected three integers like 2,16,29, got {text!r}") from None
    if len(layers) != 3:
        raise LocalEagleError(f"--target-layers: expected exactly three layer ids, got {len(layers)}")
    return layers


def _expected_shapes(cfg: dict[str, Any], ht: int, n_vocab: int, n_draft: int) -> dict[str, tuple[int, ...]]:
    h, i, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    norms = ("input_layernorm", "hidden_norm", "post_attention_layernorm")
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, 3 * ht),
        "norm.weight": (h,),
        "input_norm.weight": (3 * ht,),
        "embed_tokens.weight": (n_vocab, h),
        "lm_head.weight": (n_draft, h),
        "midlayer.self_attn.q_proj.weight": (nq, 2 * h),
        "midlayer.self_attn.k_proj.weight": (nkv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (nkv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, nq),
        "midlayer.mlp.gate_proj.weight": (i, h),
        "midlayer.mlp.up_proj.weight": (i, h),
        "midlayer.mlp.down_proj.weight": (h, i),
        **{f"midlayer.{n}.weight": (h,) for n in norms},
        **{f"fc_norm.{k}.weight": (ht,) for k in range(3)},
    }
    return shapes


def plan(
    ckpt: Checkpoint, target: ModelInfo, target_reader: Any, target_layers: list[int] | None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Check a checkpoint against its target and return (resolved config, canonical tensors)."""
    cfg = dict(ckpt.config)
    t = dict(ckpt.tensors)
    where = ckpt.path

    layers = target_layers or cfg["target_layers"] or default_target_layers(target.n_layer)
    if len(layers) != 3:
        raise CheckpointError(f"{where}: eagle_aux_hidden_state_layer_ids must hold 3 layer ids, got {layers}")
    for lid in layers:
        if lid == target.n_layer:
            raise CheckpointError(
                f"target layer id {lid} equals the layer count of target {target.path.name} with {target.n_layer} "
                "layers: speculators reads it as "
                "the target's final hidden state (the last layer's output), which local-eagle cannot capture "
                "(llama.cpp keeps that state for the output rows only, and its layer-input capture covers layers "
                f"0..{target.n_layer - 1}); this drafter needs a runtime that captures the final state"
            )
        if not 0 <= lid < target.n_layer:
            raise CheckpointError(
                f"target layer id {lid} is out of range for target {target.path.name} "
                f"with {target.n_layer} layers (expected 0..{target.n_layer - 1})"
            )
    cfg["target_layers"] = [int(x) for x in layers]

    ht = cfg["target_hidden_size"] or target.n_embd
    if ht != target.n_embd:
        raise CheckpointError(
            f"hidden size mismatch: drafter target_hidden_size is {ht} but target {target.path.name} "
            f"has embedding_length {target.n_embd}"
        )
    fc_in = t["fc.weight"].shape[1] if t["fc.weight"].ndim == 2 else -1
    if fc_in != 3 * target.n_embd:
        raise CheckpointError(
            f"hidden size mismatch: drafter fc.weight takes {fc_in} inputs, expected 3 x {target.n_embd} = "
            f"{3 * target.n_embd} for target {target.path.name}"
        )
    cfg["target_hidden_size"] = ht

    n_vocab = target.n_vocab
    if "d2t" in t:
        d2t = t.pop("d2t").astype(np.int64).reshape(-1)
        absolute = d2t + np.arange(d2t.size, dtype=np.int64)
        bad = (absolute < 0) | (absolute >= n_vocab)
        if bad.any():
            i = int(np.argmax(bad))
            raise CheckpointError(
                f"{where}: d2t maps draft token {i} to target id {int(absolute[i])}, outside the target "
                f"vocabulary of {n_vocab}"
            )
        uniq, counts = np.unique(absolute, return_counts=True)
        if (counts > 1).any():
            raise CheckpointError(
                f"{where}: d2t maps several draft tokens to target id {int(uniq[np.argmax(counts > 1)])}"
            )
        n_draft = int(d2t.size)
        if n_draft == n_vocab and not d2t.any():
            absolute = None  # identity: llama.cpp needs no mapping
    else:
        absolute = None
        n_draft = t["lm_head.weight"].shape[0] if "lm_head.weight" in t else n_vocab
        if n_draft != n_vocab:
            raise CheckpointError(
                f"{where}: no d2t tensor, but the draft vocabulary ({n_draft}) differs from the target's ({n_vocab})"
            )
    if cfg["draft_vocab_size"] != n_draft and "lm_head.weight" in t:
        raise CheckpointError(
            f"{where}: draft_vocab_size is {cfg['draft_vocab_size']} but d2t/lm_head hold {n_draft} entries"
        )
    cfg["draft_vocab_size"] = n_draft

    shapes = _expected_shapes(cfg, ht, n_vocab, n_draft)
    for name, arr in t.items():
        want = shapes.get(name)
        if want is not None and tuple(arr.shape) != want:
            raise CheckpointError(f"{where}: tensor '{name}' has shape {list(arr.shape)}, expected {list(want)}")

    if "lm_head.weight" not in t and absolute is not None:
        # llama.cpp would borrow the target's full-vocabulary head, which d2t cannot index.
        head_name = "output.weight" if "output.weight" in target.tensor_shapes else "token_embd.weight"
        t["lm_head.weight"] = tensor_f32(target_reader, head_name)[absolute]
    if absolute is not None:
        t["d2t"] = absolute
    return cfg, t


def _encode(name: str, arr: np.ndarray, outtype: str) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    if arr.dtype == np.int64:
        return arr, GGMLQuantizationType.I64
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    # llama.cpp's converter keeps 1-D tensors and any not named ``*.weight`` (a DFlash2 ``blk.N.attn_conv_base``) F32
    if arr.ndim < 2 or outtype == "f32" or not name.endswith(".weight"):
        return arr, None
    if outtype == "f16":
        return arr.astype(np.float16), None
    if outtype == "bf16":
        return quantize(arr, GGMLQuantizationType.BF16), GGMLQuantizationType.BF16
    if arr.shape[-1] % 32 == 0:
        return quantize(arr, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0
    return arr.astype(np.float16), None


def _add_rope_scaling(w: GGUFWriter, cfg: dict[str, Any], tensors: list[tuple[str, np.ndarray]]) -> None:
    rs = cfg.get("rope_scaling")
    if not rs:
        return
    w.add_string(KEY_ROPE_SCALING, json.dumps(rs, sort_keys=True))
    kind = str(rs.get("rope_type") or rs.get("type") or "").lower()
    if kind in ("", "default"):
        return
    if kind == "llama3":
        dim, base = cfg["head_dim"], cfg["rope_theta"]
        freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
        factor = rs.get("factor", 8.0)
        low, high = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
        old = rs.get("original_max_position_embeddings", 8192)
        lo_wl, hi_wl = old / low, old / high
        factors = []
        for f in freqs:
            wl = 2 * math.pi / f
            if wl < hi_wl:
                factors.append(1.0)
            elif wl > lo_wl:
                factors.append(factor)
            else:
                smooth = (old / wl - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        tensors.append(("rope_freqs.weight", np.array(factors, dtype=np.float32)))
    elif kind in ("linear", "yarn"):
        w.add_string(Keys.Rope.SCALING_TYPE.format(arch=ARCH), kind)
        w.add_float32(Keys.Rope.SCALING_FACTOR.format(arch=ARCH), float(rs["factor"]))
        if kind == "yarn" and "original_max_position_embeddings" in rs:
            w.add_uint32(Keys.Rope.SCALING_ORIG_CTX_LEN.format(arch=ARCH), int(rs["original_max_position_embeddings"]))
    else:
        raise CheckpointError(f"config.json: rope_scaling type {kind!r} is not supported (llama3, linear, yarn are)")


def open_inputs(draft_dir: str | os.PathLike[str], target_gguf: str | os.PathLike[str],
                outfile: str | os.PathLike[str], outtype: str) -> tuple[Path, Any, ModelInfo]:  # fmt: skip
    """A converter's checks before any work: the output type, an output that overwrites no input, and the target
    GGUF read (its tokenizer's fields kept, to copy): (the output path, the reader, the target's facts)."""
    if outtype not in OUTTYPES:
        raise LocalEagleError(f"--outtype: expected one of {', '.join(OUTTYPES)}, got {outtype!r}")
    inputs = [("target GGUF", target_gguf), *(("checkpoint file", f) for f in checkpoint_files(draft_dir))]
    out = check_output_file(outfile, "--outfile", inputs)
    reader = open_gguf(target_gguf, "target GGUF", keep=lambda k: k.startswith("tokenizer."))
    return out, reader, model_info(reader, Path(target_gguf), "target GGUF")


def write_tensors(w: GGUFWriter, ordered: list[tuple[str, np.ndarray]], outtype: str, progress: bool) -> int:
    """Encode the tensors, write the header, the keys (added before) and the tensors, and close: how many."""
    encoded = _encode_all(ordered, outtype, progress)
    for name, data, raw in encoded:
        w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    _write_all(w, encoded, progress)
    w.close()
    return len(encoded)


def convert(
    draft_dir: str | os.PathLike[str],
    target_gguf: str | os.PathLike[str],
    outfile: str | os.PathLike[str],
    outtype: str = "f16",
    target_layers: list[int] | None = None,
    progress: bool = False,
) -> ConvertResult:
    """Convert a drafter checkpoint directory into an ``eagle3`` GGUF paired with ``target_gguf``."""
    out, reader, target = open_inputs(draft_dir, target_gguf, outfile, outtype)
    ckpt = read_checkpoint(draft_dir)
    if target.is_drafter:
        raise LocalEagleError(f"{target_gguf}: is an eagle3 drafter, expected the target model's GGUF")
    cfg, tensors = plan(ckpt, target, reader, target_layers)
    metadata = {"d2t", *(f"fc_norm.{i}.weight" for i in range(3) if cfg["fc_norm"])}
    unused = sorted(set(tensors) - set(TENSOR_NAMES) - metadata)
    if unused:  # read_checkpoint refuses these already; never let a tensor vanish from the GGUF in silence
        raise CheckpointError(f"{ckpt.path}: tensors {', '.join(unused)} have no place in the eagle3 GGUF")

    ordered: list[tuple[str, np.ndarray]] = [(TENSOR_NAMES[k], v) for k, v in tensors.items() if k in TENSOR_NAMES]
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    ordered = [
        (
            n,
            permute_for_rope(v, n_head)
            if n == "blk.0.attn_q.weight"
            else permute_for_rope(v, n_kv)
            if n == "blk.0.attn_k.weight"
            else v,
        )
        for n, v in ordered
    ]
    if "d2t" in tensors:
        ordered.append(("d2t", tensors["d2t"]))

    version = eagle_version(cfg["fc_norm"], cfg["norm_output"])
    with atomic_output(out) as tmp:
        w = GGUFWriter(tmp, ARCH)
        w.add_name(f"{target.name or target.path.stem} EAGLE {version} drafter")
        w.add_file_type(FILE_TYPES[outtype])
        w.add_quantization_version(2)
        w.add_uint32(Keys.LLM.CONTEXT_LENGTH.format(arch=ARCH), cfg["max_position_embeddings"])
        w.add_uint32(Keys.LLM.EMBEDDING_LENGTH.format(arch=ARCH), cfg["hidden_size"])
        w.add_uint32(Keys.LLM.BLOCK_COUNT.format(arch=ARCH), 1)
        w.add_uint32(Keys.LLM.FEED_FORWARD_LENGTH.format(arch=ARCH), cfg["intermediate_size"])
        w.add_uint32(Keys.Attention.HEAD_COUNT.format(arch=ARCH), n_head)
        w.add_uint32(Keys.Attention.HEAD_COUNT_KV.format(arch=ARCH), n_kv)
        w.add_uint32(Keys.Attention.KEY_LENGTH.format(arch=ARCH), cfg["head_dim"])
        w.add_uint32(Keys.Attention.VALUE_LENGTH.format(arch=ARCH), cfg["head_dim"])
        w.add_uint32(Keys.Rope.DIMENSION_COUNT.format(arch=ARCH), cfg["head_dim"])
        w.add_float32(Keys.Rope.FREQ_BASE.format(arch=ARCH), cfg["rope_theta"])
        w.add_float32(KEY_RMS_EPS, cfg["rms_norm_eps"])
        w.add_uint32(KEY_VOCAB_SIZE, target.n_vocab)
        w.add_key_value(KEY_TARGET_LAYERS, cfg["target_layers"], GGUFValueType.ARRAY, GGUFValueType.INT32)
        w.add_uint32(KEY_TARGET_HIDDEN, cfg["target_hidden_size"])
        w.add_bool(KEY_NORM_BEFORE_RESIDUAL, cfg["norm_before_residual"])
        w.add_bool(KEY_NORM_BEFORE_FC, cfg["norm_before_fc"])
        w.add_bool(KEY_FC_NORM, cfg["fc_norm"])
        w.add_bool(KEY_NORM_OUTPUT, cfg["norm_output"])
        w.add_float32(KEY_FC_NORM_EPS, cfg["rms_norm_eps"])
        w.add_uint32(KEY_DRAFT_VOCAB, cfg["draft_vocab_size"])
        w.add_string(KEY_SOURCE_FORMAT, ckpt.format)
        if cfg["fc_norm"]:
            fc_norm = np.concatenate([tensors[f"fc_norm.{i}.weight"] for i in range(3)]).astype(np.float32)
            w.add_key_value(KEY_FC_NORM_WEIGHT, fc_norm.tolist(), GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
        _add_rope_scaling(w, cfg, ordered)
        for key, val, vtype, sub in copy_fields(reader, "tokenizer."):
            w.add_key_value(key, val, vtype, sub)

        n_tensors = write_tensors(w, ordered, outtype, progress)
        nbytes = tmp.stat().st_size
    return ConvertResult(
        outfile=out,
        format=ckpt.format,
        eagle_version=version,
        target_layers=cfg["target_layers"],
        draft_vocab_size=cfg["draft_vocab_size"],
        tensor_count=n_tensors,
        nbytes=nbytes,
    )


def _encode_all(
    ordered: list[tuple[str, np.ndarray]], outtype: str, progress: bool
) -> list[tuple[str, np.ndarray, GGMLQuantizationType | None]]:
    from rich.progress import Progress

    out = []
    with Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task(f"converting to {outtype}", total=len(ordered))
        for name, arr in ordered:
            data, raw = _encode(name, arr, outtype)
            out.append((name, data, raw))
            bar.advance(task)
    return out


def _write_all(
    w: GGUFWriter, encoded: list[tuple[str, np.ndarray, GGMLQuantizationType | None]], progress: bool
) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    total = sum(d.nbytes for _, d, _ in encoded)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("writing GGUF", total=total)
        for _, data, _ in encoded:
            w.write_tensor_data(data)
            bar.advance(task, data.nbytes)
