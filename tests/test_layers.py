"""Imports run one way: front ends on top, libraries below (docs/architecture.md, "Packages")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module may import its own unit and anything on a lower layer, nothing above
LAYERS: list[set[str]] = [
    {"local_eagle", "local_eagle.errors", "local_eagle.assets"},
    {"local_eagle.gguf", "local_eagle.reference"},
    {"local_eagle.catalog"},
    {"local_eagle.llamacpp"},
    {"local_eagle.runtime", "local_eagle.vram"},
    {"converters"},
    {"local_eagle.hub"},
    {"local_eagle.ollama"},
    {"local_eagle.settings"},
    {"local_eagle.store"},
    {"local_eagle.train"},
    {"local_eagle.testing"},
    {"local_eagle.bench", "local_eagle.doctor"},
    {"local_eagle.serve", "local_eagle.kit"},
    {"local_eagle.cli", "local_eagle.__main__"},
]


def unit_of(module: str) -> str | None:
    """The layer unit a dotted module name belongs to (its longest listed prefix)."""
    best = None
    for layer in LAYERS:
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best)):
                best = unit
    return best


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from local_eagle import doctor` imports a submodule, not just a name
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def violations(files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        me = unit_of(module_name(path))
        assert me is not None, f"{path} belongs to no layer: add it to LAYERS"
        seen = set()
        for line, name in imported(path):
            other = unit_of(name)
            if other is None or other == me or (line, other) in seen:
                continue
            seen.add((line, other))
            if layer_of(other) > layer_of(me):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {other} from a layer above")
    return bad


def package_files() -> list[Path]:
    return sorted(p for d in ("local_eagle", "converters") for p in (ROOT / d).rglob("*.py"))


def test_imports_run_one_way() -> None:
    assert violations(package_files()) == []


def test_an_upward_import_is_caught(tmp_path, monkeypatch) -> None:
    fake = ROOT / "local_eagle" / "gguf" / "reader.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: "from local_eagle.cli.app import app\n")
    assert violations([fake]) == [
        "local_eagle/gguf/reader.py:1: local_eagle.gguf imports local_eagle.cli from a layer above"
    ]


@pytest.mark.parametrize("top", ["local_eagle"])
def test_top_level_stays_small(top: str) -> None:
    modules = [p.name for p in (ROOT / top).glob("*.py")]
    assert len(modules) <= 8, modules


def test_no_module_is_huge() -> None:
    big = {str(p.relative_to(ROOT)): n for p in package_files() if (n := len(p.read_text().splitlines())) > 800}
    assert big == {}
