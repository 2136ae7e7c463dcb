"""Model shapes from GGUF headers: what the planner needs to know about a target or a drafter.

Only headers are read (the tensor table and hyper-parameters), so a 70B model is planned in
milliseconds; a split GGUF's other files contribute their tensor tables.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gguf import Keys

from local_eagle.errors import GGUFError
from local_eagle.gguf import DRAFTER_ARCH, ModelInfo, Tensor, read_header, split_tensors
from local_eagle.gguf import check_pair as gguf_check_pair
from local_eagle.gguf.check import check_model
from local_eagle.gguf.info import block_family
from local_eagle.gguf.keys import (
    BLOCK_DRAFTER_ARCH,
    KEY_DFLASH_BLOCK_SIZE,
    KEY_DFLASH_TARGET_HIDDEN,
    KEY_DFLASH_TARGET_LAYERS,
)

# Architectures whose compute graphs are rebuilt node by node (checked against llama.cpp);
# others get generic estimates and a note saying so.
KNOWN_ARCHS = {"llama", "qwen2", "qwen3", "gemma3", "eagle3", "dflash"}  # dflash: priced by vram.block
# Default SWA layer pattern (every n-th layer is global) where llama.cpp hard-codes one.
SWA_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "olmo2": 4, "exaone4": 4}
SWA_WINDOW_DEFAULTS = {"gemma2": 4096}
TOKEN_EMBD_HOST = ("token_embd.weight", "per_layer_token_embd.weight", "token_types.weight")
# The families whose model builds an MTP graph in llama-cpp-python 0.3.36: ``runtime.mtp.MTP_ARCHS``, repeated
# here so that planning never imports the runtime (and its library); a test keeps the two equal.
MTP_ARCHS = frozenset(
    {"glm4moe", "glm-dsa", "deepseek2", "deepseek32", "deepseek4", "qwen35", "qwen35moe", "qwen3next", "bailingmoe3",
     "nemotron_h_moe", "cohere2moe", "mimo2", "hy_v3", "step35"}
)  # fmt: skip
# ``runtime.mtp.RS_ROLLBACK_ARCHS`` and ``CHECKED_ROLLBACK_ARCHS``, repeated for the same reason: the families whose
# recurrent state llama.cpp rolls back by per-token snapshots, and those of them whose own head local-eagle drafts with.
RS_ROLLBACK_ARCHS = frozenset(
    {"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2",
     "lfm2moe", "bailingmoe3"}
)  # fmt: skip
CHECKED_ROLLBACK_ARCHS = frozenset({"qwen35", "qwen35moe", "nemotron_h_moe", "bailingmoe3", "deepseek4"})
# ``runtime.mtp.CHECKPOINT_ROLLBACK_ARCHS``: no snapshots, rounds rolled back by a saved recurrent state instead
CHECKPOINT_ROLLBACK_ARCHS = frozenset({"qwen3next"})
# ``runtime.mtp.CHAINED_HEAD_ARCHS``: several heads drafted as a chain
CHAINED_HEAD_ARCHS = frozenset({"step35", "mimo2", "hy_v3"})
# NextN-block tensors some families' loaders create without the block's skip flag, so llama.cpp loads them as the
# model's with or without ``load_mtp`` (``src/models/cohere2moe.cpp`` ``load_block_mtp``: the optional embedding and
# head; ``src/models/hy-v3.cpp`` ``load_block``: the FFN and router, then the same optional three;
# ``deepseek32.cpp``, ``glm-dsa.cpp``: the router's selection bias; ``step35.cpp`` ``load_block_mtp``: the q/k norms,
# the attention gate, the FFN and router, the optional three): name prefixes after ``blk.N.``, with exceptions the
# block's flag does skip.
NEXTN_ALWAYS_LOADED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cohere2moe": (("nextn.embed_tokens.", "nextn.shared_head_head.", "nextn.shared_head_norm."), ()),
    "deepseek32": (("exp_probs_b.",), ()),
    "glm-dsa": (("exp_probs_b.",), ()),
    "hy_v3": (("ffn_", "exp_probs_b", "nextn.embed_tokens.", "nextn.shared_head_head.", "nextn.shared_head_norm."),
              ("ffn_norm.",)),
    "step35": (("attn_q_norm.", "attn_k_norm.", "attn_gate.", "ffn_", "exp_probs_b", "nextn.embed_tokens.",
                "nextn.shared_head_head.", "nextn.shared_head_norm."), ("ffn_norm.",)),
}  # fmt: skip
# Hybrids whose attention layers are every n-th trunk layer unless ``attention.recurrent_layers`` lists them
# (``full_attention_interval``, llama.cpp's default when absent: ``src/models/qwen35.cpp`` ``load_arch_hparams``).
FULL_ATTENTION_INTERVAL_DEFAULTS = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "qwen4exp": 4, "minimax-01": 8}


@dataclass
class ModelShape:
    """What the planner needs from one GGUF: hyper-parameters per layer and the tensor table."""

    path: Path
    arch: str
    name: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: list[int]
    n_head_kv: list[int]
    n_ff: list[int]
    head_k: list[int]
    head_v: list[int]
    is_swa: list[bool]
    n_swa: int
    mla: bool
    recurrent: list[bool]
    ssm_r: int  # recurrent state floats per sequence and layer (conv / token shift)
    ssm_s: int  # (ssm / wkv state)
    tensors: list[Tensor]
    known: bool
    notes: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    ssm_dims: tuple[int, int, int, int] = (0, 0, 0, 0)  # d_inner, d_state, dt_rank, d_conv
    n_nextn: int = 0  # the last n_nextn of the n_layer blocks are NextN (MTP) blocks (``nextn_predict_layers``)
    moe: tuple[int, int, int, int] = (0, 0, 0, 0)  # experts, experts used, expert FFN width, shared experts
    cache: dict[Any, int] = field(default_factory=dict, repr=False, compare=False)
    # drafter only
    target_hidden: int | None = None
    draft_vocab: int | None = None
    target_layers: list[int] | None = None
    # block drafter (dflash) only
    block_size: int | None = None
    block_family: str | None = None

    @property
    def is_drafter(self) -> bool:
        return self.arch == DRAFTER_ARCH

    @property
    def is_block_drafter(self) -> bool:
        """A DFlash / DFlash2 / DSpark block drafter (``dflash``): priced by ``vram.block``."""
        return self.arch == BLOCK_DRAFTER_ARCH

    @property
    def tied_output(self) -> bool:
        """A target without ``output.weight`` reuses ``token_embd`` as its head (a copy on the output device)."""
        names = {t.name for t in self.tensors}
        return not self.is_drafter and "output.weight" not in names and "token_embd.weight" in names

    @property
    def n_trunk(self) -> int:
        """Blocks before the NextN ones: llama.cpp's ``n_layer()`` (``n_layer_all - n_layer_nextn``)."""
        return self.n_layer - self.n_nextn

    def is_nextn(self, t: Tensor) -> bool:
        """A tensor of a NextN block: llama.cpp skips it (``TENSOR_SKIP``) unless the model is loaded with
        ``load_mtp``, and then it is the MTP head's weight, not the trunk's; except those a family's loader always
        loads (``NEXTN_ALWAYS_LOADED``), which are the model's either way."""
        if not (self.n_nextn > 0 and t.layer is not None and self.n_trunk <= t.layer < self.n_layer):
            return False
        always, skipped = NEXTN_ALWAYS_LOADED.get(self.arch, ((), ()))
        part = t.name.split(".", 2)[2] if t.name.count(".") >= 2 else t.name
        return not (part.startswith(always) and not part.startswith(skipped))

    def tensor(self, name: str) -> Tensor | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


def _per_layer(key: Callable[[str], Any], arch: str, k: str, n: int, path: Path) -> list[int]:
    """A hyper-parameter llama.cpp accepts as one value or one per layer (``{arch}.{k}``, read by ``key``), as
    one per layer."""
    v = key(k)
    if v is None:
        return []
    if isinstance(v, list):
        if len(v) != n:
            raise GGUFError(f"{path}: '{arch}.{k}' holds {len(v)} values, expected one per layer ({n})")
        return [int(x) for x in v]
    return [int(v)] * n


def _recurrent_layers(
    arch: str, key: Any, head_kv: list[int], n_layer: int, n_nextn: int, path: Path, n_ff: list[int] | None = None
) -> list[bool]:
    """Which layers keep recurrent state, as llama.cpp's ``hparams.is_recr`` decides for a model with state.

    ``attention.recurrent_layers`` where the file has it; else, for the ``full_attention_interval`` hybrids
    (qwen3next, qwen35, ...), every trunk layer but each n-th (NextN blocks are attention); else a zero KV-head
    count marks a recurrent layer (nemotron_h, jamba, ...), and a model with no KV heads is recurrent throughout.
    Nemotron-H's FFN-only blocks have no KV heads either: a zero ``n_ff`` tells its Mamba 2 blocks from them
    (``src/models/nemotron-h.cpp`` ``load_arch_hparams``).
    """
    listed = _per_layer(key, arch, "attention.recurrent_layers", n_layer, path)
    if listed:
        return [bool(x) for x in listed]
    if arch in FULL_ATTENTION_INTERVAL_DEFAULTS:
        every = int(key("full_attention_interval", FULL_ATTENTION_INTERVAL_DEFAULTS[arch]) or 0)
        if every <= 0:
            raise GGUFError(f"{path}: '{arch}.full_attention_interval' is {every}; expected a positive interval")
        return [il < n_layer - n_nextn and (il + 1) % every != 0 for il in range(n_layer)]
    if arch in ("nemotron_h", "nemotron_h_moe") and n_ff is not None:
        trunk = n_layer - n_nextn
        return [h == 0 and f == 0 and il < trunk for il, (h, f) in enumerate(zip(head_kv, n_ff, strict=True))]
    return [h == 0 for h in head_kv] if any(head_kv) else [True] * n_layer


def read_shape(path: str | os.PathLike[str], what: str = "target GGUF") -> ModelShape:
    """Read one GGUF's header into a ModelShape; the weights are never read.

    The header is checked first (``local_eagle.gguf.check``): every per-layer list below is as long as a
    ``block_count`` bounded by llama.cpp's 512 and matched by the file's ``blk.N`` tensors.
    """
    h = read_header(path, what)
    p = h.path
    more = split_tensors(h, what)
    check_model(replace(h, tensors=h.tensors + more, splits_read=True), what)
    arch = h.kv.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        raise GGUFError(f"{p}: {what} has no general.architecture")

    def key(k: str, default: Any = None) -> Any:
        v = h.kv.get(f"{arch}.{k}", default)
        return default if v is None else v

    def need(k: str) -> int:
        v = key(k)
        if v is None:
            raise GGUFError(f"{p}: {what} lacks the key '{arch}.{k}'")
        return int(v)

    n_layer = need("block_count")
    n_embd = need("embedding_length")
    if n_layer <= 0 or n_embd <= 0:
        raise GGUFError(f"{p}: {what} has block_count={n_layer}, embedding_length={n_embd}; expected positive sizes")
    tensors = h.tensors + more
    names = {t.name for t in tensors}

    tok = h.kv.get(Keys.Tokenizer.LIST)
    if tok is not None:
        n_vocab = len(tok)
    elif key("vocab_size") is not None:
        n_vocab = int(key("vocab_size"))
    elif "token_embd.weight" in names:
        n_vocab = next(t.ne[1] for t in tensors if t.name == "token_embd.weight")
    else:
        raise GGUFError(f"{p}: {what} has no vocabulary (tokenizer.ggml.tokens or {arch}.vocab_size)")

    notes: list[str] = []
    known = arch in KNOWN_ARCHS
    d_conv, d_inner = int(key("ssm.conv_kernel", 0) or 0), int(key("ssm.inner_size", 0) or 0)
    d_state, n_group = int(key("ssm.state_size", 0) or 0), int(key("ssm.group_count", 0) or 0)
    wkv = int(key("wkv.head_size", 0) or 0)
    kda = int(key("kda.head_dim", 0) or 0)  # Kimi delta attention (bailingmoe3, kimi-linear)
    has_state = bool((d_inner and d_state) or wkv or kda)
    head = _per_layer(key, arch, "attention.head_count", n_layer, p)
    if not head:
        head = [0 if has_state else max(1, n_embd // 128)] * n_layer
        if not has_state:
            notes.append(f"{arch}.attention.head_count missing: assumed {head[0]} heads of 128")
    head_kv = _per_layer(key, arch, "attention.head_count_kv", n_layer, p) or list(head)
    n_ff = _per_layer(key, arch, "feed_forward_length", n_layer, p) or [4 * n_embd] * n_layer
    hk_default = n_embd // max(head) if max(head) else 0
    hk = int(key("attention.key_length", hk_default))
    hv = int(key("attention.value_length", hk))

    n_swa = int(key("attention.sliding_window", 0) or 0) or SWA_WINDOW_DEFAULTS.get(arch, 0)
    is_swa = [False] * n_layer
    if n_swa > 0:
        pat = key("attention.sliding_window_pattern")
        if isinstance(pat, list):
            is_swa = [bool(x) for x in pat][:n_layer] + [False] * max(0, n_layer - len(pat))
        else:
            n_pat = int(pat) if pat is not None else SWA_PATTERN_DEFAULTS.get(arch)
            if n_pat is None:
                n_pat = 0
                notes.append(f"{arch}: sliding window without a layer pattern; assumed every layer is windowed")
            is_swa = [n_pat == 0 or (il % n_pat < n_pat - 1) for il in range(n_layer)]
    hk_swa = int(key("attention.key_length_swa", hk))
    hv_swa = int(key("attention.value_length_swa", hv))
    head_k = [hk_swa if s else hk for s in is_swa]
    head_v = [hv_swa if s else hv for s in is_swa]

    mla = key("attention.key_length_mla") is not None and key("attention.value_length_mla") is not None

    ssm_r = ssm_s = 0
    recurrent = [False] * n_layer
    n_nextn = int(key("nextn_predict_layers", 0) or 0)
    if d_inner and d_state:
        ssm_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        ssm_s = d_state * d_inner
    elif kda:  # src/llama-hparams.cpp n_embd_r / n_embd_s: q, k and v convolutions; a square state per head
        ssm_r = 3 * (d_conv - 1 if d_conv > 0 else 3) * head[0] * kda
        ssm_s = kda * kda * head[0]
    elif wkv:
        ssm_r = int(key("token_shift_count", 2) or 2) * n_embd
        ssm_s = n_embd * wkv
    if ssm_r or ssm_s:
        recurrent = _recurrent_layers(arch, key, head_kv, n_layer, n_nextn, p, n_ff)
        if not any(head_kv):
            head_kv = [0] * n_layer

    shape = ModelShape(
        path=p,
        arch=arch,
        name=str(h.kv.get(Keys.General.NAME) or p.stem),
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=n_vocab,
        n_ctx_train=int(key("context_length", 0) or 0),
        n_head=head,
        n_head_kv=head_kv,
        n_ff=n_ff,
        head_k=head_k,
        head_v=head_v,
        is_swa=is_swa,
        n_swa=n_swa,
        mla=mla,
        recurrent=recurrent,
        ssm_r=ssm_r,
        ssm_s=ssm_s,
        tensors=tensors,
        known=known,
        notes=notes,
        ssm_dims=(d_inner, d_state, int(key("ssm.time_step_rank", 0) or 0), d_conv),
        n_nextn=n_nextn,
        moe=(
            int(key("expert_count", 0) or 0),
            int(key("expert_used_count", 0) or 0),
            int(key("expert_feed_forward_length", 0) or 0),
            int(key("expert_shared_count", 0) or 0),
        ),
    )
    if not known:
        shape.notes.insert(
            0,
            f"architecture '{arch}' is not modelled exactly: weights and KV/state come from the tensor table "
            f"and generic keys, the compute buffer is estimated with a llama-like graph"
            + (" (Mamba-like for recurrent layers)" if any(recurrent) else ""),
        )
    if arch == DRAFTER_ARCH:
        ths = key("target_hidden_size")
        if ths is None:
            raise GGUFError(f"{p}: drafter lacks '{arch}.target_hidden_size'")
        shape.target_hidden = int(ths)
        d2t = shape.tensor("d2t")
        shape.draft_vocab = d2t.ne[0] if d2t else n_vocab
        shape.flags = {k for k in ("norm_before_residual", "norm_before_fc") if key(k, False)}
        layers = key("target_layers")
        shape.target_layers = [int(x) for x in layers] if layers is not None else None
    elif arch == BLOCK_DRAFTER_ARCH:
        _block_drafter(shape, h.kv, p, what)
    return shape


def _block_drafter(shape: ModelShape, kv: dict[str, Any], p: Path, what: str) -> None:
    """A DFlash GGUF's ``dflash.*`` keys: what ``vram.block`` prices (its captured layers, width, block)."""
    ths, layers = kv.get(KEY_DFLASH_TARGET_HIDDEN), kv.get(KEY_DFLASH_TARGET_LAYERS)
    block = kv.get(KEY_DFLASH_BLOCK_SIZE)
    if not isinstance(ths, int) or ths <= 0:
        raise GGUFError(f"{p}: {what} lacks '{KEY_DFLASH_TARGET_HIDDEN}'")
    if not isinstance(layers, list) or not layers or not all(isinstance(x, int) for x in layers):
        raise GGUFError(f"{p}: {what} lacks '{KEY_DFLASH_TARGET_LAYERS}' (the target layers it reads)")
    if not isinstance(block, int) or not 1 <= block <= 4096:
        raise GGUFError(f"{p}: {what} has '{KEY_DFLASH_BLOCK_SIZE}' {block!r}; expected a block of 1 to 4096 tokens")
    shape.target_hidden = ths
    shape.target_layers = [int(x) for x in layers]
    shape.block_size = block
    shape.draft_vocab = shape.n_vocab
    shape.block_family = block_family(kv, {t.name for t in shape.tensors})


def has_state(shape: ModelShape) -> bool:
    """Recurrent layers with state (a recurrent or hybrid model): llama.cpp's ``is_recurrent`` / ``is_hybrid``."""
    return any(shape.recurrent) and bool(shape.ssm_r or shape.ssm_s)


def mtp_refusal(shape: ModelShape, rollback: int = 1) -> str | None:
    """Why the engine would not draft with this target's own MTP head (None when it would), from its header.

    The planner's copy of ``runtime.mtp.mtp_refusal`` then ``rollback_refusal`` (same order, same words): one NextN
    head, a family with an MTP graph, and a cache that drops rejected drafts: any attention cache, a hybrid one only
    where llama.cpp keeps the recurrent-state snapshots (``rollback`` of them, the engine's draft bound) by code
    local-eagle has checked (qwen35, qwen35moe, nemotron_h_moe, bailingmoe3, deepseek4).
    """
    name = shape.path.name
    if shape.n_nextn <= 0:
        return f"{name} has no NextN (MTP) layers"
    if shape.arch not in MTP_ARCHS:
        return f"{name}: llama.cpp 0.3.36 builds no MTP graph for architecture '{shape.arch}'"
    if shape.n_nextn > 1 and shape.arch not in CHAINED_HEAD_ARCHS:
        return (
            f"{name} has {shape.n_nextn} chained MTP heads; local-eagle drafts with chained heads only for "
            f"{', '.join(sorted(CHAINED_HEAD_ARCHS))} so far (runtime.mtp_chain)"
        )
    if not has_state(shape) or shape.arch in CHECKPOINT_ROLLBACK_ARCHS:
        return None
    if shape.arch not in RS_ROLLBACK_ARCHS:
        return (
            f"{name}: llama.cpp 0.3.36 keeps no recurrent-state snapshots for architecture '{shape.arch}', so "
            "a rejected draft cannot be dropped from its recurrent layers"
        )
    if shape.arch not in CHECKED_ROLLBACK_ARCHS:
        return (
            f"{name}: llama.cpp 0.3.36 rolls '{shape.arch}' recurrent state back by snapshots in code "
            "local-eagle has not checked on any model yet, so its own head does not draft"
        )
    if rollback < 1:
        return f"{name} has recurrent layers and no snapshots were allowed to roll a draft back (rollback 0)"
    return None


def pair_info(shape: ModelShape) -> ModelInfo:
    """The header facts ``local_eagle.gguf.check_pair`` judges a pair by, from a shape (splits included)."""
    return ModelInfo(
        path=shape.path,
        arch=shape.arch,
        n_layer=shape.n_layer,
        n_embd=shape.n_embd,
        n_vocab=shape.n_vocab,
        name=shape.name,
        tensor_count=len(shape.tensors),
        tensor_shapes={t.name: t.ne for t in shape.tensors},
        target_layers=shape.target_layers,
        target_hidden_size=shape.target_hidden,
        draft_vocab_size=shape.draft_vocab,
        block_size=shape.block_size,
        block_family=shape.block_family,
    )


def check_pair(target: ModelShape, draft: ModelShape) -> None:
    """The drafter must have been built for this target: the runtime's own check, on the planner's shapes."""
    gguf_check_pair(pair_info(target), pair_info(draft))
