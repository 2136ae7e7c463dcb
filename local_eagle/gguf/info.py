"""What a target or a drafter GGUF holds, as the runtime, the planner and the converter need it."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType, Keys

from local_eagle.errors import GGUFError
from local_eagle.gguf.check import check_model
from local_eagle.gguf.keys import (
    BLOCK_DRAFTER_ARCH,
    BLOCK_FAMILIES,
    DRAFTER_ARCH,
    FAMILY_NAMES,
    FILE_TYPES,
    KEY_DFLASH_BLOCK_SIZE,
    KEY_DFLASH_CONV_KERNEL,
    KEY_DFLASH_MASK_TOKEN,
    KEY_DFLASH_TARGET_HIDDEN,
    KEY_DFLASH_TARGET_LAYERS,
    KEY_FC_NORM,
    KEY_NORM_BEFORE_FC,
    KEY_NORM_BEFORE_RESIDUAL,
    KEY_NORM_OUTPUT,
    KEY_TARGET_HIDDEN,
    KEY_TARGET_LAYERS,
    TENSOR_DSPARK_MARKOV,
    UNDRAFTED_FAMILIES,
)
from local_eagle.gguf.reader import GGUFHeader, read_header, split_tensors


def eagle_version(fc_norm: bool, norm_output: bool) -> str:
    """EAGLE 3.1 is EAGLE 3 plus both of its changes (per-chunk FC norm and post-norm feedback).

    The one place that decides it, for a GGUF's keys as for a checkpoint the converter writes.
    """
    return "3.1" if fc_norm and norm_output else "3"


@dataclass
class ModelInfo:
    """What local-eagle needs to know about a GGUF model, target or drafter."""

    path: Path
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    name: str | None = None
    tensor_count: int = 0
    tensor_bytes: dict[str, int] = field(default_factory=dict)
    tensor_counts: dict[str, int] = field(default_factory=dict)
    layer_bytes: dict[str, int] = field(default_factory=dict)  # tensor_bytes of the blk.N tensors alone
    tensor_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    file_type: int | None = None  # general.file_type: llama.cpp's llama_ftype, the quantization it was made as
    # drafter only
    target_layers: list[int] | None = None
    target_hidden_size: int | None = None
    draft_vocab_size: int | None = None
    fc_norm: bool = False
    norm_output: bool = False
    norm_before_fc: bool = False
    norm_before_residual: bool = False
    has_own_embeddings: bool = False
    has_own_lm_head: bool = False
    # block drafter (dflash) only
    block_size: int | None = None
    mask_token_id: int | None = None
    block_family: str | None = None  # dflash, dflash2 or dspark: one GGUF architecture, told apart by keys

    @property
    def is_drafter(self) -> bool:
        """An EAGLE 3 / 3.1 drafter (``eagle3``), the kind the runtime drafts with; see :attr:`is_block_drafter`."""
        return self.arch == DRAFTER_ARCH

    @property
    def is_block_drafter(self) -> bool:
        """A DFlash / DFlash2 / DSpark block drafter (``dflash``): DFlash, DSpark and DFlash2
        draft (``runtime.dflash``)."""
        return self.arch == BLOCK_DRAFTER_ARCH

    @property
    def family(self) -> str | None:
        """The drafter family as the catalog names it (``eagle3``, ``eagle3.1``, ``dflash``, ...), None for a target."""
        if self.is_drafter:
            return "eagle3.1" if self.eagle_version == "3.1" else "eagle3"
        return self.block_family if self.is_block_drafter else None

    @property
    def family_name(self) -> str | None:
        """The family as people read it: ``EAGLE 3``, ``EAGLE 3.1``, ``DFlash``, ``DFlash2``, ``DSpark``."""
        return family_name(self.family) if self.family else None

    @property
    def eagle_version(self) -> str | None:
        return eagle_version(self.fc_norm, self.norm_output) if self.is_drafter else None

    @property
    def quantization(self) -> str:
        """The quantization as Ollama names it (``Q4_K_M``): the file type the GGUF was made as. Without one, the
        type of most of the layers' bytes: the embeddings and output, often kept at Q8_0 or Q6_K in a Q4_K_M
        file and the biggest tensors of a small model, would name it wrongly."""
        if self.file_type is not None:
            return FILE_TYPES.get(self.file_type, f"type {self.file_type}")
        weights = self.layer_bytes or self.tensor_bytes
        return max(weights, key=lambda t: weights[t]).upper() if weights else ""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("tensor_shapes", "layer_bytes")}
        d["quantization"] = self.quantization
        d["path"] = str(self.path)
        d["is_drafter"] = self.is_drafter
        d["eagle_version"] = self.eagle_version
        d["is_block_drafter"] = self.is_block_drafter
        d["family"] = self.family
        return d


def family_name(family: str) -> str:
    """``EAGLE 3.1`` for ``eagle3.1``: a drafter family as ``show``, ``/api/show``, ``doctor`` and the catalog
    say it."""
    return FAMILY_NAMES.get(family, family)


def is_block_family(family: str | None) -> bool:
    return family in BLOCK_FAMILIES


def drafts_with(family: str | None) -> bool:
    """Whether local-eagle drafts with a drafter of this family (every block family now)."""
    return family not in UNDRAFTED_FAMILIES


def read_model_info(path: str | os.PathLike[str], what: str = "GGUF", splits: bool = False) -> ModelInfo:
    """``model_info`` of a file; with ``splits``, the tensors of a split GGUF's other files count too."""
    header = read_header(path, what)
    if splits:
        header = replace(header, tensors=header.tensors + split_tensors(header, what), splits_read=True)
    return model_info(header, Path(path), what)


def model_info(header: GGUFHeader, path: Path | None = None, what: str = "GGUF") -> ModelInfo:
    """A header's ``ModelInfo``; a GGUF without a vocabulary or sizes, or one ``check_model`` refuses (layer
    count, ``d2t``), is refused in one line."""
    path = path or header.path
    kv = header.kv
    arch = kv.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        raise GGUFError(f"{path}: {what} has no general.architecture")

    def need_int(key: str) -> int:
        v = kv.get(key)
        if v is None:
            raise GGUFError(f"{path}: {what} lacks the key '{key}'")
        return int(v)

    tokens = kv.get(Keys.Tokenizer.LIST)
    vocab_size = Keys.LLM.VOCAB_SIZE.format(arch=arch)
    if tokens is not None:
        n_vocab = len(tokens)
    elif kv.get(vocab_size) is not None:
        n_vocab = int(kv[vocab_size])
    else:
        raise GGUFError(f"{path}: {what} has no tokenizer.ggml.tokens (a GGUF without its vocabulary)")
    check_model(header, what, path)

    by_type: Counter[str] = Counter()
    layer_bytes: Counter[str] = Counter()
    count_by_type: Counter[str] = Counter()
    shapes: dict[str, tuple[int, ...]] = {}
    for t in header.tensors:
        tname = GGMLQuantizationType(t.type).name
        by_type[tname] += int(t.nbytes)
        if t.name.startswith("blk."):
            layer_bytes[tname] += int(t.nbytes)
        count_by_type[tname] += 1
        shapes[t.name] = t.ne
    info = ModelInfo(
        path=path,
        arch=arch,
        n_layer=need_int(Keys.LLM.BLOCK_COUNT.format(arch=arch)),
        n_embd=need_int(Keys.LLM.EMBEDDING_LENGTH.format(arch=arch)),
        n_vocab=n_vocab,
        name=kv.get(Keys.General.NAME),
        tensor_count=len(header.tensors),
        tensor_bytes=dict(by_type),
        tensor_counts=dict(count_by_type),
        tensor_shapes=shapes,
        layer_bytes=dict(layer_bytes),
        file_type=_file_type(kv.get(Keys.General.FILE_TYPE)),
    )
    if arch == DRAFTER_ARCH:
        layers = kv.get(KEY_TARGET_LAYERS)
        info.target_layers = [int(x) for x in layers] if layers is not None else None
        ths = kv.get(KEY_TARGET_HIDDEN)
        info.target_hidden_size = int(ths) if ths is not None else None
        d2t = shapes.get("d2t")
        info.draft_vocab_size = d2t[0] if d2t else n_vocab
        info.fc_norm = bool(kv.get(KEY_FC_NORM, False))
        info.norm_output = bool(kv.get(KEY_NORM_OUTPUT, False))
        info.norm_before_fc = bool(kv.get(KEY_NORM_BEFORE_FC, False))
        info.norm_before_residual = bool(kv.get(KEY_NORM_BEFORE_RESIDUAL, False))
        info.has_own_embeddings = "token_embd.weight" in shapes
        info.has_own_lm_head = "output.weight" in shapes
    elif arch == BLOCK_DRAFTER_ARCH:
        layers = kv.get(KEY_DFLASH_TARGET_LAYERS)
        info.target_layers = [int(x) for x in layers] if isinstance(layers, list) else None
        info.target_hidden_size = _int(kv.get(KEY_DFLASH_TARGET_HIDDEN))
        info.block_size = _int(kv.get(KEY_DFLASH_BLOCK_SIZE))
        info.mask_token_id = _int(kv.get(KEY_DFLASH_MASK_TOKEN))
        info.draft_vocab_size = n_vocab
        info.block_family = block_family(kv, shapes)
        info.has_own_embeddings = "token_embd.weight" in shapes
        info.has_own_lm_head = "output.weight" in shapes
    return info


def block_family(kv: dict[str, Any], tensor_names: Any) -> str:
    """Which block drafter a ``dflash`` GGUF holds: DSpark (a Markov head), DFlash2 (dynamic convolutions) or DFlash."""
    if TENSOR_DSPARK_MARKOV in tensor_names:
        return "dspark"
    return "dflash2" if kv.get(KEY_DFLASH_CONV_KERNEL) is not None else "dflash"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _file_type(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def check_gguf(path: str | os.PathLike[str], what: str = "GGUF", loading: bool = True) -> GGUFHeader:
    """A GGUF file checked as a whole, splits included, right before llama.cpp opens it; its header.

    ``loading``: read through ``model_info`` (which runs :func:`check_model`) and so also require what a model
    needs to run (an architecture, sizes, a vocabulary), in the very line ``inspect`` prints for the file.
    Without it (a Modelfile's FROM being stored) only what the file holds is judged; what it lacks is told
    when it loads.
    """
    header = read_header(path, what)
    more = split_tensors(header, what)
    header = replace(header, tensors=header.tensors + more, splits_read=True)
    if loading:
        model_info(header, Path(path), what)
    else:
        check_model(header, what, Path(path))
    return header
