"""A machine's cost profile (``local_eagle/bench/profiles/``) from a GPU run's results, so ``--decide-on`` and the
projections can price that machine: the ``costs8b`` curve, the GPU and build the run names, and the host time a
round of the run's own fixed chain of 3 (``bench8b``). Written on the CPU after the lend, from ``results.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from local_eagle.errors import LocalEagleError

MODEL = ("Llama-3.1-8B-shaped Q4_K_M target (random weights) with an EAGLE3-LLaMA3.1-Instruct-8B-shaped f16 drafter "
         "(128k-row head)")  # fmt: skip


def _rounded(ms: dict) -> dict[str, float]:
    return {str(k): round(float(v), 3) for k, v in ms.items()}


def _device(results: dict) -> str:
    facts = ((results.get("results") or {}).get("machine") or {}).get("facts") or {}
    gpu = str(facts.get("gpu") or "an unnamed GPU").split(", ")
    driver = f" (driver {gpu[1]})" if len(gpu) > 1 else ""
    build = (results.get("kit") or {}).get("build") or {}
    archs = ", ".join(f"sm_{a}" for a in build.get("archs") or []) or "?"
    return (f"{gpu[0]}{driver}, CUDA {build.get('toolkit', '?')} build of llama-cpp-python "
            f"{build.get('llama_cpp_python', '?')} ({archs})")  # fmt: skip


def profile_of(results: dict, name: str, source: str) -> dict:
    """The profile a run's results give (``source``: where the results are kept, for the record)."""
    from local_eagle.bench.project import profile_from

    res = results.get("results") if isinstance(results, dict) else None
    costs = (res or {}).get("costs8b") or {}
    curve = costs.get("json")
    if not isinstance(curve, dict) or not curve.get("verify_ms") or not curve.get("drafter_ms"):
        raise LocalEagleError(f"{source}: no cost curve (results.costs8b.json with verify_ms and drafter_ms)")
    bench = (res.get("bench8b") or {}).get("json")
    chain = next((r for r in bench if isinstance(r, dict) and r.get("draft_max") == 3 and not r.get("tree_nodes")
                  and not r.get("adaptive")), None) if isinstance(bench, list) else None  # fmt: skip
    host = chain.get("host_ms_per_round") if chain else None
    host_ms = round(float(host), 3) if isinstance(host, int | float) else 0.0
    when = str(costs.get("at") or "")[:10] or "an undated run"
    host_source = ("host_ms: 0 (the run's bench8b has no fixed chain of 3)" if chain is None else
                   "host_ms: the engine's own host time per round of fixed chains of 3 in the same run's bench8b "
                   f"stage ({host_ms} ms)")  # fmt: skip
    data = {"name": name, "device": _device(results), "model": MODEL,
            "kind": f"measured by local-eagle's GPU kit (costs8b stage), {when}: medians of "
                    f"{curve.get('repeats', '?')} calls after a warm-up, a {curve.get('prefix', '?')}-token prefix, "
                    "every row's logits read",
            "sources": [f"{source} (results.costs8b)", host_source],
            "verify_ms": _rounded(curve["verify_ms"]), "drafter_ms": _rounded(curve["drafter_ms"]),
            "host_ms": host_ms}  # fmt: skip
    profile_from(data, source)
    return data


def write_profile(results_path: str | os.PathLike[str], name: str, out: str | os.PathLike[str],
                  source: str | None = None) -> Path:  # fmt: skip
    from local_eagle.bench.project import save_profile

    try:
        results = json.loads(Path(results_path).read_text())
    except (OSError, ValueError) as e:
        raise LocalEagleError(f"{results_path}: cannot read a run's results ({type(e).__name__}: {e})") from None
    return save_profile(out, profile_of(results, name, source or str(results_path)))
