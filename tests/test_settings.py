"""The one resolver from flags, a Modelfile and a request's options to what the engine runs with, and the front ends
that go through it (``generate``, ``chat``, ``run``, ``serve -m``, the store server)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from local_eagle.runtime.policy.defaults import AUTO_DRAFT_MAX, AUTO_TREE_NODES, FIXED_DRAFT_MAX
from local_eagle.settings import DraftMode, Settings, TreeSetting, resolve


def test_each_layer_overrides_the_one_before() -> None:
    s = resolve(
        {"num_ctx": 2048, "temperature": 0.5, "num_predict": 64, "stop": ["A"]},
        {"temperature": 0.1, "stop": None, "num_ctx": None},
        defaults={"num_predict": 128, "num_ctx": 1024, "top_k": 7},
    )
    assert s.parameters == {"num_ctx": 2048, "temperature": 0.1, "num_predict": 64, "stop": ["A"], "top_k": 7}
    r = s.over({"temperature": 0.9, "num_predict": None, "seed": -1})  # a request's options; null leaves a value
    assert r.sampling().temperature == 0.9 and r.sampling().seed is None and r.max_tokens(4096) == 64
    assert s.sampling().temperature == 0.1  # the layer below is unchanged
    assert resolve({"stop": ["A"]}, {"stop": []}).stop() == ["A"]  # no --stop given keeps the Modelfile's


def test_the_draft_bound_follows_the_mode_the_layers_and_what_drafts() -> None:
    assert resolve().draft_max == AUTO_DRAFT_MAX
    assert resolve(mode=DraftMode(fixed=True)).draft_max == FIXED_DRAFT_MAX
    assert resolve({"draft_num_predict": 3}).draft_max == 3
    assert resolve({"draft_num_predict": 3}, {"draft_num_predict": 5}).draft_max == 5
    assert resolve({"draft_num_predict": 3}).over({"draft_num_predict": 1}).draft_max == 1
    # --draft named another drafter: the Modelfile's bound was chosen for its own
    assert resolve({"draft_num_predict": 3}, own_draft=False).draft_max == AUTO_DRAFT_MAX
    # DRAFT none (or --no-mtp) with no drafter: nothing drafts, whatever asks for drafts
    assert resolve({"draft_num_predict": 3}, {"draft_num_predict": 5}, drafts=False).over({"draft_num_predict": 2})\
        .draft_max == 0  # fmt: skip


def test_max_tokens_runs_to_the_end_of_the_context_as_ollamas_minus_one() -> None:
    assert resolve().max_tokens(512) == 512
    assert resolve({"num_predict": -1}).max_tokens(512) == 512
    assert resolve({"num_predict": 10_000}).max_tokens(512) == 512
    assert resolve(defaults={"num_predict": 128}).max_tokens(512) == 128


def test_load_opens_tree_caches_only_where_a_tree_may_be_drafted(monkeypatch) -> None:
    import local_eagle.settings as settings

    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: False)  # every call on the CPU
    assert resolve().load().tree_nodes == 0  # auto: the policy all but never picks a tree there
    assert resolve(mode=DraftMode(tree=TreeSetting(15, explicit=True))).load().tree_nodes == 15
    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: gpu_layers != 0)
    assert resolve().load().tree_nodes == AUTO_TREE_NODES
    assert resolve({"num_gpu": 0}).load().tree_nodes == 0  # the Modelfile keeps the layers on the CPU
    assert resolve(mode=DraftMode(fixed=True)).load().tree_nodes == 0  # --fixed without --tree N: chains
    assert resolve(parallel=4).load().tree_nodes == 0  # parallel sequences draft chains
    assert resolve(drafts=False).load().tree_nodes == 0


def test_load_and_stream_options_carry_every_setting() -> None:
    s = resolve({"num_ctx": 2048, "num_gpu": 0, "num_thread": 3, "draft_num_predict": 6, "top_k": 5},
                mode=DraftMode(fixed=True, tree=TreeSetting(8, explicit=True), p_min=0.2), beyond_training=True,
                mtp=False)  # fmt: skip
    load = s.load()
    assert (load.ctx, load.gpu_layers, load.threads, load.draft_max) == (2048, 0, 3, 6)
    assert load.beyond_training and not load.adaptive and not load.mtp and load.tree_nodes == 8
    opts = load.engine_options(1024)
    assert (opts.n_ctx, opts.n_gpu_layers, opts.n_threads, opts.rollback, opts.adaptive) == (1024, 0, 3, 6, False)
    o = s.stream_options(1024)
    assert o["draft_max"] == 6 and o["draft_p_min"] == 0.2 and not o["adaptive"] and o["tree"].nodes == 8
    assert o["sampling"].top_k == 5 and o["max_tokens"] == 1024 and o["stop"] == []
    assert Settings().load().adaptive and Settings().stream_options(64)["adaptive"]  # the policy by default


def _modelfile(tmp_path: Path, target: Path, draft: Path, params: str) -> Path:
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {target}\nDRAFT {draft}\n{params}")
    return mf


@pytest.fixture
def files(pair, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The tiny pair's target and drafter (a Modelfile's DRAFT is checked), and a copy of the drafter as another."""
    import shutil

    _, target, draft = pair
    other = shutil.copy(draft, tmp_path / "other.gguf")
    return target, draft, Path(other)


def test_flags_beat_the_modelfile_and_another_drafter_drops_its_bound(tmp_path: Path, files) -> None:
    from local_eagle.cli.options import draft_mode, given, resolve_models

    target, draft, other = files
    mf = _modelfile(tmp_path, target, draft, "PARAMETER draft_num_predict 6\nPARAMETER num_ctx 2048\n")
    p = resolve_models(None, None, mf)
    assert p.own_draft and p.settings({}, draft_mode(False, None)).draft_max == 6
    assert p.settings(given(draft_max=2, ctx=1024), draft_mode(False, None)).load().ctx == 1024
    assert p.settings(given(draft_max=2), draft_mode(False, None)).draft_max == 2
    replaced = resolve_models(None, other, mf)
    assert not replaced.own_draft and replaced.draft == other
    assert replaced.settings({}, draft_mode(False, None)).draft_max == AUTO_DRAFT_MAX


def test_run_by_name_drafts_with_the_cost_aware_policy_and_opens_no_tree_caches_on_a_cpu(monkeypatch) -> None:
    """``local-eagle run NAME`` drafted a fixed chain of 4 every round and opened the caches of 63 sequences where
    ``chat -m`` ran the policy: its session now resolves as chat's does."""
    import local_eagle.settings as settings
    from local_eagle.cli.chat import ChatSession
    from local_eagle.ollama.modelfile import parse

    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: False)
    m = parse("FROM t.gguf\nDRAFT d.gguf\n", source="Modelfile")
    s = ChatSession.from_modelfile(m, Path("t.gguf"), Path("d.gguf"))
    o = s.stream_options()
    assert o["adaptive"] and o["draft_max"] == AUTO_DRAFT_MAX and o["tree"] is None
    assert s.settings().load().tree_nodes == 0 and s.settings().load().adaptive


def test_a_request_layers_its_options_over_serve_flags_and_the_modelfile(tmp_path: Path, files) -> None:
    """``serve -f Modelfile --draft-max 2``: the flag beats the Modelfile's draft_num_predict (it used to be the
    other way round), and a request's option beats both."""
    from local_eagle.cli.options import draft_mode, given, resolve_models
    from local_eagle.serve.models import settings
    from local_eagle.serve.server import ServeConfig

    target, draft, _ = files
    mf = _modelfile(tmp_path, target, draft, "PARAMETER draft_num_predict 6\nPARAMETER temperature 0.7\n"
                    "PARAMETER num_predict 50\n")  # fmt: skip
    p = resolve_models(None, None, mf)
    flags = p.settings(given(draft_max=2), draft_mode(False, None))
    config = ServeConfig(name="m", model=target, draft=draft, settings=flags)
    server = SimpleNamespace(config=config, engine=SimpleNamespace(n_ctx=512))
    s = settings(server, {})  # type: ignore[arg-type]
    assert (s.draft_max, s.sampling.temperature, s.max_tokens) == (2, 0.7, 50)
    s = settings(server, {"draft_num_predict": 3, "temperature": 0.0, "num_predict": -1})  # type: ignore[arg-type]
    assert (s.draft_max, s.sampling.temperature, s.max_tokens) == (3, 0.0, 512)
