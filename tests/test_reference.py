"""Training-time test equals the inference chain: what training optimises is what the loop runs."""

from __future__ import annotations

import pytest
import torch

from local_eagle.reference import KVCache, ttt_forward
from local_eagle.testing.tiny import make_drafter


@pytest.mark.parametrize("eagle31", [True, False])
def test_ttt_matches_sequential_chain(eagle31):
    torch.manual_seed(0)
    model = make_drafter(50, 32, [1, 2, 3], eagle31=eagle31, draft_vocab=20, hidden=32, n_head=4, n_head_kv=2, n_ff=48)
    n, depth = 9, 3
    tokens = torch.randint(0, 50, (n + depth,))
    feats = torch.randn(n, 96) * 3
    with torch.no_grad():
        ttt = ttt_forward(model, tokens, feats, depth)
        g = model.project(feats)
        for p in range(n):
            cache = KVCache()
            # real rows 0..p, then the chain of base p with teacher-forced tokens
            lg, pre = model.decode(tokens[None, 1 : p + 2], g[None, : p + 1], torch.arange(p + 1), cache)
            torch.testing.assert_close(lg[0, -1], ttt[0][p], atol=1e-4, rtol=1e-4)
            state = pre[:, -1:]
            for j in range(1, depth):
                lg, state = model.decode(
                    tokens[None, p + 1 + j : p + 2 + j], model.feedback(state), torch.tensor([p + j]), cache
                )
                torch.testing.assert_close(lg[0, -1], ttt[j][p], atol=1e-4, rtol=1e-4)
