"""A model's own MTP head drafts by default; ``DRAFT none`` and ``--no-mtp`` turn it off, ``DRAFT <drafter>`` and
``--draft`` draft with an EAGLE drafter instead (issue 37). On the tiny glm4moe whose head agrees with its target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from converters import convert
from converters.formats import write_checkpoint
from local_eagle.cli.app import app
from local_eagle.testing.tiny import make_drafter
from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_cycle_glm4moe_mtp

runner = CliRunner()
SPEC = TinyGlm4MoeSpec(n_layer=4)  # room for an EAGLE drafter's three target layers, 1..3


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny glm4moe with an agreeing MTP head, an EAGLE drafter converted against it)."""
    d = tmp_path_factory.mktemp("mtp-cli")
    gguf = write_cycle_glm4moe_mtp(d / "tiny.gguf", SPEC)
    from local_eagle.gguf import read_model_info

    n_vocab = read_model_info(gguf).n_vocab
    m = make_drafter(n_vocab, SPEC.n_embd, [1, 2, 3], eagle31=True, seed=3)
    draft = convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), gguf, d / "draft.gguf").outfile
    return gguf, draft


def _modelfile(folder: Path, gguf: Path, *lines: str) -> Path:
    p = folder / "Modelfile"
    p.write_text("\n".join([f"FROM {gguf}", *lines]) + "\n")
    return p


def _generate(*args: str) -> dict:
    """``generate --json`` with a fixed draft of 3 (the adaptive policy may draft nothing on a tiny model)."""
    fixed = ["--draft-max", "3", "--fixed", "--tree", "off", "--ctx", "256", "--json"]
    r = runner.invoke(app, ["generate", "-p", "ABC", "--raw", "-n", "12", "--temperature", "0", "--threads", "1",
                            *fixed, *args])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_modelfile_drafts_with_the_head_and_draft_none_turns_it_off(mtp_model, tmp_path):
    gguf, _ = mtp_model
    on = _generate("-f", str(_modelfile(tmp_path, gguf)))
    assert on["stats"]["drafted_tokens"] > 0 and on["stats"]["accepted_tokens"] > 0  # the head drafts by default
    off = _generate("-f", str(_modelfile(tmp_path, gguf, "DRAFT none")))
    assert off["stats"]["drafted_tokens"] == 0 and off["tokens"] == on["tokens"]  # the target alone, same tokens
    flag = _generate("-m", str(gguf), "--no-mtp")
    assert flag["stats"]["drafted_tokens"] == 0 and flag["tokens"] == on["tokens"]
    assert _generate("-m", str(gguf))["stats"]["drafted_tokens"] > 0


def test_draft_none_beside_draft_num_predict_is_accepted_with_a_warning(mtp_model, tmp_path):
    gguf, _ = mtp_model
    mf = _modelfile(tmp_path, gguf, "DRAFT none", "PARAMETER draft_num_predict 4")
    r = runner.invoke(app, ["generate", "-f", str(mf), "-p", "ABC", "--raw", "-n", "6", "--threads", "1",
                            "--ctx", "256", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "DRAFT none turns drafting off, so PARAMETER draft_num_predict (line 3) is ignored" in r.stderr
    assert json.loads(r.stdout)["stats"]["drafted_tokens"] == 0


def test_a_named_drafter_drafts_instead_of_the_head(mtp_model, tmp_path):
    gguf, draft = mtp_model
    from local_eagle.cli.options import resolve_models

    pair = resolve_models(None, None, _modelfile(tmp_path, gguf, f"DRAFT {draft}"))
    assert pair.draft == draft and pair.mtp
    from local_eagle.cli.loading import LoadOptions, open_engine
    from local_eagle.runtime.mtp import MtpDrafter

    with open_engine(pair.model, pair.draft, LoadOptions(256, 0, 1, 3, tree_nodes=0)) as engine:
        assert engine.drafter is not None and not isinstance(engine.drafter, MtpDrafter)  # the EAGLE drafter
        res = engine.generate("ABC", max_tokens=8, draft_max=3)
        assert res.stats.drafted_tokens > 0
    # --draft over a Modelfile's DRAFT none: the drafter drafts (flags override the Modelfile)
    pair = resolve_models(None, draft, _modelfile(tmp_path, gguf, "DRAFT none"))
    assert pair.draft == draft and not pair.mtp


def test_chat_and_run_sessions_draft_with_the_head_unless_turned_off(mtp_model, tmp_path):
    from local_eagle.cli.chat import ChatSession
    from local_eagle.cli.loading import own_head
    from local_eagle.cli.options import resolve_models

    gguf, draft = mtp_model
    assert own_head(gguf, None, True) is True and own_head(gguf, None, False) is False
    assert own_head(gguf, draft, True) is None
    s = ChatSession(gguf)
    s.mtp = own_head(gguf, None, True)
    assert s.stream_options()["draft_max"] == 8 and "DRAFT" not in s.modelfile_text()
    assert "own MTP (NextN) head" in s.handle("/show info").output
    pair = resolve_models(None, None, _modelfile(tmp_path, gguf, "DRAFT none"))
    assert pair.modelfile is not None
    s = ChatSession.from_modelfile(pair.modelfile, pair.model, pair.draft)
    assert s.mtp is False and s.stream_options()["draft_max"] == 0 and "\nDRAFT none\n" in s.modelfile_text()
    assert "DRAFT none or --no-mtp" in s.handle("/show info").output


def test_the_store_keeps_draft_none_and_says_so(mtp_model, tmp_path):
    gguf, _ = mtp_model
    mf = _modelfile(tmp_path, gguf, "DRAFT none")
    r = runner.invoke(app, ["create", "plain", "-f", str(mf)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", "plain", "--modelfile"])
    assert r.exit_code == 0 and "\nDRAFT none\n" in r.stdout, r.output
    r = runner.invoke(app, ["show", "plain"])
    assert r.exit_code == 0 and "DRAFT none: nothing drafts" in r.stdout, r.output
    r = runner.invoke(app, ["drafters", "plain", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["builtin"] == {"kind": "mtp", "heads": 1, "drafts": False}
    r = runner.invoke(app, ["drafters", "plain"])
    assert "off for plain, whose Modelfile says DRAFT none" in " ".join(r.output.split())
    from local_eagle.cli.options import named_pair

    assert not named_pair("plain", None).mtp


def test_the_store_server_turns_the_head_off_for_draft_none(mtp_model, tmp_path, monkeypatch):
    """``StoreFront._load``'s engine options and draft bound: the head may draft unless DRAFT none or --no-mtp."""
    gguf, _ = mtp_model
    for name, lines in (("on", ()), ("off", ("DRAFT none",))):
        r = runner.invoke(app, ["create", name, "-f", str(_modelfile(tmp_path, gguf, *lines))])
        assert r.exit_code == 0, r.output
    from local_eagle.cli.options import draft_mode
    from local_eagle.cli.serve_store import store_config
    from local_eagle.serve import store_app
    from local_eagle.serve.access import Access

    seen: dict[str, tuple] = {}

    class Runner:
        def __init__(self, name: str, model: Path, draft: Path | None, options, env=None) -> None:
            seen[name] = (options.mtp,)

    monkeypatch.setattr(store_app, "RunnerEngine", Runner)
    monkeypatch.setattr(store_app, "StoreServer", lambda engine, config: seen.setdefault("bound", {}).update(
        {config.name: config.draft_max}) or engine)  # fmt: skip
    for mtp in (True, False):
        seen.clear()
        flags = {"num_ctx": 256, "num_gpu": 0, "num_thread": 1}
        config = store_config("127.0.0.1", 11434, "warning", ollama=False, flags=flags, mode=draft_mode(False, "off"),
                              timeout=0, queue_timeout=0, max_memory=None, access=Access.configured("127.0.0.1", None),
                              mtp=mtp)  # fmt: skip
        front = store_app.StoreFront(config)
        try:
            for name in ("on", "off"):
                front._load(name)[2]()
        finally:
            front.close()
        assert seen["on"] == (mtp,) and seen["off"] == (False,)
        assert seen["bound"]["off"] == 0 and (seen["bound"]["on"] > 0) == mtp
