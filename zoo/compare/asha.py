"""``--launcher ray --scheduler asha``: the runs as Ray Tune trials under the ASHA scheduler, which
stops the runs that cannot win.

ASHA (asynchronous successive halving; Li et al., 2020, "A System for Massively Parallel
Hyperparameter Tuning") sets rungs at ``grace * rf ** k`` validations; a run that reaches a rung
goes on only if its metric there is among the best ``1 / rf`` of the runs that reached the rung
before it, so a run is never stopped for lack of company and a late run is held to the early
ones' standard. Each trial runs its run as every launcher does (:func:`zoo.compare.run.execute`,
the fit with :class:`zoo.compare.progress.ValidationLog` added), reads each validation's metrics
as the fit writes them and reports them to Tune. A run ASHA stops ends its fit (the trial's
process goes, and the fit stops when its parent has gone) and is recorded as stopped, with the
last validation it reached and no evaluation: the comparison started again does not run it
again, and the report lists it apart. Its retries are Tune's (``FailureConfig.max_failures``).

Stopping runs early suits a search for the best setting; the report's means and intervals are
then over the runs that were not stopped, which favour the settings that looked good early.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.compare import run as runs
from zoo.compare.launch import OnDone, require_extra
from zoo.compare.progress import read_progress
from zoo.compare.ray_tasks import RayLauncher, _failure
from zoo.compare.run import RunFailed, RunSpec
from zoo.errors import ConfigurationError

__all__ = ["AshaLauncher"]

#: Added to every fit so that the trial reads its validations as they come.
PROGRESS_CALLBACK = "--trainer.callbacks+=zoo.compare.progress.ValidationLog"


def _trial(config: dict[str, Any], specs: list[RunSpec], metric: str) -> None:
    """A Tune trial: run ``specs[config["run"]]``, reporting each validation's ``metric`` to Tune."""
    from ray import tune

    spec = specs[config["run"]]
    reported = 0

    def report_new_validations() -> None:
        nonlocal reported
        validations = read_progress(spec.directory / "fit")
        for validation in validations[reported:]:
            if metric in validation:
                tune.report({metric: validation[metric], "step": validation["step"]})
        reported = len(validations)

    runs.execute(spec, while_fitting=report_new_validations)


class AshaLauncher(RayLauncher):
    """Ray Tune trials under ASHA (a :class:`RayLauncher` in every other way).

    Args:
        grace: Validations every run gets before it can be stopped (the first rung).
        reduction: ASHA's reduction factor: the best ``1 / reduction`` of a rung go on.
        storage: Where Tune keeps the experiment's state (``<out>/tune``).
        kwargs: :class:`RayLauncher`'s arguments.

    Attributes:
        metric: The validation metric ASHA compares (a ``val/`` metric the fit logs); set before
            the runs start (the command line sets the one the model's checkpoints monitor).
        mode: ``min`` or ``max``: whether lower or higher ``metric`` is better.
    """

    fit_flags = (PROGRESS_CALLBACK,)

    def __init__(self, grace: int, reduction: float, storage: Path, **kwargs: Any) -> None:
        if grace < 1 or reduction <= 1:
            raise ConfigurationError(
                f"--ray_asha_grace must be at least 1 and --ray_asha_reduction more than 1; got {grace} and {reduction:g}."
            )
        super().__init__(**kwargs)
        self.tune = require_extra("ray.tune", "ray")
        self.grace, self.reduction, self.storage = grace, reduction, storage
        self.metric: str | None = None
        self.mode = "min"

    def run(self, specs: Sequence[RunSpec], on_done: OnDone) -> list[RunFailed]:
        if all(spec.evaluate is None for spec in specs):  # a time budget's calibration: no run to stop
            return super().run(specs, on_done)
        tune = self.tune
        from ray.tune.schedulers import ASHAScheduler

        trainable = tune.with_resources(
            tune.with_parameters(_trial, specs=list(specs), metric=self.metric),
            {"cpu": self.threads, "gpu": self.gpus_per_run},
        )
        scheduler = ASHAScheduler(
            time_attr="training_iteration", max_t=10**9, grace_period=self.grace, reduction_factor=self.reduction
        )
        tuner = tune.Tuner(
            trainable,
            param_space={"run": tune.grid_search(list(range(len(specs))))},
            tune_config=tune.TuneConfig(
                metric=self.metric, mode=self.mode, scheduler=scheduler, max_concurrent_trials=self.limit
            ),
            run_config=tune.RunConfig(
                name=f"asha-{time.strftime('%Y%m%d-%H%M%S')}",
                storage_path=str(self.storage.resolve()),
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=self.retries),
            ),
        )
        failures = []
        for result in tuner.fit():
            spec = specs[result.config["run"]]
            if result.error is not None:
                failures.append(_failure(spec, result.error))
            elif (record := runs.finished_record(spec)) is not None:
                on_done(spec, record)
            else:
                on_done(spec, self._stopped(spec, result.metrics or {}))
        return failures

    def _stopped(self, spec: RunSpec, last: dict[str, Any]) -> dict[str, Any]:
        """The record of a run ASHA stopped: its command, and the last validation it reported
        (where it was stopped; the fit may have gone a little further before it stopped)."""
        return {
            **spec.identity(),
            "stopped": {
                "by": "asha",
                "metric": self.metric,
                "step": last.get("step"),
                self.metric: last.get(self.metric),
            },
            "metrics": {},
            **spec.record,
        }
