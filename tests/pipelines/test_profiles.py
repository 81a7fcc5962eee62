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
    bad.write_text((PROFILE_DIR / "test.yaml").read_text().replace("probe:\n  trials: 4", "probe:\n  trails: 4"))
    with pytest.raises(ValueError, match=r"(?s)bad.yaml.*probe.trails.*Extra inputs are not permitted"):
        load_profile(bad)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(FileNotFoundError, match="demo"):
        load_profile("nope")
