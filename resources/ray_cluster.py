"""The Ray cluster as a Dagster resource: where the assets that run episodes send them.

Built on dagster-ray's ``RayResource`` (the base of its ``LocalRay`` and
``KubeRayCluster``): its lifecycle (create, wait, connect, cleanup at the end of
the step, also when the run is terminated), ``EnvVar`` resolution in
``ray_init_options`` and the tags it injects are reused; this subclass adds a
plain ``address`` (any running cluster, not only KubeRay) and connects only
when the profile asks for ``executor.kind: ray``, so the laptop default never
starts Ray.

Cancellation: terminating a Dagster run interrupts the step; the executor's
session cancels its outstanding Ray calls and stops its worker actors, then
this resource's cleanup disconnects (``ray.shutdown()`` for the embedded one).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import dagster as dg
from dagster_ray import RayResource
from pydantic import Field, PrivateAttr

from rewardbox.config.profile import Profile
from rewardbox.episode.executor import EpisodeExecutor, build_executor


class RayClusterResource(RayResource):
    """Ray for the episode executor: embedded by default, a real cluster by ``address``.

    Attributes:
        address: a running cluster (``ray://head:10001``, ``auto``); None uses the
            profile's ``executor.address``, and when that is None too an embedded
            ``ray.init(num_cpus=executor.num_cpus)`` in the step process.
        runtime_env: Ray's ``runtime_env`` for a real cluster (``working_dir``,
            ``pip``, ``env_vars``); merged over the profile's ``executor.runtime_env``.

    Connecting is deferred to :meth:`executor` whatever ``lifecycle.connect``
    says: only ``executor.kind: ray`` connects.
    """

    address: str | None = None
    runtime_env: dict[str, Any] = Field(default_factory=dict)

    _profile: Profile | None = PrivateAttr(default=None)
    _executor: EpisodeExecutor | None = PrivateAttr(default=None)

    @property
    def host(self) -> str:
        return (urlparse(self.address).hostname if self.address else None) or "127.0.0.1"

    @property
    def name(self) -> str:
        return "rewardbox-ray"

    @property
    def ray_address(self) -> str | None:  # type: ignore[override]
        return self.address

    @property
    def created(self) -> bool:
        return True

    @property
    def ready(self) -> bool:
        return True

    def init_options(self, profile: Profile) -> dict[str, Any]:
        """The ``ray.init`` keyword arguments for ``profile`` (address, runtime_env, num_cpus)."""
        from dagster_ray.utils import _process_dagster_env_vars

        address = self.address or profile.executor.address
        options = _process_dagster_env_vars(dict(self.ray_init_options))
        runtime_env = {**profile.executor.runtime_env, **self.runtime_env, **options.pop("runtime_env", {})}
        env_vars = {**runtime_env.get("env_vars", {}), **self.get_env_vars_to_inject()}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        options.update(address=address, runtime_env=runtime_env or None)
        if address is None:
            options.setdefault("num_cpus", profile.executor.num_cpus)
            options.setdefault("include_dashboard", False)
        return options

    def _connect(self, context: Any) -> None:
        if self._profile is not None:  # at resource set-up there is no profile yet: connect later
            super()._connect(context)

    def connect(self, context: Any) -> Any:
        """``ray.init`` with :meth:`init_options` of the profile given to :meth:`executor`."""
        import ray

        self._context = ray.init(**self.init_options(self._profile))
        return self._context

    def on_cleanup(self, context: Any, *, deleted: bool) -> None:
        """Nothing was created, so nothing is deleted (the base class would log a deletion)."""

    def executor(self, profile: Profile, context: dg.InitResourceContext | Any = None) -> EpisodeExecutor:
        """The episode executor the profile names; ``ray`` connects (once per step) first.

        Args:
            profile: its ``executor`` and ``episode.concurrency`` (the bound on open sandboxes).
            context: the asset's context (for the connection log line); optional.

        Raises:
            ConnectionError / RuntimeError from ``ray.init``: the cluster cannot be reached.
        """
        if profile.executor.kind == "local":
            return build_executor(profile.executor, profile.episode.concurrency)
        if self._executor is None:
            self._profile = profile
            if self.connected:
                pass
            elif getattr(context, "log", None) is not None:
                self._connect(context)  # dagster-ray's path: logs the connection into the run
            else:
                self.connect(context)
            self._executor = build_executor(profile.executor, profile.episode.concurrency)
        return self._executor

    def cleanup(self, context: dg.InitResourceContext, exception: BaseException | None) -> None:
        """Stop the executor's gauge, then disconnect (``ray.shutdown()``) if this resource connected."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        super().cleanup(context, exception)
