"""Every bad input gets one clear line, exit status 2, and leaves no output file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from local_eagle.cli.app import app

runner = CliRunner()


def run_convert(ckpt: Path, target: Path, out: Path, *extra: str):
    return runner.invoke(app, ["convert", str(ckpt), "--target", str(target), "--outfile", str(out), *extra])


def assert_fails(result, out: Path, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "error:" in text
    assert "Traceback" not in result.output
    for n in needles:
        assert n in text, text
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.*")), "temporary file left behind"


def test_missing_config(tmp_path, target_gguf):
    (tmp_path / "ckpt").mkdir()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(tmp_path / "ckpt", target_gguf, out), out, "missing config.json")


def test_missing_weights(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (ckpt / "model.safetensors").unlink()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "no weights found")


def test_unknown_format(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "hidden_size": 8}))
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "unknown drafter format", "BertModel")


def test_missing_tensor(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(mutate=lambda sd, cfg: sd.pop("midlayer.mlp.up_proj.weight"))
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "missing tensor 'midlayer.mlp.up_proj.weight'")


def test_missing_fc_norm_tensor(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(eagle31=True, mutate=lambda sd, cfg: sd.pop("fc_norm.1.weight"))
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "fc_norm.1.weight")


def test_shape_mismatch(tmp_path, target_gguf, checkpoint_factory):
    import torch

    def bad(sd, cfg):
        sd["midlayer.self_attn.o_proj.weight"] = torch.zeros(64, 32)

    _, ckpt = checkpoint_factory(mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "midlayer.self_attn.o_proj.weight", "[64, 32]", "[64, 64]")


def test_d2t_out_of_range(tmp_path, target_gguf, checkpoint_factory):
    def bad(sd, cfg):
        sd["d2t"] = sd["d2t"].clone()
        sd["d2t"][-1] = 10_000

    _, ckpt = checkpoint_factory(draft_vocab=128, mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "d2t", "outside the target vocabulary of 265")


def test_d2t_duplicate(tmp_path, target_gguf, checkpoint_factory):
    import torch

    def bad(sd, cfg):
        absolute = sd["d2t"].numpy() + np.arange(128)
        absolute[5] = absolute[4]
        sd["d2t"] = torch.from_numpy(absolute - np.arange(128))

    _, ckpt = checkpoint_factory(draft_vocab=128, mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "d2t maps several draft tokens")


def test_missing_d2t_with_small_vocab(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(draft_vocab=128, with_d2t=False)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "no d2t tensor")


def test_target_layer_out_of_range(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out, "--target-layers", "1,2,6"), out, "target layer id 6", "6 layers")


def test_target_layers_malformed(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out, "--target-layers", "1,x"), out, "--target-layers")


def test_config_layer_out_of_range(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(target_layers=[2, 3, 40])
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "target layer id 40")


def test_target_not_gguf(tmp_path, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    target = tmp_path / "target.gguf"
    target.write_bytes(b"not a model at all")
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target, out), out, "not a GGUF file")


def test_target_truncated(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    target = tmp_path / "truncated.gguf"
    target.write_bytes(target_gguf.read_bytes()[:3000])
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target, out), out, "truncated or damaged")


def test_target_missing(tmp_path, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, tmp_path / "nope.gguf", out), out, "not found")


def test_hidden_size_mismatch(tmp_path, target_gguf, checkpoint_factory):
    def bad(sd, cfg):
        cfg["target_hidden_size"] = 32

    _, ckpt = checkpoint_factory(mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "hidden size mismatch", "32", "64")


def test_fc_input_mismatch(tmp_path, target_gguf, drafter_factory, checkpoint_factory):
    import torch

    def bad(sd, cfg):
        sd["fc.weight"] = torch.zeros(64, 96)
        cfg["target_hidden_size"] = None

    _, ckpt = checkpoint_factory(mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "hidden size mismatch", "96", "192")


def test_bad_outtype(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out, "--outtype", "q4_0"), out, "--outtype")


def test_invalid_json_config(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (ckpt / "config.json").write_text("{not json")
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "not valid JSON")


def test_unexpected_tensor(tmp_path, target_gguf, checkpoint_factory):
    import torch

    _, ckpt = checkpoint_factory(mutate=lambda sd, cfg: sd.__setitem__("extra_head.weight", torch.zeros(2)))
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "unexpected tensor 'extra_head.weight'")


def test_existing_output_untouched_on_failure(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(mutate=lambda sd, cfg: sd.pop("norm.weight"))
    out = tmp_path / "o.gguf"
    out.write_bytes(b"previous")
    result = run_convert(ckpt, target_gguf, out)
    assert result.exit_code == 2
    assert out.read_bytes() == b"previous"


@pytest.mark.parametrize("kind", ["garbage", "missing"])
def test_inspect_bad_file(tmp_path, kind):
    f = tmp_path / "x.gguf"
    if kind == "garbage":
        f.write_bytes(b"\x00" * 64)
    result = runner.invoke(app, ["inspect", str(f)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# --- outputs that would destroy an input, or that cannot be written ---------------------------------


@pytest.fixture
def own_target(tmp_path, target_gguf):
    """A private copy of the target: a test that fails must not destroy the session's target."""
    t = tmp_path / "target.gguf"
    t.write_bytes(target_gguf.read_bytes())
    return t


@pytest.mark.parametrize("how", ["same-path", "relative-path", "symlink", "hardlink"])
def test_outfile_is_the_target(tmp_path, own_target, checkpoint_factory, monkeypatch, how):
    _, ckpt = checkpoint_factory()
    before = own_target.read_bytes()
    out = own_target
    if how == "relative-path":
        monkeypatch.chdir(tmp_path)
        out = Path("sub/../target.gguf")
        (tmp_path / "sub").mkdir()
    elif how == "symlink":
        out = tmp_path / "link.gguf"
        out.symlink_to(own_target)
    elif how == "hardlink":
        out = tmp_path / "hard.gguf"
        out.hardlink_to(own_target)
    r = run_convert(ckpt, own_target, out)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "--outfile" in text and "target GGUF" in text and "would destroy it" in text, text
    assert own_target.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_outfile_is_a_checkpoint_file(target_gguf, checkpoint_factory, name):
    _, ckpt = checkpoint_factory()
    before = (ckpt / name).read_bytes()
    r = run_convert(ckpt, target_gguf, ckpt / name)
    assert r.exit_code == 2, r.output
    assert "checkpoint file" in " ".join(r.output.split())
    assert (ckpt / name).read_bytes() == before


def test_outfile_may_replace_an_earlier_output_in_the_checkpoint_dir(target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (ckpt / "drafter.gguf").write_bytes(b"older conversion")
    r = run_convert(ckpt, target_gguf, ckpt / "drafter.gguf")
    assert r.exit_code == 0, r.output
    assert (ckpt / "drafter.gguf").read_bytes()[:4] == b"GGUF"


def test_outfile_under_a_regular_file(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (tmp_path / "plain.txt").write_text("x")
    out = tmp_path / "plain.txt" / "sub" / "o.gguf"
    r = run_convert(ckpt, target_gguf, out)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "is a file, not a directory" in " ".join(r.output.split())


def test_outfile_is_a_directory(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    (tmp_path / "outdir").mkdir()
    r = run_convert(ckpt, target_gguf, tmp_path / "outdir")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "is a directory, expected a file path" in " ".join(r.output.split())
    assert not list((tmp_path / "outdir").iterdir())


def test_outfile_empty(tmp_path, target_gguf, checkpoint_factory, monkeypatch):
    _, ckpt = checkpoint_factory()
    monkeypatch.chdir(tmp_path)
    r = run_convert(ckpt, target_gguf, "")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "--outfile: empty path" in " ".join(r.output.split())


def test_outfile_in_read_only_dir(tmp_path, target_gguf, checkpoint_factory, monkeypatch):
    """As root the permission bits do not stop a write, so the refusal of the file system is simulated."""
    import errno

    from local_eagle import files

    def refuse(*a, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(kw.get("dir")))

    _, ckpt = checkpoint_factory()
    monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    out = tmp_path / "ro" / "o.gguf"
    r = run_convert(ckpt, target_gguf, out)
    assert_fails(r, out, "cannot write the output file", "Permission denied")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_outfile_in_read_only_dir_for_real(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        r = run_convert(ckpt, target_gguf, ro / "o.gguf")
    finally:
        ro.chmod(0o755)
    assert r.exit_code == 2 and "not writable" in r.output, r.output


def test_disk_full(tmp_path, target_gguf, checkpoint_factory, monkeypatch):
    import errno

    import gguf

    def full(self, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    _, ckpt = checkpoint_factory()
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", full)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, str(out), "No space left on device")


# --- checkpoints whose maths the eagle3 GGUF cannot carry --------------------------------------------


def sliding_window(window: int):
    def edit(raw):
        raw["transformer_layer_config"].update(layer_types=["sliding_attention"], sliding_window=window)

    return edit


def test_sliding_window_refused(tmp_path, target_gguf, checkpoint_factory):
    _, ckpt = checkpoint_factory(fmt="speculators", config_edit=sliding_window(512))
    out = tmp_path / "o.gguf"
    assert_fails(
        run_convert(ckpt, target_gguf, out), out, "layer_types ['sliding_attention']", "sliding_window 512",
        "max_position_embeddings (2048)",
    )  # fmt: skip


@pytest.mark.parametrize("edit", ["window-covers-context", "full-attention"])
def test_sliding_window_that_masks_nothing_converts(tmp_path, target_gguf, checkpoint_factory, edit):
    if edit == "window-covers-context":
        config_edit = sliding_window(2048)
    else:

        def config_edit(raw):
            raw["transformer_layer_config"].update(layer_types=["full_attention"], sliding_window=64)

    _, ckpt = checkpoint_factory(fmt="speculators", config_edit=config_edit)
    r = run_convert(ckpt, target_gguf, tmp_path / "o.gguf")
    assert r.exit_code == 0, r.output


def test_mla_config_refused(tmp_path, target_gguf, checkpoint_factory):
    """A TorchSpec / Kimi-style MLA drafter config (an eagle_config block, DeepSeek architecture)."""

    def mla(raw):
        raw.update(
            architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="kimi_k2", q_lora_rank=32, kv_lora_rank=16,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True},
        )  # fmt: skip

    _, ckpt = checkpoint_factory(config_edit=mla)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "kv_lora_rank and q_lora_rank", "multi-head latent")


def test_mla_tensors_refused(tmp_path, target_gguf, checkpoint_factory):
    import torch

    def mla(sd, cfg):
        sd["midlayer.self_attn.kv_a_proj_with_mqa.weight"] = torch.zeros(24, 128)

    _, ckpt = checkpoint_factory(mutate=mla)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "kv_a_proj_with_mqa", "multi-head latent attention")


@pytest.mark.parametrize(
    ("tensor", "flag", "drafter_kw"),
    [
        ("fc_norm.0.weight", "fc_norm", dict(eagle31=True)),
        ("input_norm.weight", "norm_before_fc", dict(eagle31=False, norm_before_fc=True)),
    ],
)
def test_tensors_the_flags_leave_out_are_refused(tmp_path, target_gguf, checkpoint_factory, tensor, flag, drafter_kw):
    """Never drop a tensor in silence: a norm the config does not switch on is an error naming it."""

    def flag_off(raw):
        raw[flag] = False

    _, ckpt = checkpoint_factory(config_edit=flag_off, **drafter_kw)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, tensor, f"does not set {flag}")


def test_t2d_disagreeing_with_d2t_refused(tmp_path, target_gguf, checkpoint_factory):
    def bad(sd, cfg):
        sd["t2d"] = sd["t2d"].clone()
        sd["t2d"][sd["t2d"].nonzero()[0]] = False
        sd["t2d"][(~sd["t2d"]).nonzero()[-1]] = True

    _, ckpt = checkpoint_factory(draft_vocab=128, mutate=bad)
    out = tmp_path / "o.gguf"
    assert_fails(run_convert(ckpt, target_gguf, out), out, "t2d and d2t disagree")
