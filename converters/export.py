"""Write an ``eagle3`` drafter GGUF back out as the Hugging Face checkpoint vLLM and SGLang load.

The inverse of ``converters.eagle3_gguf.convert``: tensors are read (dequantised where needed),
q/k go back from llama.cpp's interleaved rope rows to Hugging Face's rotate-half rows, ``d2t``
goes from absolute target ids back to offsets, and the EAGLE 3.1 parts that travel as metadata
(``fc_norm`` weights, ``norm_output``) become tensors and config fields again. The directory
appears only when complete: it is written beside the destination and renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, Keys

from converters.eagle3_gguf import KEY_ROPE_SCALING, TENSOR_NAMES
from converters.formats import Checkpoint, write_checkpoint
from local_eagle.errors import CheckpointError, LocalEagleError
from local_eagle.files import check_output_dir, signals_raise
from local_eagle.gguf import GGUFHeader, eagle_version, model_info, open_gguf, tensor_f32
from local_eagle.gguf.keys import (
    DRAFTER_ARCH,
    KEY_FC_NORM,
    KEY_FC_NORM_WEIGHT,
    KEY_NORM_BEFORE_FC,
    KEY_NORM_BEFORE_RESIDUAL,
    KEY_NORM_OUTPUT,
    KEY_RMS_EPS,
    KEY_TARGET_HIDDEN,
    KEY_TARGET_LAYERS,
)

ARCH = DRAFTER_ARCH
# The layouts `export` writes, by the name a user gives: the speculators format (vLLM's own) and the
# EAGLE / SpecForge layout (LlamaForCausalLMEagle3, what SGLang and vLLM both load).
EXPORT_FORMATS = {"speculators": "speculators", "eagle3": "eagle3"}
DTYPES = ("auto", "float32", "float16", "bfloat16")
FROM_GGUF = {v: k for k, v in TENSOR_NAMES.items()}
# Hugging Face architectures of the targets whose GGUF architecture names differ, for speculators' verifier block.
HF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "gpt-oss": "GptOssForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "mistral3": "Mistral3ForConditionalGeneration",
}


@dataclass
class ExportResult:
    outdir: Path
    format: str
    eagle_version: str
    target_layers: list[int]
    draft_vocab_size: int
    tensor_count: int
    nbytes: int


def unpermute_for_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo ``permute_for_rope``: llama.cpp's interleaved q/k rows back to Hugging Face's rotate-half rows."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _int64_tensor(header: GGUFHeader, name: str) -> np.ndarray:
    t = header.tensor(name)
    assert t is not None
    if GGMLQuantizationType(t.type) != GGMLQuantizationType.I64:
        raise CheckpointError(f"{header.path}: tensor {name!r} is {GGMLQuantizationType(t.type).name}, expected I64")
    n = int(np.prod(t.ne))
    return np.array(np.memmap(header.path, dtype=np.int64, mode="r", offset=header.data_offset + t.offset, shape=(n,)))


def _f32(value: Any) -> float:
    """A GGUF float32 as the decimal it was written from (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def _need(kv: dict[str, Any], key: str, path: Path) -> Any:
    if kv.get(key) is None:
        raise CheckpointError(f"{path}: drafter GGUF lacks the key '{key}'")
    return kv[key]


def _rope_scaling(kv: dict[str, Any], header: GGUFHeader) -> dict[str, Any] | None:
    """The checkpoint's rope_scaling: kept as JSON by the converter, or rebuilt from llama.cpp's own keys."""
    text = kv.get(KEY_ROPE_SCALING)
    if text is not None:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise CheckpointError(f"{header.path}: key '{KEY_ROPE_SCALING}' is not a JSON object")
        return value
    if header.tensor("rope_freqs.weight") is not None:
        raise CheckpointError(
            f"{header.path}: the drafter has a rope_freqs tensor (llama3 rope scaling) but no '{KEY_ROPE_SCALING}' "
            "key to recover its parameters from; convert the checkpoint again with this version of local-eagle"
        )
    kind = kv.get(Keys.Rope.SCALING_TYPE.format(arch=ARCH))
    if kind in (None, "none"):
        return None
    factor = _need(kv, Keys.Rope.SCALING_FACTOR.format(arch=ARCH), header.path)
    out: dict[str, Any] = {"rope_type": kind, "factor": float(factor)}
    orig = kv.get(Keys.Rope.SCALING_ORIG_CTX_LEN.format(arch=ARCH))
    if orig is not None:
        out["original_max_position_embeddings"] = int(orig)
    return out


def read_drafter_gguf(
    path: str | os.PathLike[str], target: str | os.PathLike[str] | None = None
) -> tuple[Checkpoint, int]:
    """A drafter GGUF in the converter's canonical form, and the number of target tokens it knows.

    ``target``: the target's GGUF, which lends its embeddings and head to a drafter that has none
    of its own (llama.cpp shares them at run time; a checkpoint must carry them).
    """
    p = Path(path)
    header = open_gguf(p, "drafter GGUF", keep=lambda k: k == KEY_FC_NORM_WEIGHT)
    info = model_info(header, p, "drafter GGUF")
    if not info.is_drafter:
        raise LocalEagleError(f"{p}: architecture is {info.arch!r}, expected an eagle3 drafter GGUF")
    kv = header.kv
    if info.n_layer != 1:
        raise CheckpointError(f"{p}: {ARCH}.block_count is {info.n_layer}, an EAGLE-3 drafter has 1")
    unknown = sorted(
        t.name for t in header.tensors if t.name not in FROM_GGUF and t.name not in ("d2t", "rope_freqs.weight")
    )
    if unknown:
        raise CheckpointError(f"{p}: tensors {', '.join(unknown)} have no place in an EAGLE-3 checkpoint")
    n_head = int(_need(kv, Keys.Attention.HEAD_COUNT.format(arch=ARCH), p))
    n_kv = int(kv.get(Keys.Attention.HEAD_COUNT_KV.format(arch=ARCH)) or n_head)
    hidden = int(info.n_embd)
    fc_norm = bool(kv.get(KEY_FC_NORM, False))
    cfg: dict[str, Any] = {
        "hidden_size": hidden,
        "intermediate_size": int(_need(kv, Keys.LLM.FEED_FORWARD_LENGTH.format(arch=ARCH), p)),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": int(kv.get(Keys.Attention.KEY_LENGTH.format(arch=ARCH)) or hidden // n_head),
        "vocab_size": info.n_vocab,
        "target_hidden_size": int(_need(kv, KEY_TARGET_HIDDEN, p)),
        "target_layers": [int(x) for x in _need(kv, KEY_TARGET_LAYERS, p)],
        "rms_norm_eps": _f32(_need(kv, KEY_RMS_EPS, p)),
        "rope_theta": _f32(kv.get(Keys.Rope.FREQ_BASE.format(arch=ARCH)) or 10000.0),
        "rope_scaling": _rope_scaling(kv, header),
        "max_position_embeddings": int(kv.get(Keys.LLM.CONTEXT_LENGTH.format(arch=ARCH)) or 2048),
        "norm_before_residual": bool(kv.get(KEY_NORM_BEFORE_RESIDUAL, False)),
        "norm_before_fc": bool(kv.get(KEY_NORM_BEFORE_FC, False)),
        "fc_norm": fc_norm,
        "norm_output": bool(kv.get(KEY_NORM_OUTPUT, False)),
    }
    tensors: dict[str, np.ndarray] = {}
    for t in header.tensors:
        if t.name in FROM_GGUF:
            tensors[FROM_GGUF[t.name]] = tensor_f32(header, t.name)
    q, k = "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight"
    for name in ("fc.weight", "norm.weight", q, k):
        if name not in tensors:
            raise CheckpointError(f"{p}: drafter GGUF lacks the tensor {TENSOR_NAMES[name]!r}")
    tensors[q] = unpermute_for_rope(tensors[q], n_head)
    tensors[k] = unpermute_for_rope(tensors[k], n_kv)
    if fc_norm:
        w = np.asarray(_need(kv, KEY_FC_NORM_WEIGHT, p), dtype=np.float32)
        ht = cfg["target_hidden_size"]
        if w.size != 3 * ht:
            raise CheckpointError(f"{p}: '{KEY_FC_NORM_WEIGHT}' holds {w.size} values, expected 3 x {ht}")
        for i in range(3):
            tensors[f"fc_norm.{i}.weight"] = w[i * ht : (i + 1) * ht].copy()
    absolute = _int64_tensor(header, "d2t") if header.tensor("d2t") is not None else None
    n_draft = absolute.size if absolute is not None else info.n_vocab
    if absolute is not None:
        if absolute.size and (absolute.min() < 0 or absolute.max() >= info.n_vocab):
            raise CheckpointError(f"{p}: d2t holds target ids outside the vocabulary of {info.n_vocab}")
        tensors["d2t"] = absolute - np.arange(absolute.size, dtype=np.int64)
    cfg["draft_vocab_size"] = int(n_draft)
    _borrow_from_target(tensors, target, absolute, info.n_vocab)
    return Checkpoint(format="gguf", config=cfg, tensors=tensors, path=p), info.n_vocab


def _borrow_from_target(
    tensors: dict[str, np.ndarray], target: str | os.PathLike[str] | None, absolute: np.ndarray | None, n_vocab: int
) -> None:
    if target is None or ("embed_tokens.weight" in tensors and "lm_head.weight" in tensors):
        return
    header = open_gguf(target, "target GGUF")
    tinfo = model_info(header, Path(target), "target GGUF")
    if tinfo.is_drafter:
        raise LocalEagleError(f"{target}: is an eagle3 drafter, expected the target model's GGUF")
    if tinfo.n_vocab != n_vocab:
        raise LocalEagleError(
            f"{target}: the target has {tinfo.n_vocab} tokens, the drafter was made for {n_vocab}: expected its target"
        )
    if "embed_tokens.weight" not in tensors:
        tensors["embed_tokens.weight"] = tensor_f32(header, "token_embd.weight")[:n_vocab]
    if "lm_head.weight" not in tensors:
        name = "output.weight" if header.tensor("output.weight") is not None else "token_embd.weight"
        head = tensor_f32(header, name)[:n_vocab]
        tensors["lm_head.weight"] = head if absolute is None else head[absolute]


def _dtype_for(header_types: set[str], dtype: str) -> str:
    """``auto``: the GGUF's own float type; a quantised GGUF is written as float32, which holds it exactly."""
    if dtype != "auto":
        return dtype
    if header_types <= {"F16", "F32"} and "F16" in header_types:
        return "float16"
    if header_types <= {"BF16", "F32"} and "BF16" in header_types:
        return "bfloat16"
    return "float32"


def export(
    drafter_gguf: str | os.PathLike[str],
    outdir: str | os.PathLike[str],
    fmt: str = "speculators",
    target_gguf: str | os.PathLike[str] | None = None,
    dtype: str = "auto",
    vocab_size: int | None = None,
    verifier: str | None = None,
) -> ExportResult:
    """Write ``drafter_gguf`` as a checkpoint directory of ``fmt`` (speculators or eagle3)."""
    import torch

    if fmt not in EXPORT_FORMATS:
        raise LocalEagleError(f"--format: expected one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    if dtype not in DTYPES:
        raise LocalEagleError(f"--dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    out = check_output_dir(outdir, "--outdir")
    if out.exists() and any(out.iterdir()):
        raise LocalEagleError(f"--outdir: {out} exists and is not empty; pick a new directory")
    ckpt, n_vocab = read_drafter_gguf(drafter_gguf, target_gguf)
    t = ckpt.tensors
    missing = [n for n in ("lm_head.weight", "embed_tokens.weight") if n not in t]
    if fmt == "eagle3":
        missing = [n for n in missing if n != "embed_tokens.weight"]  # vLLM and SGLang share the target's
    if missing:
        raise LocalEagleError(
            f"{drafter_gguf}: the drafter shares the target's {' and '.join(m.split('.')[0] for m in missing)}; "
            "pass --target with the target's GGUF so that export can copy them into the checkpoint"
        )
    if vocab_size is not None and vocab_size < n_vocab:
        raise LocalEagleError(f"--vocab-size: {vocab_size} is below the drafter's target vocabulary of {n_vocab}")
    header = open_gguf(drafter_gguf, "drafter GGUF")
    types = {GGMLQuantizationType(x.type).name for x in header.tensors if x.name != "d2t"}
    torch_dtype = getattr(torch, _dtype_for(types, dtype))

    state: dict[str, Any] = {}
    for name, arr in t.items():
        if arr.dtype == np.int64:
            state[name] = torch.from_numpy(arr)
        elif name == "embed_tokens.weight" and vocab_size and vocab_size > arr.shape[0]:
            pad = np.zeros((vocab_size - arr.shape[0], arr.shape[1]), dtype=arr.dtype)
            state[name] = torch.from_numpy(np.concatenate([arr, pad])).to(torch_dtype)
        else:  # norms stay float32: the GGUF keeps them so, and the engines upcast them anyway
            state[name] = torch.from_numpy(np.ascontiguousarray(arr)).to(torch_dtype if arr.ndim > 1 else torch.float32)
    cfg = dict(ckpt.config)
    if "d2t" in t:
        t2d = torch.zeros(n_vocab, dtype=torch.bool)
        t2d[torch.from_numpy(t["d2t"] + np.arange(t["d2t"].size))] = True
        state["t2d"] = t2d
    arch = open_gguf(target_gguf, "target GGUF").kv.get(Keys.General.ARCHITECTURE) if target_gguf is not None else None
    verifier_archs = [HF_ARCHITECTURES[arch]] if arch in HF_ARCHITECTURES else []

    out.parent.mkdir(parents=True, exist_ok=True)
    with signals_raise():
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
        try:
            write_checkpoint(
                state,
                cfg,
                tmp,
                EXPORT_FORMATS[fmt],
                vocab_size=vocab_size,
                verifier=verifier,
                verifier_architectures=verifier_archs,
            )
            os.chmod(tmp, 0o777 & ~_umask())
            if out.exists():
                out.rmdir()
            os.rename(tmp, out)
        except OSError as e:
            raise LocalEagleError(f"{out}: cannot write the checkpoint directory ({e.strerror or e})") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(tmp)
    nbytes = sum(f.stat().st_size for f in out.iterdir())
    return ExportResult(
        outdir=out,
        format=fmt,
        eagle_version=eagle_version(cfg["fc_norm"], cfg["norm_output"]),
        target_layers=cfg["target_layers"],
        draft_vocab_size=cfg["draft_vocab_size"],
        tensor_count=len(state),
        nbytes=nbytes,
    )


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
