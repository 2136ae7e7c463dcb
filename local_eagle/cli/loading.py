"""What a command checks before llama.cpp loads a pair, and what it says when llama.cpp refuses one.

llama.cpp allocates whatever context it is asked for (``--ctx 1000000000`` ran to 19.6 GB before
``std::bad_alloc``), so :func:`plan_context` first caps the context at the one the model was trained
on (``<arch>.context_length``) unless ``--ctx-beyond-training`` says otherwise, then prices its KV
cache and compute buffers with the planner ``fit`` uses (:mod:`local_eagle.vram`) and refuses what
this machine cannot hold. A drafter given as the target, or a file llama.cpp cannot load, gets the
sentence ``inspect`` would print rather than llama.cpp's log line. ``generate``, ``chat``, ``bench``
(through :func:`open_engine`) and ``serve`` all load through here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from local_eagle.cli.console import err
from local_eagle.errors import GGUFError, LlamaError, LocalEagleError
from local_eagle.settings import DEFAULT_CTX, N_BATCH, LoadOptions  # noqa: F401 - the loaders' options, read here too
from local_eagle.units import human_bytes

if TYPE_CHECKING:
    from local_eagle.runtime.engine import Engine

BeyondTrainingOpt = Annotated[
    bool,
    typer.Option(
        "--ctx-beyond-training",
        help="Allow a context longer than the model was trained on (else it is capped there, with a note).",
    ),
]

def open_engine(model: Path, draft: Path | None, load: LoadOptions) -> Engine:
    """An engine for the pair, once :func:`plan_context` has found a context it can hold."""
    from local_eagle.runtime.engine import Engine

    n_ctx = plan_context(model, draft, load)
    try:
        return Engine(model, draft, load.engine_options(n_ctx))
    except LlamaError as e:
        raise explain_load_failure(e, model, draft) from None


def note_tree_refusal(engine: Engine, asked: bool) -> None:
    """One note when trees were asked for (``--tree N``, or ``auto`` where the command is verbose) and this
    target cannot branch its cache: its rounds draft chains."""
    if asked and engine.tree_refusal is not None:
        _note(f"no draft trees for this target ({engine.tree_refusal}): it drafts chains instead")


def note_mtp(engine: Engine, verbose: bool) -> None:
    """With ``--verbose``, one note on the target's own MTP head: how it drafts and how a rejected draft leaves the
    target's cache (a hybrid target's recurrent state rolls back to llama.cpp's snapshots), or why it does not draft."""
    if not verbose:
        return
    if engine.mtp_note is not None:
        _note(engine.mtp_note)
    elif engine.mtp_refusal is not None:
        _note(f"the model's own MTP head does not draft: {engine.mtp_refusal}")


def own_head(model: Path, draft: Path | None, mtp: bool) -> bool | None:
    """Whether the target's own MTP head drafts, for a chat's draft bound (``ChatSession.mtp``): True where the GGUF
    has NextN layers and no drafter is named, False where ``mtp`` is off (``--no-mtp``, ``DRAFT none``), None where
    a drafter drafts instead or there is no head (the engine decides what it can draft with, ``Engine.mtp_refusal``)."""
    from gguf import Keys

    from local_eagle.gguf import read_header
    from local_eagle.gguf.keys import KEY_NEXTN_PREDICT_LAYERS

    if draft is not None:
        return None
    if not mtp:
        return False
    try:
        kv = read_header(model, "target GGUF").kv
    except GGUFError:
        return None
    heads = kv.get(KEY_NEXTN_PREDICT_LAYERS.format(arch=kv.get(Keys.General.ARCHITECTURE)), 0)
    return True if isinstance(heads, int) and heads > 0 else None


def plan_context(model: Path, draft: Path | None, load: LoadOptions, note: Callable[[str], None] | None = None) -> int:
    """The context to create: the trained context at most (unless allowed), and within this machine's memory.

    A header that cannot be read is left to llama.cpp (and :func:`explain_load_failure`): only
    llama.cpp decides what it can load.
    """
    from gguf import Keys

    from local_eagle.gguf import DRAFTER_ARCH, read_header
    from local_eagle.gguf.keys import BLOCK_DRAFTER_ARCH

    try:
        kv = read_header(model, "target GGUF").kv
    except GGUFError:
        return load.ctx or DEFAULT_CTX
    arch = kv.get(Keys.General.ARCHITECTURE)
    if arch in (DRAFTER_ARCH, BLOCK_DRAFTER_ARCH):
        what = "an EAGLE" if arch == DRAFTER_ARCH else "a DFlash block"
        raise LocalEagleError(f"{model} is {what} drafter; give it with --draft and its target with --model")
    trained = kv.get(Keys.LLM.CONTEXT_LENGTH.format(arch=arch))
    trained = trained if isinstance(trained, int) and trained > 0 else None
    n_ctx = capped_context(load.ctx, trained, load.beyond_training, note or _note)
    check_memory(model, draft, n_ctx, load)
    return n_ctx


def _note(text: str) -> None:
    err.print(f"note: {text}", highlight=False, markup=False, style="dim", soft_wrap=True)


def capped_context(requested: int | None, trained: int | None, beyond: bool, note: Callable[[str], None]) -> int:
    """``requested`` (None: the default), capped at ``trained`` unless ``beyond``; a cap the user
    asked past gets one note (the default is capped quietly: it is a default, not a request)."""
    n_ctx = DEFAULT_CTX if requested is None else requested
    if trained is None or n_ctx <= trained or beyond:
        return n_ctx
    if requested is not None:
        note(
            f"the model was trained on a context of {trained} tokens: using {trained}, not {requested} "
            "(--ctx-beyond-training allows more)"
        )
    return trained


def check_memory(model: Path, draft: Path | None, n_ctx: int, load: LoadOptions) -> None:
    """Refuse a context whose KV cache and compute buffers outgrow this machine, before llama.cpp tries.

    The bytes are the planner's (``fit``); the weights are left out, since llama.cpp maps them from
    the file. On a GPU build the GPU's memory counts too. The estimate only guards against the
    absurd: a file the planner cannot read or price is left to llama.cpp, never refused here.
    """
    from local_eagle.llamacpp.backends import gpu_offload_supported

    gpu = gpu_offload_supported()
    try:
        need = buffer_bytes(model, draft, n_ctx, load, gpu)
    except (LocalEagleError, ArithmeticError, LookupError, TypeError, ValueError):
        return
    have = physical_memory()
    if load.parallel > 1 and have is not None and need > have:
        refusal = _parallel_refusal(model, draft, n_ctx, load, gpu, have)
        if refusal is not None:
            raise LocalEagleError(refusal)
    if have is None or need <= have:
        return
    where = "memory"
    if gpu and load.gpu_layers != 0:
        from local_eagle.vram.gpus import detect

        found = detect()
        if found is not None:
            have, where = have + found.total * found.count, "memory and GPU memory"
    if need > have:
        raise LocalEagleError(
            f"a context of {n_ctx} tokens needs {human_bytes(need)} for the KV cache and compute buffers, "
            f"more than this machine's {human_bytes(have)} of {where}; lower --ctx "
            "(local-eagle fit shows the breakdown)"
        )


def buffer_bytes(model: Path, draft: Path | None, n_ctx: int, load: LoadOptions, gpu: bool) -> int:
    """The KV caches and compute buffers of the pair's contexts, as the planner prices them.

    With trees (``load.tree_nodes`` above 1, a drafter, a target that can branch) the engine opens unified
    multi-sequence caches: the target's with a sequence per tree node, the drafter's with one per branch
    (``Engine``). Their compute buffers grow with the sequences (llama.cpp's dry run agrees to the byte); a
    sliding-window cache stays full-size (llama.cpp's default ``swa_full``, which the engine keeps). With no drafter
    the target's own MTP head drafts where it can, its MTP context opened as a drafter's (branch sequences with trees).
    """
    from dataclasses import replace

    from local_eagle import vram
    from local_eagle.runtime.tree import MAX_SEQ
    from local_eagle.runtime.treeround import drafter_sequences

    target = vram.read_shape(model, "target GGUF")
    drafter = vram.read_shape(draft, "drafter GGUF") if draft is not None else None
    s = _settings(n_ctx, load)
    if drafter is None and load.mtp and target.n_nextn > 0:
        from local_eagle.vram.shapes import mtp_refusal

        s = replace(s, mtp=mtp_refusal(target, rollback=max(1, load.draft_max)) is None)
    if load.parallel > 1:  # N sequences of n_ctx in one unified cache each (Engine), no trees: the planner's line
        backend = vram.CUDA if gpu else vram.CPU
        return vram.parallel_bytes(target, drafter, s.with_parallel(load.parallel), 1 << 62, backend)[0]
    trees = load.tree_nodes > 1 and (drafter is not None or s.mtp) and not any(target.recurrent)
    ts = replace(s, n_seq=min(MAX_SEQ, load.tree_nodes), kv_unified=True) if trees else s
    backend = vram.CUDA if gpu else vram.CPU
    total = vram.kv_cache(target, vram.ctx_dims(n_ctx, ts.n_seq, N_BATCH, N_BATCH, ts.kv_unified), ts, 0).total
    total += vram.target_compute(target, ts, backend)
    if drafter is not None:
        ds = replace(s, n_seq=drafter_sequences(load.tree_width), kv_unified=True) if trees else s
        dims = vram.ctx_dims(n_ctx, ds.n_seq, N_BATCH, N_BATCH, ds.kv_unified)
        total += vram.kv_cache(drafter, dims, ds, 0, True).total
        total += vram.draft_compute(drafter, ds, backend)
    elif s.mtp:
        ms = replace(ts, draft_n_seq=drafter_sequences(load.tree_width)) if trees else ts
        dims = vram.ctx_dims(n_ctx, ms.drafter_seqs, N_BATCH, N_BATCH, ms.kv_unified)
        total += vram.kv_cache(target, dims, ms, 0, mtp=True).total + vram.mtp_compute(target, ms, backend)
    return total


def _parallel_refusal(
    model: Path, draft: Path | None, n_ctx: int, load: LoadOptions, gpu: bool, have: int
) -> str | None:
    """The planner's line for a ``--parallel`` that does not fit ``have`` bytes: what would (``vram.parallel``)."""
    from local_eagle import vram

    try:
        target = vram.read_shape(model, "target GGUF")
        drafter = vram.read_shape(draft, "drafter GGUF") if draft is not None else None
        return vram.parallel_refusal(target, drafter, _settings(n_ctx, load), have, parallel=load.parallel,
                                     backend=vram.CUDA if gpu else vram.CPU)  # fmt: skip
    except (LocalEagleError, ArithmeticError, LookupError, TypeError, ValueError):
        return None


def _settings(n_ctx: int, load: LoadOptions):  # noqa: ANN202 - vram is imported late
    from local_eagle import vram

    return vram.MemoryConfig(
        n_ctx=n_ctx, n_batch=N_BATCH, n_ubatch=N_BATCH, n_gpu_layers=0, draft_batch=N_BATCH, draft_ubatch=N_BATCH,
        draft_max=min(load.draft_max, N_BATCH - 1),
    )  # fmt: skip


AUTO_PARALLEL = 4
"""Requests a served model takes at once where none is asked for and their caches fit: Ollama's
``OLLAMA_NUM_PARALLEL`` default (4, or 1 where memory is short)."""


def available_memory() -> int | None:
    """The RAM free for new allocations (Linux's ``MemAvailable``), else the whole of it; None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return physical_memory()


def auto_parallel(model: Path, draft: Path | None, n_ctx: int, load: LoadOptions) -> int:
    """How many requests a model serves at once when ``--parallel`` (``OLLAMA_NUM_PARALLEL``) is not given, as
    Ollama decides it: :data:`AUTO_PARALLEL` where their KV caches and compute buffers (the planner's, as ``fit
    --parallel`` prices them) fit, else 1. On a GPU build with layers on the GPU they must fit its free memory
    beside the weights there (``vram.parallel_bytes`` with the detected GPU's budget); otherwise the free RAM. A
    pair the planner cannot price gets 1. Open WebUI sends a chat's title request beside the chat; with one request
    at a time the chat's first token waits for the title."""
    from dataclasses import replace

    from local_eagle import vram
    from local_eagle.llamacpp.backends import gpu_offload_supported
    from local_eagle.vram import gpus

    four = replace(load, parallel=AUTO_PARALLEL, tree_nodes=0)  # several at once draft chains
    gpu = gpu_offload_supported()
    try:
        if gpu and load.gpu_layers != 0:
            found = gpus.detect()
            if found is not None:
                budget = gpus.budget(detector=lambda: found)
                target = vram.read_shape(model, "target GGUF")
                drafter = vram.read_shape(draft, "drafter GGUF") if draft is not None else None
                settings = replace(_settings(n_ctx, four), n_gpu_layers=load.gpu_layers).with_parallel(AUTO_PARALLEL)
                need, room = vram.parallel_bytes(target, drafter, settings, budget)
                return AUTO_PARALLEL if need <= room else 1
        need = buffer_bytes(model, draft, n_ctx, four, gpu)
    except (LocalEagleError, ArithmeticError, LookupError, TypeError, ValueError, OSError):
        return 1
    free = available_memory()
    return AUTO_PARALLEL if free is not None and need <= free else 1


def physical_memory() -> int | None:
    """This machine's RAM in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def explain_load_failure(e: LlamaError, model: Path, draft: Path | None) -> LocalEagleError:
    """llama.cpp's refusal of a file in the words ``inspect`` uses, where the file's header says why."""
    from local_eagle.gguf import read_model_info

    for path in (model, draft):
        if path is not None and str(e).startswith(f"{path}:"):
            try:
                read_model_info(path)
            except GGUFError as found:
                return GGUFError(f"{found}; llama.cpp could not load it")
    return e
