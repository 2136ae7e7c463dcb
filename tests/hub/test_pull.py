"""Fetching Hub names through huggingface_hub, against the local Hub of conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hubserver import DRAFTER_REPO, GATED_REPO, NO_TERMS_TOKEN, TARGET_REPO, FakeHub, TinyRepos, target_files

from local_eagle.hub.fetch import pull
from local_eagle.hub.names import HubError


def test_a_gguf_repo_gives_the_q4_k_m_file(hub: FakeHub, tiny_repos: TinyRepos, tmp_path: Path) -> None:
    got = pull(f"hf.co/{TARGET_REPO}")
    assert got.kind == "gguf" and got.path.name == "cycle-Q4_K_M.gguf"
    assert got.path.read_bytes() == tiny_repos.target
    assert got.commit == hub.repos[TARGET_REPO].commit and not got.from_cache
    assert (tmp_path / "hf-home" / "hub") in got.path.parents  # huggingface_hub's cache under HF_HOME
    downloads = [r.path for r in hub.seen("cdn", "GET")]
    assert len(downloads) == 1  # only the file the tag picks
    assert [r.path for r in hub.seen("hub", "GET")] == [f"/api/models/{TARGET_REPO}/revision/main"]
    assert [r.path for r in hub.seen("hub", "HEAD")] == [f"/{TARGET_REPO}/resolve/{got.commit}/cycle-Q4_K_M.gguf"]


def test_a_tag_picks_the_file_and_a_second_pull_downloads_nothing(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    got = pull(f"huggingface.co/{TARGET_REPO}:q8_0")
    assert got.path.name == "cycle-Q8_0.gguf" and got.path.read_bytes() == tiny_repos.other
    n = len(hub.seen("cdn", "GET"))
    again = pull(f"hf.co/{TARGET_REPO}:Q8_0")
    assert again.path == got.path and len(hub.seen("cdn", "GET")) == n


def test_split_ggufs_are_fetched_whole(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    got = pull(f"hf.co/{TARGET_REPO}:Q2_K")
    assert [p.name for p in got.files] == ["cycle-Q2_K-00001-of-00002.gguf", "cycle-Q2_K-00002-of-00002.gguf"]
    assert got.path == got.files[0]
    assert b"".join(p.read_bytes() for p in got.files) == tiny_repos.other


def test_an_interrupted_download_resumes_with_a_range(
    hub: FakeHub, tiny_repos: TinyRepos, monkeypatch: pytest.MonkeyPatch
) -> None:
    # huggingface_hub keeps what it received in whole chunks (10 MB); the tiny file needs small ones
    chunk = 64 * 1024
    monkeypatch.setattr("huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE", chunk)
    cut = 5 * chunk
    assert len(tiny_repos.target) > cut + chunk
    hub.cut["cycle-Q4_K_M.gguf"] = cut
    got = pull(f"hf.co/{TARGET_REPO}")
    assert got.path.read_bytes() == tiny_repos.target
    gets = hub.seen("cdn", "GET")
    assert len(gets) == 2 and gets[0].range is None
    start = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))  # type: ignore[union-attr]
    assert 0 < start <= cut  # the second GET asks for the rest only


def test_a_drafter_checkpoint_repo_gives_its_directory(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    got = pull(f"hf.co/{DRAFTER_REPO}")
    assert got.kind == "checkpoint" and got.path.is_dir()
    assert sorted(p.name for p in got.path.iterdir()) == ["config.json", "model.safetensors"]  # no README
    assert (got.path / "model.safetensors").read_bytes() == tiny_repos.weights


def test_a_gated_repo_says_how_to_log_in(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(HubError) as e:
        pull(f"hf.co/{GATED_REPO}")
    msg = str(e.value)
    assert "\n" not in msg and "access denied (401)" in msg and "hf auth login" in msg and "HF_TOKEN" in msg
    assert f"accept the model's terms at {hub.endpoint}/{GATED_REPO}" in msg
    denied = len(hub.requests)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    assert pull(f"hf.co/{GATED_REPO}").path.name == "gated-Q4_K_M.gguf"
    later = hub.requests[denied:]
    assert all(r.auth for r in later if r.server == "hub")
    assert not any(r.auth for r in later if r.server == "cdn")  # the token never leaves the Hub


def test_terms_not_accepted_is_a_403_with_the_same_advice(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", NO_TERMS_TOKEN)
    with pytest.raises(HubError) as e:
        pull(f"hf.co/{GATED_REPO}")
    assert "access denied (403)" in str(e.value) and f"{hub.endpoint}/{GATED_REPO}" in str(e.value)


def test_a_missing_repo_is_one_line(hub: FakeHub) -> None:
    with pytest.raises(HubError) as e:
        pull("hf.co/nobody/nothing-GGUF")
    assert str(e.value) == f"hf.co/nobody/nothing-GGUF: no such repository ({hub.endpoint}/nobody/nothing-GGUF)"


def test_a_missing_tag_lists_the_tags(hub: FakeHub) -> None:
    with pytest.raises(HubError, match=r"no GGUF matches the tag 'Q6_K'; the repository has: Q2_K, Q4_K_M, Q8_0"):
        pull(f"hf.co/{TARGET_REPO}:Q6_K")


def test_a_missing_revision_is_one_line(hub: FakeHub) -> None:
    with pytest.raises(HubError, match=f"no revision 'v9' in {TARGET_REPO}"):
        pull(f"hf.co/{TARGET_REPO}@v9")


def test_a_new_commit_brings_the_new_file(hub: FakeHub, tiny_repos: TinyRepos) -> None:
    first = pull(f"hf.co/{TARGET_REPO}")
    files = target_files(tiny_repos) | {"cycle-Q4_K_M.gguf": tiny_repos.other}
    commit = hub.add(TARGET_REPO, files)
    second = pull(f"hf.co/{TARGET_REPO}")
    assert second.commit == commit != first.commit
    assert second.path.read_bytes() == tiny_repos.other and first.path.read_bytes() == tiny_repos.target
    n = len(hub.seen("cdn", "GET"))
    pinned = pull(f"hf.co/{TARGET_REPO}@{first.commit}")  # the old commit: its file is in the cache
    assert pinned.path == first.path and pinned.commit == first.commit and len(hub.seen("cdn", "GET")) == n


def test_offline_answers_from_the_cache(hub: FakeHub, tiny_repos: TinyRepos, monkeypatch: pytest.MonkeyPatch) -> None:
    online = pull(f"hf.co/{TARGET_REPO}")
    drafter = pull(f"hf.co/{DRAFTER_REPO}")
    n = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = pull(f"hf.co/{TARGET_REPO}")
    assert offline.path == online.path and offline.from_cache and offline.commit == online.commit
    assert pull(f"hf.co/{DRAFTER_REPO}").path == drafter.path
    assert len(hub.requests) == n  # not one request
    with pytest.raises(HubError) as e:
        pull(f"hf.co/{TARGET_REPO}:Q8_0")
    assert "no GGUF matches the tag 'Q8_0'" in str(e.value)
    assert str(e.value).endswith("HF_HUB_OFFLINE is set, so only the files in the cache are known")
    with pytest.raises(HubError, match="not in the cache .* HF_HUB_OFFLINE is set; pull it once online"):
        pull("hf.co/nobody/never-pulled")


def test_an_unreachable_hub_falls_back_to_the_cache(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    online = pull(f"hf.co/{TARGET_REPO}")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert pull(f"hf.co/{TARGET_REPO}").path == online.path
    with pytest.raises(HubError, match="cannot reach http://127.0.0.1:9 .* not in the cache"):
        pull(f"hf.co/{DRAFTER_REPO}")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_bars_take_what_huggingface_hub_reports(enabled: bool) -> None:
    """HTTP downloads update a tqdm-like bar; Xet downloads (most of the Hub now, not served here) report
    through XetDownloadProgressReporter, which must accept the same bar class."""
    from types import SimpleNamespace

    from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

    from local_eagle.hub.fetch import progress_bars

    with progress_bars(enabled) as bar_for:
        cls = bar_for("model.gguf")
        with cls(total=100, initial=10, desc="model.gguf", unit="B", unit_scale=True) as bar:
            bar.update(40)
            bar.update(-10)  # a retry that rewinds
        with XetDownloadProgressReporter(reconstruction_desc="x", total=None, log_level=30, tqdm_class=cls) as rep:
            for done in (30, 100):
                rep.update_progress(SimpleNamespace(
                    total_bytes_completed=done, total_transfer_bytes_completed=done, total_bytes=100,
                    total_bytes_completion_rate=1.0, total_transfer_bytes_completion_rate=1.0,
                ))  # fmt: skip
            if enabled:
                assert rep.reconstruction_bar is rep.transfer_bar and rep.reconstruction_bar.total == 100


def test_the_advice_names_the_hub_page(tmp_path: Path) -> None:
    """With the default endpoint, the page to log in and accept the terms at is huggingface.co's."""
    from types import SimpleNamespace

    from local_eagle.hub.fetch import DEFAULT_ENDPOINT, HubSettings, hub_error
    from local_eagle.hub.names import parse_hub_name

    s = HubSettings(DEFAULT_ENDPOINT, tmp_path, offline=False)
    ref = parse_hub_name("hf.co/meta-llama/Llama-3.2-1B:Q4_K_M")
    denied = Exception("401 Client Error")
    denied.response = SimpleNamespace(status_code=401)  # type: ignore[attr-defined]
    msg = str(hub_error(ref, denied, s))
    assert msg == (
        "hf.co/meta-llama/Llama-3.2-1B:Q4_K_M: access denied (401); log in with `hf auth login` (the former "
        "`huggingface-cli login`) or set HF_TOKEN, and accept the model's terms at "
        "https://huggingface.co/meta-llama/Llama-3.2-1B"
    )
