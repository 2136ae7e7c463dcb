"""local-eagle's own store: create, list, copy, remove, the checks on referenced files, and name lookup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local_eagle.store import LocalStore, StoreEntryError, is_model_name, resolve_name
from local_eagle.store.summary import summarize
from local_eagle.testing.ollama_store import write_model


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def modelfile(tmp_path: Path, target: Path, extra: str = "", name: str = "Modelfile") -> Path:
    mf = tmp_path / name
    mf.write_text(f"FROM {target}\nPARAMETER temperature 0.3\nSYSTEM be brief\n{extra}")
    return mf


def test_create_list_load(store: LocalStore, tmp_path: Path, target_gguf: Path) -> None:
    entry = store.create("Coder", modelfile(tmp_path, target_gguf))
    assert entry.name.short == "Coder:latest"
    assert [e.name.short for e in store.entries()] == ["Coder:latest"]
    assert entry.files[0].size == target_gguf.stat().st_size and len(entry.files[0].sha256) == 64
    m = store.load(store.get("coder"))  # names match whatever the case, as Ollama's do
    assert m.model == target_gguf.absolute()
    assert m.parameters == {"temperature": 0.3} and m.system == "be brief"
    assert not list(store.root.rglob("*.gguf")), "the GGUF is referenced, not copied"


@pytest.mark.parametrize("bad", ["", "-x", "a b", "ns/", "x:y:z/w", "m:" + "t" * 81, "llama:cloud"])
def test_bad_names(store: LocalStore, tmp_path: Path, target_gguf: Path, bad: str) -> None:
    with pytest.raises(StoreEntryError):
        store.create(bad, modelfile(tmp_path, target_gguf))
    assert not store.entries()


def test_a_failed_create_leaves_the_old_entry(store: LocalStore, tmp_path: Path, target_gguf: Path) -> None:
    old = store.create("m", modelfile(tmp_path, target_gguf))
    broken = modelfile(tmp_path, target_gguf, "DRAFT ./missing-drafter.gguf\n", "Broken")
    with pytest.raises(Exception, match="missing-drafter"):
        store.create("m", broken)
    assert store.get("m").modelfile == old.modelfile
    assert [p.name for p in old.path.parent.iterdir()] == ["latest"], "no temporary file is left behind"


def test_a_moved_file_is_named(store: LocalStore, tmp_path: Path, target_gguf: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(target_gguf.read_bytes())
    store.create("m", modelfile(tmp_path, gguf))
    gguf.rename(tmp_path / "elsewhere.gguf")
    with pytest.raises(StoreEntryError, match=rf"m:latest: its model GGUF {gguf} has moved or been deleted"):
        resolve_name("m", store)


def test_a_changed_file_is_named_and_a_touch_is_not_a_change(
    store: LocalStore, tmp_path: Path, target_gguf: Path
) -> None:
    gguf = tmp_path / "model.gguf"
    data = target_gguf.read_bytes()
    gguf.write_bytes(data)
    store.create("m", modelfile(tmp_path, gguf))
    st = gguf.stat()
    os.utime(gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert resolve_name("m", store).model == gguf  # same content: found by its digest
    assert store.get("m").files[0].mtime_ns == st.st_mtime_ns + 10**9, "the record follows the mtime"
    gguf.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(StoreEntryError, match=r"has changed \(another SHA-256\)"):
        resolve_name("m", store)
    gguf.write_bytes(data + b"x")
    with pytest.raises(StoreEntryError, match="has changed"):
        resolve_name("m", store)


def test_copy_and_remove(store: LocalStore, tmp_path: Path, target_gguf: Path) -> None:
    store.create("a", modelfile(tmp_path, target_gguf))
    store.copy("a", "me/b:v1")
    assert sorted(e.name.short for e in store.entries()) == ["a:latest", "me/b:v1"]
    store.remove("a")
    assert [e.name.short for e in store.entries()] == ["me/b:v1"]
    with pytest.raises(StoreEntryError, match="not found"):
        store.remove("a")
    assert resolve_name("me/b:v1", store).parameters == {"temperature": 0.3}


def test_a_checkpoint_draft_is_converted_once_into_the_store(store: LocalStore, tmp_path: Path, pair) -> None:
    d, target, _ = pair
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {d / 'ckpt'}\n")
    entry = store.create("p", mf)
    draft = entry.file("draft")
    assert draft is not None and Path(draft.path).parent == store.drafters
    again = store.create("p2", mf)
    assert again.file("draft").path == draft.path, "converted once"
    s = summarize(target, Path(draft.path))
    assert s.draft_architecture == "eagle3" and s.eagle_version == "3.1" and s.target_layers
    store.remove("p")
    assert Path(draft.path).exists(), "still used by p2"
    store.remove("p2")
    assert not Path(draft.path).exists(), "a converted drafter goes with its last model"


def test_names_resolve_here_first_then_in_ollamas_store(
    store: LocalStore, tmp_path: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ollama = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    write_model(ollama, "tiny", target_gguf, system="from ollama", params={"temperature": 0.9})
    assert resolve_name("tiny", store).system == "from ollama"
    store.create("tiny", modelfile(tmp_path, target_gguf))
    assert resolve_name("tiny", store).system == "be brief"
    with pytest.raises(StoreEntryError, match=r"'nope' not found: not in local-eagle's store .* nor in Ollama's"):
        resolve_name("nope", store)


def test_is_model_name(tmp_path: Path, target_gguf: Path) -> None:
    assert is_model_name("llama3.1:8b") and is_model_name("me/coder")
    assert not is_model_name(str(target_gguf)) and not is_model_name("./x.gguf") and not is_model_name("a b")
