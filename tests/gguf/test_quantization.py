"""What a GGUF calls its quantization: its file type (``general.file_type``), as Ollama reads it, not its biggest
tensor type (a Q4_K_M file keeps its embeddings at Q8_0, and they outweigh the layers of a small model)."""

from __future__ import annotations

from pathlib import Path

from local_eagle.gguf import ModelInfo, read_model_info
from local_eagle.serve.server import _model_info
from local_eagle.store.summary import summarize
from local_eagle.testing.gguf_edit import with_keys
from local_eagle.testing.tiny import write_tiny_target

Q4_K_M = 15  # llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M


def with_file_type(src: Path, dst: Path, file_type: int | None) -> Path:
    """A copy of ``src`` whose ``general.file_type`` is ``file_type`` (None: without the key)."""
    if file_type is None:
        return with_keys(src, dst, drop=["general.file_type"])
    return with_keys(src, dst, {"general.file_type": file_type})


def test_the_file_type_names_the_quantization(tmp_path: Path) -> None:
    src = write_tiny_target(tmp_path / "f32.gguf")
    q4 = with_file_type(src, tmp_path / "q4km.gguf", Q4_K_M)  # F32 tensors, but made "as" Q4_K_M
    assert read_model_info(src).quantization == "F32"
    assert read_model_info(q4).quantization == "Q4_K_M"
    assert summarize(q4).quantization == "Q4_K_M"
    assert _model_info(q4)["quantization"] == "Q4_K_M"  # serve -m's /api/tags and /api/show details
    assert read_model_info(q4).to_dict()["quantization"] == "Q4_K_M"
    unknown = with_file_type(src, tmp_path / "odd.gguf", 99)
    assert read_model_info(unknown).quantization == "type 99"


def test_without_a_file_type_the_layers_decide() -> None:
    """A Q4_K_M file of a small model with a large vocabulary (Gemma 3 270M): the Q8_0 embeddings are most of its
    bytes; without a file type, the layers' own type names it."""
    info = ModelInfo(path=Path("x.gguf"), arch="gemma3", n_layer=18, n_embd=640, n_vocab=262144,
                     tensor_bytes={"Q8_0": 179824640, "Q4_K": 13271040, "Q6_K": 9676800, "F32": 223744},
                     layer_bytes={"Q4_K": 13271040, "Q6_K": 9676800, "F32": 200000})  # fmt: skip
    assert info.quantization == "Q4_K"
    assert ModelInfo(path=Path("x.gguf"), arch="llama", n_layer=1, n_embd=1, n_vocab=1).quantization == ""


def test_chat_show_info_names_the_file_type(tmp_path: Path) -> None:
    from local_eagle.cli.chat import ChatSession

    q4 = with_file_type(write_tiny_target(tmp_path / "f32.gguf"), tmp_path / "q4km.gguf", Q4_K_M)
    info = ChatSession(q4, None, {}).handle("/show info").output
    assert "quantization          Q4_K_M" in info, info
