"""The reuse canary: a reused server process is trusted only once it was checked against a fresh one.

A server process that serves an episode after another (a warm pool process) or that was forked
from a template (``rewardbox.sandbox.template``) is *reused*: its state right after
``__reserved__init`` should equal a fresh process's for the same config, but only the server's own
code can make it so. The first reused episode of each server in a campaign is the canary
(docs/external_servers.md, "Reuse and its canary"):

1. after ``__reserved__init`` the reused process's effects are read;
2. a fresh process of the same server is started and initialised with the same arguments, and its
   effects are read;
3. their ``result_db_hash`` and ``golden_db_hash`` are compared (each server hashes its own way, so
   only a server's hash is compared with the same server's hash). Equal: reuse is trusted for the
   rest of the campaign. Different: reuse is retired for that server, with one warning; the
   episode continues on the fresh process, so its result is correct either way.

A server whose effects carry neither hash cannot be checked: reuse stays off for it unless its
servers.yaml entry says ``reuse_unchecked: true``, which trusts its reuse without a canary. While one episode runs a server's canary, the
others get fresh processes for that server.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

logger = logging.getLogger(__name__)

HASH_KEYS = ("result_db_hash", "golden_db_hash")
Claim = Literal["canary", "trusted", "fresh"]


def canary_verdict(
    reused: dict[str, Any], fresh: dict[str, Any], *, unchecked_ok: bool = False
) -> str | None:
    """Why the reused process's state right after init cannot be trusted, or None when it can.

    Args:
        reused: the reused process's ``__reserved__geteffects`` JSON right after init.
        fresh: a fresh process's, for the same init arguments.
        unchecked_ok: the servers.yaml entry allows reuse without hashes (``reuse_unchecked``).

    Returns:
        None (trusted) or a one-line reason naming the differing hash, or the missing hashes.
    """
    keys = [k for k in HASH_KEYS if k in reused or k in fresh]
    if not keys:
        if unchecked_ok:
            return None
        return (
            "its effects report no result_db_hash/golden_db_hash, so a reused process cannot be checked "
            "against a fresh one (set reuse_unchecked: true on the server in servers.yaml to reuse anyway)"
        )
    differs = [k for k in keys if reused.get(k) != fresh.get(k)]
    if differs:
        return (
            f"right after __reserved__init a reused process reports {differs[0]} {reused.get(differs[0])!r} "
            f"but a fresh process {fresh.get(differs[0])!r}: its init keeps state from earlier episodes"
        )
    return None


class ReuseLedger:
    """Per server of one campaign: unchecked, checking, trusted or retired reuse.

    Attributes:
        retired: ``{server: reason}`` for every server whose reuse was retired.
    """

    def __init__(self) -> None:
        self._status: dict[str, str] = {}
        self.retired: dict[str, str] = {}

    def claim(self, name: str, *, unchecked: bool = False) -> Claim:
        """What a reused process of ``name`` may do in the episode asking now.

        Args:
            name: the server.
            unchecked: its servers.yaml entry says ``reuse_unchecked: true``: trusted without a canary.

        Returns:
            ``"canary"`` (the first reuse: serve, and be checked), ``"trusted"`` (serve), or
            ``"fresh"`` (do not reuse: retired, or another episode is running the canary).
        """
        status = self._status.get(name, "unchecked")
        if unchecked and status != "retired":
            self._status[name] = status = "trusted"
        if status == "unchecked":
            self._status[name] = "checking"
            return "canary"
        return "trusted" if status == "trusted" else "fresh"

    def allowed(self, name: str) -> bool:
        """False once reuse of ``name`` is retired."""
        return self._status.get(name) != "retired"

    def passed(self, name: str) -> None:
        """The canary of ``name`` matched a fresh process: trust reuse from now on."""
        self._status[name] = "trusted"

    def abandon(self, name: str) -> None:
        """The canary episode of ``name`` faulted before its check: the next reuse checks again."""
        if self._status.get(name) == "checking":
            self._status[name] = "unchecked"

    def retire(self, name: str, reason: str) -> None:
        """Stop reusing ``name`` for the rest of the campaign; warn once."""
        if self._status.get(name) == "retired":
            return
        self._status[name] = "retired"
        self.retired[name] = reason
        logger.warning(
            "server %s: reuse retired, every episode gets a fresh process from now on: %s",
            name,
            reason,
        )

    def report(self) -> dict[str, str]:
        """``{server: status}`` for every server seen (``unchecked``/``checking``/``trusted``/``retired``)."""
        return dict(self._status)
