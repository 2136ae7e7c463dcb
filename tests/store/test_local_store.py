"""local-eagle's own store: create, list, copy, remove, the checks on referenced files, and name lookup."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from local_eagle.ollama.modelfile import parse_file
from local_eagle.store import LocalStore, StoreEntryError, is_model_name, models, resolve_name
from local_eagle.store.models import checked_name
from local_eagle.store.summary import summarize
from local_eagle.testing.ollama_store import run_bounded, write_model


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


# --- damaged entries: one line each, listed as warnings, removable -------------------------------


def _field(key: str, value: object) -> Callable[[dict], str]:
    def edit(raw: dict) -> str:
        if key.startswith("files."):
            raw["files"][0][key.removeprefix("files.")] = value
        else:
            raw[key] = value
        return json.dumps(raw)

    return edit


DAMAGE: dict[str, tuple[Callable[[dict], str], str]] = {
    "deep JSON": (lambda raw: "[" * 100_000 + "]" * 100_000, "nested more than 64 deep"),
    "nested JSON": (_field("from", json.loads("[" * 80 + "]" * 80)), "nested more than 64 deep"),
    "wide integer": (lambda raw: json.dumps(raw).replace('"size": ', '"size": ' + "9" * 5000, 1), "64 bits"),
    "created_at an int": (_field("created_at", 5), "created_at must be an ISO 8601 time"),
    "created_at not a time": (_field("created_at", "yesterday"), "created_at must be an ISO 8601 time"),
    "size a string": (_field("files.size", "1 GB"), "files[0].size must be a byte count"),
    "size negative": (_field("files.size", -1), "files[0].size must be a byte count"),
    "modelfile a list": (_field("modelfile", ["FROM x"]), "modelfile must be a string"),
    "path an int": (_field("files.path", 7), "files[0].path must be an absolute file path"),
    "path relative": (_field("files.path", "model.gguf"), "files[0].path must be an absolute file path"),
    "role unknown": (_field("files.role", "lora"), 'files[0].role must be "model" or "draft"'),
    "sha256 short": (_field("files.sha256", "abc"), "files[0].sha256 must be 64 lowercase hex digits"),
    "no files": (_field("files", []), "files must be a non-empty list"),
    "not JSON": (lambda raw: "{oops", "invalid JSON at line 1"),
    "not an object": (lambda raw: "[]", "the entry must be a JSON object"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_one_line_listed_as_a_warning_and_removable(
    store: LocalStore, tmp_path: Path, target_gguf: Path, damage: str
) -> None:
    edit, needle = DAMAGE[damage]
    store.create("good", modelfile(tmp_path, target_gguf))
    bad = store.create("bad", modelfile(tmp_path, target_gguf))
    bad.path.write_text(edit(json.loads(bad.path.read_text())))
    entries, problems = store.scan()
    assert [e.name.short for e in entries] == ["good:latest"] == [e.name.short for e in store.entries()]
    assert len(problems) == 1 and str(bad.path) in problems[0] and needle in problems[0], problems
    assert "\n" not in problems[0]
    for use in (lambda: store.get("bad"), lambda: resolve_name("bad", store), lambda: store.copy("bad", "c")):
        with pytest.raises(StoreEntryError, match=re.escape(needle)):
            use()
    assert store.remove("bad").name.short == "bad:latest"
    assert store.scan() == (entries, [])


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "dangling"])
def test_a_planted_entry_is_one_line_and_removable(
    store: LocalStore, tmp_path: Path, target_gguf: Path, kind: str
) -> None:
    store.create("good", modelfile(tmp_path, target_gguf))
    path = store.root / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest"
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "nowhere" if kind == "dangling" else kind)
    entries, problems = run_bounded(store.scan)
    assert [e.name.short for e in entries] == ["good:latest"] and len(problems) == 1
    assert problems[0].startswith(f"local-eagle model entry {path} ")
    with pytest.raises(StoreEntryError):
        run_bounded(lambda: store.get("bad"))
    store.remove("bad")
    assert not os.path.lexists(path) and run_bounded(store.scan)[1] == []


def test_a_create_waits_for_an_rm_of_the_same_name(store: LocalStore, pair) -> None:
    """``rm p`` collecting the drafter converted for p must not delete it under a ``create p`` that is
    about to record it (the server runs both in threads): the second waits for the first."""
    d, target, _ = pair
    mf = d.parent / "race-Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {d / 'ckpt'}\n")
    store.create("p", mf)
    removing: list[threading.Thread] = []
    errors: list[BaseException] = []

    def remove() -> None:
        try:
            store.remove("p")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def on_status(status: dict) -> None:
        if status["status"] == "resolving drafter" and not removing:
            removing.append(threading.Thread(target=remove))
            removing[0].start()
            removing[0].join(0.5)
            assert removing[0].is_alive(), "rm ran in the middle of create"

    entry = store.create_from(checked_name("p"), parse_file(mf), on_status=on_status)
    removing[0].join(60)
    assert not errors and not removing[0].is_alive()
    assert store.find("p") is None and not Path(entry.files[1].path).exists(), "rm ran after create, whole"


def test_a_file_gone_while_creating_is_one_line(
    store: LocalStore, tmp_path: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone.gguf"
    monkeypatch.setattr(models, "resolve_draft", lambda m, **kw: gone)
    with pytest.raises(StoreEntryError, match=rf"{gone}: cannot read the drafter \(No such file"):
        store.create("m", modelfile(tmp_path, target_gguf, "DRAFT ./whatever\n"))


def test_a_model_file_replaced_by_a_fifo_is_one_line(store: LocalStore, tmp_path: Path, target_gguf: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(target_gguf.read_bytes())
    store.create("m", modelfile(tmp_path, gguf))
    gguf.unlink()
    os.mkfifo(gguf)
    with pytest.raises(StoreEntryError, match="is no longer a regular file"):
        run_bounded(lambda: resolve_name("m", store))
