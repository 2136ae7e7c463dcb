"""The drafter catalog: every row sourced, matched by the GGUF's shape (not its name), DRAFT auto picks the best."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle.catalog import best, catalog, fitting, near_misses, parse_catalog
from local_eagle.cli.app import app
from local_eagle.errors import LocalEagleError
from local_eagle.gguf import read_model_info
from local_eagle.ollama.modelfile import ModelfileError, parse
from local_eagle.testing.vram_fixtures import LLAMA31_8B, ShapeSpec, write_shape_gguf

ROWS = catalog()
TARGETS = {d.target.key: d.target for d in ROWS}


def shape_gguf(tmp_path: Path, arch: str, hidden: int, layers: int, vocab: int, name: str = "model") -> Path:
    """A shape-only GGUF of a target: the header's keys and tensor table, a sparse data section."""
    spec = ShapeSpec(arch=arch, n_layer=layers, n_embd=hidden, n_head=8, n_head_kv=8, n_ff=2 * hidden,
                     n_vocab=vocab, tokenizer=False, name=name)  # fmt: skip
    return write_shape_gguf(tmp_path / f"{name}.gguf", spec)


def test_every_row_has_a_source_and_a_target():
    assert len(ROWS) >= 10
    for d in ROWS:
        assert "https://" in d.source, d.repo
        if d.family in ("eagle3", "eagle3.1"):
            assert d.eagle_version in ("3", "3.1") and d.format in ("speculators", "eagle3", "vllm", "modelopt")
        else:
            assert (d.family, d.format, d.eagle_version) == ("dflash", "dflash", None), d.repo
    assert len({d.repo for d in ROWS}) == len(ROWS)
    assert any(d.eagle_version == "3.1" and d.supported for d in ROWS)
    assert [d.repo for d in ROWS if d.unsupported] == ["lightseekorg/kimi-k2.6-eagle3.1-mla"]
    # block drafters are listed and never picked by DRAFT auto (a DFlash one drafts when DRAFT names it)
    assert all(not d.supported for d in ROWS if d.family == "dflash")


@pytest.mark.parametrize("key", sorted(TARGETS))
def test_each_target_shape_matches_its_rows(tmp_path, key):
    t = TARGETS[key]
    info = read_model_info(shape_gguf(tmp_path, t.arch, t.hidden_size, t.layers, t.vocab, "renamed-anything"))
    same_shape = [d for d in ROWS if (d.target.arch, d.target.hidden_size, d.target.layers, d.target.vocab)
                  == (t.arch, t.hidden_size, t.layers, t.vocab)]  # fmt: skip
    assert [d.repo for d in fitting(info)] == [d.repo for d in sorted(same_shape, key=lambda d: d.rank(info))]
    assert any(d.target.key == key for d in fitting(info))


@pytest.mark.parametrize(
    ("name", "first_target"),
    [
        ("DeepSeek R1 Distill Llama 8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
        ("Meta Llama 3.1 8B Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ],
)
def test_a_shared_shape_is_ordered_by_the_ggufs_name(tmp_path, name, first_target):
    """Llama 3.1 8B and the R1 Llama distill share a shape: both drafters fit, the one for the named model first."""
    info = read_model_info(shape_gguf(tmp_path, "llama", 4096, 32, 128256, name))
    fits = fitting(info)
    assert {d.target.repo for d in fits} == {"deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
                                             "meta-llama/Llama-3.1-8B-Instruct"}  # fmt: skip
    assert fits[0].target.repo == first_target and best(info) is fits[0]


def test_llama31_8b_header(tmp_path):
    """The shape-only Llama-3.1-8B GGUF (as vram_fixtures writes it) gets the Llama 3.1 8B drafters first."""
    info = read_model_info(write_shape_gguf(tmp_path / "l.gguf", replace(LLAMA31_8B, tokenizer=False)))
    fits = fitting(info)
    assert {d.repo for d in fits} >= {"RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
                                      "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}  # fmt: skip
    # named "Llama-3.1-8B-Instruct Q4_K_M": its own drafters first, the same-shape R1 distill's after them (and the
    # block drafter, which is not drafted with, last)
    usable = [d for d in fits if d.supported]
    n_own = sum(d.target.repo == "meta-llama/Llama-3.1-8B-Instruct" for d in usable)
    assert all(d.target.repo == "meta-llama/Llama-3.1-8B-Instruct" for d in usable[:n_own])
    assert fits[-1].repo == "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"
    assert best(info) is fits[0]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (dict(layers=28), "layers 28"),
        (dict(hidden=3072), "hidden size 3072"),
        (dict(vocab=128000), "vocabulary 128000"),
    ],
)
def test_a_mismatched_header_gets_none(tmp_path, change, why):
    """Same architecture and name, another shape (a Llama 3.2 3B, say): nothing fits, and the reason is given."""
    shape = dict(arch="llama", hidden=4096, layers=32, vocab=128256) | change
    info = read_model_info(shape_gguf(tmp_path, name="Meta-Llama-3.1-8B-Instruct", **shape))
    assert fitting(info) == []
    assert any(why in w for _, w in near_misses(info))
    with pytest.raises(LocalEagleError, match="no drafter in the catalog fits"):
        best(info)


def test_another_architecture_gets_none(tmp_path):
    info = read_model_info(shape_gguf(tmp_path, "qwen2", 4096, 32, 128256))
    assert fitting(info) == [] and near_misses(info) == []


def test_eagle31_before_eagle3_then_preference(tmp_path):
    t = TARGETS["gpt-oss-20b"]
    info = read_model_info(shape_gguf(tmp_path, t.arch, t.hidden_size, t.layers, t.vocab))
    picks = [d for d in fitting(info) if d.eagle_version is not None]
    assert picks[0].eagle_version == "3.1" and best(info) is picks[0]
    assert [d.eagle_version for d in picks] == sorted((d.eagle_version for d in picks), reverse=True)


def test_unsupported_rows_are_never_picked(tmp_path):
    t = TARGETS["kimi-k2.6"]
    info = read_model_info(shape_gguf(tmp_path, t.arch, t.hidden_size, t.layers, t.vocab))
    assert [d.repo for d in fitting(info)] == ["lightseekorg/kimi-k2.6-eagle3.1-mla", "z-lab/Kimi-K2.6-DFlash"]
    with pytest.raises(LocalEagleError, match="that llama.cpp can run: multi-head latent attention"):
        best(info)


def test_a_drafter_gguf_is_refused(tmp_path):
    from local_eagle.testing.vram_fixtures import LLAMA31_8B_EAGLE3, write_drafter_gguf

    info = read_model_info(write_drafter_gguf(tmp_path / "d.gguf", LLAMA31_8B_EAGLE3, tokenizer=False))
    with pytest.raises(LocalEagleError, match="is an eagle3 drafter"):
        fitting(info)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.pop("source"), "field 'source' must be a str"),
        (lambda r: r.update(source="my notes"), "source must give the address"),
        (lambda r: r.update(target="nope"), "target 'nope' is not in targets"),
        (lambda r: r.update(format="gguf"), "format one of"),
        (lambda r: r.update(repo="no-slash"), "repo must be USER/REPO"),
    ],
)
def test_a_bad_row_is_refused(edit, message):
    from importlib import resources

    data = json.loads(resources.files("local_eagle.catalog").joinpath("drafters.json").read_text())
    edit(data["drafters"][0])
    with pytest.raises(LocalEagleError, match=message):
        parse_catalog(data)


def test_draft_auto_resolves_to_the_best_row(tmp_path, monkeypatch):
    """DRAFT auto fetches the chosen row's hf.co/USER/REPO name (the download itself is the hub's, stubbed here)."""
    from local_eagle.ollama import modelfile

    target = write_shape_gguf(tmp_path / "l.gguf", replace(LLAMA31_8B, tokenizer=False))
    fetched = []

    def fake_hub(value, what, at):
        fetched.append((value, what))
        return tmp_path / "drafter-dir"

    monkeypatch.setattr(modelfile, "_from_hub", fake_hub)
    m = parse(f"FROM {target}\nDRAFT auto\n", base_dir=tmp_path)
    assert fetched == [("hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3", "DRAFT")]
    assert m.draft == tmp_path / "drafter-dir"
    assert any("DRAFT auto picked hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3" in w for w in m.warnings)


def test_draft_auto_says_which_drafter_when_the_download_fails(tmp_path, monkeypatch):
    from local_eagle.ollama import modelfile

    target = write_shape_gguf(tmp_path / "l.gguf", replace(LLAMA31_8B, tokenizer=False))

    def offline(value, what, at):
        raise ModelfileError(f"{at}: {what} {value}: cannot reach huggingface.co")

    monkeypatch.setattr(modelfile, "_from_hub", offline)
    with pytest.raises(ModelfileError) as e:
        parse(f"FROM {target}\nDRAFT auto\n", base_dir=tmp_path)
    text = str(e.value)
    assert "\n" not in text
    assert "DRAFT auto picked hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3" in text
    assert "download RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3" in text


def test_draft_auto_without_a_fit_is_one_line(tmp_path):
    target = shape_gguf(tmp_path, "llama", 3072, 28, 128256)
    with pytest.raises(ModelfileError, match=r"Modelfile:2: DRAFT auto: no drafter in the catalog fits"):
        parse(f"FROM {target}\nDRAFT auto\n", base_dir=tmp_path)


def test_drafters_command(tmp_path):
    target = write_shape_gguf(tmp_path / "l.gguf", replace(LLAMA31_8B, tokenizer=False))
    r = CliRunner().invoke(app, ["drafters", str(target), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [x["best"] for x in got["fits"]][0] is True
    assert got["fits"][0]["drafter"] == "hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"
    r = CliRunner().invoke(app, ["drafters", "--json"])
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == len(ROWS)
    other = shape_gguf(tmp_path, "llama", 3072, 28, 128256, "small")
    r = CliRunner().invoke(app, ["drafters", str(other)], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "no drafter in the catalog fits" in r.output and "hidden size 3072" in r.output


def test_drafters_command_on_a_missing_file(tmp_path):
    r = CliRunner().invoke(app, ["drafters", str(tmp_path / "none.gguf")])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_draft_option_auto(tmp_path, monkeypatch):
    """--draft auto goes the way of a Modelfile's DRAFT auto."""
    from local_eagle.cli.options import hub_draft
    from local_eagle.ollama import modelfile
    from local_eagle.testing.vram_fixtures import LLAMA31_8B_EAGLE3, write_drafter_gguf

    target = write_shape_gguf(tmp_path / "l.gguf", replace(LLAMA31_8B, tokenizer=False))
    drafter = write_drafter_gguf(tmp_path / "d.gguf", LLAMA31_8B_EAGLE3, tokenizer=False)
    asked = []
    monkeypatch.setattr(modelfile, "_from_hub", lambda value, what, at: asked.append(value) or drafter)
    assert hub_draft(Path("auto"), target) == drafter
    assert asked == ["hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"]
    assert hub_draft(tmp_path / "other.gguf", target) == tmp_path / "other.gguf"


def test_drafters_for_an_ollama_model_name(tmp_path, monkeypatch):
    """MODEL may be a name of Ollama's store; its GGUF's header decides, and its general.name orders shared shapes."""
    from gguf import GGUFWriter

    from local_eagle.testing.ollama_store import write_model

    header = tmp_path / "header.gguf"
    w = GGUFWriter(header, "llama")
    w.add_name("DeepSeek R1 Distill Llama 8B")
    for key, value in (("embedding_length", 4096), ("block_count", 32), ("vocab_size", 128256)):
        w.add_uint32(f"llama.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    store = tmp_path / "ollama"
    write_model(store, "deepseek-r1", header, tag="8b-llama-distill-q4_K_M")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    r = CliRunner().invoke(app, ["drafters", "deepseek-r1:8b-llama-distill-q4_K_M", "--json"])
    assert r.exit_code == 0, r.output
    fits = json.loads(r.stdout)["fits"]
    assert fits[0]["drafter"] == "hf.co/yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B" and fits[0]["best"]
    assert "deepseek-r1:8b-llama-distill-q4_K_M" in fits[0]["ollama"]


@pytest.mark.parametrize("name", ["llama3.1:8b", "LLAMA3.1:8B", "registry.ollama.ai/library/llama3.1:8b"])
def test_drafters_for_a_name_no_store_has_lists_the_catalogs_rows(name):
    """`drafters llama3.1:8b` before `ollama pull`: the catalog lists drafters under that name, so those are shown
    (by name, there being no GGUF to read), best first; a name the catalog does not list is still "not found"."""
    r = CliRunner().invoke(app, ["drafters", name, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    want = [d.hub_name for d in ROWS if "llama3.1:8b" in d.target.ollama]
    assert [x["drafter"] for x in got["fits"]] == want and len(want) == 4
    assert got["fits"][0]["drafter"] == "hf.co/RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"
    assert got["fits"][-1]["drafter"] == "hf.co/z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"
    assert [x["best"] for x in got["fits"]] == [True, False, False, False] and got["by_name"]
    r = CliRunner().invoke(app, ["drafters", name], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "RedHatAI" in r.output and "not pulled here" in r.output


def test_drafters_for_a_name_nobody_lists_is_not_found():
    r = CliRunner().invoke(app, ["drafters", "mistral:7b"])
    assert r.exit_code == 2 and "not found" in r.output and "Traceback" not in r.output


def test_drafters_lists_a_models_own_mtp_head(tmp_path):
    """A GGUF with NextN layers drafts with them by default: ``drafters`` says so, in the table and in JSON."""
    import json

    from typer.testing import CliRunner

    from local_eagle.cli.app import app
    from local_eagle.testing.tiny_mtp import TinyGlm4MoeSpec, write_tiny_glm4moe_mtp

    gguf = write_tiny_glm4moe_mtp(tmp_path / "glm.gguf", TinyGlm4MoeSpec(), seed=1)
    r = CliRunner().invoke(app, ["drafters", str(gguf), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["builtin"] == {"kind": "mtp", "heads": 1, "drafts": True}
    r = CliRunner().invoke(app, ["drafters", str(gguf)])
    assert r.exit_code == 0 and "1 MTP (NextN) head" in " ".join(r.output.split())


# z-lab's DFlash drafters whose names were read in z-lab's list (github.com/z-lab/dflash README), by target
DFLASH_ROWS = {
    "z-lab/Qwen3-8B-DFlash-b16": "Qwen/Qwen3-8B",
    "z-lab/Qwen3-4B-DFlash-b16": "Qwen/Qwen3-4B",
    "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat": "meta-llama/Llama-3.1-8B-Instruct",
    "z-lab/Qwen3-Coder-30B-A3B-DFlash": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "z-lab/gpt-oss-20b-DFlash": "openai/gpt-oss-20b",
    "z-lab/gpt-oss-120b-DFlash": "openai/gpt-oss-120b",
    "z-lab/Kimi-K2.6-DFlash": "moonshotai/Kimi-K2.6",
}


def test_dflash_rows_name_their_family_and_are_never_picked(tmp_path):
    rows = {d.repo: d for d in ROWS if d.family == "dflash"}
    assert {r: d.target.repo for r, d in rows.items()} == DFLASH_ROWS
    assert all("github.com/z-lab/dflash" in d.source for d in rows.values())
    assert all(d.family_name == "DFlash" for d in rows.values())
    assert all("DRAFT auto picks EAGLE drafters" in (d.why_not or "") for d in rows.values())
    # Qwen3-8B: the DFlash drafter fits the shape and comes after every EAGLE drafter; DRAFT auto takes an EAGLE one
    t = TARGETS["qwen3-8b"]
    info = read_model_info(shape_gguf(tmp_path, t.arch, t.hidden_size, t.layers, t.vocab, "Qwen3-8B"))
    fits = fitting(info)
    assert fits[-1].repo == "z-lab/Qwen3-8B-DFlash-b16" and best(info).family == "eagle3"
    # Qwen3-Coder-30B-A3B has a DFlash drafter only: none to pick, and the line says why
    t = TARGETS["qwen3-coder-30b-a3b"]
    info = read_model_info(shape_gguf(tmp_path, t.arch, t.hidden_size, t.layers, t.vocab, "coder"))
    assert [d.repo for d in fitting(info)] == ["z-lab/Qwen3-Coder-30B-A3B-DFlash"]
    with pytest.raises(LocalEagleError, match="DRAFT auto picks EAGLE drafters"):
        best(info)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.update(family="medusa"), "field 'family' must be one of"),
        (lambda r: r.update(family="eagle3.1", eagle_version="3"), "disagree"),
        (lambda r: r.update(family="dflash"), "a dflash drafter takes format one of"),
    ],
)
def test_a_bad_family_is_refused(edit, message):
    from importlib import resources

    data = json.loads(resources.files("local_eagle.catalog").joinpath("drafters.json").read_text())
    edit(data["drafters"][0])
    with pytest.raises(LocalEagleError, match=message):
        parse_catalog(data)


def test_an_eagle_version_row_still_reads():
    """A catalog of the older form (``eagle_version``, no ``family``) names the EAGLE family."""
    from importlib import resources

    data = json.loads(resources.files("local_eagle.catalog").joinpath("drafters.json").read_text())
    row = data["drafters"][0]
    row["eagle_version"] = "3.1" if row.pop("family") == "eagle3.1" else "3"
    assert parse_catalog(data)[0].family == ("eagle3.1" if row["eagle_version"] == "3.1" else "eagle3")


def test_the_listing_shows_each_rows_family():
    res = CliRunner().invoke(app, ["drafters", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["drafter"]: r for r in json.loads(res.output)}
    assert rows["hf.co/z-lab/Qwen3-8B-DFlash-b16"]["family"] == "dflash"
    assert rows["hf.co/z-lab/Qwen3-8B-DFlash-b16"]["eagle_version"] is None
    assert "block drafter" in rows["hf.co/z-lab/Qwen3-8B-DFlash-b16"]["unsupported"]
    assert rows["hf.co/RedHatAI/Qwen3-8B-speculator.eagle3"]["family"] == "eagle3"
    text = " ".join(CliRunner().invoke(app, ["drafters"], env={"COLUMNS": "200"}).output.split())
    assert "DFlash" in text and "EAGLE 3.1" in text and "family" in text
