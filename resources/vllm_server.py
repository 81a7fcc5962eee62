"""vLLM as a Dagster resource: the evaluation and probe assets serve their checkpoint through it.

``serving.kind: vllm`` in the profile: ``policy_config(...)`` starts ``vllm serve`` on the asset's checkpoint
(``rewardbox.policy.vllm_server.serve``), yields an ``endpoint`` policy config pointed at it, and stops the
server when the block ends. Any server still running when the step ends (an exception, a terminated run) is
stopped by the resource's teardown. ``serving.kind: none`` (the default), or a machine without a GPU or
without vLLM: the profile's own policy is yielded, with a log line that says why vLLM was skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from rewardbox.config.profile import Profile
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.vllm_server import VllmServer, serve, stop_process_group, unavailable_reason


class VllmServerResource(dg.ConfigurableResource):
    """Starts and stops ``vllm serve`` for the assets that run a checkpoint's episodes.

    Attributes:
        log_dir: where server logs go; None: ``<data_dir>/<profile>/serving/``.
    """

    log_dir: str | None = None

    _servers: list[VllmServer] = PrivateAttr(default_factory=list)

    @contextmanager
    def policy_config(
        self, profile: Profile, checkpoint: str | None, log: Any = None
    ) -> Iterator[PolicyConfig]:
        """The policy config for episodes on ``checkpoint``: an endpoint at a fresh vLLM server, or ``profile.policy``.

        Args:
            profile: its ``serving`` section decides; its ``policy`` is the fallback.
            checkpoint: the checkpoint directory to serve (None or empty: nothing to serve, ``profile.policy``).
            log: Dagster's ``context.log`` (or any logger) for the skip message and the server's address.

        Raises:
            rewardbox.policy.vllm_server.ServingError: the server did not become healthy (a system error:
                the step fails with the server log's tail; nothing is scored).
        """
        config = profile.serving
        if config.kind == "none" or not checkpoint:
            yield profile.policy
            return
        reason = unavailable_reason(config)
        if reason is not None:
            _info(log, f"{reason}; episodes use policy kind {profile.policy.kind!r}", warning=True)
            yield profile.policy
            return
        log_dir = (
            Path(self.log_dir) if self.log_dir else profile.data_path / profile.name / "serving"
        )
        with serve(config, checkpoint, log_dir / f"vllm-{Path(checkpoint).name}.log") as server:
            self._servers.append(server)
            _info(
                log,
                f"vLLM serving {checkpoint} at {server.base_url} as {server.model!r} "
                f"(healthy after {server.startup_s:.1f} s): {' '.join(server.command)}",
            )
            try:
                yield server.policy_config(profile.policy)
            finally:
                if server in self._servers:  # teardown may have stopped it already
                    self._servers.remove(server)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Stop every server a block left running (the block's own exit normally has)."""
        for server in list(self._servers):
            stop_process_group(server.process, 5.0)
        self._servers.clear()


def _info(log: Any, message: str, *, warning: bool = False) -> None:
    if log is None:
        return
    (log.warning if warning and hasattr(log, "warning") else log.info)(message)
