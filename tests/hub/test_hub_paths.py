"""Hub names and file names never reach outside the cache: ``..``, absolute paths, NUL and overlong parts are refused.

A revision becomes ``refs/<REV>`` in the cache and a listed file name a path under the snapshot, so
``hf.co/u/r@../../x`` or a repository listing ``../../x.gguf`` would otherwise write or read files
anywhere. Each case here checks the one-line refusal and that nothing appeared outside the cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hubserver import TARGET_REPO, FakeHub, TinyRepos

from local_eagle.hub.fetch import HubSettings, _cached_listing, _remember_ref, pull
from local_eagle.hub.names import HubError, HubRef, parse_hub_name

ESCAPES = [
    ("../../../../escaped", "'..'"),
    ("main/../../../../../escaped", "'..'"),
    ("/tmp/escaped", "an absolute path"),
    ("a\x00b", "NUL"),
    ("a//b", "an empty part"),
    ("x" * 300, "over 255"),
]


@pytest.mark.parametrize(("rev", "why"), ESCAPES, ids=["up", "down-up", "absolute", "nul", "empty", "long"])
def test_a_revision_that_leaves_the_cache_is_refused_by_the_parser(rev: str, why: str) -> None:
    with pytest.raises(HubError) as e:
        parse_hub_name(f"hf.co/u/r@{rev}")
    msg = str(e.value)
    assert "\n" not in msg and "revision" in msg and why in msg, msg


def test_an_overlong_repository_name_is_one_line() -> None:
    with pytest.raises(HubError, match="the repo name is over 96 characters"):
        parse_hub_name("hf.co/u/" + "r" * 5000)


def test_revisions_with_slashes_still_parse() -> None:
    assert parse_hub_name("hf.co/u/r@refs/pr/1").revision == "refs/pr/1"
    assert parse_hub_name("hf.co/u/r@feature/x:Q8_0") == HubRef("u/r", "Q8_0", "feature/x")


@pytest.fixture
def any_revision(hub: FakeHub) -> FakeHub:
    """The Hub answers every revision with the current commit, as a careless or hostile endpoint could."""
    repo = hub.repos[TARGET_REPO]
    repo.at = lambda rev: (repo.commit, repo.files)  # type: ignore[method-assign]
    return hub


def test_pull_with_an_escaping_revision_writes_nothing_outside(any_revision: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(HubError, match="revision"):
        pull(f"hf.co/{TARGET_REPO}@../../../../escaped")
    assert not (tmp_path / "escaped").exists()
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))


def test_the_cache_refuses_an_escaping_revision_itself(hub: FakeHub, tmp_path: Path) -> None:
    """Below the parser too: a HubRef built by hand cannot write or read a ref outside the cache."""
    s = HubSettings.from_env()
    bad = HubRef(TARGET_REPO, None, "../../../../escaped")
    with pytest.raises(HubError, match="leaves the cache"):
        _remember_ref(s, bad, "0" * 40)
    assert not (tmp_path / "escaped").exists()
    (tmp_path / "escaped").write_text("1" * 40)  # a file outside the cache, shaped like a ref
    with pytest.raises(HubError, match="leaves the cache"):
        _cached_listing(bad, s)


@pytest.mark.parametrize("name", ["../../../../../escaped-Q4_K_M.gguf", "sub/../../../../../../escaped-Q4_K_M.gguf",
                                  "/tmp/escaped-Q4_K_M.gguf"])  # fmt: skip
def test_a_listed_file_that_leaves_the_repository_is_refused(
    hub: FakeHub, tiny_repos: TinyRepos, tmp_path: Path, name: str
) -> None:
    hub.add("tiny/evil-GGUF", {name: tiny_repos.target, "README.md": b"#\n"})
    with pytest.raises(HubError) as e:
        pull("hf.co/tiny/evil-GGUF")
    msg = str(e.value)
    assert "\n" not in msg and repr(name) in msg and "leaves the repository" in msg, msg
    assert not hub.seen("cdn", "GET")  # nothing was downloaded
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))
    assert not Path("/tmp/escaped-Q4_K_M.gguf").exists()


def test_a_bad_name_beside_the_wanted_file_does_not_stop_the_pull(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    """One bad entry in a listing is one bad entry: the tag's own file still comes."""
    hub.add("tiny/mixed-GGUF", {"../odd-Q8_0.gguf": tiny_repos.other, "good-Q4_K_M.gguf": tiny_repos.target})
    got = pull("hf.co/tiny/mixed-GGUF")
    assert got.path.name == "good-Q4_K_M.gguf"


def test_the_cli_says_it_in_one_line(any_revision: FakeHub, tiny_repos: TinyRepos, tmp_path: Path) -> None:
    from test_hub_cli import one_line_error, runner

    from local_eagle.cli.app import app

    line = one_line_error(runner.invoke(app, ["pull", f"hf.co/{TARGET_REPO}@../../../../escaped"]))
    assert "the revision '../../../../escaped' has a '..' part" in line
    any_revision.add("tiny/evil-GGUF", {"../../escaped-Q4_K_M.gguf": tiny_repos.target})
    line = one_line_error(runner.invoke(app, ["pull", "hf.co/tiny/evil-GGUF"]))
    assert "lists '../../escaped-Q4_K_M.gguf', a path that leaves the repository" in line
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))
