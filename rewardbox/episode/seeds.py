"""Sampling seeds: one per (base seed, task uid, trial, agent turn).

A seed that depends only on ``seed + trial`` gives trial t of every task the
same random stream; one that depends on the batch makes a run depend on which
requests shared a batch. Here each agent turn of each (task, trial) gets its
own 63-bit seed from a keyed hash (BLAKE2b), and the local policy seeds one
generator per row from it (``rewardbox.policy.sampling``), so the same
(uid, trial) draws the same tokens whatever else runs beside it.
"""

from __future__ import annotations

import hashlib


def turn_seed(base_seed: int, uid: str, trial: int, turn: int) -> int:
    """The sampling seed of agent turn ``turn`` (0-based) of trial ``trial`` of task ``uid``.

    Args:
        base_seed: the profile's ``episode.seed``.
        uid: the task's uid.
        trial: trial index (>= 0).
        turn: agent turn index within the episode (>= 0).

    Returns:
        An int in ``[0, 2**63)``; distinct keys collide with probability ~2**-63.
    """
    key = f"{int(base_seed)}\x1f{uid}\x1f{int(trial)}\x1f{int(turn)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1
