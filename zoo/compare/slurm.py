"""The ``slurm`` launcher: each run a SLURM job submitted through submitit, or all of them one array.

submitit pickles the run, submits a job (``sbatch``) with the partition, time, CPUs and GPUs of
the flags, and reads the record back when the job ends; its own files (the pickled run, the
job's standard output and error) are in ``<out>/slurm/<job id>/``, the run's output in the run's
directory as with any launcher. A run that fails is submitted again (``--retries``), then
recorded as failed while the others go on. Ctrl-C cancels every job (``scancel``); a job that
ends while the comparison is stopped leaves its record in its run directory, which the
comparison reads when started again (on any launcher). ``cluster="local"`` runs the jobs as
processes of this machine through submitit's local executor: the same path without a cluster.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from zoo.compare import run as runs
from zoo.compare.launch import Launcher, OnDone, require_extra
from zoo.compare.run import RunFailed, RunSpec
from zoo.errors import ConfigurationError

__all__ = ["SlurmLauncher", "slurm_parameters"]

#: How often the comparison looks at its jobs.
POLL_SECONDS = 0.5
#: How long a Ctrl-C waits for the cancelled jobs to end.
CANCEL_SECONDS = 30.0


def _job(spec: RunSpec) -> dict[str, Any] | RunFailed:
    """What a job runs: the run, its failure returned (one line) rather than raised as a traceback."""
    try:
        return runs.execute(spec)
    except RunFailed as failure:
        return failure


class SlurmLauncher(Launcher):
    """SLURM jobs through submitit.

    Args:
        folder: submitit's folder (``<out>/slurm``): one subfolder per job.
        parallel: At most this many runs at once (an array's ``slurm_array_parallelism``).
        cpus_per_run: CPUs of each job (``cpus_per_task``), the run's threads too (default 1).
        gpus_per_run: GPUs of each job (``gpus_per_node``), a whole number (default 0).
        partition: The partition (``--partition``); None for the cluster's default.
        time_min: The jobs' time limit in minutes.
        array: Submit the runs as one job array instead of one job each.
        parameters: Further ``sbatch`` settings, by submitit's names without ``slurm_``
            (``account``, ``qos``, ``mem_gb`` ...).
        cluster: ``slurm``, or ``local`` (or ``debug``) for submitit's executors on this machine.
        retries: Submissions of a failed run after its first.
        name: The jobs' name.
    """

    name = "slurm"

    def __init__(
        self,
        folder: Path,
        parallel: int | None = None,
        cpus_per_run: int | None = None,
        gpus_per_run: float | None = None,
        partition: str | None = None,
        time_min: int = 60,
        array: bool = False,
        parameters: dict[str, Any] | None = None,
        cluster: str = "slurm",
        retries: int = 1,
        name: str = "zoo-compare",
    ) -> None:
        submitit = require_extra("submitit", "slurm")
        gpus = gpus_per_run or 0
        if gpus != int(gpus):
            raise ConfigurationError(f"--gpus_per_run {gpus:g}: a SLURM job takes whole GPUs.")
        if cluster == "slurm" and shutil.which("sbatch") is None:
            raise ConfigurationError(
                "--launcher slurm submits with sbatch, which is not on this machine's PATH: run the comparison on "
                "the cluster's login node (or --slurm_cluster local to run the jobs here)."
            )
        self.threads = cpus_per_run or 1
        self.parallel = parallel
        self.array = array
        self.retries = retries
        self.executor = submitit.AutoExecutor(folder=Path(folder, "%j"), cluster=cluster)
        settings: dict[str, Any] = {
            "name": name,
            "timeout_min": time_min,
            "cpus_per_task": self.threads,
            "gpus_per_node": int(gpus),
            "nodes": 1,
            "tasks_per_node": 1,
            **({"slurm_partition": partition} if partition else {}),
            **({"slurm_array_parallelism": parallel} if array and parallel else {}),
        }
        generic = submitit.AutoExecutor._typed_parameters()  # the settings every executor takes, unprefixed
        for key, value in (parameters or {}).items():
            settings[key if key in generic else f"slurm_{key}"] = value
        try:
            self.executor.update_parameters(**settings)
        except (ValueError, TypeError, NameError) as error:  # submitit's NameError: an unknown setting
            raise ConfigurationError(f"submitit refuses the SLURM settings: {str(error).splitlines()[0]}") from None

    def run(self, specs: Sequence[RunSpec], on_done: OnDone) -> list[RunFailed]:
        tries = dict.fromkeys((spec.key for spec in specs), 0)
        waiting, running, failures = list(specs), {}, []
        try:
            if self.array and waiting:
                with self.executor.batch():
                    submitted = [(self.executor.submit(_job, spec), spec) for spec in waiting]
                running |= {job: spec for job, spec in submitted}
                waiting = []
            while waiting or running:
                while waiting and len(running) < (self.parallel or len(waiting) + len(running)):
                    spec = waiting.pop(0)
                    running[self.executor.submit(_job, spec)] = spec
                for job in [job for job in running if job.done()]:
                    spec = running.pop(job)
                    tries[spec.key] += 1
                    result = _result(job, spec)
                    if isinstance(result, RunFailed):
                        if tries[spec.key] <= self.retries:
                            waiting.insert(0, spec)
                        else:
                            failures.append(result)
                    else:
                        on_done(spec, result)
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            for job in running:
                job.cancel(check=False)
            deadline = time.monotonic() + CANCEL_SECONDS
            while time.monotonic() < deadline and not all(job.done() for job in running):
                time.sleep(POLL_SECONDS)
            raise
        return failures


def _result(job: Any, spec: RunSpec) -> dict[str, Any] | RunFailed:
    """The job's record, or a failure line: the run's own, or the job's when it ended without a
    result (killed, out of time or memory)."""
    try:
        return job.result()
    except Exception as error:  # submitit's errors carry the job's whole log: keep its first line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return RunFailed(
            f"Run {spec.key} failed: SLURM job {job.job_id} ended without a result ({first}); "
            f"its output: {job.paths.stderr}."
        )


def slurm_parameters(specs: list[str]) -> dict[str, Any]:
    """``["account=lab", "mem_gb=64"]`` -> ``{"account": "lab", "mem_gb": 64}`` (values read as YAML scalars)."""
    parameters = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"Bad --slurm_param {spec!r}: write KEY=VALUE, e.g. --slurm_param account=mylab.")
        parameters[key.strip().removeprefix("slurm_")] = yaml.safe_load(value)
    return parameters
