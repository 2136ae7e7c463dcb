"""What the commands check before llama.cpp loads a pair: the file kinds, the trained context, the memory;
and what they say when llama.cpp refuses a file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from typer.testing import CliRunner

from local_eagle.cli import loading
from local_eagle.cli.app import app
from local_eagle.cli.loading import LoadOptions, buffer_bytes, capped_context
from local_eagle.testing.tiny_pair import SPEC

runner = CliRunner()


def one_line_error(r) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [line for line in r.stderr.splitlines() if not line.startswith("no GPU build")]  # chat says that first
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_a_drafter_given_as_the_model_says_so(pair):
    _, target, draft = pair
    r = runner.invoke(app, ["generate", "-m", str(draft), "-p", "hi", "-n", "2"])
    assert one_line_error(r) == f"error: {draft} is an EAGLE drafter; give it with --draft and its target with --model"
    r = runner.invoke(app, ["generate", "-m", str(draft), "-d", str(target), "-p", "hi", "-n", "2"])
    assert "is an EAGLE drafter" in one_line_error(r)


def _header_only(path: Path, keys: dict[str, int]) -> Path:
    w = GGUFWriter(path, "llama")
    for k, v in keys.items():
        w.add_uint32(k, v)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("case", ["no vocabulary", "truncated", "not a GGUF"])
def test_a_file_llama_cpp_cannot_load_gets_what_inspect_says(tmp_path, case):
    """generate refuses the file before llama.cpp reads it, in the very line inspect prints."""
    bad = tmp_path / "bad.gguf"
    if case == "no vocabulary":
        _header_only(bad, {"llama.block_count": 1, "llama.embedding_length": 4, "llama.context_length": 64})
    elif case == "truncated":
        bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 10)
    else:
        bad.write_text("hello")
    inspected = one_line_error(runner.invoke(app, ["inspect", str(bad)]))
    got = one_line_error(runner.invoke(app, ["generate", "-m", str(bad), "-p", "hi"]))
    assert got == inspected  # the file is checked before llama.cpp reads it (local_eagle.gguf.check)
    assert "llama_model_load" not in got


def _context(r) -> int:
    """The context a run had: with -n -1 it generates until the context is full, and one token past it."""
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["stats"]["stop_reason"] == "context"
    return got["stats"]["prompt_tokens"] + len(got["tokens"]) - 1


def test_the_context_is_capped_at_the_trained_one_unless_allowed(pair):
    _, target, draft = pair
    base = ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "-1", "--temperature", "0", "--json",
            "--threads", "1"]  # fmt: skip
    r = runner.invoke(app, [*base, "--ctx", "4096"])
    assert _context(r) == SPEC.n_ctx == 1024
    note = "note: the model was trained on a context of 1024 tokens: using 1024, not 4096 (--ctx-beyond-training"
    assert r.stderr.count(note) == 1, r.stderr
    r = runner.invoke(app, base)  # the default is capped quietly
    assert _context(r) == 1024 and r.stderr == ""
    r = runner.invoke(app, [*base, "--ctx", "2048", "--ctx-beyond-training"])
    assert _context(r) == 2048 and r.stderr == ""


def test_capped_context() -> None:
    notes: list[str] = []
    assert capped_context(None, 1024, False, notes.append) == 1024 and notes == []
    assert capped_context(None, None, False, notes.append) == 4096
    assert capped_context(512, 1024, False, notes.append) == 512
    assert capped_context(8192, 1024, True, notes.append) == 8192 and notes == []
    assert capped_context(8192, 1024, False, notes.append) == 1024 and len(notes) == 1


def test_buffer_bytes_grow_with_the_context(pair):
    _, target, draft = pair
    small = buffer_bytes(target, draft, 1024, LoadOptions(), gpu=False)
    big = buffer_bytes(target, draft, 1 << 20, LoadOptions(), gpu=False)
    kv_per_token = 2 * SPEC.n_layer * SPEC.n_head_kv * (SPEC.n_embd // SPEC.n_head) * 2  # K and V, f16
    assert big - small >= kv_per_token * ((1 << 20) - 1024)


@pytest.mark.parametrize("command", ["generate", "chat", "bench", "serve"])
def test_a_context_this_machine_cannot_hold_is_refused_before_loading(pair, tmp_path, monkeypatch, command):
    _, target, draft = pair
    monkeypatch.setattr(loading, "physical_memory", lambda: 64 << 20)
    monkeypatch.setattr("local_eagle.llamacpp.backends.gpu_offload_supported", lambda: False)

    def no_load(*a, **k):
        raise AssertionError("llama.cpp was asked to load")

    monkeypatch.setattr("local_eagle.runtime.engine.Engine.__init__", no_load)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    args = {
        "generate": ["generate", "-p", "hi"],
        "chat": ["chat"],
        "bench": ["bench", "--prompts", str(prompts)],
        "serve": ["serve"],
    }[command]
    big = ["--ctx", str(1 << 20), "--ctx-beyond-training"]
    r = runner.invoke(app, [*args, "-m", str(target), "-d", str(draft), *big], input="/bye\n")
    message = one_line_error(r)
    assert f"a context of {1 << 20} tokens needs" in message
    assert "more than this machine's 64.0 MiB of memory; lower --ctx" in message


def test_a_pair_the_planner_cannot_price_is_left_to_llama_cpp(pair, monkeypatch):
    _, target, draft = pair

    def broken(*a, **k):
        raise ZeroDivisionError("an architecture the planner gets wrong")

    monkeypatch.setattr(loading, "buffer_bytes", broken)
    monkeypatch.setattr(loading, "physical_memory", lambda: 1)
    r = runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "3", "--threads", "1"])
    assert r.exit_code == 0, r.output


def test_buffer_bytes_price_parallel_sequences(pair):
    _, target, draft = pair
    one = buffer_bytes(target, draft, 4096, LoadOptions(), gpu=False)
    four = buffer_bytes(target, draft, 4096, LoadOptions(parallel=4), gpu=False)
    kv_per_token = 2 * SPEC.n_layer * SPEC.n_head_kv * (SPEC.n_embd // SPEC.n_head) * 2  # K and V, f16
    assert four - one >= kv_per_token * 3 * 4096  # three more requests' caches at least


def test_a_parallel_this_machine_cannot_hold_names_what_would_fit(pair, monkeypatch):
    _, target, draft = pair
    have = buffer_bytes(target, draft, 65536, LoadOptions(parallel=3), gpu=False) + (1 << 20)
    monkeypatch.setattr(loading, "physical_memory", lambda: have)
    monkeypatch.setattr("local_eagle.llamacpp.backends.gpu_offload_supported", lambda: False)

    def no_load(*a, **k):
        raise AssertionError("llama.cpp was asked to load")

    monkeypatch.setattr("local_eagle.runtime.engine.Engine.__init__", no_load)
    args = ["serve", "-m", str(target), "-d", str(draft), "--ctx", "65536", "--ctx-beyond-training", "--parallel", "16"]
    message = one_line_error(runner.invoke(app, args))
    assert "--parallel 16" in message and "--parallel 3 fits" in message, message


def test_auto_parallel_is_four_where_they_fit_the_free_memory_else_one(pair, monkeypatch):
    """Issue 46: without --parallel, a served model takes 4 requests at once where their caches fit the free
    memory, else 1, as Ollama's OLLAMA_NUM_PARALLEL default decides."""
    _, target, draft = pair
    monkeypatch.setattr("local_eagle.llamacpp.backends.gpu_offload_supported", lambda: False)
    need = buffer_bytes(target, draft, 2048, LoadOptions(parallel=loading.AUTO_PARALLEL, tree_nodes=0), gpu=False)
    monkeypatch.setattr(loading, "available_memory", lambda: need)
    assert loading.auto_parallel(target, draft, 2048, LoadOptions()) == 4
    monkeypatch.setattr(loading, "available_memory", lambda: need - 1)
    assert loading.auto_parallel(target, draft, 2048, LoadOptions()) == 1
    monkeypatch.setattr(loading, "available_memory", lambda: None)
    assert loading.auto_parallel(target, draft, 2048, LoadOptions()) == 1


def test_auto_parallel_on_a_gpu_counts_the_weights_there(pair, monkeypatch):
    """On a GPU build, four requests' caches must fit the GPU's free memory beside the weights (the planner's
    ``parallel_bytes`` with the detected GPU's budget), whatever the RAM."""
    from local_eagle.vram import gpus

    _, target, draft = pair
    monkeypatch.setattr("local_eagle.llamacpp.backends.gpu_offload_supported", lambda: True)
    monkeypatch.setattr(loading, "available_memory", lambda: 0)
    big = gpus.DetectedGPU("test GPU", 80 << 30, 80 << 30, 1)
    monkeypatch.setattr(gpus, "detect", lambda: big)
    assert loading.auto_parallel(target, draft, 2048, LoadOptions()) == 4
    monkeypatch.setattr(gpus, "detect", lambda: gpus.DetectedGPU("test GPU", 80 << 30, 1 << 20, 1))
    assert loading.auto_parallel(target, draft, 2048, LoadOptions()) == 1
    assert loading.auto_parallel(target, draft, 2048, LoadOptions(gpu_layers=0)) == 1  # RAM then: none free
