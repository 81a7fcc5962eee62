"""Every shipped profile validates; a typo in a profile is an error naming the key."""

from __future__ import annotations

import pytest

from rewardbox.config.profile import PROFILE_DIR, load_profile


@pytest.mark.parametrize("name", sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
def test_shipped_profiles_validate(name):
    profile = load_profile(name)
    assert profile.name == name and profile.tasks.candidates and profile.tasks.benchmark


def test_unknown_key_names_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (PROFILE_DIR / "test.yaml")
        .read_text()
        .replace("probe:\n  trials: 4", "probe:\n  trails: 4")
    )
    with pytest.raises(
        ValueError, match=r"(?s)bad.yaml.*probe.trails.*Extra inputs are not permitted"
    ):
        load_profile(bad)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(FileNotFoundError, match="demo"):
        load_profile("nope")


def test_a_removed_key_names_the_key_that_replaced_it(tmp_path):
    bad = tmp_path / "old.yaml"
    bad.write_text(
        (PROFILE_DIR / "test.yaml")
        .read_text()
        .replace("policy:\n", "policy:\n  temperature: 0.2\n")
    )
    with pytest.raises(
        ValueError, match=r"(?s)old.yaml.*policy.temperature was removed: set episode.temperature"
    ):
        load_profile(bad)


def test_the_profile_is_read_once_until_its_file_changes(tmp_path, monkeypatch):
    import yaml

    from rewardbox.config import profile as profile_module

    path = tmp_path / "once.yaml"
    path.write_text((PROFILE_DIR / "test.yaml").read_text())
    reads = []
    real_load = yaml.safe_load
    monkeypatch.setattr(
        profile_module.yaml, "safe_load", lambda text: reads.append(1) or real_load(text)
    )
    first, second = load_profile(path), load_profile(path)
    assert (
        len(reads) == 1 and first == second and first is not second
    )  # one read; each caller its own copy
    first.evaluation.trials = 99
    assert load_profile(path).evaluation.trials == 2  # a caller's change never reaches the cache
    path.write_text(
        path.read_text().replace("evaluation:\n  trials: 2", "evaluation:\n  trials: 3")
    )
    import os

    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert (
        load_profile(path).evaluation.trials == 3 and len(reads) == 2
    )  # an edited file is read again


def test_the_environment_picks_profile_and_data_dir(tmp_path, monkeypatch):
    from rewardbox.config.profile import profile_from_env

    monkeypatch.setenv("REWARDBOX_PROFILE", "test")
    monkeypatch.setenv("REWARDBOX_DATA_DIR", str(tmp_path))
    profile = profile_from_env()
    assert profile.name == "test" and profile.data_path == tmp_path.resolve()
    assert (
        load_profile("test", data_dir=tmp_path / "x").data_path == (tmp_path / "x").resolve()
    )  # argument wins
    monkeypatch.delenv("REWARDBOX_PROFILE")
    monkeypatch.delenv("REWARDBOX_DATA_DIR")
    assert profile_from_env().name == "demo" and profile_from_env().data_dir == "data"
