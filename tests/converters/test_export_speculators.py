"""Both directions against speculators' own EAGLE-3 classes (the vLLM team's), on the CPU.

Exports load in ``Eagle3DraftModel.from_pretrained`` and give our logits; checkpoints that
speculators itself builds and saves convert here and give its logits on llama.cpp. Needs the
``speculators`` extra (``pip install 'local-eagle[speculators]'``); skipped without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip(
    "speculators.models.eagle3", reason="needs the speculators extra: pip install 'local-eagle[speculators]'"
)

from safetensors.torch import save_file  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

from converters import convert, read_checkpoint  # noqa: E402
from converters.export import export  # noqa: E402
from converters.formats import to_reference  # noqa: E402
from local_eagle.llamacpp.bindings import Context, ContextOptions, Model  # noqa: E402
from local_eagle.reference import ttt_forward  # noqa: E402
from local_eagle.runtime.drafter import Drafter  # noqa: E402
from local_eagle.testing.tiny import TinyTargetSpec, target_head_weights  # noqa: E402

SPEC = TinyTargetSpec()
N_VOCAB = 265
# speculators' flex-attention block masks come in blocks of 128 rows
N_ROWS = 128
STEPS = 3
VARIANTS = [
    ("eagle3", dict(eagle31=False)),
    ("eagle31", dict(eagle31=True)),
    ("eagle31-reduced-vocab", dict(eagle31=True, draft_vocab=100)),
    ("eagle3-norm-before-fc-reduced", dict(eagle31=False, norm_before_fc=True, draft_vocab=128)),
    ("eagle3-norm-before-residual", dict(eagle31=False, norm_before_residual=True)),
    ("eagle31-norm-before-residual", dict(eagle31=True, norm_before_residual=True, draft_vocab=128)),
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may reach the Hub: a stray lookup fails at once instead of retrying for half a minute."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    scales = np.repeat(np.array([4.0, 1.0, 12.0]), SPEC.n_embd)
    feats = (rng.standard_normal((N_ROWS, 3 * SPEC.n_embd)) * scales).astype(np.float32)
    tokens = rng.integers(3, N_VOCAB, size=N_ROWS + STEPS)
    return torch.from_numpy(feats), torch.from_numpy(tokens)


def speculators_logits(model, feats: torch.Tensor, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Draft-vocab logits of each TTT step of speculators' forward, rows (token[p+1], features[p]) at position p."""
    caught: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: caught.append(o.detach()[0]))
    try:
        with torch.no_grad():
            model(
                feats[None],
                tokens[None, 1 : N_ROWS + 1],
                torch.zeros(1, N_ROWS, dtype=torch.long),
                position_ids=torch.arange(N_ROWS)[None],
                ttt_steps=STEPS,
            )
    finally:
        hook.remove()
    return caught


def llama_rows(drafter_gguf: Path, target_gguf: Path, feats: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
    """llama.cpp's target-vocab logits for the same rows (-inf outside the draft vocabulary)."""
    opts = ContextOptions(n_ctx=256, n_batch=N_ROWS, n_ubatch=N_ROWS)
    target = Model(target_gguf, what="target")
    ctx = Context(target, opts)
    drafter = Drafter(drafter_gguf, ctx, opts)
    try:
        g = drafter.encode(feats.numpy())
        logits, _ = drafter.decode(tokens[1 : N_ROWS + 1].numpy().astype(np.int32), g, np.arange(N_ROWS))
        return np.array(logits)
    finally:
        drafter.close()
        ctx.close()
        target.close()


def to_target_vocab(draft_logits: torch.Tensor, d2t: torch.Tensor | None) -> np.ndarray:
    if d2t is None or draft_logits.shape[-1] == N_VOCAB:
        return draft_logits.numpy()
    out = np.full((draft_logits.shape[0], N_VOCAB), -np.inf, dtype=np.float32)
    out[:, (d2t + torch.arange(d2t.numel())).numpy()] = draft_logits.numpy()
    return out


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    finite = np.isfinite(b)
    assert np.array_equal(finite, np.isfinite(a))
    return float(np.max(np.abs(a[finite] - b[finite])) / np.max(np.abs(b[finite])))


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory, target_gguf: Path) -> Path:
    """The target as a Hugging Face directory (config and the weights speculators reads from a verifier)."""
    d = tmp_path_factory.mktemp("verifier")
    LlamaConfig(
        hidden_size=SPEC.n_embd,
        intermediate_size=SPEC.n_ff,
        num_attention_heads=SPEC.n_head,
        num_key_value_heads=SPEC.n_head_kv,
        num_hidden_layers=SPEC.n_layer,
        vocab_size=N_VOCAB,
        rms_norm_eps=SPEC.eps,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(d)
    embd, head = target_head_weights(target_gguf)
    weights = {
        "model.embed_tokens.weight": torch.from_numpy(embd.copy()),
        "lm_head.weight": torch.from_numpy(head.copy()),
        "model.norm.weight": torch.ones(SPEC.n_embd),
    }
    save_file(weights, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("kw", [v[1] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_speculators_loads_the_export(target_gguf, checkpoint_factory, verifier, tmp_path, kw):
    from speculators.models.eagle3 import Eagle3DraftModel

    model, ckpt = checkpoint_factory(**kw)
    gguf = convert(ckpt, target_gguf, tmp_path / "d.gguf", outtype="f32").outfile
    res = export(gguf, tmp_path / "spec", fmt="speculators", target_gguf=target_gguf, verifier=str(verifier))
    spec = Eagle3DraftModel.from_pretrained(str(res.outdir)).eval()
    assert spec.config.norm_before_residual is kw.get("norm_before_residual", False)
    assert spec.config.fc_norm is kw["eagle31"] and spec.config.norm_output is kw["eagle31"]
    feats, tokens = inputs()
    theirs = speculators_logits(spec, feats, tokens)
    with torch.no_grad():
        ours = ttt_forward(model, tokens, feats, STEPS)
    for step, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        rows = N_ROWS - step  # speculators pads the teacher-forced tokens of the last rows with 0
        assert rel_diff(a[:rows].numpy(), b[:rows].numpy()) < 1e-5, step
        assert torch.equal(a[:rows].argmax(-1), b[:rows].argmax(-1))
    d2t = model.d2t if kw.get("draft_vocab") else None
    ll = llama_rows(gguf, target_gguf, feats, tokens)
    full = to_target_vocab(theirs[0], d2t)
    assert rel_diff(ll, full) < 1e-3
    assert np.array_equal(ll.argmax(-1), full.argmax(-1))


def speculators_checkpoint(
    out: Path,
    verifier: Path,
    eagle31: bool,
    norm_before_fc: bool,
    norm_before_residual: bool,
    draft_vocab: int | None,
    seed: int = 0,
) -> Path:
    """A drafter built and saved by speculators itself, with every weight random (norms around 1)."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    layer = LlamaConfig(
        hidden_size=SPEC.n_embd,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_hidden_layers=1,
        vocab_size=N_VOCAB,
        rms_norm_eps=1e-5,
        max_position_embeddings=1024,
    )
    n_draft = draft_vocab or N_VOCAB
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=n_draft,
        norm_before_residual=norm_before_residual,
        norm_before_fc=norm_before_fc,
        fc_norm=eagle31,
        norm_output=eagle31,
        eagle_aux_hidden_state_layer_ids=[1, 3, 4],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=str(verifier), architectures=["LlamaForCausalLM"]),
        ),
    )
    model = Eagle3DraftModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.startswith("fc_norm"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 if "embed" in name else 0.1))
        ids = torch.sort(torch.randperm(N_VOCAB, generator=g)[:n_draft]).values
        t2d = torch.zeros(N_VOCAB, dtype=torch.bool)
        t2d[ids] = True
        model.load_vocab_mappings(t2d, ids - torch.arange(n_draft))
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("kw", [v[1] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_speculators_checkpoints_match_on_llama_cpp(target_gguf, verifier, tmp_path, kw):
    from speculators.models.eagle3 import Eagle3DraftModel

    flags = dict(
        eagle31=kw["eagle31"],
        norm_before_fc=kw.get("norm_before_fc", False),
        norm_before_residual=kw.get("norm_before_residual", False),
        draft_vocab=kw.get("draft_vocab"),
    )
    d = speculators_checkpoint(tmp_path / "spec", verifier, **flags)
    raw = json.loads((d / "config.json").read_text())
    assert raw["speculators_model_type"] == "eagle3"
    res = convert(d, target_gguf, tmp_path / "d.gguf", outtype="f32")
    assert res.eagle_version == ("3.1" if kw["eagle31"] else "3")
    spec = Eagle3DraftModel.from_pretrained(str(d)).eval()
    feats, tokens = inputs(seed=3)
    theirs = speculators_logits(spec, feats, tokens)
    d2t = spec.d2t if kw.get("draft_vocab") else None
    ll = llama_rows(res.outfile, target_gguf, feats, tokens)
    full = to_target_vocab(theirs[0], d2t)
    assert rel_diff(ll, full) < 1e-3
    assert np.array_equal(ll.argmax(-1), full.argmax(-1))
    ref = to_reference(read_checkpoint(d)).eval()
    with torch.no_grad():
        ours = ttt_forward(ref, tokens, feats, STEPS)
    for step, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        rows = N_ROWS - step
        assert rel_diff(a[:rows].numpy(), b[:rows].numpy()) < 1e-5, step
