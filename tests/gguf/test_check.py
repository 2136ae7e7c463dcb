"""Crafted files are refused in one line before llama.cpp or the planner reads them (issue 34, "Failures stay
contained"): through the CLI (inspect, generate, fit, create), the server's /api/create and the converter.

Each file is the tiny valid pair with one thing changed (``local_eagle.testing.crafted``); the pinned llama.cpp
would abort the whole process on several of them (block_count 513, an unknown RoPE scaling type, an I32 d2t).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gguf import GGUFReader
from gguf import GGUFValueType as V
from typer.testing import CliRunner

from local_eagle.cli.app import app
from local_eagle.gguf.check import json_depth
from local_eagle.gguf.info import check_gguf
from local_eagle.serve.store_app import StoreConfig, StoreFront
from local_eagle.settings import resolve
from local_eagle.store import LocalStore
from local_eagle.testing.crafted import rewrite_gguf, write_many_layers_gguf

runner = CliRunner()
LOCAL = "http://127.0.0.1"

MAX = "expected an integer from 1 to 512"
TARGET_CASES: dict[str, tuple[dict, str]] = {
    "block_count 513": (
        {"llama.block_count": (513, V.UINT32, None)},
        f"key 'llama.block_count' is 513 (UINT32), {MAX}",
    ),
    "block_count 10^5": (
        {"llama.block_count": (100_000, V.UINT32, None)},
        f"key 'llama.block_count' is 100000 (UINT32), {MAX}",
    ),
    "block_count 2^32-1": (
        {"llama.block_count": (2**32 - 1, V.UINT32, None)},
        f"key 'llama.block_count' is 4294967295 (UINT32), {MAX}",
    ),
    "block_count a string": (
        {"llama.block_count": ("6", V.STRING, None)},
        f"key 'llama.block_count' is '6' (STRING), {MAX}",
    ),
    "block_count short of the layers": (
        {"llama.block_count": (5, V.UINT32, None)},
        "key 'llama.block_count' is 5, but the file has tensors for 6 layers (blk.0 to blk.5); "
        "expected one blk.N for each layer",
    ),
    "rms epsilon NaN": (
        {"llama.attention.layer_norm_rms_epsilon": (float("nan"), V.FLOAT32, None)},
        "key 'llama.attention.layer_norm_rms_epsilon' is nan (FLOAT32), expected a finite positive float",
    ),
    "rms epsilon negative": (
        {"llama.attention.layer_norm_rms_epsilon": (-1.0, V.FLOAT32, None)},
        "key 'llama.attention.layer_norm_rms_epsilon' is -1.0 (FLOAT32), expected a finite positive float",
    ),
    "alignment a string": (
        {"general.alignment": ("32", V.STRING, None)},
        "key 'general.alignment' is '32' (STRING), expected a UINT32 power of two",
    ),
    "alignment NaN": (
        {"general.alignment": (float("nan"), V.FLOAT32, None)},
        "key 'general.alignment' is nan (FLOAT32), expected a UINT32 power of two",
    ),
    "tokens as integers": (
        {"tokenizer.ggml.tokens": (list(range(265)), V.ARRAY, V.INT32)},
        "key 'tokenizer.ggml.tokens' is an array of 265 INT32, expected a non-empty array of STRING",
    ),
    "head counts per layer, too many": (
        {"llama.attention.head_count": ([4] * 1000, V.ARRAY, V.INT32)},
        "key 'llama.attention.head_count' is an array of 1000 INT32, expected an integer or an array of 6 integers",
    ),
    "rope scaling unknown": (
        {"llama.rope.scaling.type": ("bogus", V.STRING, None)},
        "key 'llama.rope.scaling.type' is 'bogus' (STRING), expected one of none, linear, yarn, longrope",
    ),
}


def one_line_error(r) -> str:
    """The command failed with exit status 2 and one error line on stderr, no traceback (``create`` may
    say what it was doing first, as Ollama's does)."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = [line for line in r.stderr.splitlines() if not line.startswith("no GPU build")]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    assert all(line == "gathering model components" for line in lines[:-1]), r.stderr
    return errors[0]


def modelfile(tmp_path: Path, model: Path, draft: Path | None = None) -> Path:
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {model}\n" + (f"DRAFT {draft}\n" if draft else ""))
    return mf


@pytest.fixture
def front(tmp_path: Path):
    f = StoreFront(
        StoreConfig(local=LocalStore(tmp_path / "models"), defaults=resolve(flags={"num_ctx": 256, "num_thread": 1}))
    )
    yield f
    f.close()


def api_create(front: StoreFront, body: dict) -> tuple[int, str]:
    with TestClient(front, base_url=LOCAL, raise_server_exceptions=False) as client:
        r = client.post("/api/create", json={"model": "crafted", "stream": False, **body})
    return r.status_code, r.json().get("error", "")


@pytest.mark.parametrize("case", list(TARGET_CASES))
def test_a_crafted_target_is_one_line_everywhere(pair, tmp_path, case) -> None:
    _, target, draft = pair
    keys, message = TARGET_CASES[case]
    bad = rewrite_gguf(target, tmp_path / "bad.gguf", keys)
    for args in (
        ["inspect", str(bad)],
        ["generate", "-m", str(bad), "-p", "hi", "-n", "2"],
        ["generate", "-m", str(bad), "-d", str(draft), "-p", "hi", "-n", "2"],
        ["fit", "-m", str(bad)],
        ["create", "crafted", "-f", str(modelfile(tmp_path, bad))],
    ):
        line = one_line_error(runner.invoke(app, args))
        assert f"{bad}: " in line and message in line, (args[0], line)


def test_the_server_answers_a_crafted_target_with_a_400(pair, tmp_path, front) -> None:
    _, target, _ = pair
    for i, (keys, message) in enumerate(TARGET_CASES.values()):
        bad = rewrite_gguf(target, tmp_path / f"bad{i}.gguf", keys)
        status, error = api_create(front, {"from": str(bad)})
        assert status == 400 and message in error and str(bad) in error, error
    assert front.config.local.entries() == []


@pytest.fixture(scope="module")
def d2t_draft(pair, tmp_path_factory) -> Path:
    """A drafter for the pair's target with a draft vocabulary of 64 ids, so its GGUF has a ``d2t``."""
    from converters import convert
    from converters.formats import write_checkpoint
    from local_eagle.testing.tiny import make_drafter
    from local_eagle.testing.tiny_pair import LAYERS, N_VOCAB, SPEC

    _, target, _ = pair
    d = tmp_path_factory.mktemp("d2t-draft")
    m = make_drafter(N_VOCAB, SPEC.n_embd, LAYERS, draft_vocab=64)
    return convert(write_checkpoint(m.state_dict(), m.cfg.to_dict(), d / "ckpt"), target, d / "draft.gguf").outfile


def _d2t(draft: Path) -> np.ndarray:
    return np.array(next(t for t in GGUFReader(draft).tensors if t.name == "d2t").data)


DRAFT_CASES = {
    "d2t past the target vocabulary": (
        {},
        lambda d2t: {"d2t": np.where(np.arange(len(d2t)) == 3, 265, d2t).astype(np.int64)},
        "tensor 'd2t' maps draft token 3 to target id 265, expected an id from 0 to 264 "
        "(the vocabulary has 265 tokens)",
    ),
    "d2t negative": (
        {},
        lambda d2t: {"d2t": np.where(np.arange(len(d2t)) == 0, -1, d2t).astype(np.int64)},
        "tensor 'd2t' maps draft token 0 to target id -1",
    ),
    "d2t of I32": ({}, lambda d2t: {"d2t": d2t.astype(np.int32)}, "tensor 'd2t' has ggml type 26"),
    "fc_norm epsilon -1": (
        {"eagle3.fc_norm.epsilon": (-1.0, V.FLOAT32, None)},
        None,
        "key 'eagle3.fc_norm.epsilon' is -1.0 (FLOAT32), expected a finite positive float",
    ),
    "rms epsilon NaN": (
        {"eagle3.attention.layer_norm_rms_epsilon": (float("nan"), V.FLOAT32, None)},
        None,
        "key 'eagle3.attention.layer_norm_rms_epsilon' is nan (FLOAT32), expected a finite positive float",
    ),
    "fc_norm flag a string": (
        {"eagle3.fc_norm": ("false", V.STRING, None)},
        None,
        "key 'eagle3.fc_norm' is 'false' (STRING), expected a BOOL",
    ),
    "target layers too many": (
        {"eagle3.target_layers": ([1, 3, 4, 5], V.ARRAY, V.INT32)},
        None,
        "key 'eagle3.target_layers' is an array of 4 INT32, expected an array of 3 integers from 0 to 511",
    ),
}


@pytest.mark.parametrize("case", list(DRAFT_CASES))
def test_a_crafted_drafter_is_one_line_everywhere(pair, d2t_draft, tmp_path, front, case) -> None:
    _, target, _ = pair
    draft = d2t_draft
    keys, tensors, message = DRAFT_CASES[case]
    bad = rewrite_gguf(draft, tmp_path / "bad-draft.gguf", keys, tensors(_d2t(draft)) if tensors else None)
    for args in (
        ["inspect", str(bad)],
        ["generate", "-m", str(target), "-d", str(bad), "-p", "hi", "-n", "2"],
        ["fit", "-m", str(target), "-d", str(bad)],
        ["create", "crafted", "-f", str(modelfile(tmp_path, target, bad))],
    ):
        line = one_line_error(runner.invoke(app, args))
        assert f"{bad}: " in line and message in line, (args[0], line)
    status, error = api_create(front, {"from": str(target), "draft": str(bad)})
    assert status == 400 and message in error, error


def test_a_gguf_that_is_only_its_magic_is_not_stored(pair, tmp_path, front) -> None:
    bad = tmp_path / "magic.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 6)
    message = f"{bad}: GGUF version 0 is not supported (expected 2 or 3)"
    line = one_line_error(runner.invoke(app, ["create", "crafted", "-f", str(modelfile(tmp_path, bad))]))
    assert line.endswith(message), line
    status, error = api_create(front, {"from": str(bad)})
    assert status == 400 and error.endswith(message), error
    assert "GGUF version 0 is not supported" in one_line_error(
        runner.invoke(app, ["generate", "-m", str(bad), "-p", "x"])
    )


def test_fit_refuses_a_million_layers_at_once(tmp_path) -> None:
    """A 1 MB GGUF claiming 10^6 layers: the planner would loop and allocate per layer (74 s at 10^5)."""
    big = write_many_layers_gguf(tmp_path / "million.gguf", 1_000_000)
    assert big.stat().st_size < 2 << 20
    r = subprocess.run([sys.executable, "-m", "local_eagle", "fit", "-m", str(big)], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if not x.startswith("no GPU build")]
    assert lines == [f"error: {big}: target GGUF key 'llama.block_count' is 1000000 (UINT32), {MAX}"], r.stderr


def test_draft_p_min_must_be_a_probability(pair) -> None:
    _, target, draft = pair
    for value in ("nan", "-0.5", "1.5"):
        r = runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "--draft-p-min", value])
        assert one_line_error(r) == f"error: --draft-p-min: expected a probability from 0 to 1, got {float(value)}"


def test_a_faithful_copy_still_loads_and_generates(pair, d2t_draft, tmp_path) -> None:
    """The checks refuse only what is wrong: the crafting itself changes nothing, and the copy runs."""
    _, target, _ = pair
    draft = d2t_draft
    copy = rewrite_gguf(target, tmp_path / "copy.gguf")
    dcopy = rewrite_gguf(draft, tmp_path / "dcopy.gguf", None, {"d2t": _d2t(draft)})
    check_gguf(copy)
    check_gguf(dcopy)
    r = runner.invoke(app, ["generate", "-m", str(copy), "-d", str(dcopy), "-p", "hi", "-n", "4", "--temperature", "0"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip()


def test_shipped_drafters_pass() -> None:
    import local_eagle

    for name in ("gemma3-270m-eagle31-q8_0.gguf", "smollm2-135m-instruct-eagle31-q8_0.gguf"):
        check_gguf(Path(local_eagle.__file__).parent / "assets" / name)


CONFIG_CASES = {
    "rms_norm_eps -1": (lambda c: c.update(rms_norm_eps=-1), "'rms_norm_eps' is -1, expected a finite positive number"),
    "rms_norm_eps NaN": (lambda c: c.update(rms_norm_eps=float("nan")), "'rms_norm_eps' is NaN"),
    "hidden_size a list": (
        lambda c: c.update(hidden_size=[64]),
        "'hidden_size' is [64], expected an integer from 1 to",
    ),
    "max_position_embeddings 1e30": (
        lambda c: c.update(max_position_embeddings=1e30),
        "'max_position_embeddings' is 1e+30, expected an integer from 1 to 4294967295",
    ),
    "layer ids not integers": (
        lambda c: c.update(eagle_aux_hidden_state_layer_ids=["1", 2, 3]),
        "'eagle_aux_hidden_state_layer_ids' is [\"1\", 2, 3], expected a list of layer ids from 0 to 511",
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_a_crafted_checkpoint_config_is_one_line(target_gguf, tmp_path, checkpoint_factory, case) -> None:
    edit, message = CONFIG_CASES[case]
    _, ckpt = checkpoint_factory(config_edit=edit)
    r = runner.invoke(app, ["convert", str(ckpt), "--target", str(target_gguf), "--outfile", str(tmp_path / "o.gguf")])
    line = one_line_error(r)
    assert f"{ckpt / 'config.json'}: " in line and message in line, line


def test_a_deeply_nested_config_is_one_line(target_gguf, tmp_path, checkpoint_factory) -> None:
    _, ckpt = checkpoint_factory()
    (ckpt / "config.json").write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    r = runner.invoke(app, ["convert", str(ckpt), "--target", str(target_gguf), "--outfile", str(tmp_path / "o.gguf")])
    assert one_line_error(r) == f"error: {ckpt / 'config.json'}: the config.json nests deeper than 64 levels; " \
                                "expected a plain JSON object"  # fmt: skip
    assert json_depth('{"a": "[[[[", "b": [{"c": []}]}') == 4  # brackets inside strings do not count
