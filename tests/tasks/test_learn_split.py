"""The `learn` profile's split (docs/learning_run.md): what its learning result stands on.

In distribution means held-out *instances* of the trained families, disjoint by uid and content
hash; out of distribution means a domain never trained on; every benchmark domain is in one split.
"""

from __future__ import annotations

import re

from rewardbox.config.profile import load_profile
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.generated import GENERATED_TAG
from rewardbox.tasks.sources import load_benchmark, load_candidates


def _family(uid: str) -> str:
    return re.sub(r"_g?\d+$", "", uid.split(":")[-1])


def test_learn_split_is_held_out_instances_of_trained_families_plus_an_untrained_domain():
    profile = load_profile("learn")
    candidates, benchmark = load_candidates(profile.tasks), load_benchmark(profile.tasks)
    assert not candidates.excluded, "a listed candidate is a benchmark task (uid or content hash)"
    assert check_disjoint(candidates.tasks, benchmark.tasks) == []
    assert (len(candidates.tasks), len(benchmark.tasks)) == (58 + 58, 57 + 16)

    splits = profile.report.splits
    by_split = {
        name: [t for t in benchmark.tasks if t.domain in domains]
        for name, domains in splits.items()
    }
    assert sum(len(tasks) for tasks in by_split.values()) == len(benchmark.tasks), (
        "a benchmark domain in no split"
    )
    trained_domains = {t.domain for t in candidates.tasks}
    assert set(splits["in_distribution"]) == trained_domains
    assert not set(splits["out_of_distribution"]) & trained_domains

    trained = {_family(t.uid) for t in candidates.tasks}
    held_out = {_family(t.uid) for t in by_split["in_distribution"]}
    assert held_out == trained, "every trained family has held-out instances, and only those"
    hashes = {t.content_hash() for t in candidates.tasks}
    assert not any(t.content_hash() in hashes for t in benchmark.tasks)


def test_learn_profile_holds_out_at_least_45_in_distribution_tasks_disjoint_by_content_from_training():
    """Issue #23: >= 45 in-distribution held-out tasks (power ~0.88 at 45 x 3), fixed in files, G = 8, and no
    training task (shipped or generated) shares a content hash with any of them."""
    profile = load_profile("learn")
    candidates, benchmark = load_candidates(profile.tasks), load_benchmark(profile.tasks)
    in_distribution = [
        t for t in benchmark.tasks if t.domain in profile.report.splits["in_distribution"]
    ]
    assert len(in_distribution) >= 45 and profile.grpo.group_size == 8
    generated = [t for t in candidates.tasks if GENERATED_TAG in t.tags]
    assert len(generated) == 58 and {_family(t.uid) for t in generated} == {
        _family(t.uid) for t in candidates.tasks
    }
    held_out = {t.content_hash(): t.uid for t in benchmark.tasks}
    assert [t.uid for t in candidates.tasks if t.content_hash() in held_out] == []
    assert len({t.content_hash() for t in candidates.tasks}) == len(
        candidates.tasks
    )  # no twin inside the pool
    for source in profile.tasks.benchmark:
        assert source.generate is None and source.test_list and source.test_list.endswith(".yaml")


def test_learn_family_screening_probes_the_shipped_candidates_first_in_every_family():
    """``probe.family_screening: {first: 2, more: 2}``: round 1 of every family is its two shipped
    candidates (the sources list them first) and round 2 adds its two generated instances."""
    from rewardbox.selection.family_screening import supply_from

    profile = load_profile("learn")
    screening = profile.probe.family_screening
    assert (screening.first, screening.more) == (2, 2)
    families, supply = supply_from(load_candidates(profile.tasks).tasks)
    assert len(families) == 29
    for family in families:
        first = supply(family, screening.first)
        grown = supply(family, screening.first + screening.more)[screening.first :]
        assert [GENERATED_TAG in t.tags for t in first] == [False, False], family
        assert [GENERATED_TAG in t.tags for t in grown] == [True, True], family
