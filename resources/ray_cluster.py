"""The Ray cluster as a Dagster resource: where the assets that run episodes send them.

Built on dagster-ray's ``RayResource`` (the base of its ``LocalRay`` and
``KubeRayCluster``): its lifecycle (create, wait, connect, cleanup at the end of
the step, also when the run is terminated), ``EnvVar`` resolution in
``ray_init_options`` and the tags it injects are reused; this subclass adds a
plain ``address`` (any running cluster, not only KubeRay) and connects only
when the profile asks for ``executor.kind: ray``, so the laptop default never
starts Ray.

Ray jobs (the verl GRPO backend): :meth:`RayClusterResource.job_client` gives
Ray's ``JobSubmissionClient`` for ``job_address`` (a cluster's dashboard,
``http://head:8265``), or, when none is set, for a local Ray head that this
resource starts in the step process with its dashboard (the job server) on a
free port, and shuts down at cleanup.

Cancellation: terminating a Dagster run interrupts the step; the executor's
session cancels its outstanding Ray calls and stops its worker actors, then
this resource's cleanup disconnects (``ray.shutdown()`` for the embedded one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any
from urllib.parse import urlparse

import dagster as dg
from dagster_ray import RayResource
from pydantic import Field, PrivateAttr

from rewardbox import strict_json
from rewardbox.config.profile import Profile
from rewardbox.episode.executor import EpisodeExecutor, build_executor
from rewardbox.training.verl.ray_client import JobClient, job_client

LOCAL = "local"
RAY_ADDRESS_ENV = "RAY_ADDRESS"


class RayClusterResource(RayResource):
    """Ray for the episode executor: embedded by default, a real cluster by ``address``.

    Attributes:
        address: a running cluster (``ray://head:10001``, ``auto``); None uses the
            profile's ``executor.address``, and when that is None too (or ``local``) a
            private ``ray.init(address="local", num_cpus=executor.num_cpus)`` in the step
            process, whatever ``RAY_ADDRESS`` says (see :meth:`init_options`).
        runtime_env: Ray's ``runtime_env`` for a real cluster (``working_dir``,
            ``pip``, ``env_vars``); merged over the profile's ``executor.runtime_env``.
        job_address: the job server of a running cluster (its dashboard,
            ``http://head:8265``) for Ray jobs; None starts a local head (see :meth:`job_client`).

    Connecting is deferred to :meth:`executor` whatever ``lifecycle.connect``
    says: only ``executor.kind: ray`` connects.
    """

    address: str | None = None
    runtime_env: dict[str, Any] = Field(default_factory=dict)
    job_address: str | None = None

    _profile: Profile | None = PrivateAttr(default=None)
    _cluster: dict[str, Any] | None = PrivateAttr(default=None)
    _executor: EpisodeExecutor | None = PrivateAttr(default=None)

    @property
    def cluster(self) -> dict[str, Any] | None:
        """The cluster this resource joined (:func:`joined_cluster`), None before it connects."""
        return self._cluster

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
        """The ``ray.init`` keyword arguments for ``profile`` (address, runtime_env, num_cpus).

        Which cluster (decided here, whatever the environment says):

        - no address (``executor.address: null``, the default) or ``local``: a private Ray
          started in this process, ``address="local"`` with ``executor.num_cpus`` CPUs and no
          dashboard; ``RAY_ADDRESS`` and any ``ray start`` head on the machine are ignored
          (:meth:`connect` hides ``RAY_ADDRESS`` from the call);
        - ``auto``: the cluster Ray discovers (``RAY_ADDRESS``, else the latest ``ray start``
          head of this machine), Ray's own rule;
        - any other address (``ray://head:10001``, ``head:6379``): that cluster.

        Joining a cluster passes neither ``num_cpus`` nor ``num_gpus`` (Ray refuses them there:
        "When connecting to an existing cluster, num_cpus and num_gpus must not be provided").
        """
        from dagster_ray.utils import _process_dagster_env_vars

        address = self.address or profile.executor.address
        options = _process_dagster_env_vars(dict(self.ray_init_options))
        runtime_env = {
            **profile.executor.runtime_env,
            **self.runtime_env,
            **options.pop("runtime_env", {}),
        }
        env_vars = {**runtime_env.get("env_vars", {}), **self.get_env_vars_to_inject()}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        options.update(runtime_env=runtime_env or None)
        if address in (None, LOCAL):
            options.update(address=LOCAL)
            options.setdefault("num_cpus", profile.executor.num_cpus)
            options.setdefault("include_dashboard", False)
        else:
            options.update(address=address)
            for key in ("num_cpus", "num_gpus"):
                options.pop(key, None)
        return options

    def _connect(self, context: Any) -> None:
        if self._profile is not None:  # at resource set-up there is no profile yet: connect later
            super()._connect(context)

    def connect(self, context: Any) -> Any:
        """``ray.init`` with :meth:`init_options` of the profile given to :meth:`executor`; records :attr:`cluster`."""
        import ray

        options = self.init_options(self._profile)
        with _private_ray(options["address"] == LOCAL):
            self._context = ray.init(**options)
        self._cluster = joined_cluster(options["address"])
        return self._context

    def on_cleanup(self, context: Any, *, deleted: bool) -> None:
        """Nothing was created, so nothing is deleted (the base class would log a deletion)."""

    def executor(
        self, profile: Profile, context: dg.InitResourceContext | Any = None
    ) -> EpisodeExecutor:
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
        _record_cluster(context, self.cluster)
        return self._executor

    def job_client(self, profile: Profile, context: Any = None) -> JobClient:
        """Ray's job client for ``job_address``, else for a local head started here (once per step).

        The local head is an embedded ``ray.init`` with ``executor.num_cpus`` CPUs, its
        GPUs as Ray detects them, and its dashboard on a free port of 127.0.0.1; cleanup
        shuts it down (and with it any job still on it).

        Raises:
            ConnectionError: the job server did not answer within ``verl.connect_timeout_s``.
            RuntimeError: Ray is already connected in this process without a dashboard.
        """
        verl = profile.verl
        address = self.job_address
        if address is None:
            address = self._local_job_server(profile, context)
        if getattr(context, "log", None) is not None:
            context.log.info(f"Ray job server: {address}")
        return job_client(address, verl.request_timeout_s, verl.connect_timeout_s)

    def _local_job_server(self, profile: Profile, context: Any) -> str:
        import ray

        if self._context is None and not ray.is_initialized():
            with _private_ray(True):
                self._context = ray.init(
                    address=LOCAL,
                    num_cpus=profile.executor.num_cpus,
                    include_dashboard=True,
                    dashboard_host="127.0.0.1",
                    dashboard_port=_free_port(),
                    runtime_env=self.runtime_env or None,
                )
            self._cluster = joined_cluster(LOCAL)
        _record_cluster(context, self.cluster)
        url = getattr(self._context, "dashboard_url", None)
        if not url:
            raise RuntimeError(
                "Ray is connected in this process without a dashboard, so it takes no jobs: "
                "set the ray_cluster resource's job_address (REWARDBOX_RAY_JOB_ADDRESS)"
            )
        return url if "://" in url else f"http://{url}"

    def cleanup(self, context: dg.InitResourceContext, exception: BaseException | None) -> None:
        """Stop the executor's gauge, then disconnect (``ray.shutdown()``) if this resource connected."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        super().cleanup(context, exception)


@contextlib.contextmanager
def _private_ray(private: bool):
    """Around a ``ray.init``: hide ``RAY_ADDRESS`` from one that starts a private Ray, keep SIGTERM's handler.

    ``ray.init(address="local")`` already starts a new cluster, but the processes it starts
    (GCS, raylet, dashboard) inherit the environment and read ``RAY_ADDRESS`` themselves.
    ``ray.init`` also replaces the process's SIGTERM handler (``sys.exit``, then Ray's native
    failure handler), which would pre-empt Dagster's: a terminated run would die before its
    verl job is stopped and waited for. The handler found before is put back after.
    """
    saved = os.environ.pop(RAY_ADDRESS_ENV, None) if private else None
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ[RAY_ADDRESS_ENV] = saved
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def joined_cluster(requested: str | None) -> dict[str, Any]:
    """The cluster ``ray.init`` joined: ``requested`` address, GCS address, alive nodes, total resources."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    resources = {
        k: v
        for k, v in ray.cluster_resources().items()
        if k in ("CPU", "GPU", "memory", "object_store_memory")
    }
    return {
        "requested_address": requested,
        "gcs_address": ray.get_runtime_context().gcs_address,
        "nodes": len(nodes),
        "resources": resources,
    }


def _record_cluster(context: Any, cluster: dict[str, Any] | None) -> None:
    """The joined cluster into the asset's metadata (``ray_cluster``) and the run's log."""
    if cluster is None or context is None:
        return
    if getattr(context, "log", None) is not None:
        context.log.info(f"Ray cluster: {strict_json.dumps(cluster)}")
    if hasattr(context, "add_output_metadata"):
        context.add_output_metadata({"ray_cluster": dg.MetadataValue.json(cluster)})


def _free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
