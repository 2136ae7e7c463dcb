"""Ollama's store, read-only: names as types/model/name.go parses them, manifests and blobs as
server/images.go GetModel reads them, over a synthetic store written like Ollama writes one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local_eagle.ollama import store as store_mod
from local_eagle.ollama.store import (
    LICENSE,
    MESSAGES,
    MODEL,
    PARAMS,
    PROMPT,
    SYSTEM,
    TEMPLATE,
    ModelNotFound,
    Name,
    OllamaStore,
    StoreError,
    check_name,
    models_dir,
    parse_name,
    read_manifest,
)
from local_eagle.testing.ollama_store import CONFIG, add_blob, plant_blob, run_bounded, write_model

LLAMA3 = (Path(__file__).parents[1] / "data" / "templates" / "llama3-instruct.gotmpl").read_text()
P80, P350 = "8" * 80, "3" * 350


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "ollama-models"
    r.mkdir()
    monkeypatch.setenv("OLLAMA_MODELS", str(r))
    return r


# --------------------------------------------------------------------------------------------
# names: types/model/name_test.go


@pytest.mark.parametrize(
    ("ref", "parts"),
    [  # TestParseNameParts (with ParseName's defaults filled in)
        (
            "registry.ollama.ai/library/dolphin-mistral:7b-v2.6-dpo-laser-q6_K",
            ("registry.ollama.ai", "library", "dolphin-mistral", "7b-v2.6-dpo-laser-q6_K"),
        ),
        ("scheme://host:port/namespace/model:tag", ("host:port", "namespace", "model", "tag")),
        ("host/namespace/model:tag", ("host", "namespace", "model", "tag")),
        ("host:port/namespace/model", ("host:port", "namespace", "model", "latest")),
        ("namespace/model", ("registry.ollama.ai", "namespace", "model", "latest")),
        ("model", ("registry.ollama.ai", "library", "model", "latest")),
        ("h/nn/mm:t", ("h", "nn", "mm", "t")),
        (f"{P350}/{P80}/{P80}:{P80}", (P350, P80, P80, P80)),
    ],
)
def test_parse_name_parts(ref: str, parts: tuple[str, ...]) -> None:
    assert parse_name(ref).parts == parts
    assert check_name(ref).parts == parts


@pytest.mark.parametrize(
    "ref",
    [  # testCases marked invalid whose defaults cannot make them valid
        "",
        "^",
        "mm:",
        "n/m:",
        "/nn/mm",
        "//",
        "//mm",
        "hh//",
        "//mm:@",
        "00@",
        "@",
        "m@d",
        "-hh/nn/mm:tt",
        "hh/-nn/mm:tt",
        "hh/nn/-mm:tt",
        "hh/nn/mm:-tt",
        "host/name:space/model:tag",
        "a/b/c/d",
        "m" * 81,
        f"model:{'t' * 81}",
    ],
)
def test_invalid_names(ref: str) -> None:
    with pytest.raises(StoreError, match="is not a valid Ollama model name: the "):
        check_name(ref)


@pytest.mark.parametrize("ref", ["_why/_the/_lucky:_stiff", "h/n/m:t", "host:https/namespace/model:tag", "xx"])
def test_valid_names(ref: str) -> None:
    check_name(ref)


def test_invalid_name_messages_say_which_part() -> None:
    with pytest.raises(StoreError, match=r"'hh/-nn/mm:tt' is not a valid Ollama model name: the namespace '-nn' must"):
        check_name("hh/-nn/mm:tt")
    with pytest.raises(StoreError, match="the tag is empty"):
        check_name("mm:")


def test_short_and_long_forms() -> None:
    assert str(parse_name("xx")) == "registry.ollama.ai/library/xx:latest"  # TestNameparseNameDefault
    assert parse_name("llama3.1:8b").short == "llama3.1:8b"
    assert parse_name("me/mine").short == "me/mine:latest"
    assert parse_name("example.com/team/m:q4").short == "example.com/team/m:q4"


@pytest.mark.parametrize(("ref", "base"), [("gpt-oss:20b-cloud", "gpt-oss:20b"), ("qwen3:cloud", "qwen3")])
def test_cloud_models_are_refused(ref: str, base: str) -> None:
    with pytest.raises(StoreError, match="is an Ollama cloud model"):
        check_name(ref)
    assert check_name(base + (":local" if ":" not in base else "")).model == base.split(":")[0]


def test_local_suffix_is_dropped_and_both_suffixes_refused() -> None:
    assert check_name("qwen3:8b:local").parts[2:] == ("qwen3", "8b")
    with pytest.raises(StoreError, match="not both"):
        check_name("qwen3:local:cloud")


# --------------------------------------------------------------------------------------------
# where the store is: envconfig.Models


def test_models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert models_dir({"OLLAMA_MODELS": ' "/data/models" '}) == Path("/data/models")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models_dir({}) == tmp_path / ".ollama" / "models"
    service = tmp_path / "usr-share" / "models"
    service.mkdir(parents=True)
    monkeypatch.setattr(store_mod, "SERVICE_MODELS", service)
    assert models_dir({}) == service  # the Linux service's store when the user has none
    (tmp_path / ".ollama" / "models").mkdir(parents=True)
    assert models_dir({}) == tmp_path / ".ollama" / "models"


# --------------------------------------------------------------------------------------------
# manifests and layers: server/images.go GetModel


def test_every_name_form_finds_the_model(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf, template=LLAMA3, system="Be brief.")
    write_model(root, "mine", target_gguf, namespace="me", tag="v1")
    write_model(root, "m", target_gguf, host="example.com:5000", namespace="team", tag="q4")
    s = OllamaStore()
    blob = s.resolve("tiny").model
    assert blob.name.startswith("sha256-") and blob.read_bytes() == target_gguf.read_bytes()
    for ref in ("tiny", "tiny:latest", "library/tiny", "registry.ollama.ai/library/tiny:latest", "TINY:Latest"):
        m = s.resolve(ref)
        assert (m.model, m.template, m.system, m.name.short) == (blob, LLAMA3, "Be brief.", "tiny:latest")
    assert s.resolve("tiny:local").model == blob
    assert s.resolve("me/mine:v1").name == Name("registry.ollama.ai", "me", "mine", "v1")
    assert s.resolve("example.com:5000/team/m:q4").model == blob
    with pytest.raises(ModelNotFound, match=r"tiny:v2: not in Ollama's store at .* \(no manifest registry"):
        s.resolve("tiny:v2")
    assert sorted(map(str, s.names())) == [
        "example.com:5000/team/m:q4",
        "registry.ollama.ai/library/tiny:latest",
        "registry.ollama.ai/me/mine:v1",
    ]


def test_layers_are_read_as_get_model_reads_them(root: Path, target_gguf: Path) -> None:
    """A later template/system layer replaces an earlier one (the older ``prompt`` type is a template),
    params layers merge key by key, license layers add up, other media types are skipped."""
    extra = [
        add_blob(root, b"{{ .Prompt }}", "application/vnd.ollama.image.prompt"),
        add_blob(root, b'{"temperature": 0.2, "top_k": 7}', "application/vnd.ollama.image.params"),
        add_blob(root, b"MIT", "application/vnd.ollama.image.license"),
        add_blob(root, b"old", "application/vnd.ollama.image.embed"),
        add_blob(root, b"?", "application/vnd.example.unknown"),
    ]
    params = {"temperature": 0.6, "stop": ["<|eot_id|>"]}
    msgs = [{"role": "User", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    write_model(
        root, "tiny", target_gguf, template=LLAMA3, params=params, messages=msgs, license="Apache", layers=extra
    )
    m = OllamaStore().resolve("tiny")
    assert m.template == "{{ .Prompt }}"
    assert m.parameters == {"temperature": 0.2, "stop": ["<|eot_id|>"], "top_k": 7}
    assert m.license == ["Apache", "MIT"]
    assert m.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert m.skipped == ["application/vnd.ollama.image.embed", "application/vnd.example.unknown"]


def test_config_gives_renderer_parser_and_requires(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf, config={"renderer": "qwen3", "parser": "qwen3", "requires": "0.12.0"})
    m = OllamaStore().resolve("tiny")
    assert (m.renderer, m.parser, m.requires) == ("qwen3", "qwen3", "0.12.0")


def one_line_error(ref: str) -> str:
    with pytest.raises(StoreError) as e:
        OllamaStore().resolve(ref)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_missing_blob_names_the_file(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf, system="s")
    blob = OllamaStore().resolve("tiny").sources["system"]
    blob.unlink()
    msg = one_line_error("tiny")
    assert f"blob {blob} (application/vnd.ollama.image.system) is missing" in msg and "ollama pull" in msg


def test_a_truncated_blob_is_refused(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf)
    blob = OllamaStore().resolve("tiny").model
    blob.unlink()
    blob.write_bytes(b"GGUF")
    assert "has 4 bytes where the manifest says" in one_line_error("tiny")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "malformed manifest (invalid JSON at line 1, column 2)"),
        ("[]", "malformed manifest (expected a JSON object)"),
        ('{"layers": {}}', "malformed manifest ('layers' is not a list)"),
        ('{"layers": [{"mediaType": 3}]}', "malformed manifest (layer 0 needs a string mediaType"),
        ('{"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "md5:00"}]}', "invalid digest"),
        ('{"layers": []}', "the manifest has no GGUF model layer"),
    ],
)
def test_a_malformed_manifest_names_the_file(root: Path, target_gguf: Path, text: str, needle: str) -> None:
    path = write_model(root, "tiny", target_gguf)
    path.write_text(text)
    msg = one_line_error("tiny")
    assert str(path) in msg and needle in msg


def test_adapter_and_projector_layers_are_refused(root: Path, target_gguf: Path) -> None:
    adapter = add_blob(root, b"GGUF-lora", "application/vnd.ollama.image.adapter")
    write_model(root, "lora", target_gguf, layers=[adapter])
    assert "has a LoRA adapter layer" in one_line_error("lora") and "llama-export-lora" in one_line_error("lora")
    projector = add_blob(root, b"GGUF-mmproj", "application/vnd.ollama.image.projector")
    write_model(root, "vision", target_gguf, layers=[projector])
    msg = one_line_error("vision")
    assert "has a vision projector layer" in msg and f"FROM {root / 'blobs'}/sha256-" in msg


def test_models_that_are_not_local_ggufs_are_refused(root: Path, target_gguf: Path) -> None:
    write_model(root, "mlx", None, config={"model_format": "safetensors"})
    assert "a safetensors model (Ollama's MLX engine)" in one_line_error("mlx")
    write_model(root, "remote", None, config={"remote_host": "https://ollama.com:443", "remote_model": "big"})
    assert "an Ollama cloud model" in one_line_error("remote")


def test_reading_writes_nothing(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf, template=LLAMA3, params={"temperature": 0.5})
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
    OllamaStore().resolve("TINY")
    with pytest.raises(ModelNotFound):
        OllamaStore().resolve("other/model:tag")
    OllamaStore(root / "nowhere").names()
    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before
    assert not (root / "nowhere").exists()


def test_manifest_json_is_what_ollama_writes(root: Path, target_gguf: Path) -> None:
    path = write_model(root, "tiny", target_gguf, system="s")
    raw = json.loads(path.read_text())
    assert raw["schemaVersion"] == 2 and [x["mediaType"] for x in raw["layers"]] == [
        "application/vnd.ollama.image.model",
        "application/vnd.ollama.image.system",
    ]


# --------------------------------------------------------------------------------------------
# planted files and crafted JSON: one line each, never a hang, a read without end or a traceback

PLANTED = ["fifo", "/dev/zero", "outside", "fifo-in-store"]


@pytest.fixture
def planted(tmp_path: Path, root: Path):
    """The file a planted blob links to: a FIFO, /dev/zero or a secret file outside the store, or a FIFO
    inside its blobs directory."""

    def make(kind: str) -> Path:
        if kind.startswith("fifo"):
            fifo = root / "blobs" / "fifo" if kind == "fifo-in-store" else tmp_path / "fifo"
            fifo.parent.mkdir(parents=True, exist_ok=True)
            if not fifo.exists():
                os.mkfifo(fifo)
            return fifo
        if kind == "outside":
            secret = tmp_path / "secret.txt"
            secret.write_text("root:x:0:0:SECRET\n")
            return secret
        return Path(kind)

    return make


def expected(kind: str, target: Path, root: Path) -> str:
    if kind == "fifo-in-store":
        return "is a FIFO, not a regular file"
    return f"links to {os.path.realpath(target)}, outside {root / 'blobs'}"


def bounded_error(ref: str) -> str:
    def resolve() -> None:
        OllamaStore().resolve(ref)

    with pytest.raises(StoreError) as e:
        run_bounded(resolve)
    assert "\n" not in str(e.value) and "SECRET" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("kind", PLANTED)
@pytest.mark.parametrize("media", [TEMPLATE, SYSTEM, PARAMS, MESSAGES, LICENSE, PROMPT])
def test_a_planted_blob_is_refused(root: Path, target_gguf: Path, planted, kind: str, media: str) -> None:
    target = planted(kind)
    write_model(root, "tiny", target_gguf, layers=[plant_blob(root, target, media)])
    assert expected(kind, target, root) in bounded_error("tiny")


@pytest.mark.parametrize("kind", PLANTED)
def test_a_planted_model_or_config_blob_is_refused(root: Path, planted, kind: str, target_gguf: Path) -> None:
    target = planted(kind)
    write_model(root, "weights", None, layers=[plant_blob(root, target, MODEL)])
    assert expected(kind, target, root) in bounded_error("weights")
    write_model(root, "config", target_gguf, config_layer=plant_blob(root, target, CONFIG))
    assert expected(kind, target, root) in bounded_error("config")


def test_a_link_inside_the_blobs_directory_is_followed(root: Path, target_gguf: Path) -> None:
    real = add_blob(root, b"{{ .Prompt }}", TEMPLATE)
    link = plant_blob(root, root / "blobs" / real["digest"].replace(":", "-"), TEMPLATE)
    write_model(root, "tiny", target_gguf, layers=[link])
    assert OllamaStore().resolve("tiny").template == "{{ .Prompt }}"


def test_a_directory_as_blob_is_refused(root: Path, target_gguf: Path) -> None:
    layer = add_blob(root, b"x", TEMPLATE)
    path = root / "blobs" / layer["digest"].replace(":", "-")
    path.unlink()
    path.mkdir()
    write_model(root, "tiny", target_gguf, layers=[{**layer, "size": 0}])
    assert "is a directory, not a regular file" in bounded_error("tiny")


def test_small_blobs_are_read_up_to_a_cap(root: Path, target_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_model(root, "tiny", target_gguf, template="x" * 100)
    monkeypatch.setitem(store_mod.BLOB_CAPS, TEMPLATE, 64)
    assert "has 100 bytes, more than the 64 bytes such a file may have" in bounded_error("tiny")


DEEP = "[" * 100_000 + "]" * 100_000
NESTED = "[" * 80 + "]" * 80  # parses, but deeper than any file Ollama writes
WIDE = "1" * 5000
WIDE64 = str(1 << 70)


@pytest.mark.parametrize(("text", "needle"), [(DEEP, "nested more than 64 deep"), (NESTED, "nested more than 64 deep")])
def test_deeply_nested_json_is_one_line(root: Path, target_gguf: Path, text: str, needle: str) -> None:
    path = write_model(root, "manifest", target_gguf)
    path.write_text(f'{{"layers": {text}}}')
    assert needle in bounded_error("manifest") and str(path) in bounded_error("manifest")
    config = add_blob(root, f'{{"renderer": {text}}}'.encode(), CONFIG)
    write_model(root, "config", target_gguf, config_layer=config)
    assert needle in bounded_error("config")
    write_model(root, "params", target_gguf, layers=[add_blob(root, f'{{"stop": {text}}}'.encode(), PARAMS)])
    assert needle in bounded_error("params")
    write_model(root, "messages", target_gguf, layers=[add_blob(root, text.encode(), MESSAGES)])
    assert needle in bounded_error("messages")


@pytest.mark.parametrize("number", [WIDE, WIDE64])
def test_integers_beyond_64_bits_are_one_line(root: Path, target_gguf: Path, number: str) -> None:
    path = write_model(root, "manifest", target_gguf)
    raw = json.loads(path.read_text())
    path.write_text(json.dumps(raw).replace(f'"size": {raw["layers"][0]["size"]}', f'"size": {number}', 1))
    assert "at most 64 bits" in bounded_error("manifest")
    with pytest.raises(StoreError, match="at most 64 bits"):
        read_manifest(path)  # what the server's listing reads for each model: one bad manifest is one error
    write_model(root, "params", target_gguf, layers=[add_blob(root, f'{{"seed": {number}}}'.encode(), PARAMS)])
    assert "at most 64 bits" in bounded_error("params")


@pytest.mark.parametrize(
    ("params", "needle"),
    [('{"stop": [{"a": 1}]}', "'stop' is not a string, a number"), ('{"top_k": {"x": 1}}', "'top_k' is not a")],
)
def test_parameters_of_the_wrong_shape_are_one_line(root: Path, target_gguf: Path, params: str, needle: str) -> None:
    write_model(root, "tiny", target_gguf, layers=[add_blob(root, params.encode(), PARAMS)])
    assert needle in bounded_error("tiny")


def test_a_config_field_of_the_wrong_type_is_one_line(root: Path, target_gguf: Path) -> None:
    write_model(root, "tiny", target_gguf, config={"model_format": {"x": 1}})
    assert "config field 'model_format' must be a string" in bounded_error("tiny")
