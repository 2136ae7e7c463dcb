"""A checkpoint rollback's own target calls are counted (``replay_calls``), apart from the verifies that
``target_calls`` and the acceptance length count: together they are every target call of the decode phase."""

from __future__ import annotations

import numpy as np

from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.testing.tiny_mtp_hybrid import CHECKPOINT_FAMILIES, TinyHybridSpec, write_tiny_hybrid_mtp


def test_every_target_call_is_counted(tmp_path) -> None:
    path = write_tiny_hybrid_mtp(tmp_path / "random.gguf", TinyHybridSpec(CHECKPOINT_FAMILIES[0]), seed=3)
    prompt = np.array([1, 5, 9, 13, 2], dtype=np.int32)
    with Engine(path, None, EngineOptions(n_ctx=256, n_batch=32, n_threads=1)) as eng:
        assert eng.checkpoints
        replays = 0
        for k in (1, 2, 3):
            before = eng.ctx.n_calls
            res = eng.generate(prompt, max_tokens=30, draft_max=k, adaptive=False)
            st = res.stats
            assert eng.ctx.n_calls - before == 1 + st.target_calls + st.replay_calls  # the prefill's one call
            assert st.drafted_tokens > st.accepted_tokens  # a random head: rejections, rolled back
            replays += st.replay_calls
        assert replays > 0  # rejections in a row: kept rows past a chain's worth took a call of their own
