"""Hub names as Ollama writes them, and the file a tag picks (no network)."""

from __future__ import annotations

import pytest

from local_eagle.hub.names import (
    HubError,
    HubRef,
    checkpoint_files,
    gguf_tags,
    is_checkpoint,
    is_hub_name,
    parse_hub_name,
    pick_gguf,
)

FILES = [
    "README.md",
    "Model-7B-Q4_K_M.gguf",
    "Model-7B-Q8_0.gguf",
    "Model-7B-IQ3_S-imat.gguf",
    "Model-7B-Q2_K-00001-of-00002.gguf",
    "Model-7B-Q2_K-00002-of-00002.gguf",
    "mmproj-Model-7B-f16.gguf",
]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("hf.co/bartowski/Model-GGUF", HubRef("bartowski/Model-GGUF")),
        ("huggingface.co/bartowski/Model-GGUF:q8_0", HubRef("bartowski/Model-GGUF", "q8_0")),
        ("hf.co/u/r:latest", HubRef("u/r")),
        ("hf.co/u/r@v1.2", HubRef("u/r", None, "v1.2")),
        ("hf.co/u/r:Q4_K_M@0123abc", HubRef("u/r", "Q4_K_M", "0123abc")),
        ("hf.co/u/r@dev:Q4_K_M", HubRef("u/r", "Q4_K_M", "dev")),
        ("https://huggingface.co/u/r", HubRef("u/r")),
        ("https:/huggingface.co/u/r", HubRef("u/r")),  # what a Path makes of a URL given to -m
    ],
)
def test_names_parse(text: str, want: HubRef) -> None:
    assert is_hub_name(text)
    assert parse_hub_name(text) == want


@pytest.mark.parametrize("text", ["hf.co/only-user", "hf.co/u/r/extra", "hf.co/u/r:a:b", "hf.co/"])
def test_a_malformed_name_is_one_line(text: str) -> None:
    with pytest.raises(HubError, match="not a Hugging Face name; expected hf.co/USER/REPO"):
        parse_hub_name(text)


def test_other_names_are_not_hub_names() -> None:
    assert not any(is_hub_name(t) for t in ("llama3.1:8b", "./hf.co/x", "me/model", "registry.ollama.ai/a/b"))


def test_default_is_q4_k_m_and_tags_match_case_insensitively() -> None:
    assert pick_gguf(HubRef("u/r"), FILES) == ["Model-7B-Q4_K_M.gguf"]
    assert pick_gguf(HubRef("u/r", "q8_0"), FILES) == ["Model-7B-Q8_0.gguf"]
    assert pick_gguf(HubRef("u/r", "iq3_s-IMAT"), FILES) == ["Model-7B-IQ3_S-imat.gguf"]
    assert pick_gguf(HubRef("u/r", "model-7b-q8_0.gguf"), FILES) == ["Model-7B-Q8_0.gguf"]


def test_a_tag_matches_at_a_separator_only() -> None:
    files = ["m-IQ4_XS.gguf", "m-Q4_K_M.gguf"]
    with pytest.raises(HubError, match="no GGUF matches the tag '4_XS'"):
        pick_gguf(HubRef("u/r", "4_XS"), files)


def test_split_ggufs_come_whole_in_order() -> None:
    whole = ["Model-7B-Q2_K-00001-of-00002.gguf", "Model-7B-Q2_K-00002-of-00002.gguf"]
    assert pick_gguf(HubRef("u/r", "Q2_K"), FILES) == whole
    assert pick_gguf(HubRef("u/r", "Model-7B-Q2_K-00002-of-00002.gguf"), FILES) == whole


def test_an_unknown_tag_lists_the_tags() -> None:
    with pytest.raises(HubError) as e:
        pick_gguf(HubRef("u/r", "Q5_K_M"), FILES)
    msg = str(e.value)
    assert "no GGUF matches the tag 'Q5_K_M'" in msg and "\n" not in msg
    assert "IQ3_S-imat, Q2_K, Q4_K_M, Q8_0" in msg and "mmproj" not in msg
    assert gguf_tags(FILES) == ["IQ3_S-imat", "Q2_K", "Q4_K_M", "Q8_0"]


def test_no_q4_k_m_falls_back() -> None:
    assert pick_gguf(HubRef("u/r"), ["only-F16.gguf"]) == ["only-F16.gguf"]
    assert pick_gguf(HubRef("u/r"), ["m-F16.gguf", "m-Q8_0.gguf", "m-Q4_0.gguf"]) == ["m-Q4_0.gguf"]
    with pytest.raises(HubError, match="no Q4_K_M GGUF"):
        pick_gguf(HubRef("u/r"), ["a-X1.gguf", "a-X2.gguf"])


def test_no_gguf_and_no_checkpoint() -> None:
    with pytest.raises(HubError, match="no GGUF file and is no drafter checkpoint"):
        pick_gguf(HubRef("u/r"), ["README.md"])


def test_checkpoints_are_recognised() -> None:
    assert is_checkpoint(["config.json", "model.safetensors", "README.md"])
    assert is_checkpoint(["config.json", "pytorch_model.bin"])
    assert not is_checkpoint(["config.json", "README.md"])
    assert not is_checkpoint(["sub/config.json", "sub/model.safetensors"])


def test_a_checkpoint_brings_only_what_the_converter_reads() -> None:
    extra = ["README.md", "training_args.bin", "optimizer.bin"]
    assert checkpoint_files(["config.json", "model.safetensors", *extra]) == ["config.json", "model.safetensors"]
    assert checkpoint_files(["config.json", "pytorch_model.bin", *extra]) == ["config.json", "pytorch_model.bin"]
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert checkpoint_files(["config.json", "model.safetensors.index.json", *shards, *extra]) == [
        "config.json", "model.safetensors.index.json", *shards
    ]  # fmt: skip
