"""The built-in default job: a self-contained EAGLE 3.1 round trip on generated tiny models."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def run_demo(workdir: Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
    """Generate a tiny target and EAGLE 3.1 checkpoint, convert at f32/f16/q8_0, compare with the reference."""
    from converters.eagle3_gguf import convert
    from converters.formats import write_checkpoint
    from local_eagle.testing.oracle import agrees, compare
    from local_eagle.testing.tiny import make_drafter, write_tiny_target

    with tempfile.TemporaryDirectory(prefix="local-eagle-demo-") as tmp:
        base = Path(workdir) if workdir else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        target = write_tiny_target(base / "tiny-target.gguf")
        model = make_drafter(target_vocab=265, target_hidden=64, target_layers=[1, 3, 4], draft_vocab=128)
        ckpt = write_checkpoint(model.state_dict(), model.cfg.to_dict(), base / "eagle31-ckpt")
        rows = []
        for outtype in ("f32", "f16", "q8_0"):
            gguf = convert(ckpt, target, base / f"drafter-{outtype}.gguf", outtype=outtype, progress=progress)
            for c in compare(gguf.outfile, target, model):
                rows.append(
                    {
                        "outtype": outtype,
                        "step": c.step,
                        "max_abs_diff": c.max_abs_diff,
                        "logit_scale": c.logit_scale,
                        "argmax_equal": c.argmax_equal,
                        "ok": agrees(outtype, c),
                    }
                )
        return rows
