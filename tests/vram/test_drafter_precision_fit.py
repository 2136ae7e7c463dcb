"""fit on a float drafter: what its matrices would weigh at q8_0, and what q8_0 kept in acceptance on the demo pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle import vram
from local_eagle.assets import DEMO_DRAFTER
from local_eagle.bench.precision import measured_acceptance, measured_call_ratio
from local_eagle.cli.app import app
from local_eagle.testing.vram_fixtures import LLAMA31_8B, LLAMA31_8B_EAGLE3, write_drafter_gguf, write_shape_gguf
from local_eagle.vram import MiB
from local_eagle.vram.memory import as_q8_0, float_matrices


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("llama8b-precision")
    return write_shape_gguf(d / "t.gguf", LLAMA31_8B), write_drafter_gguf(d / "d.gguf", LLAMA31_8B_EAGLE3)


def test_q8_0_keeps_vectors_and_packs_each_matrix_at_34_bytes_a_32(llama8b) -> None:
    shape = vram.read_shape(llama8b[1], "drafter GGUF")
    q8 = as_q8_0(shape)
    packed = 0
    for a, b in zip(shape.tensors, q8.tensors, strict=True):
        if a.type == 1 and len(a.ne) >= 2 and a.ne[0] % 32 == 0:
            assert b.type == 8 and b.nbytes * 64 == a.nbytes * 34
            packed += 1
        else:
            assert b == a
    assert packed >= 5 and float_matrices(shape) == "F16" and float_matrices(q8) is None
    assert float_matrices(vram.read_shape(DEMO_DRAFTER, "drafter GGUF")) is None  # the shipped drafter is q8_0


def test_fit_says_what_a_float_drafter_weighs_at_q8_0_and_what_it_kept(llama8b) -> None:
    t, d = (str(x) for x in llama8b)
    r = CliRunner().invoke(app, ["fit", "-m", t, "-d", d, "--ctx", "8192", "--gpu", "rtx4090", "--json"])
    assert r.exit_code == 0, r.output
    notes = [n for n in json.loads(r.output)["plan"]["notes"] if "q8_0" in n]
    assert len(notes) == 1, notes
    shape = vram.read_shape(d, "drafter GGUF")
    now = sum(x.nbytes for x in shape.tensors) / MiB
    q8 = sum(x.nbytes for x in as_q8_0(shape).tensors) / MiB
    f16, q8_0 = (measured_acceptance()[k].acceptance_length for k in ("F16", "Q8_0"))
    for part in ("matrices are F16", f"{now:.0f} MiB", f"at q8_0 {q8:.0f} MiB", "--outtype q8_0",
                 f"{q8_0 / f16:.1%} of f16's acceptance length ({q8_0:.3f} against {f16:.3f})",
                 f"call cost {measured_call_ratio():.2f}x f16's on a 2-core CPU", "prefer q8_0"):  # fmt: skip
        assert part in notes[0], part
