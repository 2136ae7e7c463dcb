"""The demo drafter's larger recipe: HumanEval answers by the target plus standard-library Python.

python drafters/gemma_code_train.py CODE_JSONL OUT_DIR EPOCHS MAX_HOURS [--arch A] [--lr LR]
    [--threads N] [--window-tokens W] [--init-from RUN_DIR]
CODE_JSONL comes from drafters/make_code_text.py: the 130 HumanEval training prompts (the target
answers each, greedily, 128 tokens) then {"text"} pieces of the standard library, teacher-forced up to
576 tokens each. Both sets are captured to OUT_DIR/data (a rerun skips what is there), then one drafter
is trained on all of it and written to OUT_DIR/gemma3-270m-<arch>-q8_0.gguf. Problems 130-163 are
never trained on.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from local_eagle.assets import demo_target
from local_eagle.train.data import build_dataset, read_samples
from local_eagle.train.trainer import TrainConfig, fit

LAYERS = [2, 9, 15]  # [2, n/2, n-3] for Gemma 3 270M's 18 layers


def main(
    code_jsonl: str, out_dir: str, epochs: int, max_hours: float, arch: str = "eagle3.1", lr: float = 5e-4,
    threads: int = 2, window_tokens: int | None = 256, init_from: str | None = None,
) -> dict:  # fmt: skip
    target = demo_target()
    out = Path(out_dir)
    samples = read_samples(code_jsonl)
    answered = [s for s in samples if s.generate]
    texts = [s for s in samples if not s.generate]
    t0 = time.monotonic()
    paths = build_dataset(target, answered, LAYERS, out / "data-humaneval", 128, n_threads=threads, progress=False)
    paths += build_dataset(target, texts, LAYERS, out / "data-code", 512, n_threads=threads, progress=False)
    capture_hours = (time.monotonic() - t0) / 3600
    cfg = TrainConfig(arch=arch, draft_vocab=8192, target_layers=LAYERS, ttt_steps=3, epochs=epochs, lr=lr,
                      heldout_fraction=0.03, seed=0, n_threads=threads, max_seconds=3600 * max_hours,
                      window_tokens=window_tokens)  # fmt: skip
    tag = "eagle31" if arch == "eagle3.1" else "eagle3"
    t1 = time.monotonic()
    reports = fit(target, paths, out, cfg, resume=True, gguf_out=out / f"gemma3-270m-{tag}-q8_0.gguf",
                  progress=False, layers=LAYERS, init_from=init_from)  # fmt: skip
    return {"arch": arch, "samples": len(paths), "capture_hours": capture_hours,
            "train_hours": (time.monotonic() - t1) / 3600, "reports": [asdict(r) for r in reports]}  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("code_jsonl")
    ap.add_argument("out_dir")
    ap.add_argument("epochs", type=int)
    ap.add_argument("max_hours", type=float)
    ap.add_argument("--arch", default="eagle3.1")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window-tokens", type=int, default=256)
    ap.add_argument("--init-from", default=None)
    print(json.dumps(main(**vars(ap.parse_args()))))
