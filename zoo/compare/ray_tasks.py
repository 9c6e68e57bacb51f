"""The ``ray`` launcher: each run a Ray task with its CPUs and GPUs, on a Ray started for the
comparison or on a running cluster (``--ray_address``).

Ray places the tasks where their resources are free (and gives each its GPUs through
``CUDA_VISIBLE_DEVICES``), retries a failed run (``max_retries`` with ``retry_exceptions``: the
run starts again from a clean directory), and after its last try the run is recorded as failed
while the others go on. Ctrl-C cancels every task (``ray.cancel``: the task's wait is
interrupted and it stops its child); a cancelled run has no record, so the comparison started
again, on any launcher, runs it afresh. The runs' directories must be on a file system that
every node shares, and each node must have the zoo installed.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Sequence
from typing import Any

from zoo.compare import run as runs
from zoo.compare.devices import check_gpus_per_run
from zoo.compare.launch import Launcher, OnDone, require_extra
from zoo.compare.run import RunFailed, RunSpec
from zoo.errors import ConfigurationError

__all__ = ["RayLauncher"]

#: How long one wait for a finished run lasts: Ctrl-C is seen between two waits.
WAIT_SECONDS = 0.5
#: How long a Ctrl-C waits for the cancelled tasks to stop their children.
CANCEL_SECONDS = 30.0


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``HOST:PORT`` (or ``ray://HOST:PORT``) nothing answers at: Ray itself would keep
    retrying for minutes. ``auto`` and other forms are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ConfigurationError(
            f"No Ray cluster answers at --ray_address {address} ({error.strerror or error}): start one there "
            "(ray start --head), give the address its head printed, or leave --ray_address out to start Ray here."
        ) from None


class RayLauncher(Launcher):
    """Ray tasks, on a Ray started here or on a running cluster.

    Args:
        address: A running cluster's address (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``);
            None starts a Ray on this machine for the comparison (or uses the one this process
            has already started).
        parallel: At most this many runs at once (default: as many as the cluster's resources hold).
        cpus_per_run: CPUs of each run, its threads too (default 1).
        gpus_per_run: GPUs of each run, a share ``1/N`` of one for N runs on each (default: 1 on
            a cluster with GPUs, else 0).
        retries: Tries after a run's first failure.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        parallel: int | None = None,
        cpus_per_run: int | None = None,
        gpus_per_run: float | None = None,
        retries: int = 1,
    ) -> None:
        self.ray = require_extra("ray", "ray")
        self.address = address
        self.limit = parallel
        self.threads = cpus_per_run or 1
        self.gpus_per_run = gpus_per_run
        self.retries = retries
        self.parallel: int | None = parallel
        self._started = False

    def __enter__(self) -> RayLauncher:
        ray = self.ray
        if not ray.is_initialized():
            if self.address:
                _check_reachable(self.address)
            # Unless the environment says otherwise, a Ray started for a comparison reports no
            # usage statistics to its makers, and runs its tasks (the runs) at this process's
            # priority, as the local launcher does: Ray lowers its workers' (nice 15) by default.
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            os.environ.setdefault("RAY_worker_niceness", "0")
            try:
                ray.init(
                    address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
                )
            except ConnectionError as error:
                raise ConfigurationError(
                    f"Could not join the Ray cluster at --ray_address {self.address}: {str(error).splitlines()[0]}"
                ) from None
            self._started = True
        self._fit_resources()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False

    def _fit_resources(self) -> None:
        """The GPUs per run (by default), and how many runs the cluster holds at once; refuse a
        run that no node has the CPUs and GPUs for (Ray would wait for such a node forever)."""
        nodes = [node["Resources"] for node in self.ray.nodes() if node.get("Alive")]
        if self.gpus_per_run is None:
            self.gpus_per_run = 1.0 if any(node.get("GPU", 0) for node in nodes) else 0.0
        check_gpus_per_run(self.gpus_per_run)
        cpus, gpus = self.threads, self.gpus_per_run
        fits = [node for node in nodes if node.get("CPU", 0) >= cpus and node.get("GPU", 0) >= gpus]
        if not fits:
            largest = max(nodes, key=lambda node: (node.get("GPU", 0), node.get("CPU", 0)), default={})
            raise ConfigurationError(
                f"A run asks for {cpus} CPU(s) and {gpus:g} GPU(s) (--cpus_per_run, --gpus_per_run), more than any "
                f"node of the Ray cluster has (the largest: {largest.get('CPU', 0):g} CPUs, {largest.get('GPU', 0):g} "
                "GPUs): ask for less, or add a node that has them."
            )
        capacity = sum(
            min(int(node.get("CPU", 0) // cpus), int(node.get("GPU", 0) // gpus) if gpus else math.inf) for node in fits
        )
        self.parallel = min(capacity, self.limit or capacity)

    def run(self, specs: Sequence[RunSpec], on_done: OnDone) -> list[RunFailed]:
        ray = self.ray
        task = ray.remote(runs.execute)
        resources = {
            "num_cpus": self.threads,
            "num_gpus": self.gpus_per_run,
            "max_retries": self.retries,
            "retry_exceptions": [RunFailed],
        }
        waiting, running, failures = list(specs), {}, []
        try:
            while waiting or running:
                while waiting and len(running) < (self.limit or len(waiting) + len(running)):
                    spec = waiting.pop(0)
                    running[task.options(name=f"zoo compare {spec.key}", **resources).remote(spec)] = spec
                ready, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_SECONDS)
                for ref in ready:
                    spec = running.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as error:
                        failures.append(_failure(spec, error))
                        continue
                    on_done(spec, record)
        except KeyboardInterrupt:
            for ref in running:
                ray.cancel(ref)
            ray.wait(list(running), num_returns=len(running), timeout=CANCEL_SECONDS)
            raise
        return failures


def _failure(spec: RunSpec, error: Any) -> RunFailed:
    """The run's own failure line where it failed (a child exited with an error), else what Ray says."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, RunFailed):
        return cause
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return RunFailed(f"Run {spec.key} failed on Ray ({type(error).__name__}): {first}")
