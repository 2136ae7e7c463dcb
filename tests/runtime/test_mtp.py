"""MTP (NextN) heads on the pinned llama.cpp: a tiny generated glm4moe target with one NextN block.

- llama.cpp loads it with ``load_mtp`` and builds an MTP context whose graph is the NextN block;
- that context's logits for one row match a numpy transcription of ``glm4-moe.cpp``'s ``graph_mtp``;
- greedy drafting with :class:`MtpDrafter`, driven by the loop's feed, proposes the tokens that a transcription
  of ``common/speculative.cpp``'s ``draft-mtp`` (process / draft / accept, llama-server's schedule) proposes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from local_eagle.errors import LlamaError, LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.feed import DrafterFeed
from local_eagle.runtime.mtp import MtpCapture, MtpDrafter, mtp_refusal
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_tiny_glm4moe_mtp, write_tiny_qwen35_mtp
from local_eagle.testing.tiny_mtp_families import FAMILIES, write_tiny_family_mtp

SPEC = TinyGlm4MoeSpec()
OPTS = ContextOptions(n_ctx=256, n_batch=32, n_ubatch=32, n_threads=2)


@pytest.fixture(scope="module")
def mtp_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_glm4moe_mtp(tmp_path_factory.mktemp("mtp") / "tiny-glm4moe-mtp.gguf", SPEC, seed=3)


@pytest.fixture(scope="module")
def model(mtp_gguf: Path):
    m = Model(mtp_gguf, n_gpu_layers=0, load_mtp=True)
    yield m
    m.close()


@pytest.fixture(scope="module", params=["glm4moe", "qwen35", *FAMILIES])
def any_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A tiny target of each family tested: glm4moe (attention), qwen35 (hybrid: gated delta net + attention) and the
    other attention families of ``testing.tiny_mtp_families`` (deepseek2, mimo2, cohere2moe, hy_v3, and the DSA
    deepseek32 and glm-dsa)."""
    d = tmp_path_factory.mktemp(request.param)
    if request.param == "glm4moe":
        path = write_tiny_glm4moe_mtp(d / "glm4moe.gguf", SPEC, seed=3)
    elif request.param == "qwen35":
        path = write_tiny_qwen35_mtp(d / "qwen35.gguf", seed=3)
    else:
        path = write_tiny_family_mtp(d / f"{request.param}.gguf", request.param, seed=3)
    m = Model(path, n_gpu_layers=0, load_mtp=True)
    assert m.arch() == request.param and m.n_layer_nextn == 1
    yield m
    m.close()


def test_loads_with_its_nextn_block(model: Model, mtp_gguf: Path, tmp_path: Path) -> None:
    assert model.arch() == "glm4moe"
    assert model.n_layer == SPEC.n_layer  # llama_model_n_layer counts the trunk only
    assert model.n_layer_nextn == 1
    assert mtp_refusal(model) is None
    plain = Model(mtp_gguf, n_gpu_layers=0)  # without load_mtp the NextN tensors are skipped
    try:
        assert plain.n_layer_nextn == 1
        assert "without its MTP layers" in (mtp_refusal(plain) or "")
    finally:
        plain.close()
    trunk = Model(write_tiny_glm4moe_mtp(tmp_path / "trunk.gguf", SPEC, seed=3, mtp=False), n_gpu_layers=0)
    try:
        assert trunk.n_layer_nextn == 0 and "no NextN" in (mtp_refusal(trunk) or "")
        with pytest.raises(LocalEagleError, match="no NextN"):
            MtpDrafter(Context(trunk, OPTS))
    finally:
        trunk.close()


def _rms(x: np.ndarray, w: np.ndarray, eps: float = SPEC.eps) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * w


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _mtp_row_oracle(path: Path, token: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """glm4-moe.cpp's graph_mtp for one row alone in the cache (attention then reduces to V), in float64."""
    t = {x.name: np.asarray(x.data, dtype=np.float64) for x in GGUFReader(path).tensors}
    b = f"blk.{SPEC.n_layer}."
    hd = SPEC.n_embd // SPEC.n_head
    e_norm = _rms(t["token_embd.weight"][token], t[b + "nextn.enorm.weight"])
    h_norm = _rms(h.astype(np.float64), t[b + "nextn.hnorm.weight"])
    x = t[b + "nextn.eh_proj.weight"] @ np.concatenate([e_norm, h_norm])
    cur = _rms(x, t[b + "attn_norm.weight"])
    v = (t[b + "attn_v.weight"] @ cur + t[b + "attn_v.bias"]).astype(np.float16)  # the V cache is f16
    group = SPEC.n_head // SPEC.n_head_kv
    heads = np.concatenate([v[(i // group) * hd : (i // group + 1) * hd] for i in range(SPEC.n_head)])
    ffn_inp = t[b + "attn_output.weight"] @ heads + x
    cur = _rms(ffn_inp, t[b + "post_attention_norm.weight"])
    probs = 1.0 / (1.0 + np.exp(-(t[b + "ffn_gate_inp.weight"] @ cur)))  # sigmoid router
    chosen = np.argsort(-(probs + t[b + "exp_probs_b.bias"]))[: SPEC.n_expert_used]  # bias picks, probs weigh
    weights = probs[chosen] / probs[chosen].sum()
    routed = sum(
        w * (t[b + "ffn_down_exps.weight"][e] @ (_silu(t[b + "ffn_gate_exps.weight"][e] @ cur)
                                               * (t[b + "ffn_up_exps.weight"][e] @ cur)))
        for w, e in zip(weights, chosen, strict=True)
    )  # fmt: skip
    shared = t[b + "ffn_down_shexp.weight"] @ (
        _silu(t[b + "ffn_gate_shexp.weight"] @ cur) * (t[b + "ffn_up_shexp.weight"] @ cur)
    )
    state = _rms(routed + shared + ffn_inp, t[b + "nextn.shared_head_norm.weight"])
    return t[b + "nextn.shared_head_head.weight"] @ state, state


def test_mtp_context_runs_the_nextn_block(model: Model, mtp_gguf: Path) -> None:
    target = Context(model, OPTS)
    drafter = MtpDrafter(target, OPTS)
    try:
        h = np.random.default_rng(0).standard_normal((1, SPEC.n_embd)).astype(np.float32)
        token = 262
        logits, state = drafter.decode(np.array([token]), h, np.array([-1]))  # loop position -1: MTP position 0
        want_logits, want_state = _mtp_row_oracle(mtp_gguf, token, h[0])
        assert logits.shape == (1, model.n_vocab) and state.shape == (1, SPEC.n_embd)
        np.testing.assert_allclose(state[0], want_state, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logits[0], want_logits, rtol=1e-4, atol=1e-3)
        # the head's logits are not the trunk's: the MTP context runs the NextN block alone
        target.decode(np.array([token]), np.array([0]), True)
        assert not np.allclose(target.logits(0, model.n_vocab), logits[0], atol=1e-2)
    finally:
        drafter.close()
        target.close()


class _ReferenceMtp:
    """common/speculative.cpp's common_speculative_impl_draft_mtp with one head, transcribed: process() after every
    target batch, draft() from (id_last, pos0), accept(n_accepted); the server's seq_rm calls around them."""

    def __init__(self, model: Model, target: Context) -> None:
        self.model, self.target = model, target
        self.ctx = Context(model, ContextOptions(n_ctx=OPTS.n_ctx, n_batch=OPTS.n_batch, n_ubatch=OPTS.n_ubatch,
                                                 n_threads=OPTS.n_threads, mtp=True), ctx_other=target)  # fmt: skip
        self.ctx.set_embeddings_nextn(True, True)
        self.pending = np.zeros(model.n_embd, np.float32)
        self.verify_h = np.zeros((0, model.n_embd), np.float32)

    def process(self, tokens: np.ndarray, positions: np.ndarray) -> None:
        n = len(tokens)
        h_tgt = self.target.embeddings_nextn(n, self.model.n_embd)
        embd = np.vstack([self.pending[None, :], h_tgt[:-1]])
        self.ctx.decode(tokens, positions, False, embd)
        self.verify_h = h_tgt
        self.pending = h_tgt[-1].copy()

    def draft(self, id_last: int, pos0: int, n_max: int) -> list[int]:
        result: list[int] = []
        token, pos, h = id_last, pos0, self.pending
        while True:
            self.ctx.decode(np.array([token]), np.array([pos]), True, h[None, :])
            token = int(np.argmax(self.ctx.logits(0, self.model.n_vocab)))  # top-k 10, its first candidate
            h = self.ctx.embeddings_nextn_ith(0, self.model.n_embd)
            result.append(token)
            if len(result) >= n_max:
                return result
            pos += 1

    def accept(self, n_accepted: int) -> None:
        self.pending = self.verify_h[min(n_accepted, len(self.verify_h) - 1)].copy()


def _roll_back(target: Context, history: list[int], n_past: int) -> None:
    """The target's cache cut back to ``history``: a suffix dropped, or (a hybrid target, whose recurrent state cannot
    drop one without snapshots) cleared and decoded again."""
    try:
        target.remove_from(n_past)
    except LlamaError:
        target.clear()
        target.decode(np.array(history, dtype=np.int32), np.arange(n_past), False)


def _run(model: Model, prompt: np.ndarray, n_rounds: int, n_max: int, accept_rule) -> tuple[list, list]:
    """Both drafters side by side on one target: each round's drafts from the reference and from MtpDrafter (fed
    as runtime.rounds feeds a drafter), then one verification of the reference's drafts that both see."""
    target = Context(model, OPTS)
    capture = MtpCapture(model)
    capture.attach(target)
    ref = _ReferenceMtp(model, target)
    drafter = MtpDrafter(target, OPTS)
    feed = DrafterFeed(drafter, capture.width, window=10_000)
    ours, theirs = [], []
    try:
        n = len(prompt)
        target.decode(prompt, np.arange(n), np.arange(n) == n - 1)
        features = capture.features(n)
        ref.process(prompt, np.arange(n))
        last = int(np.argmax(target.logits(n - 1, model.n_vocab)))
        drafter.prime(int(prompt[0]))
        feed.push(0, np.append(prompt[1:], last), features)
        feed.flush()
        n_past, history = n, [int(x) for x in prompt]
        for r in range(n_rounds):
            # reference: draft, then the server drops the draft rows from the MTP cache before verifying
            want = ref.draft(last, n_past, n_max)
            ref.ctx.remove_from(n_past)
            # ours: the catch-up, then one row a step on the head's own state (runtime.chain.draft_alone)
            logits, state, _ = feed.catch_up()
            got = [int(np.argmax(logits[0]))]
            while len(got) < n_max:
                position = np.array([n_past + len(got) - 1])
                logits, state = drafter.decode(np.array([got[-1]]), drafter.feedback(state), position)
                got.append(int(np.argmax(logits[0])))
            theirs.append(want)
            ours.append(got)
            # verification: [last, drafts] at n_past.. on the target, every row an output
            rows = np.array([last, *want], dtype=np.int32)
            target.decode(rows, np.arange(n_past, n_past + len(rows)), True)
            verified = capture.features(len(rows))
            ref.process(rows, np.arange(n_past, n_past + len(rows)))
            greedy = [int(np.argmax(target.logits(i, model.n_vocab))) for i in range(len(rows))]
            n_acc = accept_rule(r, want, greedy)
            accepted = [*want[:n_acc], greedy[n_acc]]
            ref.accept(n_acc)
            new_past = n_past + 1 + n_acc
            history += [last, *want[:n_acc]]
            _roll_back(target, history, new_past)
            ref.ctx.remove_from(new_past)
            drafter.remove_from(n_past)  # the loop's drafter rows past n_past (runtime.rounds commit)
            feed.push(n_past, accepted, verified[: n_acc + 1])
            last, n_past = accepted[-1], new_past
    finally:
        drafter.close()
        ref.ctx.close()
        target.close()
    return ours, theirs


def _greedy(r: int, drafts: list[int], greedy: list[int]) -> int:
    n = 0
    while n < len(drafts) and drafts[n] == greedy[n]:
        n += 1
    return n


def test_greedy_drafts_match_llamacpp_draft_mtp(any_model: Model) -> None:
    prompt = any_model.tokenize("the a and the tea eat")
    ours, theirs = _run(any_model, prompt, n_rounds=6, n_max=3, accept_rule=_greedy)
    assert ours == theirs


def test_drafts_match_across_partial_acceptance(any_model: Model) -> None:
    """Accepting 0, 1, 2 or all 3 drafts by fiat (the target's cache holds them, the next token is the target's at
    that row): the head's cache and carried state roll back alike on both sides."""
    prompt = any_model.tokenize("and the a tea")
    ours, theirs = _run(any_model, prompt, n_rounds=8, n_max=3, accept_rule=lambda r, d, g: r % 4)
    assert ours == theirs
    assert len({tuple(x) for x in ours}) > 1


def test_masked_state_of_a_later_row_is_the_first_rows(model: Model) -> None:
    """A fact of the pinned llama.cpp that MtpDrafter works around: glm4moe's graph_mtp (as most families') sets
    t_h_nextn before it selects the output rows, so in masked mode a batch whose only output is its last row hands
    back the first row's state for it; with every row an output the states are right."""
    target = Context(model, OPTS)
    mtp = Context(model, ContextOptions(n_ctx=64, n_batch=8, n_ubatch=8, n_threads=2, mtp=True), ctx_other=target)
    try:
        mtp.set_embeddings_nextn(True, True)
        h = np.random.default_rng(1).standard_normal((3, SPEC.n_embd)).astype(np.float32)
        tokens, positions = np.array([262, 263, 264]), np.arange(3)
        mtp.decode(tokens, positions, True, h)
        right = [mtp.embeddings_nextn_ith(i, SPEC.n_embd) for i in range(3)]
        mtp.clear()
        mtp.decode(tokens, positions, np.array([False, False, True]), h)
        np.testing.assert_allclose(mtp.embeddings_nextn_ith(2, SPEC.n_embd), right[0], rtol=1e-5)
        assert not np.allclose(right[0], right[2], atol=1e-3)
    finally:
        mtp.close()
        target.close()
