"""The random-weight bench pair recipe (docs/gpu-results.md), checked at a tiny shape on the CPU."""

from __future__ import annotations

from collections import Counter

from gguf import GGUFReader

from local_eagle.bench.pair import make_pair
from local_eagle.runtime.engine import Engine, EngineOptions


def test_tiny_pair_quantises_and_runs(tmp_path) -> None:
    paths = make_pair(tmp_path, tiny=True)
    assert not (tmp_path / "target-f16.gguf").exists()
    types = Counter(t.tensor_type.name for t in GGUFReader(paths["target"]).tensors)
    assert types["Q4_K"] > 0 and types["Q6_K"] > 0 and set(types) == {"Q4_K", "Q6_K", "F32"}
    d = {t.name: t for t in GGUFReader(paths["drafter"]).tensors}
    assert list(d["d2t"].data[:5]) == [0, 1, 2, 3, 4]
    assert float(abs(d["fc.weight"].data).max()) > 0
    eng = Engine(paths["target"], paths["drafter"], EngineOptions(n_ctx=256, n_threads=1))
    res = eng.generate("the quick brown fox", max_tokens=8)
    assert len(res.tokens) == 8 and res.stats.target_calls > 0


def test_run_bench_refuses_an_empty_prompt_list() -> None:
    from types import SimpleNamespace

    import pytest

    from local_eagle.bench.run import run_bench
    from local_eagle.errors import LocalEagleError

    with pytest.raises(LocalEagleError, match="at least one prompt"):
        run_bench(SimpleNamespace(drafter=object()), [], [4], progress=False)  # type: ignore[arg-type]
