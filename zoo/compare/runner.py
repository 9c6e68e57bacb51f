"""Run a comparison: every combination of the grid for every seed, each in fresh processes.

Each run fits in its own directory ``<out>/runs/<combination>/seed<N>`` (a CSVLogger with an
explicit save_dir, name and version, so nothing depends on how Lightning numbers versions), then
tests or validates its ``last.ckpt``; its metrics are read from the loggers' ``metrics.csv``.
A run is finished when its record is in ``<out>/records.jsonl``: started again, the comparison
skips those and starts the others afresh.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml

from zoo.compare.grid import Budget, Combination, combinations
from zoo.compare.process import ChildResult, run_child, zoo_command
from zoo.compare.records import append_record, config_digests, last_metrics, load_records
from zoo.compare.timing import read_timing
from zoo.errors import ConfigurationError
from zoo.tasks import MODEL_REGISTRY
from zoo.text.files import atomic_write_text

__all__ = ["CompareConfig", "Comparison", "resolve_base"]

T = TypeVar("T")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
TIMER = "--trainer.callbacks+=zoo.compare.timing.StepTimer"
#: The metric prefix each evaluation stage logs under.
STAGE_PREFIX = {"test": "test/", "validate": "val/"}


@dataclass
class CompareConfig:
    """A comparison: the shared ``fit`` arguments, the grid, seeds, budget and where it all goes.

    Args:
        base: ``fit`` arguments every run shares (model, data, config files, flags).
        axes: Grid axes, flag -> values (:func:`zoo.compare.grid.parse_grid`).
        seeds: Runs per combination, with seeds ``0 .. seeds - 1``.
        budget: How long each run trains; None keeps the configuration's own limits.
        out: Output directory (records, runs, report); reusing it resumes.
        parallel: Runs at once; each child gets ``cores // parallel`` threads.
        evaluate: ``test`` or ``validate``, run on each fit's last checkpoint.
        calibration_steps: Steps of the short fit that measures step time for a time budget.
    """

    base: list[str]
    axes: dict[str, list[str]] = field(default_factory=dict)
    seeds: int = 1
    budget: Budget | None = None
    out: Path = Path("runs/compare")
    parallel: int = 1
    evaluate: str = "test"
    calibration_steps: int = 20

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ConfigurationError(f"--seeds must be at least 1, got {self.seeds}.")
        if self.parallel < 1:
            raise ConfigurationError(f"--parallel must be at least 1, got {self.parallel}.")
        if self.calibration_steps < 5:
            raise ConfigurationError(
                f"--calibration_steps must be at least 5 (the first steps are warm-up), got {self.calibration_steps}."
            )
        if self.evaluate not in STAGE_PREFIX:
            raise ConfigurationError(f"--evaluate must be one of {sorted(STAGE_PREFIX)}, got {self.evaluate!r}.")
        if self.base[:1] and not self.base[0].startswith("-"):
            raise ConfigurationError(
                f"Give the fit arguments without a subcommand ({self.base[0]!r}): compare runs fit, then {self.evaluate}."
            )


def resolve_base(base: list[str]) -> dict[str, Any]:
    """The configuration ``fit`` would run with ``base`` (its ``--print_config``), checked in this process.

    A bad flag or value fails here, once, before any run starts.
    """
    # zoo.cli imports zoo.compare's caller lazily; importing it here, when needed, keeps imports one-way
    from zoo.cli import ZooCLI

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            ZooCLI(["fit", *base, "--print_config"])
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise ConfigurationError(
                "The fit arguments given to compare are not valid (the message above says why): "
                "check them with python -m zoo fit ARGS --print_config."
            ) from None
    return yaml.safe_load(printed.getvalue()) or {}


class Comparison:
    """Runs, resumes and records a :class:`CompareConfig`."""

    def __init__(self, config: CompareConfig) -> None:
        self.config = config
        self.combinations: list[Combination] = combinations(config.axes)
        self.records_file = config.out / "records.jsonl"
        self.threads = max(1, len(os.sched_getaffinity(0)) // config.parallel)
        resolved = resolve_base(config.base)
        data = resolved.get("data") or {}
        self.data_args: dict[str, Any] = data.get("init_args") or {}
        self.data_class: str | None = data.get("class_path")
        self.data_has_seed = "seed" in self.data_args
        self.model_class = (resolved.get("model") or {}).get("class_path")

    @property
    def data_description(self) -> str:
        """The data module and its settings as resolved for the base command (``LRATextDataModule(max_length=1000, ...)``)."""
        settings = ", ".join(f"{key}={value}" for key, value in self.data_args.items() if value is not None)
        return f"{str(self.data_class).rsplit('.', 1)[-1]}({settings})"

    @property
    def default_metric(self) -> str | None:
        """The metric the task's checkpoints monitor, under the evaluation stage's prefix."""
        for entry in MODEL_REGISTRY.entries():
            if f"{entry.obj.__module__}.{entry.obj.__qualname__}" == self.model_class:
                return STAGE_PREFIX[self.config.evaluate] + entry.obj.monitor[0].split("/", 1)[-1]
        return None

    def run(self) -> list[dict[str, Any]]:
        """Run every unfinished (combination, seed); return all records of this comparison."""
        config = self.config
        budgets = self._budget_flags()
        done = {record["run"]: record for record in load_records(self.records_file)}
        pending = []
        for combination in self.combinations:
            for seed in range(config.seeds):
                key = f"{combination.name}/seed{seed}"
                command = self._command("fit", combination, seed, budgets[combination.name])
                if key not in done:
                    pending.append((key, combination, seed, command))
                elif done[key]["command"] != _shown(command):
                    raise ConfigurationError(
                        f"{self.records_file} holds run {key} of another command ({done[key]['command']}): "
                        f"give another --out, or delete that directory to start over."
                    )
                elif changed := _changed_configs(done[key], command):
                    raise ConfigurationError(
                        f"{', '.join(changed)} changed since {self.records_file} recorded run {key}: restore "
                        f"it, or give another --out (or delete that directory) to start over."
                    )
        _run_all(self._run_one, pending, config.parallel)
        keys = {f"{c.name}/seed{s}" for c in self.combinations for s in range(config.seeds)}
        return [record for record in load_records(self.records_file) if record["run"] in keys]

    # -- commands ------------------------------------------------------------------------------

    def run_dir(self, combination: Combination, seed: int) -> Path:
        return self.config.out / "runs" / combination.name / f"seed{seed}"

    def _command(
        self, stage: str, combination: Combination, seed: int, extra: list[str], run_dir: Path | None = None
    ) -> list[str]:
        run_dir = run_dir or self.run_dir(combination, seed)
        seeds = [f"--seed_everything={seed}", *([f"--data.seed={seed}"] if self.data_has_seed else [])]
        logger = [
            "--trainer.logger.class_path=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.init_args.save_dir={run_dir.parent}",
            f"--trainer.logger.init_args.name={run_dir.name}",
            f"--trainer.logger.init_args.version={stage}",
        ]
        timer = [TIMER] if stage == "fit" else []
        return zoo_command(stage, *self.config.base, *combination.flags, *seeds, *extra, *logger, *timer, *QUIET)

    def _child(self, command: list[str], log: Path, key: str) -> ChildResult:
        """Run a child; a failure is one error naming the run, the last line of its output and its log."""
        result = run_child(command, log, self.threads)
        if result.returncode != 0:
            lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
            raise ConfigurationError(
                f"Run {key} failed ({command[3]} exited with {result.returncode}): "
                f"{lines[-1].strip() if lines else 'no output'} (full output: {log})."
            )
        return result

    # -- budget --------------------------------------------------------------------------------

    def _budget_flags(self) -> dict[str, list[str]]:
        """Trainer flags per combination; a time budget first measures each combination's step time."""
        budget = self.config.budget
        if budget is None:
            return {c.name: [] for c in self.combinations}
        if budget.kind != "seconds":
            return {c.name: budget.flags() for c in self.combinations}
        file = self.config.out / "calibration.json"
        measured: dict[str, float] = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        missing = [c for c in self.combinations if c.name not in measured]
        for combination, seconds in zip(
            missing, _run_all(self._calibrate, [(c,) for c in missing], self.config.parallel)
        ):
            measured[combination.name] = seconds
        atomic_write_text(file, json.dumps(measured, indent=2, sort_keys=True) + "\n")
        return {c.name: budget.flags(measured[c.name]) for c in self.combinations}

    def _calibrate(self, combination: Combination) -> float:
        """Wall seconds per training step of ``combination`` (validation included), from a short fit
        of ``calibration_steps``: set ``--calibration_steps`` past an epoch to count validation in."""
        run_dir = self.config.out / "calibration" / combination.name
        shutil.rmtree(run_dir, ignore_errors=True)
        steps = Budget("steps", self.config.calibration_steps, f"{self.config.calibration_steps}steps").flags()
        command = self._command("fit", combination, 0, steps, run_dir)
        self._child(command, run_dir / "fit.log", f"{combination.name} (calibration)")
        timing = read_timing(run_dir / "fit")
        if "wall_seconds_per_step" not in timing:
            raise ConfigurationError(
                f"The calibration of {combination.name} measured no step (see {run_dir / 'fit.log'})."
            )
        return float(timing["wall_seconds_per_step"])

    # -- one run -------------------------------------------------------------------------------

    def _run_one(self, key: str, combination: Combination, seed: int, fit_command: list[str]) -> None:
        run_dir = self.run_dir(combination, seed)
        shutil.rmtree(run_dir, ignore_errors=True)  # an unfinished earlier attempt starts over
        fit = self._child(fit_command, run_dir / "fit.log", key)
        stage = self.config.evaluate
        checkpoint = run_dir / "fit" / "checkpoints" / "last.ckpt"
        eval_command = self._command(stage, combination, seed, [f"--ckpt_path={checkpoint}"])
        evaluation = self._child(eval_command, run_dir / f"{stage}.log", key)
        timing = read_timing(run_dir / "fit")
        append_record(
            self.records_file,
            {
                "run": key,
                "combination": combination.name,
                "overrides": combination.overrides,
                "seed": seed,
                "command": _shown(fit_command),
                "config_digests": config_digests(fit_command),
                "eval_command": _shown(eval_command),
                "run_dir": str(run_dir),
                "budget": self.config.budget.text if self.config.budget else None,
                "fit_seconds": round(fit.seconds, 3),
                "eval_seconds": round(evaluation.seconds, 3),
                "steps": timing.get("steps"),
                "seconds_per_step": timing.get("seconds_per_step"),
                "samples_per_second": timing.get("samples_per_second"),
                "peak_rss_mib": round(fit.peak_rss_mib, 1),
                "metrics": last_metrics(run_dir / stage / "metrics.csv", STAGE_PREFIX[stage]),
                "parallel": self.config.parallel,
                "threads": self.threads,
                "torch": torch.__version__,
                "machine": platform.machine(),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )


def _changed_configs(record: dict[str, Any], command: list[str]) -> list[str]:
    """The config files ``command`` reads whose contents differ from when ``record`` ran (records
    written before digests were kept are taken as they are)."""
    recorded = record.get("config_digests")
    if recorded is None:
        return []
    now = config_digests(command)
    return sorted(path for path in recorded.keys() | now.keys() if recorded.get(path) != now.get(path))


def _shown(command: list[str]) -> str:
    """A child's command as a shell line, ``python -m zoo ...`` whichever interpreter runs it."""
    return shlex.join(["python", *command[1:]])


def _run_all(function: Callable[..., T], jobs: list[tuple[Any, ...]], parallel: int) -> list[T]:
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
