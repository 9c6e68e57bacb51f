"""Run a comparison: every combination of the grid for every seed, each in fresh processes.

Each run fits in its own directory ``<out>/runs/<combination>/seed<N>`` (a CSVLogger with an
explicit save_dir, name and version, so nothing depends on how Lightning numbers versions), then
tests or validates its ``last.ckpt``; its metrics are read from the loggers' ``metrics.csv``
(:mod:`zoo.compare.run`). A launcher runs them (:mod:`zoo.compare.launch`: here, on Ray, on
SLURM). A run is finished when its record is in ``<out>/records.jsonl`` (or in its directory's
``record.json``, which the record is copied from): started again, on any launcher, the comparison
skips those and starts the others afresh.

When the runs log to Weights & Biases too (``--trainer.logger WandbLogger`` among the fit
arguments), each fit and evaluation is a W&B run of the group named after the comparison, named
after the run, with the grid's values and the seed in its config.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zoo.compare.grid import Budget, Combination, combinations
from zoo.compare.keys import check_grid_keys
from zoo.compare.launch import Launcher
from zoo.compare.local import LocalLauncher
from zoo.compare.process import zoo_command
from zoo.compare.records import append_record, config_digests, load_records
from zoo.compare.run import STAGE_PREFIX, RunFailed, RunSpec, finished_record, shown
from zoo.errors import ConfigurationError
from zoo.tasks import MODEL_REGISTRY
from zoo.text.files import atomic_write_text

__all__ = ["REFUSED", "STAGE_PREFIX", "CompareConfig", "Comparison", "resolve_base"]

#: What ``--dry_run`` writes between a recorded run's key and why its record cannot be resumed from.
REFUSED = ": refused: "

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
TIMER = "--trainer.callbacks+=zoo.compare.timing.StepTimer"
CSV_LOGGER = "lightning.pytorch.loggers.CSVLogger"
#: Settings of the user's W&B logger that each run sets for itself.
WANDB_PER_RUN = ("name", "save_dir", "dir", "version", "id", "group", "job_type", "resume")
#: Variables the runs get from the comparison's environment, wherever they run (a Ray node or a
#: SLURM job may start with another): plugins, caches, W&B and Hub settings.
FORWARDED_PREFIXES = ("ZOO_", "WANDB_", "HF_")


@dataclass
class CompareConfig:
    """A comparison: the shared ``fit`` arguments, the grid, seeds, budget and where it all goes.

    Args:
        base: ``fit`` arguments every run shares (model, data, config files, flags).
        axes: Grid axes, flag -> values (:func:`zoo.compare.grid.parse_grid`).
        seeds: Runs per combination, with seeds ``0 .. seeds - 1``.
        budget: How long each run trains; None keeps the configuration's own limits.
        out: Output directory (records, runs, report); reusing it resumes.
        parallel: Runs at once (the launcher's default when None: one on the CPU here).
        evaluate: ``test`` or ``validate``, run on each fit's last checkpoint.
        calibration_steps: Steps of the short fit that measures step time for a time budget.
        name: The comparison's name (its W&B group); default: the name of ``out``.
    """

    base: list[str]
    axes: dict[str, list[str]] = field(default_factory=dict)
    seeds: int = 1
    budget: Budget | None = None
    out: Path = Path("runs/compare")
    parallel: int | None = None
    evaluate: str = "test"
    calibration_steps: int = 20
    name: str | None = None

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ConfigurationError(f"--seeds must be at least 1, got {self.seeds}.")
        if self.parallel is not None and self.parallel < 1:
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
        self.name = self.name or self.out.resolve().name


def resolve_base(base: list[str]) -> dict[str, Any]:
    """The configuration ``fit`` would run with ``base`` (its ``--print_config``), checked in this process.

    A bad flag or value fails here, once, before any run starts.
    """
    # zoo.cli imports zoo.compare's caller lazily; importing it here, when needed, keeps imports one-way
    from zoo.cli import ZooCLI

    printed, complaint = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(complaint):
            ZooCLI(["fit", *base, "--print_config"])
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            why = _parser_complaint(complaint.getvalue())
            raise ConfigurationError(
                f"The fit arguments given to compare are not valid: {why} "
                "(check them with python -m zoo fit ARGS --print_config)."
            ) from None
    return yaml.safe_load(printed.getvalue()) or {}


def _parser_complaint(text: str) -> str:
    """The parser's complaint in one line: its last ``error:`` and the rejected options under it
    (jsonargparse indents those below a line that names only the key: ``Parser key "data":``),
    without its usage, its tip and the value it was given."""
    if "error:" not in text:
        return "see python -m zoo fit ARGS --print_config"
    first, *details = text[text.rindex("error:") + len("error:") :].strip().splitlines()
    rejected = [
        line.strip().lstrip("- ").rstrip(":") for line in details if "not accepted" in line or "Problem with" in line
    ]
    return " ".join([first.strip().rstrip(":") + (":" if rejected else ""), "; ".join(rejected)]).strip()


def _wandb_settings(resolved: dict[str, Any]) -> dict[str, Any] | None:
    """The W&B logger's settings among the resolved loggers (those not left to their defaults), or None."""
    loggers = (resolved.get("trainer") or {}).get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        if isinstance(logger, dict) and str(logger.get("class_path", "")).endswith(".WandbLogger"):
            settings = logger.get("init_args") or {}
            return {key: value for key, value in settings.items() if value is not None and key not in WANDB_PER_RUN}
    return None


class Comparison:
    """Runs, resumes and records a :class:`CompareConfig` with a launcher (default: ``local``)."""

    def __init__(self, config: CompareConfig, launcher: Launcher | None = None) -> None:
        self.config = config
        self.launcher = launcher or LocalLauncher(config.parallel)
        self.combinations: list[Combination] = combinations(config.axes)
        self.records_file = config.out / "records.jsonl"
        self.failures_file = config.out / "failures.jsonl"
        self.failures: list[RunFailed] = []
        resolved = resolve_base(config.base)
        data = resolved.get("data") or {}
        self.data_args: dict[str, Any] = data.get("init_args") or {}
        self.data_class: str | None = data.get("class_path")
        self.data_has_seed = "seed" in self.data_args
        self.model_class = (resolved.get("model") or {}).get("class_path")
        check_grid_keys(
            config.axes, resolved, f"model {self._short(self.model_class)} and data {self._short(self.data_class)}"
        )
        self.wandb = _wandb_settings(resolved)

    @staticmethod
    def _short(class_path: str | None) -> str:
        return str(class_path).rsplit(".", 1)[-1]

    @property
    def threads(self) -> int:
        """Intra-op threads of each run."""
        return self.launcher.threads

    @property
    def data_description(self) -> str:
        """The data module and its settings as resolved for the base command (``LRATextDataModule(max_length=1000, ...)``)."""
        settings = ", ".join(f"{key}={value}" for key, value in self.data_args.items() if value is not None)
        return f"{self._short(self.data_class)}({settings})"

    @property
    def model_name(self) -> str | None:
        """The registered name of the model the base command trains."""
        for entry in MODEL_REGISTRY.entries():
            if f"{entry.obj.__module__}.{entry.obj.__qualname__}" == self.model_class:
                return entry.name
        return None

    @property
    def monitor(self) -> tuple[str, str] | None:
        """The validation metric the model's checkpoints monitor, and its mode (``min`` or ``max``)."""
        name = self.model_name
        return None if name is None else tuple(MODEL_REGISTRY.get(name).monitor)

    @property
    def default_metric(self) -> str | None:
        """The metric the task's checkpoints monitor, under the evaluation stage's prefix."""
        name = self.model_name
        if name is None:
            return None
        return STAGE_PREFIX[self.config.evaluate] + MODEL_REGISTRY.get(name).monitor[0].split("/", 1)[-1]

    def run(self, plan: Sequence[tuple[Combination, Sequence[int]]] | None = None) -> list[dict[str, Any]]:
        """Run every unfinished (combination, seed) of ``plan`` (default: every combination with
        seeds ``0 .. seeds - 1``); return the records of the plan's runs. The runs that failed after
        their retries (on launchers that go on past a failure) are in :attr:`failures` and
        ``<out>/failures.jsonl``. A sweep runs two plans (:mod:`zoo.compare.sweep`)."""
        config = self.config
        plan = [(c, range(config.seeds)) for c in self.combinations] if plan is None else plan
        with self.launcher:
            budgets = self._budget_flags()
            done = {record["run"]: record for record in load_records(self.records_file)}
            pending = []
            for combination, seeds in plan:
                for seed in seeds:
                    spec = self._spec(combination, seed, budgets[combination.name])
                    if spec.key not in done:
                        if (record := finished_record(spec)) is not None and not _changed_configs(record, spec.fit):
                            append_record(self.records_file, record)  # finished while nobody waited for it
                        else:
                            pending.append(spec)
                    elif refusal := self._refusal(done[spec.key], spec):
                        raise ConfigurationError(refusal)
            self.failures = self.launcher.run(pending, lambda spec, record: append_record(self.records_file, record))
        for failure in self.failures:
            append_record(self.failures_file, {"error": str(failure), "launcher": self.launcher.name})
        keys = {f"{c.name}/seed{s}" for c, seeds in plan for s in seeds}
        return [record for record in load_records(self.records_file) if record["run"] in keys]

    def _refusal(self, record: dict[str, Any], spec: RunSpec) -> str | None:
        """Why ``record`` cannot stand for ``spec``'s run (another command, or a config file it read
        that changed since), as the line that refuses to resume; None where it can."""
        if recorded_command(record, self.config.out) != shown(spec.fit):
            return (
                f"{self.records_file} holds run {spec.key} of another command ({record['command']}): "
                f"give another --out, or delete that directory to start over."
            )
        if changed := _changed_configs(record, spec.fit):
            return (
                f"{', '.join(changed)} changed since {self.records_file} recorded run {spec.key}: restore "
                f"it, or give another --out (or delete that directory) to start over."
            )
        return None

    def describe(self, plan: Sequence[tuple[Combination, Sequence[int]]] | None = None) -> list[str]:
        """``--dry_run``: a line per run of ``plan`` (default: every combination and seed), its fit
        command or that it is recorded; nothing runs. A time budget's steps are left to the
        calibration the real command makes first."""
        config = self.config
        plan = [(c, range(config.seeds)) for c in self.combinations] if plan is None else plan
        budget = config.budget
        extra = [] if budget is None or budget.kind == "seconds" else budget.flags()
        done = {record["run"]: record for record in load_records(self.records_file)}
        lines = []
        for combination, seeds in plan:
            for seed in seeds:
                spec = self._spec(combination, seed, extra)
                if spec.key not in done:
                    lines.append(f"{spec.key}: {shown(spec.fit)}")
                else:
                    refusal = self._refusal(done[spec.key], spec)
                    lines.append(f"{spec.key}: recorded" if refusal is None else f"{spec.key}{REFUSED}{refusal}")
        if budget is not None and budget.kind == "seconds":
            lines.append(f"(the {budget.text} budget becomes steps after a calibration fit of each combination)")
        return lines

    # -- runs ----------------------------------------------------------------------------------

    def run_dir(self, combination: Combination, seed: int) -> Path:
        return self.config.out / "runs" / combination.name / f"seed{seed}"

    def _spec(
        self, combination: Combination, seed: int, extra: list[str], run_dir: Path | None = None, key: str | None = None
    ) -> RunSpec:
        """The run of ``combination`` and ``seed``; with ``run_dir`` given, a calibration fit there (no evaluation)."""
        stage = self.config.evaluate
        directory = run_dir or self.run_dir(combination, seed)
        fit = self._command("fit", combination, seed, extra, directory)
        checkpoint = directory / "fit" / "checkpoints" / "last.ckpt"
        evaluate = (
            None if run_dir else self._command(stage, combination, seed, [f"--ckpt_path={checkpoint}"], directory)
        )
        return RunSpec(
            key=key or f"{combination.name}/seed{seed}",
            combination=combination.name,
            overrides=combination.overrides,
            seed=seed,
            run_dir=directory,
            fit=fit,
            evaluate=evaluate,
            stage=stage,
            cwd=Path.cwd(),
            threads=self.threads,
            env={key: value for key, value in os.environ.items() if key.startswith(FORWARDED_PREFIXES)},
            record={
                "budget": self.config.budget.text if self.config.budget else None,
                "config_digests": config_digests(fit),
                "parallel": self.launcher.parallel,
                "launcher": self.launcher.name,
            },
        )

    def _command(self, stage: str, combination: Combination, seed: int, extra: list[str], run_dir: Path) -> list[str]:
        seeds = [f"--seed_everything={seed}", *([f"--data.seed={seed}"] if self.data_has_seed else [])]
        timer = [TIMER, *self.launcher.fit_flags] if stage == "fit" else []
        logger = self._logger_flags(stage, combination, seed, run_dir)
        return zoo_command(stage, *self.config.base, *combination.flags, *seeds, *extra, *logger, *timer, *QUIET)

    def _logger_flags(self, stage: str, combination: Combination, seed: int, run_dir: Path) -> list[str]:
        """A CSV logger in the run directory (what the records read), and where the fit arguments
        ask for W&B, a W&B run in the comparison's group with the grid's values in its config."""
        csv = {"save_dir": str(run_dir.parent), "name": run_dir.name, "version": stage}
        if self.wandb is None:
            return [
                f"--trainer.logger.class_path={CSV_LOGGER}",
                *(f"--trainer.logger.init_args.{k}={v}" for k, v in csv.items()),
            ]
        grid = {"comparison": self.config.name, "combination": combination.name, "seed": seed, **combination.overrides}
        wandb = self.wandb | {
            "project": self.wandb.get("project") or self.model_name,
            "save_dir": str(run_dir),
            "name": f"{combination.name}/seed{seed}",
            "group": self.config.name,
            "job_type": stage,
            "config": (self.wandb.get("config") or {}) | grid,
        }
        loggers = [
            {"class_path": CSV_LOGGER, "init_args": csv},
            {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": wandb},
        ]
        return [f"--trainer.logger={json.dumps(loggers)}"]

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
        measured |= self._calibrate(missing)
        atomic_write_text(file, json.dumps(measured, indent=2, sort_keys=True) + "\n")
        return {c.name: budget.flags(measured[c.name]) for c in self.combinations}

    def _calibrate(self, missing: list[Combination]) -> dict[str, float]:
        """Wall seconds per training step of each combination (validation included), from a short
        fit of ``calibration_steps`` run by the launcher (so on the machines the runs will use):
        set ``--calibration_steps`` past an epoch to count validation in."""
        steps = Budget("steps", self.config.calibration_steps, f"{self.config.calibration_steps}steps").flags()
        specs = [
            self._spec(c, 0, steps, self.config.out / "calibration" / c.name, f"{c.name} (calibration)")
            for c in missing
        ]
        measured: dict[str, Any] = {}
        failures = self.launcher.run(specs, lambda spec, record: measured.update({spec.combination: record}))
        if failures:
            raise failures[0]
        for spec in specs:
            seconds = measured[spec.combination].get("wall_seconds_per_step")
            if seconds is None:
                raise ConfigurationError(
                    f"The calibration of {spec.combination} measured no step (see {spec.run_dir / 'fit.log'})."
                )
            measured[spec.combination] = float(seconds)
        return measured


def _changed_configs(record: dict[str, Any], command: list[str]) -> list[str]:
    """The config files ``command`` reads whose contents differ from when ``record`` ran (records
    written before digests were kept are taken as they are)."""
    recorded = record.get("config_digests")
    if recorded is None:
        return []
    now = config_digests(command)
    return sorted(path for path in recorded.keys() | now.keys() if recorded.get(path) != now.get(path))


def recorded_command(record: dict[str, Any], out: Path) -> str:
    """``record``'s fit command as if its records folder were ``out``: records copied to another
    folder (the matrix's committed ``benchmarks/results``, from ``runs/``) resume there, since where
    a run writes its logs changes nothing it computes."""
    if "run_dir" not in record:
        return record["command"]
    written = str(Path(record["run_dir"]).parents[2])  # OUT/runs/COMBINATION/seedN
    return record["command"].replace(written, str(out))
