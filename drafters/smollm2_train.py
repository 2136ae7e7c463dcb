"""Training stage of the SmolLM2-135M-Instruct chat drafter recipe (see drafters/README.md).

python drafters/smollm2_train.py ARCH DATA_DIR OUT_DIR MAX_STEPS EPOCHS [--threads N] [--max-seconds S]
    [--window-tokens W] [--lr LR] [--init-from RUN_DIR]
DATA_DIR may be several directories, comma-separated; MAX_STEPS 0: no cap. ARCH is eagle3.1 or eagle3;
the same DATA_DIR, MAX_STEPS, EPOCHS, window and seed give both the same samples in the same order, so
the two drafters differ only in the architecture.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from local_eagle.assets import smollm2_target
from local_eagle.train.trainer import TrainConfig, fit

LAYERS = [2, 15, 27]


def main(
    arch: str, data_dir: str, out_dir: str, max_steps: int, epochs: int, threads: int = 1, max_seconds: int = 0,
    window_tokens: int | None = 256, lr: float = 1e-3, init_from: str | None = None,
) -> dict:  # fmt: skip
    paths = [p for d in data_dir.split(",") for p in sorted(Path(d).glob("sample-*.npz"))]
    cfg = TrainConfig(arch=arch, draft_vocab=8192, target_layers=LAYERS, ttt_steps=3, epochs=epochs, lr=lr,
                      heldout_fraction=0.03, seed=0, n_threads=threads, max_steps=max_steps or None,
                      max_seconds=max_seconds or None, window_tokens=window_tokens)  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tag = "eagle31" if arch == "eagle3.1" else "eagle3"
    reports = fit(smollm2_target(), paths, out, cfg, resume=True, gguf_out=out / f"smollm2-135m-{tag}-q8_0.gguf",
                  progress=False, layers=LAYERS, init_from=init_from)  # fmt: skip
    return {"arch": arch, "samples": len(paths), "hours": (time.monotonic() - t0) / 3600,
            "reports": [asdict(r) for r in reports]}  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch")
    ap.add_argument("data_dir")
    ap.add_argument("out_dir")
    ap.add_argument("max_steps", type=int)
    ap.add_argument("epochs", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-seconds", type=int, default=0)
    ap.add_argument("--window-tokens", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init-from", default=None)
    print(json.dumps(main(**vars(ap.parse_args()))))
