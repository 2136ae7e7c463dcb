"""What the hybrid MTP families' tests share (``tests/runtime/test_mtp_hybrid*.py``, ``test_mtp_checkpoint.py``):
one set of settings, so that a family checked by snapshots and one checked by checkpoints are held to the same
numbers, and the blurred cycle their sampling tests draw from."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from local_eagle.llamacpp.model import ContextOptions
from local_eagle.runtime.engine import Engine, EngineOptions
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.testing.chisquare import SamplingCheck, sampling_check

OPTS = EngineOptions(n_ctx=256, n_batch=32, n_threads=1)
CTX = ContextOptions(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=1)
PROMPTS = [np.array(p, dtype=np.int32) for p in ([1, 5, 9, 13, 2], [3, 3, 3], [7, 1, 30, 12, 8, 4, 4])]
TOL = 1e-2
"""A verify batch against single rows differs by ~1e-3 in these logits (float order), rollback or not."""
SAMPLING = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
BLURRED = {"margin": 0.4, "state": 0.2, "noise": 0.1, "seed": 4}
"""A cycle whose head is right often, not always: a small margin spreads the target over its top 4, the noise
blurs its head, and the recurrent state (which the NextN head does not see) moves the target off the head."""


def check_sampling(path: Path, n: int = 1200) -> SamplingCheck:
    """The sampling test every hybrid family runs: ``draft_max`` 3 fixed over ``n`` seeds, the first three tokens
    against the target alone's joint distribution (``testing.chisquare.sampling_check``)."""
    with Engine(path, None, OPTS) as eng:
        return sampling_check(eng, "xyzA", SAMPLING, n, draft_max=3, adaptive=False)
