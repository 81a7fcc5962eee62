"""Dagster's default run launcher plus a run-worker health check, so run monitoring can fail dead runs.

Dagster's run monitoring (``run_monitoring`` in ``dagster.yaml``) marks a *started* run failed when
the run launcher reports its worker dead; the default launcher (runs as local processes) reports
nothing, so a run whose process was SIGKILLed (a killed ``dagster job execute``, a ``dagster dev``
that died with its code server) stays "Started" for ever and, with ``max_concurrent_runs: 1``,
blocks the run queue. :class:`LocalProcessRunLauncher` is the default launcher with that check:
the run's process is the one that wrote the run's ``RUN_START`` event (Dagster records its pid);
it is alive when a process with that pid exists and was created no later than the event (a
reused pid belongs to a younger process). docs/operations-storage.md, "A killed run".

Pids mean something on one machine only: ``assume_local`` (default true) says that every run of the
instance runs on the machine of its daemon, as with the SQLite instance and ``make dev-postgres``.
Set it false for a Postgres instance shared by several machines; runs are then never reported dead
by pid (``max_runtime_seconds`` still applies).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psutil
from dagster import DagsterEventType, DagsterRun, Field
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus
from dagster._serdes import ConfigurableClassData

START_SLACK_S = 2.0
"""A live process may have been created this long after its RUN_START event's timestamp (clock rounding)."""


class LocalProcessRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run-worker health check reads the run process's pid.

    Args:
        assume_local: every run of this instance runs on this machine (see the module docstring).
    """

    def __init__(self, inst_data: ConfigurableClassData | None = None, assume_local: bool = True):
        super().__init__(inst_data=inst_data)
        self.assume_local = assume_local

    @classmethod
    def config_type(cls) -> dict:
        return {"assume_local": Field(bool, is_required=False, default_value=True)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]):
        return cls(inst_data=inst_data, assume_local=config_value.get("assume_local", True))

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        """RUNNING while the run's process lives (or it cannot be told), FAILED when it is gone.

        Returns:
            ``WorkerStatus.FAILED`` with the pid in the message when no process with the pid of the
            run's ``RUN_START`` event exists, or a younger one has it; ``RUNNING`` otherwise,
            including runs with no ``RUN_START`` yet (the start timeout covers those) and every
            run when ``assume_local`` is false.
        """
        if not self.assume_local:
            return CheckRunHealthResult(
                WorkerStatus.RUNNING, "not checked: runs may be on other machines"
            )
        records = self._instance.get_records_for_run(
            run.run_id, of_type=DagsterEventType.RUN_START
        ).records
        event = records[-1].event_log_entry if records else None
        pid = (
            event.dagster_event.pid
            if event is not None and event.dagster_event is not None
            else None
        )
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no RUN_START event with a pid yet")
        try:
            process = psutil.Process(pid)
            created_s = process.create_time()
            if process.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
                return CheckRunHealthResult(
                    WorkerStatus.FAILED, f"the run's process (pid {pid}) has exited"
                )
        except psutil.NoSuchProcess:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"the run's process (pid {pid}) is gone"
            )
        if created_s > event.timestamp + START_SLACK_S:
            return CheckRunHealthResult(
                WorkerStatus.FAILED,
                f"the run's process (pid {pid}) is gone; the pid now belongs to a newer process",
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING, f"the run's process (pid {pid}) is alive")
