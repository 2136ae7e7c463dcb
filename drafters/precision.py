"""A drafter at f16, bf16 and q8_0 from one checkpoint: acceptance on the demo pair, and each call's cost by rows here.

Writes the acceptance file the kit and ``fit`` quote (``local_eagle/bench/acceptance/``):

python drafters/precision.py CHECKPOINT_DIR PROMPTS.jsonl N_TOKENS OUT.json ["how the checkpoint was made"]

CHECKPOINT_DIR is a Hugging Face EAGLE checkpoint of the demo target (``local-eagle train``'s
``OUT/drafter``). Every precision is converted from the same weights, so only the precision differs.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from acceptance import main as acceptance  # noqa: E402

from converters.eagle3_gguf import convert  # noqa: E402
from local_eagle.assets import demo_target  # noqa: E402
from local_eagle.bench.costs import measure_cost_curve  # noqa: E402
from local_eagle.files import atomic_output  # noqa: E402

PRECISIONS = ("f16", "bf16", "q8_0")


def main(ckpt: str, prompts: str, n_tokens: int, out: str, about: str = "") -> dict:
    target = demo_target()
    with tempfile.TemporaryDirectory() as tmp:
        files = {p: Path(tmp) / f"drafter-{p}.gguf" for p in PRECISIONS}
        for p, f in files.items():
            convert(ckpt, target, f, outtype=p, progress=False)
        kept = {}
        for p, f in files.items():
            r = acceptance(str(f), prompts, n_tokens)
            kept[p] = {"acceptance_length": round(r["acceptance_length"], 4), "per_position": r["per_position"],
                       "bytes": f.stat().st_size}  # fmt: skip
            print(p, kept[p], file=sys.stderr)
        curve = measure_cost_curve(target, files["f16"], rows=(1, 2, 3, 4, 5, 8), repeats=15, prefix=256,
                                   seconds=None, others=(files["bf16"], files["q8_0"]))  # fmt: skip
    result = {
        "source": f"{Path(ckpt)} converted at {', '.join(PRECISIONS)}; {Path(target).name} greedy, chains of 4, "
        f"{Path(prompts).name} x {n_tokens} tokens (drafters/precision.py)",
        "drafter": about,
        "precisions": kept,
        "cpu_costs": curve.to_dict(),
    }
    with atomic_output(out) as t:
        t.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3], int(sys.argv[3]), *sys.argv[4:6])["precisions"]))
