"""Training stage of the SmolLM2-135M-Instruct chat drafter recipe (see drafters/README.md).

python drafters/smollm2_train.py ARCH DATA_DIR OUT_DIR MAX_STEPS EPOCHS [THREADS] [MAX_SECONDS]
ARCH is eagle3.1 or eagle3; the same DATA_DIR, MAX_STEPS, EPOCHS and seed give both the same
samples in the same order, so the two drafters differ only in the architecture.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from local_eagle.assets import smollm2_target
from local_eagle.train.trainer import TrainConfig, fit

LAYERS = [2, 15, 27]


def main(
    arch: str, data_dir: str, out_dir: str, max_steps: int, epochs: int, threads: int = 1, max_seconds: int = 0
) -> dict:
    paths = sorted(Path(data_dir).glob("sample-*.npz"))
    cfg = TrainConfig(arch=arch, draft_vocab=8192, target_layers=LAYERS, ttt_steps=3, epochs=epochs, lr=1e-3,
                      heldout_fraction=0.03, seed=0, n_threads=threads, max_steps=max_steps,
                      max_seconds=max_seconds or None)  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tag = "eagle31" if arch == "eagle3.1" else "eagle3"
    reports = fit(smollm2_target(), paths, out, cfg, resume=True, gguf_out=out / f"smollm2-135m-{tag}-q8_0.gguf",
                  progress=False, layers=LAYERS)  # fmt: skip
    return {"arch": arch, "samples": len(paths), "hours": (time.monotonic() - t0) / 3600,
            "reports": [asdict(r) for r in reports]}  # fmt: skip


if __name__ == "__main__":
    a = sys.argv
    print(json.dumps(main(a[1], a[2], a[3], int(a[4]), int(a[5]), *(int(x) for x in a[6:]))))
