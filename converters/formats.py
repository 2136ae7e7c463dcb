"""The Hugging Face checkpoint formats of EAGLE 3 / 3.1 drafters, read and written.

Every format is mapped onto one canonical layout: the original EAGLE-3 tensor names
(``midlayer.*``, ``fc.weight``, ``fc_norm.{i}.weight`` ...) and a ``DrafterConfig``. Reading
and writing live side by side so the name tables exist once (docs/architecture.md).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.errors import CheckpointError
from local_eagle.files import atomic_output
from local_eagle.gguf.check import check_config, read_json

FORMATS = ("eagle3", "vllm", "speculators", "modelopt")

ARCH_TO_FORMAT = {
    "LlamaForCausalLMEagle3": "eagle3",
    "Eagle3LlamaForCausalLM": "vllm",
    "Eagle3Speculator": "speculators",
    "Eagle3DraftModel": "speculators",
}

LAYER_TENSORS = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
REQUIRED = ("fc.weight", "norm.weight", *(f"midlayer.{n}" for n in LAYER_TENSORS))
OPTIONAL = (
    "embed_tokens.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
    "input_norm.weight",
    "fc_norm.0.weight",
    "fc_norm.1.weight",
    "fc_norm.2.weight",
)
LEGACY_AUX_NORMS = {"aux_norm_low.weight": 0, "aux_norm_mid.weight": 1, "aux_norm_high.weight": 2}
IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")
# Tensors that only a config flag puts into the maths; present without it they would be dropped.
NEEDS_FLAG = {"input_norm.weight": "norm_before_fc", **{f"fc_norm.{i}.weight": "fc_norm" for i in range(3)}}
# Multi-head latent attention (DeepSeek / Kimi drafters): config fields and projection names.
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank")
MLA_TENSOR = re.compile(r"(^|\.)(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|q_a_layernorm|kv_a_layernorm)\.")
QK_NORM = re.compile(r"(^|\.)self_attn\.(q_norm|k_norm)\.")
NESTED_CONFIGS = ("transformer_layer_config", "eagle_config", "eagle_architecture_config")
ATTENTION_ONLY_GQA = "llama.cpp's eagle3 graph has plain grouped-query attention only (q_proj, k_proj, v_proj, o_proj)"


@dataclass
class Checkpoint:
    """A drafter checkpoint in canonical form: flags and shapes, plus float32/int64 arrays."""

    format: str
    config: dict[str, Any]
    tensors: dict[str, np.ndarray]
    path: Path

    @property
    def flags(self) -> dict[str, bool]:
        keys = ("fc_norm", "norm_output", "norm_before_fc", "norm_before_residual")
        return {k: bool(self.config[k]) for k in keys}


def _flag(cfg: dict[str, Any], *names: str, default: bool = False) -> bool:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return bool(cfg[n])
    return default


def detect_format(raw: dict[str, Any]) -> str:
    """Name the checkpoint format of a parsed config.json, or raise."""
    archs = raw.get("architectures") or []
    if raw.get("speculators_model_type") == "eagle3" or "transformer_layer_config" in raw:
        return "speculators"
    if isinstance(raw.get("eagle_config"), dict):
        return "modelopt"
    for a in archs:
        if a in ARCH_TO_FORMAT:
            return ARCH_TO_FORMAT[a]
    if "draft_vocab_size" in raw and raw.get("num_hidden_layers") == 1:
        return "eagle3"
    raise CheckpointError(
        f"config.json: unknown drafter format (architectures={archs}); expected one of "
        "LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM, Eagle3Speculator, an eagle_config block, "
        "or draft_vocab_size with num_hidden_layers=1"
    )


def parse_config(raw: dict[str, Any], fmt: str, config_path: Path) -> dict[str, Any]:
    """Flatten a format's config.json into the fields of ``DrafterConfig`` (some may be None)."""
    top = dict(raw)
    if fmt == "speculators":
        layer = top.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise CheckpointError(f"{config_path}: speculators config has no transformer_layer_config object")
        base = {**top, **layer}
        norm_before_residual = _flag(top, "norm_before_residual", default=True)
    elif fmt == "modelopt":
        base = {**top, **top["eagle_config"]}
        norm_before_residual = _flag(base, "norm_before_residual")
    else:
        base = top
        norm_before_residual = _flag(base, "norm_before_residual")

    def need(key: str) -> Any:
        if base.get(key) is None:
            raise CheckpointError(f"{config_path}: missing field '{key}'")
        return base[key]

    check_config(base, config_path)  # types and bounds first: int([4096]) or int(1e30) must not reach a plan

    hidden = int(need("hidden_size"))
    heads = int(need("num_attention_heads"))
    layers = base.get("num_hidden_layers", 1)
    if layers != 1:
        raise CheckpointError(f"{config_path}: num_hidden_layers is {layers}, an EAGLE-3 drafter has 1")
    rope_scaling = base.get("rope_scaling") or base.get("rope_parameters")
    max_pos = int(base.get("max_position_embeddings", 2048))
    check_attention_window(base, max_pos, config_path)
    target_layers = base.get("eagle_aux_hidden_state_layer_ids")
    if target_layers is None and isinstance(top.get("eagle_config"), dict):
        target_layers = top["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    return {
        "hidden_size": hidden,
        "intermediate_size": int(need("intermediate_size")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(base.get("num_key_value_heads") or heads),
        "head_dim": int(base.get("head_dim") or hidden // heads),
        "vocab_size": int(need("vocab_size")),
        "draft_vocab_size": int(base.get("draft_vocab_size") or base["vocab_size"]),
        "target_hidden_size": base.get("target_hidden_size"),
        "target_layers": list(target_layers) if target_layers is not None else None,
        "rms_norm_eps": float(base.get("rms_norm_eps", 1e-6)),
        "rope_theta": float(base.get("rope_theta") or (rope_scaling or {}).get("rope_theta") or 10000.0),
        "rope_scaling": rope_scaling if isinstance(rope_scaling, dict) else None,
        "max_position_embeddings": max_pos,
        "norm_before_residual": norm_before_residual,
        "norm_before_fc": _flag(base, "norm_before_fc"),
        # use_aux_norm: the older name of fc_norm (early EAGLE 3.1 exports, SGLang); either one switches it on
        "fc_norm": _flag(base, "fc_norm") or _flag(base, "use_aux_norm"),
        "norm_output": _flag(base, "norm_output"),
    }


def check_attention_window(base: dict[str, Any], max_pos: int, config_path: Path) -> None:
    """Refuse a drafter trained with a sliding attention window.

    speculators' trainer writes ``layer_types: ["sliding_attention"]`` with a ``sliding_window``
    and masks the drafter's attention with it; llama.cpp's eagle3 graph builds a plain causal
    mask over the whole context (``build_attn_inp_kv``, no SWA), so past the window the GGUF
    would compute something the drafter never learnt. A window that covers
    ``max_position_embeddings`` masks nothing and is fine.
    """
    types = base.get("layer_types")
    window = base.get("sliding_window")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise CheckpointError(f"{config_path}: layer_types must be a list of strings, got {types!r}")
        other = sorted(set(types) - {"full_attention", "sliding_attention"})
        if other:
            raise CheckpointError(
                f"{config_path}: layer_types holds {other}; llama.cpp's eagle3 graph runs full_attention only"
            )
        sliding, why = "sliding_attention" in types, f"layer_types {types}"
    else:
        sliding, why = bool(base.get("use_sliding_window")) and window is not None, "use_sliding_window"
    if not sliding:
        return
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)):
        raise CheckpointError(f"{config_path}: sliding_window must be an integer, got {window!r}")
    if window is None or window < max_pos:
        size = f"sliding_window {window}" if window is not None else "no sliding_window"
        raise CheckpointError(
            f"{config_path}: {why} with {size}: the drafter was trained with sliding-window attention, which "
            "llama.cpp's eagle3 graph does not apply (it attends to the whole context); expected layer_types "
            f"full_attention or a sliding_window >= max_position_embeddings ({max_pos})"
        )


def check_not_mla(raw: dict[str, Any], config_path: Path) -> None:
    """Refuse a multi-head latent attention drafter before its format is even guessed."""
    for part in (raw, *(raw[k] for k in NESTED_CONFIGS if isinstance(raw.get(k), dict))):
        fields = [f for f in MLA_FIELDS if part.get(f) is not None]
        if fields:
            raise CheckpointError(
                f"{config_path}: {' and '.join(fields)} set: a drafter with multi-head latent attention "
                f"(DeepSeek / Kimi style) is not supported; {ATTENTION_ONLY_GQA}"
            )


def _why_unexpected(name: str) -> str:
    """The reason llama.cpp's eagle3 graph cannot run a tensor the reader does not know, for the error line."""
    if QK_NORM.search(name):
        return (
            ": the drafter layer normalises queries and keys per head (q_norm / k_norm, a Qwen3-style layer), and "
            f"llama.cpp's eagle3 graph has no such norms; {ATTENTION_ONLY_GQA}"
        )
    if name.endswith(".bias"):
        return f": llama.cpp's eagle3 graph has no biases; {ATTENTION_ONLY_GQA} and an MLP without bias"
    if re.search(r"(^|\.)layers\.[1-9]", name):
        return ": llama.cpp's eagle3 graph has a single decoder layer (layers.0 / midlayer)"
    optional = ", ".join(OPTIONAL[:4])
    return f" (expected {', '.join(REQUIRED[:2])}, midlayer.* / layers.0.*, and optionally {optional}, ...)"


def canonical_name(name: str) -> str | None:
    """Map a checkpoint tensor name to its canonical name; None for tensors that carry nothing."""
    if IGNORED.search(name):
        return None
    for prefix in ("eagle_module.", "model."):
        if name.startswith(prefix) and not name.startswith("model.layers."):
            name = name[len(prefix) :]
    for prefix in ("model.layers.0.", "layers.0."):
        if name.startswith(prefix):
            name = "midlayer." + name[len(prefix) :]
    if name in LEGACY_AUX_NORMS:
        name = f"fc_norm.{LEGACY_AUX_NORMS[name]}.weight"
    return name


def _load_safetensors(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    try:
        import torch  # noqa: F401

        framework = "pt"
    except ImportError:
        framework = "numpy"
    out: dict[str, Any] = {}
    try:
        with safe_open(str(path), framework=framework) as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    except Exception as e:  # safetensors raises several unrelated types
        raise CheckpointError(f"{path}: unreadable safetensors file ({e})") from None
    return out


def _load_bin(path: Path) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path}: reading pytorch_model.bin needs torch (pip install 'local-eagle[torch]')"
        ) from None
    try:
        sd = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: unreadable PyTorch weights ({e})") from None
    if not isinstance(sd, dict):
        raise CheckpointError(f"{path}: expected a state dict, found {type(sd).__name__}")
    return sd


def _to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    import torch

    if t.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool):
        return t.detach().cpu().numpy()
    return t.detach().to(torch.float32).cpu().numpy()


def _shard_paths(directory: Path, idx: Path, shards: list[Any]) -> list[Path]:
    """The shard files a weight index names, each checked to lie in the checkpoint directory.

    ``weight_map`` values are joined to ``directory``; an absolute path or a ``..`` would make
    ``convert`` read any file the user can read (and echo what it finds), so they are refused by
    their text before anything is opened, and by where their folder really is (a symlinked folder).
    The shard file itself may be a symlink, as in the Hugging Face cache, whose snapshots link to blobs.
    """
    root = directory.resolve()
    out = []
    for shard in shards:
        if not isinstance(shard, str) or not shard or "\x00" in shard:
            raise CheckpointError(f"{idx}: weight_map names {shard!r}; expected a shard file name beside the index")
        parts = shard.replace("\\", "/").split("/")
        path = directory / shard
        leaves = os.path.isabs(shard) or shard.startswith(("/", "\\")) or ".." in parts
        if leaves or not path.parent.resolve().is_relative_to(root):
            raise CheckpointError(
                f"{idx}: weight_map names {shard[:120]!r}, a path outside {directory}; "
                "expected a shard file beside the index"
            )
        if any(len(part.encode()) > 255 for part in parts):
            raise CheckpointError(f"{idx}: weight_map names a file name over 255 bytes; expected a shard file name")
        out.append(path)
    return out


def weight_files(directory: Path) -> tuple[Callable[[Path], dict[str, Any]], list[Path]]:
    """The loader and the files that hold a checkpoint directory's weights (an index comes first)."""
    single = directory / "model.safetensors"
    if single.is_file():
        return _load_safetensors, [single]
    indexes = (("model.safetensors.index.json", _load_safetensors), ("pytorch_model.bin.index.json", _load_bin))
    for name, loader in indexes:
        idx = directory / name
        if idx.is_file():
            try:
                shards = sorted(set(read_json(idx, "weight index")["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise CheckpointError(f"{idx}: not a weight index with a 'weight_map' ({e})") from None
            return loader, [idx, *_shard_paths(directory, idx, shards)]
    binfile = directory / "pytorch_model.bin"
    if binfile.is_file():
        return _load_bin, [binfile]
    raise CheckpointError(
        f"{directory}: no weights found (expected model.safetensors, model.safetensors.index.json or pytorch_model.bin)"
    )


def load_weights(directory: Path) -> dict[str, Any]:
    """Read every tensor of a checkpoint directory, from whichever weight layout it uses."""
    loader, files = weight_files(directory)
    out: dict[str, Any] = {}
    for f in files:
        if f.name.endswith(".index.json"):
            continue
        if not f.is_file():
            raise CheckpointError(f"{files[0]}: shard {f.name} is missing")
        out.update(loader(f))
    return out


def checkpoint_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The files reading a checkpoint directory opens (config.json and the weights), so an output can avoid them.

    Lists what exists without loading anything; an unreadable layout lists config.json only
    (``read_checkpoint`` reports the problem).
    """
    d = Path(directory)
    try:
        return [d / "config.json", *weight_files(d)[1]]
    except CheckpointError:
        return [d / "config.json"]


def read_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint:
    """Read a drafter checkpoint directory of any supported format into canonical form."""
    d = Path(directory)
    if not d.is_dir():
        raise CheckpointError(f"{d}: not a directory (expected a drafter checkpoint directory)")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path}: missing config.json")
    raw = read_json(cfg_path)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{cfg_path}: expected a JSON object")
    check_not_mla(raw, cfg_path)
    fmt = detect_format(raw)
    config = parse_config(raw, fmt, cfg_path)
    if config["fc_norm"] and config["norm_before_fc"]:
        raise CheckpointError(f"{cfg_path}: fc_norm and norm_before_fc are both set; they are mutually exclusive")

    tensors: dict[str, np.ndarray] = {}
    original: dict[str, str] = {}
    known = set(REQUIRED) | set(OPTIONAL)
    for name, t in load_weights(d).items():
        cname = canonical_name(name)
        if cname is None:
            continue
        if cname not in known:
            if MLA_TENSOR.search(name):
                raise CheckpointError(
                    f"{d}: tensor '{name}' belongs to multi-head latent attention (DeepSeek / Kimi style), which "
                    f"is not supported; {ATTENTION_ONLY_GQA}"
                )
            raise CheckpointError(f"{d}: unexpected tensor '{name}' for an EAGLE-3 drafter{_why_unexpected(name)}")
        tensors[cname] = _to_numpy(t)
        original[cname] = name
    for name in REQUIRED:
        if name not in tensors:
            raise CheckpointError(f"{d}: missing tensor '{name}'")
    for flag in dict.fromkeys(NEEDS_FLAG.values()):
        unused = [original[n] for n, f in NEEDS_FLAG.items() if f == flag and n in tensors and not config[flag]]
        if unused:
            alias = " (or use_aux_norm)" if flag == "fc_norm" else ""
            raise CheckpointError(
                f"{d}: tensors {', '.join(unused)} are in the checkpoint but {cfg_path.name} does not set "
                f"{flag}{alias}; they would be dropped and the drafter would compute something else. Set "
                f'"{flag}": true if it was trained with them'
            )
    if config["fc_norm"]:
        for i in range(3):
            if f"fc_norm.{i}.weight" not in tensors:
                raise CheckpointError(f"{d}: fc_norm is set but tensor 'fc_norm.{i}.weight' is missing")
    if config["norm_before_fc"] and "input_norm.weight" not in tensors:
        raise CheckpointError(f"{d}: norm_before_fc is set but tensor 'input_norm.weight' is missing")
    _check_t2d(tensors, d)
    return Checkpoint(format=fmt, config=config, tensors=tensors, path=d)


def _check_t2d(tensors: dict[str, np.ndarray], where: Path) -> None:
    """Drop ``t2d`` only where it says nothing ``d2t`` does not; derive ``d2t`` from it when it is alone.

    ``t2d`` marks the target ids of the draft vocabulary, the same set ``d2t`` maps to. A ``d2t``
    that is itself out of range or duplicated is left for ``plan`` to report against the target.
    """
    t2d = tensors.pop("t2d", None)
    if t2d is None:
        return
    marked = np.flatnonzero(t2d.reshape(-1).astype(bool))
    if "d2t" not in tensors:
        tensors["d2t"] = marked - np.arange(marked.size, dtype=np.int64)
        return
    d2t = tensors["d2t"].reshape(-1).astype(np.int64)
    absolute = d2t + np.arange(d2t.size, dtype=np.int64)
    valid = d2t.size > 0 and absolute.min() >= 0 and absolute.max() < t2d.size
    if valid and np.unique(absolute).size == absolute.size and not np.array_equal(np.sort(absolute), marked):
        raise CheckpointError(
            f"{where}: tensors t2d and d2t disagree: t2d marks {marked.size} target ids, d2t maps {d2t.size} draft "
            "tokens to a different set; expected t2d[i + d2t[i]] true for every draft token i and false elsewhere"
        )


# --- writing (used by the tests' fixtures and by `local-eagle train`) -----------------------------


SPECULATORS_VERSION = "0.9.0"  # the release whose config schema the speculators writer follows


def _speculators_block(verifier: str | None, verifier_architectures: list[str] | None) -> dict[str, Any]:
    """The ``speculators_config`` object without which speculators refuses to load a checkpoint."""
    return {
        "algorithm": "eagle3",
        "default_proposal_method": "greedy",
        "proposal_methods": [
            {"proposal_type": "greedy", "speculative_tokens": 3, "accept_tolerance": 0.0, "verifier_accept_k": 1}
        ],
        "verifier": {"name_or_path": verifier, "architectures": list(verifier_architectures or [])},
    }


def _config_json(
    cfg: dict[str, Any],
    fmt: str,
    verifier: str | None = None,
    verifier_architectures: list[str] | None = None,
) -> dict[str, Any]:
    llama = {
        "model_type": "llama",
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "num_hidden_layers": 1,
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_theta": cfg["rope_theta"],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "vocab_size": cfg["vocab_size"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    if cfg.get("rope_scaling"):
        llama["rope_scaling"] = dict(cfg["rope_scaling"])
    extra = {
        "draft_vocab_size": cfg["draft_vocab_size"],
        "target_hidden_size": cfg["target_hidden_size"],
        "eagle_aux_hidden_state_layer_ids": list(cfg["target_layers"]),
        "norm_before_residual": cfg["norm_before_residual"],
        "norm_before_fc": cfg["norm_before_fc"],
        "fc_norm": cfg["fc_norm"],
        "norm_output": cfg["norm_output"],
    }
    if fmt == "speculators":
        # norm_before_residual is always written: speculators reads an absent key as false, vLLM's adapter as true
        return {
            "speculators_model_type": "eagle3",
            "speculators_version": SPECULATORS_VERSION,
            "architectures": ["Eagle3DraftModel"],
            "transformer_layer_config": {**llama, "architectures": ["LlamaForCausalLM"]},
            **extra,
            "speculators_config": _speculators_block(verifier, verifier_architectures),
        }
    if fmt == "modelopt":
        return {"architectures": ["LlamaForCausalLMEagle3"], **llama, "eagle_config": extra}
    arch = "Eagle3LlamaForCausalLM" if fmt == "vllm" else "LlamaForCausalLMEagle3"
    return {"architectures": [arch], **llama, **extra}


def _format_name(name: str, fmt: str, fc_norm_style: str) -> str:
    if name.startswith("midlayer.") and fmt == "speculators":
        return "layers.0." + name[len("midlayer.") :]
    if name.startswith("fc_norm."):
        i = int(name.split(".")[1])
        if fc_norm_style == "model":
            return "model." + name
        if fc_norm_style == "legacy":
            return ("aux_norm_low.weight", "aux_norm_mid.weight", "aux_norm_high.weight")[i]
    return name


def write_checkpoint(
    state_dict: dict[str, Any],
    cfg: dict[str, Any],
    out_dir: str | os.PathLike[str],
    fmt: str = "eagle3",
    weights: str = "safetensors",
    fc_norm_style: str = "plain",
    shard_count: int = 2,
    vocab_size: int | None = None,
    verifier: str | None = None,
    verifier_architectures: list[str] | None = None,
) -> Path:
    """Write a canonical state dict as a checkpoint of ``fmt``; each file appears only when complete.

    weights: "safetensors", "sharded" (``shard_count`` files plus an index) or "bin".
    fc_norm_style: "plain" (``fc_norm.i.weight``), "model" (``model.fc_norm.i.weight``) or
    "legacy" (``aux_norm_{low,mid,high}.weight``).
    vocab_size: the Hugging Face target's vocabulary size for config.json, which vLLM / SGLang
    check against the target's embedding rows; a GGUF's token count can be smaller when the
    embedding matrix is padded. ``t2d`` is padded to it. Default: ``cfg["vocab_size"]``.
    verifier / verifier_architectures: the target's Hugging Face name and architectures, for the
    speculators format's ``speculators_config.verifier`` (vLLM can serve the drafter alone from it).
    """
    import torch
    from safetensors.torch import save_file

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    cfg = dict(cfg)
    state = dict(state_dict)
    if vocab_size is not None:
        if vocab_size < cfg["vocab_size"]:
            raise ValueError(f"vocab_size {vocab_size} is below the drafter's target vocabulary of {cfg['vocab_size']}")
        embed = state.get("embed_tokens.weight")
        if embed is not None and embed.shape[0] != vocab_size:
            raise ValueError(f"embed_tokens has {embed.shape[0]} rows but vocab_size is {vocab_size}")
        if "t2d" in state:
            t2d = torch.as_tensor(state["t2d"]).to(torch.bool)
            state["t2d"] = torch.cat([t2d, torch.zeros(vocab_size - t2d.numel(), dtype=torch.bool)])
        cfg["vocab_size"] = vocab_size
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        _format_name(k, fmt, fc_norm_style): torch.as_tensor(v).detach().contiguous().clone() for k, v in state.items()
    }

    def save_safetensors(part: dict[str, Any], name: str) -> None:
        with atomic_output(out / name) as tmp:
            save_file(part, str(tmp))

    def save_json(obj: dict[str, Any], name: str) -> None:
        with atomic_output(out / name) as tmp:
            tmp.write_text(json.dumps(obj, indent=2))

    if weights == "bin":
        with atomic_output(out / "pytorch_model.bin") as tmp:
            torch.save(tensors, tmp)
    elif weights == "sharded":
        names = sorted(tensors)
        weight_map: dict[str, str] = {}
        for i in range(shard_count):
            part = names[i::shard_count]
            fname = f"model-{i + 1:05d}-of-{shard_count:05d}.safetensors"
            save_safetensors({n: tensors[n] for n in part}, fname)
            weight_map.update(dict.fromkeys(part, fname))
        save_json({"metadata": {}, "weight_map": weight_map}, "model.safetensors.index.json")
    elif weights == "safetensors":
        save_safetensors(tensors, "model.safetensors")
    else:
        raise ValueError(f"unknown weights layout {weights!r}")
    save_json(_config_json(cfg, fmt, verifier, verifier_architectures), "config.json")
    return out


def to_reference(ckpt: Checkpoint, target_layers: list[int] | None = None):
    """Build the torch reference drafter from a canonical checkpoint (for checks and fine-tuning)."""
    import torch

    from local_eagle.reference import DrafterConfig, Eagle3Drafter

    c = ckpt.config
    t = ckpt.tensors
    cfg = DrafterConfig(
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        vocab_size=c["vocab_size"],
        draft_vocab_size=c["draft_vocab_size"],
        target_hidden_size=c["target_hidden_size"] or t["fc.weight"].shape[1] // 3,
        target_layers=list(target_layers or c["target_layers"] or [2, 4, 5]),
        rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c["rope_theta"],
        max_position_embeddings=c["max_position_embeddings"],
        norm_before_residual=c["norm_before_residual"],
        norm_before_fc=c["norm_before_fc"],
        fc_norm=c["fc_norm"],
        norm_output=c["norm_output"],
        own_embeddings="embed_tokens.weight" in t,
        own_lm_head="lm_head.weight" in t,
    )
    model = Eagle3Drafter(cfg)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in t.items()}
    if "d2t" not in state:
        state["d2t"] = torch.zeros(cfg.draft_vocab_size, dtype=torch.int64)
    state["t2d"] = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    state["t2d"][state["d2t"] + torch.arange(cfg.draft_vocab_size)] = True
    model.load_state_dict(state)
    return model
