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


def _probe_section(tmp_path, probe_yaml):
    path = tmp_path / "screening.yaml"
    path.write_text(
        (PROFILE_DIR / "test.yaml").read_text().replace("probe:\n  trials: 4", probe_yaml)
    )
    return path


@pytest.mark.parametrize(
    ("probe_yaml", "message"),
    [
        (
            "probe:\n  trials: 4\n  family_screening: {first: 0}",
            r"probe.family_screening.first.*greater than or equal to 1",
        ),
        (
            "probe:\n  trials: 4\n  family_screening: {more: -1}",
            r"probe.family_screening.more.*greater than or equal to 0",
        ),
        ("probe:\n  trials: 4\n  family_screening: {fist: 2}", r"family_screening.fist"),
        (
            "probe:\n  trials: 4\n  import_results: x.jsonl\n  family_screening: {first: 2}",
            r"family_screening.*import_results",
        ),
    ],
)
def test_family_screening_is_validated_with_errors_naming_the_key(tmp_path, probe_yaml, message):
    with pytest.raises(ValueError, match=rf"(?s)screening.yaml.*{message}"):
        load_profile(_probe_section(tmp_path, probe_yaml))


def test_family_screening_loads_and_its_absence_keeps_the_probe_hash_it_had_before(tmp_path):
    """A profile without the field hashes its probe section as it did before the field existed (campaign
    journals and asset config hashes unchanged); a profile with it hashes differently."""
    import hashlib

    from rewardbox.tasks.schema import canonical_json

    plain = load_profile("test")
    before = canonical_json({"probe": {"trials": 4, "import_results": None}})
    assert plain.section_hash("probe") == hashlib.sha256(before.encode()).hexdigest()[:16]
    assert "family_screening" not in plain.model_dump()["probe"]
    screened = load_profile(
        _probe_section(tmp_path, "probe:\n  trials: 4\n  family_screening: {first: 3}")
    )
    assert (screened.probe.family_screening.first, screened.probe.family_screening.more) == (3, 4)
    assert screened.section_hash("probe") != plain.section_hash("probe")
