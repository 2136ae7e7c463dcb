"""A Modelfile ``FROM`` a model of Ollama's store: what it inherits and what its own lines override,
as ``ollama create`` decides it (server/create.go), and the prompt it renders (the issue's bar)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter

from local_eagle.ollama.conversation import render_conversation
from local_eagle.ollama.modelfile import Message, ModelfileError, format_modelfile, parse, parse_file, resolve_model
from local_eagle.ollama.modelfile import show as show_modelfile
from local_eagle.ollama.store import MESSAGES, PARAMS, TEMPLATE
from local_eagle.testing.ollama_store import add_blob, plant_blob, run_bounded, write_model

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"
LLAMA3 = (TEMPLATES / "llama3-instruct.gotmpl").read_text()
STOP = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]  # Ollama's template/llama3-instruct.json
HISTORY = [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A llama."}]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "ollama-models"
    r.mkdir()
    monkeypatch.setenv("OLLAMA_MODELS", str(r))
    return r


@pytest.fixture
def llama(root: Path, target_gguf: Path) -> Path:
    """A pulled model with every layer a Modelfile can inherit."""
    return write_model(
        root,
        "tiny-llama",
        target_gguf,
        tag="8b",
        template=LLAMA3,
        system="You are a helpful assistant.",
        params={"stop": STOP, "temperature": 0.6, "num_ctx": 8192},
        messages=HISTORY,
        license="LLAMA 3 COMMUNITY LICENSE",
    )


def write(tmp_path: Path, text: str) -> Path:
    mf = tmp_path / "Modelfile"
    mf.write_text(text)
    return mf


def test_from_a_name_inherits_everything(tmp_path: Path, llama: Path, target_gguf: Path) -> None:
    m = parse_file(write(tmp_path, "FROM tiny-llama:8b\n"))
    assert resolve_model(m).read_bytes() == target_gguf.read_bytes()
    assert m.model.name.startswith("sha256-") and m.from_name == "tiny-llama:8b"
    assert m.template == LLAMA3 and m.system == "You are a helpful assistant."
    assert m.parameters == {"stop": STOP, "temperature": 0.6, "num_ctx": 8192}
    assert m.messages == [Message("user", "Who are you?"), Message("assistant", "A llama.")]
    assert m.license == ["LLAMA 3 COMMUNITY LICENSE"]
    assert m.draft is None and m.warnings == []
    assert m.origins["template"].startswith("tiny-llama:8b (") and "/blobs/sha256-" in m.origins["template"]


def test_the_modelfile_overrides_as_ollama_create_does(tmp_path: Path, llama: Path) -> None:
    """Template and system replace, parameters merge key by key (stop as a whole), messages replace,
    licenses add up (server/create.go setTemplate, setSystem, setParameters, setMessages, setLicense)."""
    text = (
        'FROM tiny-llama:8b\nTEMPLATE "{{ .Prompt }}"\nSYSTEM Be terse.\nPARAMETER temperature 0.1\n'
        "PARAMETER stop <END>\nMESSAGE user hi\nLICENSE mine\nDRAFT ./drafter.gguf\n"
    )
    m = parse_file(write(tmp_path, text))
    assert (m.template, m.system) == ("{{ .Prompt }}", "Be terse.")
    assert m.parameters == {"stop": ["<END>"], "temperature": 0.1, "num_ctx": 8192}
    assert m.messages == [Message("user", "hi")]
    assert m.license == ["LLAMA 3 COMMUNITY LICENSE", "mine"]
    assert m.draft == tmp_path / "drafter.gguf"
    assert set(m.origins) == {"parameters"}


def test_empty_template_and_system_keep_the_inherited_ones(tmp_path: Path, llama: Path) -> None:
    """create.go sets a template or system layer only for a non-empty value."""
    m = parse_file(write(tmp_path, 'FROM tiny-llama:8b\nTEMPLATE ""\nSYSTEM ""\n'))
    assert m.template == LLAMA3 and m.system == "You are a helpful assistant."


def test_the_bar_render_is_ollamas_prompt(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    """A store model with template, system and params layers, and a Modelfile ``FROM`` it plus DRAFT:
    the prompt is exactly Ollama's template/testdata/llama3-instruct.gotmpl/system-user-assistant-user."""
    write_model(
        root, "llama3", target_gguf, template=LLAMA3, system="You are a helpful assistant.", params={"stop": STOP}
    )
    m = parse_file(write(tmp_path, "FROM llama3\nDRAFT ./llama3-eagle3.gguf\n"))
    assert m.draft == tmp_path / "llama3-eagle3.gguf" and m.stop == STOP
    chat = [
        {"role": "user", "content": "Hello, how are you?"},
        {"role": "assistant", "content": "I'm doing great. How can I help you today?"},
        {"role": "user", "content": "I'd like to show off how chat templating works!"},
    ]
    assert render_conversation(m, chat) == (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\nI'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nI'd like to show off how chat templating works!<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\n"
    )


def test_inherited_history_comes_first(tmp_path: Path, llama: Path) -> None:
    """Ollama's chat handler puts the model's messages before the request's, after the system prompt."""
    m = parse_file(write(tmp_path, "FROM tiny-llama:8b\nDRAFT ./llama3-eagle3.gguf\n"))
    assert render_conversation(m, [{"role": "user", "content": "Hi"}]) == (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nA llama.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_a_legacy_template_renders_per_turn(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "phi", target_gguf, template=(TEMPLATES / "phi-3-legacy.gotmpl").read_text(), system="S")
    m = parse_file(write(tmp_path, "FROM phi\n"))
    assert (
        render_conversation(m, [{"role": "user", "content": "Q"}])
        == "<|system|>\nS<|end|>\n<|user|>\nQ<|end|>\n<|assistant|>\n"
    )


def test_renderer_parser_requires_come_from_the_config(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "qwen", target_gguf, config={"renderer": "qwen3-coder", "parser": "qwen3-coder"})
    m = parse_file(write(tmp_path, "FROM qwen\nPARSER mine\n"))
    assert (m.renderer, m.parser, m.requires) == ("qwen3-coder", "mine", None)


def test_stored_parameters_get_local_eagle_types(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    """JSON numbers become ints or floats as the parameter wants; an unknown name is skipped with a
    warning (Ollama's Options.FromMap skips it too), a deprecated one silently."""
    params = {"num_ctx": 4096.0, "top_k": 40, "stop": "</s>", "mirostat": 0, "num_gqa": 8}
    write_model(root, "p", target_gguf, params=params)
    m = parse_file(write(tmp_path, "FROM p\n"))
    assert m.parameters == {"num_ctx": 4096, "top_k": 40, "stop": ["</s>"]}
    assert isinstance(m.parameters["num_ctx"], int)
    assert len(m.warnings) == 1 and "parameter num_gqa" in m.warnings[0] and "ignored" in m.warnings[0]


def test_a_stored_parameter_out_of_range_names_the_blob(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "p", target_gguf, params={"top_p": 3})
    mf = write(tmp_path, "\nFROM p\n")
    with pytest.raises(
        ModelfileError, match=rf"^{mf}:2: FROM p:latest: parameter in .*/blobs/sha256-\w+: top_p must be"
    ):
        parse_file(mf)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("FROM nothere:1b\n", "FROM nothere:1b: no such file, and no such model in Ollama's store at"),
        ("FROM llama3.1:8b-cloud\n", "is an Ollama cloud model"),
        ("FROM bad..name/-x\n", "is not a valid Ollama model name"),
        ("FROM tiny-llama:8b\nFROM ./other.gguf\n", "a second FROM beside FROM tiny-llama:8b (line 1)"),
    ],
)
def test_errors_name_the_modelfile_line(tmp_path: Path, llama: Path, text: str, needle: str) -> None:
    mf = write(tmp_path, text)
    with pytest.raises(ModelfileError) as e:
        parse_file(mf)
    assert str(e.value).startswith(f"{mf}:") and needle in str(e.value) and "\n" not in str(e.value)


def test_a_missing_blob_and_an_adapter_reach_the_modelfile(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "lora", target_gguf, layers=[add_blob(root, b"x", "application/vnd.ollama.image.adapter")])
    with pytest.raises(ModelfileError, match=r"Modelfile:1: FROM lora: lora:latest \(.*\): has a LoRA adapter layer"):
        parse("FROM lora\n", tmp_path)
    write_model(root, "gone", target_gguf, system="s")
    next(p for p in (root / "blobs").iterdir() if p.read_bytes() == b"s").unlink()
    with pytest.raises(ModelfileError, match=r"Modelfile:1: FROM gone: gone:latest .* blob .* is missing"):
        parse("FROM gone\n", tmp_path)


def test_an_unknown_media_type_is_skipped(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "odd", target_gguf, template=LLAMA3, layers=[add_blob(root, b"?", "application/x-unknown")])
    assert parse("FROM odd\n", tmp_path).template == LLAMA3


def test_an_inherited_template_that_ollama_would_refuse_is_refused(
    root: Path, tmp_path: Path, target_gguf: Path
) -> None:
    write_model(root, "bad", target_gguf, template='{{ define "x" }}{{ template "x" }}{{ end }}')
    with pytest.raises(
        ModelfileError, match=r"FROM bad: the TEMPLATE of bad:latest \(.*\): .*undefined template specified"
    ):
        parse("FROM bad\n", tmp_path)


def test_a_render_error_in_an_inherited_template_names_its_model(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    write_model(root, "oops", target_gguf, template="{{ range .Messages }}{{ .Nope }}{{ end }}")
    m = parse_file(write(tmp_path, "# first\nFROM oops\n"))
    with pytest.raises(ModelfileError, match=r"Modelfile:2: TEMPLATE inherited from oops:latest \(.*\): .*Nope"):
        render_conversation(m, [{"role": "user", "content": "x"}])


def write_header_gguf(path: Path, arch: str) -> Path:
    w = GGUFWriter(path, arch)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_models_own_draft_layer(root: Path, tmp_path: Path, target_gguf: Path) -> None:
    """GetModel reads a draft layer; an EAGLE 3 one is inherited, another kind is not, with a warning."""
    eagle = add_blob(root, write_header_gguf(tmp_path / "e.gguf", "eagle3"), "application/vnd.ollama.image.draft")
    plain = add_blob(root, write_header_gguf(tmp_path / "p.gguf", "llama"), "application/vnd.ollama.image.draft")
    write_model(root, "with-eagle", target_gguf, layers=[eagle])
    write_model(root, "with-plain", target_gguf, layers=[plain])
    m = parse("FROM with-eagle\n", tmp_path)
    assert m.draft is not None and m.draft.name == eagle["digest"].replace(":", "-")
    assert parse("FROM with-eagle\nDRAFT ./mine.gguf\n", tmp_path).draft == tmp_path / "mine.gguf"
    m = parse("FROM with-eagle\nDRAFT none\n", tmp_path)  # not even the model's own draft layer
    assert m.draft is None and m.draft_off and m.warnings == []
    m = parse("FROM with-plain\n", tmp_path)
    assert m.draft is None and "is not an EAGLE 3 drafter" in m.warnings[0]


def test_show_writes_the_blob_and_names_the_model_like_ollama_show(tmp_path: Path, llama: Path) -> None:
    m = parse_file(write(tmp_path, "FROM tiny-llama:8b\nPARAMETER temperature 0.2\n"))
    text = show_modelfile(m)
    assert "# To build a new Modelfile based on this, replace FROM with:\n# FROM tiny-llama:8b\n" in text
    assert f"\nFROM {m.model}\n" in text
    again = parse(format_modelfile(m), tmp_path)
    assert again == m and again.from_name is None


@pytest.mark.parametrize(
    ("blob", "media", "needle"),
    [
        (b'{"seed": ' + b"7" * 5000 + b"}", PARAMS, "at most 64 bits"),
        (b'{"seed": 1e300}', PARAMS, "seed must be an integer, got 1e+300"),
        (b'{"stop": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", PARAMS, "nested more than 64 deep"),
        (b"[" * 100_000 + b"]" * 100_000, MESSAGES, "nested more than 64 deep"),
        (b'[{"role": "user", "content": ' + b"9" * 5000 + b"}]", MESSAGES, "at most 64 bits"),
    ],
)
def test_crafted_json_in_a_blob_is_one_line_naming_the_modelfile_and_the_blob(
    root: Path, tmp_path: Path, target_gguf: Path, blob: bytes, media: str, needle: str
) -> None:
    write_model(root, "crafted", target_gguf, layers=[add_blob(root, blob, media)])
    mf = write(tmp_path, "FROM crafted\n")
    with pytest.raises(ModelfileError) as e:
        parse_file(mf)
    msg = str(e.value)
    assert msg.startswith(f"{mf}:1: FROM crafted") and "/blobs/sha256-" in msg and needle in msg and "\n" not in msg


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd"])
def test_a_planted_template_reaches_the_modelfile_as_one_line(
    root: Path, tmp_path: Path, target_gguf: Path, target: str
) -> None:
    if not Path(target).exists():
        pytest.skip(f"{target} does not exist here")
    write_model(root, "planted", target_gguf, layers=[plant_blob(root, target, TEMPLATE)])
    with pytest.raises(ModelfileError, match=rf"^.*Modelfile:1: FROM planted: .* links to {target}, outside "):
        run_bounded(lambda: parse("FROM planted\n", tmp_path))
