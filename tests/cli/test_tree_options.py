"""``--tree``: one reading for generate, chat, serve, demo; trees on by default; the memory they cost priced.

Greedy output is the target's own whatever is drafted, so every tree setting must print what ``--draft-max 0``
prints; what differs is the engine the command opens (multi-sequence caches or not) and what it drafts.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from local_eagle import settings
from local_eagle.cli.app import app
from local_eagle.cli.loading import LoadOptions, buffer_bytes
from local_eagle.cli.options import TreeSetting, parse_tree
from local_eagle.errors import LocalEagleError
from local_eagle.runtime.engine import Engine
from local_eagle.runtime.policy.lengths import AUTO_TREE_NODES, AUTO_TREE_WIDTH
from local_eagle.runtime.tree import TreeShape
from local_eagle.testing.vram_fixtures import DrafterShape, ShapeSpec, write_drafter_gguf, write_shape_gguf

runner = CliRunner()


@pytest.mark.parametrize(
    ("value", "nodes", "explicit"),
    [(None, AUTO_TREE_NODES, False), ("auto", AUTO_TREE_NODES, False), (" AUTO ", AUTO_TREE_NODES, False),
     ("off", 0, True), ("Off", 0, True), ("0", 0, True), ("1", 1, True), ("7", 7, True), ("255", 255, True)],
)  # fmt: skip
def test_parse_tree(value, nodes, explicit):
    assert parse_tree(value) == TreeSetting(nodes, explicit)


@pytest.mark.parametrize("value", ["many", "-1", "256", "7.5", ""])
def test_a_bad_tree_is_one_line_naming_the_flag(value):
    with pytest.raises(LocalEagleError, match=r"^--tree must be 'auto', 'off' or a number of nodes \(0 to 255\)"):
        parse_tree(value)


@pytest.fixture(autouse=True)
def _a_gpu(monkeypatch):
    """These tests are about what ``--tree auto`` opens where layers go to a GPU (on the CPU alone it opens no
    tree caches: ``test_auto_opens_no_tree_caches_on_the_cpu``)."""
    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: gpu_layers != 0)


def test_auto_opens_no_tree_caches_on_the_cpu(pair, opened, monkeypatch):
    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: False)
    assert parse_tree("auto").engine_nodes(False) == 0 and parse_tree("5").engine_nodes(False) == 5
    _generate(pair)
    assert [e.options.tree_nodes for e in opened] == [0]


def test_what_a_tree_setting_opens_and_drafts(monkeypatch):
    auto, seven, off = parse_tree("auto"), parse_tree("7"), parse_tree("off")
    # adaptive, with layers on a GPU: the engine is opened for trees, the policy chooses each round's shape
    assert (auto.engine_nodes(False), auto.engine_width(False), auto.shape(False)) == (
        AUTO_TREE_NODES, AUTO_TREE_WIDTH, None
    )  # fmt: skip
    # every layer on the CPU: auto opens no tree caches (63 sequences' windows held 1.47 GB for a 260 MB pair)
    assert auto.engine_nodes(False, gpu_layers=0) == 0 and seven.engine_nodes(False, gpu_layers=0) == 7
    monkeypatch.setattr(settings, "offloads", lambda gpu_layers: False)
    assert auto.engine_nodes(False) == 0
    assert (seven.engine_nodes(False), seven.shape(False)) == (7, None)
    # --fixed: chains as always, unless --tree N asks for that tree every round
    assert (auto.engine_nodes(True), auto.shape(True)) == (0, None)
    assert seven.shape(True) == TreeShape.for_nodes(7)
    assert (seven.engine_nodes(True), seven.engine_width(True)) == (7, TreeShape.for_nodes(7).width)
    assert (off.engine_nodes(False), off.engine_nodes(True), off.shape(True)) == (0, 0, None)


def test_load_options_open_trees_by_default():
    assert (LoadOptions().tree_nodes, LoadOptions().tree_width) == (AUTO_TREE_NODES, AUTO_TREE_WIDTH)


@pytest.fixture
def opened(monkeypatch) -> list[Engine]:
    """Every engine the command opens, to read the options it was opened with."""
    engines: list[Engine] = []
    init = Engine.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        engines.append(self)

    monkeypatch.setattr(Engine, "__init__", spy)
    return engines


def _generate(pair, *args: str) -> dict:
    _, target, draft = pair
    r = runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "-n", "20", "--json",
                            "--threads", "1", "--temperature", "0", *args])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    ("args", "nodes", "tree_rounds"),
    [([], AUTO_TREE_NODES, None), (["--tree", "off"], 0, False), (["--tree", "7", "--fixed"], 7, True),
     (["--tree", "1", "--fixed"], 1, None), (["--fixed"], 0, False), (["--tree", "5"], 5, None)],
)  # fmt: skip
def test_generate_with_trees_prints_the_target_s_own_greedy_output(pair, opened, args, nodes, tree_rounds):
    plain = _generate(pair, "--draft-max", "0")
    opened.clear()
    got = _generate(pair, *args)
    assert got["tokens"] == plain["tokens"] and got["text"] == plain["text"]
    assert [e.options.tree_nodes for e in opened] == [nodes]
    rounds = got["draft_lengths_by_round"]
    if tree_rounds:  # --fixed --tree 7: every round drafts 7 nodes (fewer only where the context ends)
        assert max(rounds) == 7 and rounds.count(7) >= len(rounds) - 1
    elif tree_rounds is False:  # chains only: at most --draft-max's bound per round
        assert max(rounds) <= 8


def test_generate_refuses_a_bad_tree_before_loading(pair, opened):
    _, target, draft = pair
    r = runner.invoke(app, ["generate", "-m", str(target), "-d", str(draft), "-p", "hi", "--tree", "lots"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert " ".join(r.output.split()).startswith("error: --tree must be 'auto', 'off' or a number of nodes")
    assert opened == []


def test_chat_opens_trees_by_default_and_drafts_a_fixed_one(pair, opened):
    _, target, draft = pair
    base = ["chat", "-m", str(target), "-d", str(draft), "--threads", "1", "--temperature", "0", "-n", "12"]
    r = runner.invoke(app, base, input="hi\n/bye\n")
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*base, "--fixed", "--tree", "6", "--verbose"], input="hi\n/bye\n")
    assert r.exit_code == 0, r.output
    assert [e.options.tree_nodes for e in opened] == [AUTO_TREE_NODES, 6]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "nodes", "tree"),
    [([], None, None), (["--parallel", "1"], AUTO_TREE_NODES, None), (["--tree", "off"], 0, None),
     (["--fixed", "--tree", "9"], 9, 9), (["--fixed"], 0, None)],
)  # fmt: skip
def test_serve_opens_its_engine_for_trees_where_it_takes_one_request_at_a_time(pair, monkeypatch, args, nodes, tree):
    """By default a served model takes 4 requests at once where they fit (as Ollama), and several at once draft
    chains; one at a time (--parallel 1, or where 4 do not fit) it is opened for trees."""
    import local_eagle.serve.app as serve_app

    served = []
    monkeypatch.setattr(serve_app, "serve", lambda server, *a, **k: served.append(server))
    _, target, draft = pair
    r = runner.invoke(app, ["serve", "-m", str(target), "-d", str(draft), "--threads", "1", "--ctx", "256",
                            "--port", str(_free_port()), *args])  # fmt: skip
    assert r.exit_code == 0, r.output
    (server,) = served
    try:
        if nodes is None:
            nodes = 0 if server.engine.options.parallel > 1 else AUTO_TREE_NODES
        assert server.engine.options.tree_nodes == nodes
        assert server.tree == (TreeShape.for_nodes(tree) if tree else None)
    finally:
        server.close()


@pytest.mark.parametrize(("args", "nodes"), [([], AUTO_TREE_NODES), (["--tree", "off"], 0), (["--tree", "12"], 12)])
def test_the_store_server_opens_every_model_for_trees(pair, monkeypatch, args, nodes):
    import local_eagle.serve.runner as serve_runner

    fronts = []
    monkeypatch.setattr(serve_runner, "run", lambda front, *a, **k: fronts.append(front))
    r = runner.invoke(app, ["serve", "--threads", "1", "--port", str(_free_port()), *args])
    assert r.exit_code == 0, r.output
    (front,) = fronts
    front.close()
    assert front.config.defaults.load().tree_nodes == nodes


def test_bench_measures_the_default_on_a_tree_capable_engine(pair, opened, tmp_path: Path):
    _, target, draft = pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    base = ["bench", "-m", str(target), "-d", str(draft), "--prompts", str(prompts), "-n", "8", "--threads", "1",
            "--json"]  # fmt: skip
    for args in ([], ["--no-tree"], ["--draft-max", "3", "--fixed"], ["--tree", "5", "--fixed"]):
        r = runner.invoke(app, [*base, *args])
        assert r.exit_code == 0, r.output
    assert [e.options.tree_nodes for e in opened] == [AUTO_TREE_NODES, 0, 0, 5]
    r = runner.invoke(app, [*base, "--no-tree", "--tree", "5"])
    assert r.exit_code == 2 and "give --tree N or --no-tree, not both" in r.output


@pytest.fixture(scope="module")
def swa_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Header-only GGUFs shaped as a sliding-window gemma3 target and its drafter (the planner reads no weights)."""
    d = tmp_path_factory.mktemp("swa")
    target = write_shape_gguf(d / "g.gguf", ShapeSpec(
        arch="gemma3", n_layer=7, n_embd=512, n_head=4, n_head_kv=2, head_dim=128, n_ff=1024, n_vocab=4096,
        tied=True, n_swa=512,
    ))  # fmt: skip
    draft = write_drafter_gguf(d / "d.gguf", DrafterShape(
        target_hidden=512, n_vocab=4096, n_embd=256, n_head=4, n_head_kv=2, n_ff=768, own_embeddings=True,
    ))  # fmt: skip
    return target, draft


def test_trees_price_the_multi_sequence_caches(swa_pair):
    """A tree-capable engine's contexts hold a sequence per node (the target) and per branch (the drafter), in a
    unified cache: on a sliding-window model the planner prices more than for a chains-only engine (the compute
    buffers; the engine keeps llama.cpp's full-size SWA cache, which does not grow)."""
    target, draft = swa_pair
    chains = buffer_bytes(target, draft, 8192, LoadOptions(tree_nodes=0), gpu=False)
    trees = buffer_bytes(target, draft, 8192, LoadOptions(), gpu=False)
    assert trees > chains
    assert buffer_bytes(target, draft, 8192, LoadOptions(tree_nodes=1), gpu=False) == chains  # one node: a chain
    # without a drafter nothing is drafted: no tree, no multi-sequence cache
    assert buffer_bytes(target, None, 8192, LoadOptions(), gpu=False) == buffer_bytes(
        target, None, 8192, LoadOptions(tree_nodes=0), gpu=False
    )


def _fit(swa_pair, *args: str) -> dict:
    target, draft = swa_pair
    r = runner.invoke(app, ["fit", "-m", str(target), "-d", str(draft), "--ctx", "8192", "--vram-gb", "8", "--json",
                            *args])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["plan"]


def test_fit_prices_trees_when_asked(swa_pair):
    default, off, trees = _fit(swa_pair), _fit(swa_pair, "--tree", "off"), _fit(swa_pair, "--tree", "auto")
    assert default == off and (default["settings"]["n_seq"], default["settings"]["kv_unified"]) == (1, False)
    assert (trees["settings"]["n_seq"], trees["settings"]["kv_unified"]) == (AUTO_TREE_NODES, True)
    assert trees["settings"]["draft_n_seq"] == 1 + 2 * AUTO_TREE_WIDTH  # the drafter's context: its own, two levels
    assert trees["components"]["target_compute"]["gpu"] > default["components"]["target_compute"]["gpu"]
    assert trees["total_gpu"] > default["total_gpu"]
    target, draft = swa_pair
    r = runner.invoke(app, ["fit", "-m", str(target), "-d", str(draft), "--tree", "7", "--parallel", "2"])
    assert r.exit_code == 2 and "give --tree (one generation's draft trees) or --parallel, not both" in r.output
