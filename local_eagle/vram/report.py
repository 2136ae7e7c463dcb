"""Printing plans for people (rich tables) and machines (JSON), and the --measure comparison."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from local_eagle.units import human_bytes
from local_eagle.vram.memory import attention_kv, kv_cache, n_offloadable, recurrent_state, rs_snapshots, weights
from local_eagle.vram.plan import Plan, draft_compute, drafter_dims, mtp_compute, prices_mtp, target_compute
from local_eagle.vram.settings import MemoryConfig, ctx_dims
from local_eagle.vram.shapes import ModelShape, has_state
from local_eagle.vram.suggest import Suggestion
from local_eagle.vram.types import CPU, CUDA


def settings_line(p: Plan) -> str:
    s = p.settings
    ctx = f"ctx {s.n_ctx}"
    if s.parallel > 1:
        ctx = f"{s.parallel} sequences x {s.n_ctx} tokens (--parallel: each context holds {s.cells}, one shared cache)"
    parts = [
        ctx,
        f"ubatch {s.n_ubatch}",
        f"KV {s.type_k}/{s.type_v}",
        f"flash-attn {'on' if s.flash_attn else 'off'}",
        f"GPU layers {p.n_gpu_layers}/{p.n_layers_max}",
    ]
    if s.n_seq > 1 and s.parallel == 1:
        parts.append(f"{s.n_seq} sequences in one cache (draft trees)" if s.kv_unified else f"{s.n_seq} streams")
    if p.draft is not None:
        parts.append(f"drafter KV {s.draft_type_k}/{s.draft_type_v}, ubatch {s.draft_ubatch}, max {s.draft_max}")
    elif prices_mtp(p.target, p.draft, s):
        parts.append(f"drafts with its own MTP head ({p.target.n_nextn} NextN block, KV f16)")
        if rs_snapshots(p.target, s):
            parts.append(f"{rs_snapshots(p.target, s)} recurrent-state snapshots per sequence")
    return ", ".join(parts)


def verdict(p: Plan) -> str:
    if p.fits:
        where = (
            "fully offloaded"
            if p.full_offload
            else f"partially offloaded, {p.n_gpu_layers}/{p.n_layers_max} layers on the GPU (slower)"
        )
        return f"[bold green]fits[/]: {where}, {human_bytes(p.free)} free of {human_bytes(p.budget.free)}"
    return (
        f"[bold red]does not fit[/]: needs {human_bytes(p.total_gpu)}, {human_bytes(-p.free)} over the "
        f"{human_bytes(p.budget.free)} available; try --suggest"
    )


def plan_table(p: Plan, title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("component")
    t.add_column("VRAM", justify="right")
    t.add_column("host RAM", justify="right")
    for c in p.components:
        t.add_row(c.label, human_bytes(c.gpu) if c.gpu else "-", human_bytes(c.host) if c.host else "-")
    t.add_section()
    t.add_row("[bold]total[/]", f"[bold]{human_bytes(p.total_gpu)}[/]", human_bytes(p.total_host))
    style = "green" if p.fits else "red"
    t.add_row("free", f"[{style}]{human_bytes(p.free)}[/]", "")
    return t


def header(p: Plan) -> str:
    pair = p.target.name + (f" + {p.draft.name}" if p.draft is not None else "")
    b = p.budget
    src = {"preset": "preset", "detected": "detected, free memory", "manual": "--vram-gb"}[b.source]
    return f"[bold]{pair}[/] on [bold]{b.name}[/] ({human_bytes(b.free)}, {src})"


def print_plan(out: Console, p: Plan) -> None:
    out.print(header(p), highlight=False)
    out.print(settings_line(p), highlight=False)
    out.print(plan_table(p))
    for n in p.notes:
        out.print(f"[dim]note: {n}[/]", highlight=False)
    out.print(verdict(p), highlight=False)


def print_suggestion(out: Console, sg: Suggestion) -> None:
    if sg.plan is None:
        out.print("[bold red]no configuration fits[/], even at the smallest context with one layer on the GPU")
        return
    p = sg.plan
    out.print(f"[bold]suggested[/] ({sg.evaluated} configurations searched): {settings_line(p)}", highlight=False)
    out.print("flags: " + " ".join(cli_flags(p)), highlight=False)
    if sg.traded:
        out.print("traded away: " + "; ".join(sg.traded), highlight=False)
    else:
        out.print("traded away: nothing, the request fits as asked")
    out.print(plan_table(p))
    out.print(verdict(p), highlight=False)


def cli_flags(p: Plan) -> list[str]:
    s = p.settings
    f = [f"--ctx {s.n_ctx}", f"--gpu-layers {p.n_gpu_layers}"]
    if s.parallel > 1:
        f.append(f"--parallel {s.parallel}")
    if s.type_k == s.type_v:
        f.append(f"--kv-type {s.type_k}")
    else:
        f += [f"--kv-type-k {s.type_k}", f"--kv-type-v {s.type_v}"]
    if not s.swa_full and any(p.target.is_swa):
        f.append("--no-swa-full")
    if p.draft is not None:
        f.append(f"--draft-ubatch {s.draft_ubatch}")
        if s.draft_type_k == s.draft_type_v:
            f.append(f"--draft-kv-type {s.draft_type_k}")
    return f


# --- --measure -----------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    predicted: int
    measured: int

    @property
    def error(self) -> float:
        return 0.0 if self.measured == 0 else (self.predicted - self.measured) / self.measured


def predict_for_backend(
    target: ModelShape, draft: ModelShape | None, s: MemoryConfig, gpu_build: bool
) -> dict[str, int]:
    """The planner's numbers in the form llama.cpp reports them on this machine's backend.

    On a CPU build every buffer is a host buffer (CPU rounding, no offload); on a GPU build the
    GPU side uses CUDA's rounding. Totals per component are compared, wherever they live.
    """
    gpu = CUDA if gpu_build else CPU
    ngl = 0 if not gpu_build else (n_offloadable(target) if s.n_gpu_layers is None else s.n_gpu_layers)
    if ngl < 0:
        ngl = n_offloadable(target)
    d = ctx_dims(s.cells, s.n_seq, s.n_batch, s.n_ubatch, s.kv_unified)
    out = {
        "target weights": weights(target, ngl, gpu, CPU).total,
        "target KV cache": attention_kv(target, d, s, ngl, False, gpu, CPU).total,
        "target compute": target_compute(target, s, gpu),
    }
    if has_state(target):
        out["target recurrent state"] = recurrent_state(target, s, ngl, gpu, CPU).total
    if draft is not None:
        dn = n_offloadable(draft) if gpu_build else 0
        dd = drafter_dims(draft, s)
        out["draft weights"] = weights(draft, dn, gpu, CPU).total
        out["draft KV cache"] = kv_cache(draft, dd, s, dn, True, gpu, CPU).total
        out["draft compute"] = draft_compute(draft, s, gpu, encoder=False)
    elif prices_mtp(target, draft, s):
        out["MTP head weights"] = weights(target, ngl, gpu, CPU, nextn=True).total
        md = ctx_dims(s.cells, s.drafter_seqs, s.n_batch, s.n_ubatch, s.kv_unified)
        out["MTP KV cache"] = attention_kv(target, md, s, ngl, False, gpu, CPU, mtp=True).total
        out["MTP compute"] = mtp_compute(target, s, gpu)
    return out


def measure_rows(pred: dict[str, int], m: Any) -> list[Row]:
    """Weights and KV wherever they live; compute on the device that runs the graph (the GPU on a
    GPU build, whose small pinned-host input buffer the planner reports under host RAM)."""
    gpu_build = m.backend != "CPU"

    def compute(b: Any) -> int:
        return b.device("compute") if gpu_build else b.total("compute")

    rows = [Row("target weights", pred["target weights"], m.target.total("model"))]
    context = m.target.total("context")
    state = getattr(m, "target_state", None)
    if "target recurrent state" not in pred:
        rows.append(Row("target KV cache", pred["target KV cache"], context))
    elif state is not None:  # llama.cpp reports one sum: its state measured apart (measure.Measurement.target_state)
        rows += [
            Row("target KV cache", pred["target KV cache"], context - state),
            Row("target recurrent state", pred["target recurrent state"], state),
        ]
    else:
        both = pred["target KV cache"] + pred["target recurrent state"]
        rows.append(Row("target KV cache + recurrent state", both, context))
    rows.append(Row("target compute", pred["target compute"], compute(m.target)))
    if m.draft is not None:
        rows += [
            Row("draft weights", pred["draft weights"], m.draft.total("model")),
            Row("draft KV cache", pred["draft KV cache"], m.draft.total("context")),
            Row("draft compute (decoder graph)", pred["draft compute"], compute(m.draft)),
        ]
    mtp = getattr(m, "mtp", None)
    if mtp is not None and "MTP compute" in pred:
        rows += [
            Row("MTP head weights", pred["MTP head weights"], mtp.total("model")),
            Row("MTP KV cache", pred["MTP KV cache"], mtp.total("context")),
            Row("MTP compute", pred["MTP compute"], compute(mtp)),
        ]
    return rows


def measure_table(rows: list[Row], backend: str) -> Table:
    t = Table(title=f"prediction vs llama.cpp ({backend} backend, dry-run load)", title_justify="left")
    for c in ("component", "predicted", "llama.cpp", "difference"):
        t.add_column(c, justify="left" if c == "component" else "right")
    for r in rows:
        diff = r.predicted - r.measured
        t.add_row(r.label, f"{r.predicted:,}", f"{r.measured:,}", f"{diff:+,} ({100 * r.error:+.2f}%)")
    return t
