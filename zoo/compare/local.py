"""The ``local`` launcher: runs as child processes of this one, ``--parallel`` at a time, the
cores split between them, each on its own GPUs where the machine has some (:mod:`zoo.compare.devices`).

The first run that fails stops the comparison: no further run starts, and the failure is raised
once the running ones end. Ctrl-C reaches the children too (the terminal sends it to them all).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from zoo.compare import run as runs
from zoo.compare.devices import DevicePool, check_gpus_per_run, visible_gpus
from zoo.compare.launch import Launcher, OnDone
from zoo.compare.run import RunFailed, RunSpec
from zoo.errors import ConfigurationError

__all__ = ["LocalLauncher", "run_all"]

T = TypeVar("T")


class LocalLauncher(Launcher):
    """Child processes on this machine.

    Args:
        parallel: Runs at once; by default 1 on the CPU, and as many as the GPUs hold when runs
            are placed on GPUs.
        cpus_per_run: Threads of each run (default: the cores this process may use, split between
            the runs at once).
        gpus_per_run: GPUs of each run, or a share ``1/N`` of one (default: 1 where GPUs are
            visible, else 0; 0 runs on the CPU and hides the GPUs from the runs).
        gpus: The devices to place runs on (default: the visible ones, :func:`visible_gpus`).
    """

    name = "local"

    def __init__(
        self,
        parallel: int | None = None,
        cpus_per_run: int | None = None,
        gpus_per_run: float | None = None,
        gpus: Sequence[str] | None = None,
    ) -> None:
        devices = list(visible_gpus() if gpus is None else gpus)
        gpus_per_run = (1.0 if devices else 0.0) if gpus_per_run is None else gpus_per_run
        check_gpus_per_run(gpus_per_run)
        if gpus_per_run and not devices:
            raise ConfigurationError(
                f"--gpus_per_run {gpus_per_run:g}, but this machine shows no GPU: leave it out to run on the CPU."
            )
        self.pool = DevicePool(devices, gpus_per_run) if gpus_per_run else None
        self.hide_gpus = bool(devices) and not gpus_per_run
        capacity = self.pool.capacity if self.pool else None
        self.parallel = min(parallel or capacity or 1, capacity or parallel or 1)
        self.threads = cpus_per_run or max(1, len(os.sched_getaffinity(0)) // self.parallel)

    def run(self, specs: Sequence[RunSpec], on_done: OnDone) -> list[RunFailed]:
        run_all(lambda spec: on_done(spec, self._execute(spec)), [(spec,) for spec in specs], self.parallel)
        return []

    def _execute(self, spec: RunSpec) -> dict[str, Any]:
        if self.pool is None:
            return runs.execute(spec, {"CUDA_VISIBLE_DEVICES": ""} if self.hide_gpus else None)
        devices = self.pool.acquire()
        try:
            return runs.execute(spec, {"CUDA_VISIBLE_DEVICES": ",".join(devices)})
        finally:
            self.pool.release(devices)


def run_all(function: Callable[..., T], jobs: list[tuple[Any, ...]], parallel: int) -> list[T]:
    """``function(*job)`` for every job, ``parallel`` at a time, results in order. After a failure
    no further job starts (nor after Ctrl-C); the failure is raised once the running ones end."""
    failed = threading.Event()

    def guarded(*job: Any) -> T | None:
        if failed.is_set():
            return None
        try:
            return function(*job)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(parallel) as pool:
        futures = [pool.submit(guarded, *job) for job in jobs]
        try:
            for future in as_completed(futures):
                future.result()
        except BaseException:  # a failed run, or Ctrl-C here: start nothing more
            failed.set()
            raise
    return [future.result() for future in futures]
