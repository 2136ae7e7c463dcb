"""``local-eagle fit``: will a target (and drafter) fit in VRAM, and what would?

The planning is :mod:`local_eagle.vram`'s; this module turns flags into its
:class:`~local_eagle.vram.settings.MemoryConfig`, runs the plan (and with ``--suggest`` the search,
with ``--measure`` llama.cpp's own dry-run load), and prints or serialises what came out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from local_eagle import DEFAULT_CTX
from local_eagle.cli.console import friendly, out
from local_eagle.cli.options import (
    OFF,
    DraftMode,
    JsonOpt,
    MtpOpt,
    TreeOpt,
    check_option,
    checked_options,
    given,
    parse_tree,
    resolve_models,
)
from local_eagle.errors import LocalEagleError
from local_eagle.ollama.parameters import PARAMETERS

if TYPE_CHECKING:
    from local_eagle.vram import MemoryConfig, ModelShape, Plan, Suggestion
    from local_eagle.vram.report import Row


def _read_shapes(model: Path, draft: Path | None) -> tuple[ModelShape, ModelShape | None]:
    """The shapes of the pair from their GGUF headers (no weights are read); a mismatched pair is refused."""
    from local_eagle import vram

    target = vram.read_shape(model, "target GGUF")
    drafter = vram.read_shape(draft, "drafter GGUF") if draft is not None else None
    if target.is_drafter or target.is_block_drafter:
        raise LocalEagleError(
            f"{model}: --model is a {target.arch} drafter; pass it with --draft and the target with --model"
        )
    if drafter is not None:
        vram.check_pair(target, drafter)
    return target, drafter


def _settings(
    ctx: int | None, gpu_layers: str, kv_type: str | None, kv_type_k: str | None, kv_type_v: str | None,
    draft_kv_type: str, flash_attn: bool, parallel: int, batch: int, ubatch: int, draft_ubatch: int,
    draft_max: int, swa_full: bool,
) -> MemoryConfig:  # fmt: skip
    """The planner's settings from fit's flags, checked before anything is planned (bad input: exit status 2)."""
    from local_eagle import vram

    if gpu_layers == "auto":
        ngl: int | None = None
    else:
        try:
            ngl = check_option("gpu_layers", int(gpu_layers))
        except ValueError:
            raise LocalEagleError(f"--gpu-layers {gpu_layers!r}: expected a number or auto") from None
    s = vram.MemoryConfig(
        n_ctx=ctx or DEFAULT_CTX,
        n_batch=batch,
        n_ubatch=ubatch,
        type_k=kv_type_k or kv_type or "f16",
        type_v=kv_type_v or kv_type or "f16",
        flash_attn=flash_attn,
        n_gpu_layers=ngl,
        draft_type_k=draft_kv_type,
        draft_type_v=draft_kv_type if flash_attn else "f16",  # a quantized V cache needs flash attention
        draft_batch=max(draft_ubatch, 512),
        draft_ubatch=draft_ubatch,
        draft_max=draft_max,
        swa_full=swa_full,
    ).with_parallel(parallel)  # as the engine opens N requests: N x --ctx cells, N sequences, one unified cache
    s.validate()
    return s


def _mtp_settings(
    target: ModelShape, drafter: ModelShape | None, s: MemoryConfig, on: bool, off_by: str = "--no-mtp"
) -> tuple[MemoryConfig, str | None]:
    """Price the target's own MTP head where the engine would draft with it, else say why a head goes unpriced."""
    from local_eagle.vram.shapes import mtp_refusal

    if target.n_nextn <= 0:
        return s, None
    if drafter is not None:
        return s, "MTP head not priced: a drafter is named, the NextN block is not loaded"
    if not on:
        return s, f"MTP head not priced ({off_by}): the NextN block is not loaded"
    refusal = mtp_refusal(target, rollback=max(1, s.draft_max))  # the engine's rollback bound (cli.loading)
    if refusal is not None:
        return s, f"MTP head not priced, it will not draft: {refusal}"
    return replace(s, mtp=True), None


@dataclass
class _Outcome:
    """What fit found: the plan, and with --suggest / --measure the search and the comparison."""

    plan: Plan
    suggestion: Suggestion | None = None
    refusal: str | None = None
    """With --parallel N that does not fit: what it needs and the most requests (or the context) that fit."""
    backend: str = ""
    rows: list[Row] | None = None

    @property
    def ok(self) -> bool:
        """Exit status 0 or 1: with --suggest, whether anything fits; else whether the plan does."""
        return self.suggestion.plan is not None if self.suggestion is not None else self.plan.fits

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"plan": self.plan.to_dict()}
        if self.plan.settings.parallel > 1:
            result["parallel_refusal"] = self.refusal
        if self.suggestion is not None:
            result["suggestion"] = self.suggestion.to_dict()
        if self.rows is not None:
            result["measure"] = {
                "backend": self.backend,
                "rows": [{"component": r.label, "predicted": r.predicted, "measured": r.measured} for r in self.rows],
            }
        return result

    def print(self) -> None:
        from local_eagle.vram import report as vram_report

        vram_report.print_plan(out, self.plan)
        if self.refusal is not None:
            out.print(self.refusal, highlight=False, markup=False, soft_wrap=True)
        if self.suggestion is not None:
            out.print()
            vram_report.print_suggestion(out, self.suggestion)
        if self.rows is not None:
            out.print()
            out.print(vram_report.measure_table(self.rows, self.backend))


def _precision_note(drafter: ModelShape) -> list[str]:
    """A float drafter's weight at q8_0 and the acceptance q8_0 kept on the demo pair (bench.precision)."""
    from local_eagle.bench.precision import fit_note
    from local_eagle.vram.memory import as_q8_0, float_matrices

    matrices = float_matrices(drafter)
    if matrices is None:
        return []
    now = sum(t.nbytes for t in drafter.tensors)
    return [fit_note(matrices, now, sum(t.nbytes for t in as_q8_0(drafter).tensors))]


def _measure(
    model: Path, draft: Path | None, target: ModelShape, drafter: ModelShape | None, s: MemoryConfig
) -> tuple[str, list[Row]]:
    """llama.cpp's dry-run load of the pair, row by row against what the planner predicts for its backend."""
    from local_eagle.llamacpp import bindings
    from local_eagle.vram import report as vram_report
    from local_eagle.vram.measure import measure as do_measure

    gpu_build = bindings.gpu_offload_supported()
    m = do_measure(model, s, draft)
    pred = vram_report.predict_for_backend(target, drafter, s, gpu_build)
    return m.backend, vram_report.measure_rows(pred, m)


@friendly
@checked_options
def fit(
    model: Annotated[
        Path | None, typer.Option("--model", "-m", help="The target model's GGUF (headers only are read).")
    ] = None,
    draft: Annotated[
        Path | None, typer.Option("--draft", "-d", help="An EAGLE 3 / 3.1 or DFlash drafter GGUF.")
    ] = None,
    modelfile: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take model, drafter, num_ctx from a Modelfile.")
    ] = None,
    ctx: Annotated[
        int | None,
        typer.Option(
            help=PARAMETERS["num_ctx"].help + f" Default {DEFAULT_CTX}; with --suggest, the model's trained one."
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU preset: rtx4090, rtx3090, rtx4080, rtx4070ti, ...")] = None,
    vram_gb: Annotated[float | None, typer.Option(help="GPU memory in GiB instead of a preset.")] = None,
    kv_type: Annotated[str | None, typer.Option(help="KV cache type for K and V: f16, q8_0, q4_0, ...")] = None,
    kv_type_k: Annotated[str | None, typer.Option(help="KV cache type for K only.")] = None,
    kv_type_v: Annotated[str | None, typer.Option(help="KV cache type for V only.")] = None,
    draft_kv_type: Annotated[str, typer.Option(help="The drafter's KV cache type.")] = "f16",
    flash_attn: Annotated[bool, typer.Option("--flash-attn/--no-flash-attn", help="Flash attention.")] = True,
    layers: Annotated[
        str, typer.Option("--gpu-layers", help="Target layers on the GPU (output layer counts), -1 = all, or auto.")
    ] = "auto",
    parallel: Annotated[
        int,
        typer.Option(help="Requests at once, each up to --ctx tokens: both contexts hold N x --ctx, one shared cache."),
    ] = 1,
    batch: Annotated[int, typer.Option(help="n_batch of the target context.")] = 2048,
    ubatch: Annotated[int, typer.Option(help="n_ubatch of the target context.")] = 512,
    draft_ubatch: Annotated[int, typer.Option(help="n_ubatch (and at most n_batch) of the drafter.")] = 512,
    draft_max: Annotated[
        int | None,
        typer.Option(help=PARAMETERS["draft_num_predict"].help + " Default: the Modelfile's, else 8 (the policy's)."),
    ] = None,
    tree: TreeOpt = OFF,
    swa_full: Annotated[
        bool, typer.Option("--swa-full/--no-swa-full", help="Full-size cache for sliding-window layers.")
    ] = True,
    overhead_mib: Annotated[
        int | None, typer.Option(help="CUDA context + pool allowance in MiB (default 768).")
    ] = None,
    suggest: Annotated[bool, typer.Option("--suggest", help="Search for the best configuration that fits.")] = False,
    measure: Annotated[
        bool, typer.Option("--measure", help="Also ask llama.cpp (dry-run load) and compare with the prediction.")
    ] = False,
    mtp: MtpOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Will this target (+ drafter) fit in VRAM? Breakdown, verdict, and with --suggest the best fit.

    Exit status 0 when it fits, 1 when it does not, 2 on bad input.
    """
    from local_eagle import vram
    from local_eagle.runtime.tree import MAX_SEQ
    from local_eagle.runtime.treeround import drafter_sequences
    from local_eagle.vram import gpus

    trees = parse_tree(tree)
    if trees.nodes > 1 and parallel != 1:
        raise LocalEagleError("give --tree (one generation's draft trees) or --parallel, not both")
    pair = resolve_models(model, draft, modelfile, mtp)
    # the engine's resolution (local_eagle.settings): the flag, else the Modelfile's num_ctx / draft_num_predict
    resolved = pair.settings(given(ctx=ctx, draft_max=draft_max), DraftMode())
    ctx, draft_max = resolved.ctx, max(1, resolved.draft_max)
    s = _settings(ctx, layers, kv_type, kv_type_k, kv_type_v, draft_kv_type, flash_attn, parallel, batch, ubatch,
                  draft_ubatch, draft_max, swa_full)  # fmt: skip
    target, drafter = _read_shapes(pair.model, pair.draft)
    if measure and drafter is not None and drafter.is_block_drafter:
        raise LocalEagleError(
            f"{pair.draft}: --measure opens the pair in llama.cpp, and local-eagle does not run block drafters "
            "(DFlash) yet; fit prices them without --measure"
        )
    s, mtp_note = _mtp_settings(target, drafter, s, pair.mtp, "--no-mtp" if not mtp else "DRAFT none")
    if trees.nodes > 1 and (drafter is not None or s.mtp) and not any(target.recurrent):
        # the contexts local-eagle opens for trees: a sequence per node, one unified cache (the drafter's or the
        # MTP context's a sequence per branch)
        width = trees.engine_width(False)
        s = replace(s, n_seq=min(MAX_SEQ, trees.nodes), kv_unified=True, draft_n_seq=drafter_sequences(width))
    budget = gpus.budget(gpu, vram_gb, overhead_mib)
    found = _Outcome(vram.make_plan(target, drafter, s, budget))
    if mtp_note is not None:
        found.plan.notes.append(mtp_note)
    if drafter is not None and not drafter.is_block_drafter:
        found.plan.notes += _precision_note(drafter)
    if parallel > 1 and not (found.plan.fits and (found.plan.full_offload or s.n_gpu_layers is not None)):
        from local_eagle.vram.parallel import parallel_refusal

        # at the layers asked for; with auto, fully offloaded (serve's default), said when the plan fits partially
        at = s if s.n_gpu_layers is not None else replace(s, n_gpu_layers=-1)
        found.refusal = parallel_refusal(target, drafter, at, budget)
        if found.refusal is not None and at is not s:
            found.refusal = f"with every layer on the GPU, {found.refusal}"
    if suggest:
        top = ctx or target.n_ctx_train or s.n_ctx
        found.suggestion = vram.suggest(target, drafter, replace(s, n_ctx=top), budget, max_ctx=top)
    if measure:
        ms = replace(s, n_gpu_layers=found.plan.n_gpu_layers)
        found.backend, found.rows = _measure(pair.model, pair.draft, target, drafter, ms)
    if as_json:
        print(json.dumps(found.to_dict()))
    else:
        found.print()
    if not found.ok:
        raise typer.Exit(1)
