"""Training data for a drafter: the target's own answers, its hidden states and its distributions.

Prompts are answered by the target itself (self-distillation, as EAGLE does); plain text is
teacher-forced. One teacher-forced pass over each sample then captures the three target layers
through the runtime's capture path and the target's top-k next-token log-probabilities. Each
sample is stored as its own ``.npz`` (written to a temporary name, then renamed), so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.files import atomic_output, jsonl_records, read_text_input
from local_eagle.llamacpp.bindings import Context, ContextOptions
from local_eagle.runtime.sampling import GREEDY
from local_eagle.train.defaults import PROMPT_MAX_TOKENS

TOPK = 32
CHUNK = 64  # rows per teacher-forced decode: bounds the logits buffer (CHUNK x vocab floats)


@dataclass
class Sample:
    text: str
    generate: bool  # True: a prompt the target answers; False: text to teacher-force


def read_samples(path: str | os.PathLike[str]) -> list[Sample]:
    """``.jsonl`` ({"prompt": ...} answered by the target, or {"text": ...} taken as is) or ``.txt`` paragraphs."""
    p = Path(path)
    raw = read_text_input(p, "prompts file")
    samples: list[Sample] = []
    if p.suffix == ".jsonl":
        for i, obj in jsonl_records(p, raw):
            if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                samples.append(Sample(obj["prompt"], True))
            elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
                samples.append(Sample(obj["text"], False))
            elif isinstance(obj, str):
                samples.append(Sample(obj, True))
            else:
                raise LocalEagleError(f"{p}:{i}: expected an object with a string 'prompt' or 'text' field")
    else:
        samples = [Sample(par.strip(), False) for par in raw.split("\n\n") if par.strip()]
    samples = [s for s in samples if s.text.strip()]
    if not samples:
        raise LocalEagleError(f"{p}: the prompt set is empty")
    return samples


def bytes_per_token(target_hidden: int) -> int:
    return 3 * target_hidden * 4 + TOPK * (4 + 2) + 4


def check_disk(out_dir: Path, n_samples: int, tokens_per_sample: int, target_hidden: int) -> int:
    """Estimated bytes of the dataset; refuse to start when the disk cannot hold it."""
    need = n_samples * tokens_per_sample * bytes_per_token(target_hidden)
    out_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out_dir).free
    if need > free * 0.95:
        raise LocalEagleError(
            f"{out_dir}: the training data needs about {need / 2**30:.2f} GiB, only {free / 2**30:.2f} GiB is free"
        )
    return need


def _save(path: Path, **arrays: np.ndarray) -> None:
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def capture_sample(
    ctx: Context, capture, tokens: np.ndarray, n_vocab: int, soft_from: int = 0, chunk: int = CHUNK, topk: int = TOPK
) -> dict[str, np.ndarray]:
    """Teacher-force ``tokens`` through the target: features everywhere, top-k log-probabilities from ``soft_from``.

    Positions before ``soft_from`` (a prompt the target did not write) get the actual next token as a
    hard label, which spares computing full-vocabulary logits there.
    """
    import torch

    n = len(tokens)
    ctx.clear()
    feats = np.empty((n, len(capture.layers) * ctx.model.n_embd), dtype=np.float32)  # hidden states overflow fp16
    top_ids = np.zeros((n, topk), dtype=np.int32)
    top_lp = np.full((n, topk), -np.inf, dtype=np.float16)
    hard = np.arange(min(soft_from, n - 1))
    top_ids[hard, 0] = tokens[hard + 1]
    top_lp[hard, 0] = 0.0
    for s in range(0, n, chunk):
        part = tokens[s : s + chunk]
        m = len(part)
        rows = np.arange(s, s + m)
        outputs = rows >= soft_from
        ctx.decode(part, rows, outputs)
        feats[s : s + m] = capture.features(m)
        if not outputs.any():
            continue
        idx = np.nonzero(outputs)[0]
        logits = torch.from_numpy(np.stack([ctx.logits(int(i), n_vocab) for i in idx]))
        vals, ids = torch.topk(logits, topk, dim=1)
        lse = torch.logsumexp(logits, dim=1, keepdim=True)
        top_ids[s + idx] = ids.numpy()
        top_lp[s + idx] = (vals - lse).numpy()
    return {"tokens": tokens.astype(np.int32), "features": feats, "top_ids": top_ids, "top_logprobs": top_lp}


def build_dataset(
    target: str | os.PathLike[str],
    samples: list[Sample],
    layers: list[int],
    out_dir: str | os.PathLike[str],
    max_tokens_per_sample: int = PROMPT_MAX_TOKENS,
    n_ctx: int = 2048,
    n_threads: int = 0,
    progress: bool = True,
) -> list[Path]:
    """Write one ``sample-NNNNNN.npz`` per sample (skipping those already there) and return their paths."""
    from rich.progress import Progress

    from local_eagle.runtime.capture import LayerCapture
    from local_eagle.runtime.engine import Engine, EngineOptions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine(target, None, EngineOptions(n_ctx=n_ctx, n_batch=512, n_threads=n_threads))
    try:
        capture = LayerCapture.create(engine.model, layers)
        opts = ContextOptions(n_ctx=n_ctx, n_batch=CHUNK, n_ubatch=CHUNK, n_threads=n_threads)
        ctx = Context(engine.model, opts, cb_eval=capture.callback)
        capture.attach(ctx)
        check_disk(out, sum(1 for i in range(len(samples)) if not (out / f"sample-{i:06d}.npz").exists()),
                   max_tokens_per_sample + 64, engine.model.n_embd)  # fmt: skip
        paths = []
        with Progress(disable=not progress) as bar:
            task = bar.add_task("capturing target states", total=len(samples))
            for i, s in enumerate(samples):
                path = out / f"sample-{i:06d}.npz"
                paths.append(path)
                if path.exists():
                    bar.advance(task)
                    continue
                prompt = engine.tokenize(s.text)[: n_ctx - max_tokens_per_sample - 1]
                if s.generate:
                    res = engine.generate(prompt, max_tokens=max_tokens_per_sample, sampling=GREEDY, draft_max=0)
                    tokens = np.concatenate([prompt, np.asarray(res.tokens, dtype=np.int32)])
                    soft_from = len(prompt) - 1
                else:
                    tokens = prompt[: max_tokens_per_sample + 64]
                    soft_from = 0
                if len(tokens) < 4:
                    bar.advance(task)
                    paths.pop()
                    continue
                _save(path, **capture_sample(ctx, capture, tokens, engine.n_vocab, soft_from))
                bar.advance(task)
        ctx.close()
        return paths
    finally:
        engine.close()
