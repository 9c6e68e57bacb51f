"""One run of a comparison as every launcher runs it: a ``fit`` child, then the evaluation of its
last checkpoint, in the run's own directory, ending with the run's record.

:class:`RunSpec` holds everything a run needs, plain data that pickles, so that a launcher can
run it in this process's threads (``local``), as a Ray task on any node, or as a SLURM job
(submitit): :func:`execute` is the one function they all call, so a run and its record are the
same whichever launcher ran it. The record is written to ``<run directory>/record.json`` as well
as returned: a run that finished while nobody waited for it (a SLURM job whose comparison was
stopped) still counts when the comparison starts again, on any launcher. A run stopped before its
record (Ctrl-C, SIGTERM, a node lost) continues its fit from the ``last.ckpt`` it left, with
``fit --ckpt_path last`` (:mod:`zoo.resume`), when the comparison starts again with the same fit
command and configuration files (``attempt.json`` names them); otherwise it starts over.
"""

from __future__ import annotations

import json
import platform
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.compare.process import ChildResult, run_child
from zoo.compare.records import join_metric_rows, last_metrics, metric_rows
from zoo.compare.timing import read_timing
from zoo.errors import ConfigurationError
from zoo.text.files import atomic_write_text

__all__ = ["RECORD_FILE", "STAGE_PREFIX", "RunFailed", "RunSpec", "execute", "finished_record"]

#: The metric prefix each evaluation stage logs under.
STAGE_PREFIX = {"test": "test/", "validate": "val/"}
#: The file of a run directory that holds its record once the run has finished.
RECORD_FILE = "record.json"
#: The file of a run directory that names the fit an attempt runs (its command and configuration
#: files' digests), written before the fit starts: what a later attempt may continue.
ATTEMPT_FILE = "attempt.json"


class RunFailed(ConfigurationError):
    """A run's ``fit`` or evaluation exited with an error: the message names the run, the last
    line of its output and its log."""


@dataclass(frozen=True)
class RunSpec:
    """A run: its key (``<combination>/seed<N>``), commands, directory and conditions.

    Args:
        key: The run's name in the records.
        combination: The grid combination's name.
        overrides: The grid's values of the combination, flag -> value.
        seed: The run's seed.
        run_dir: The run's directory (relative to ``cwd`` or absolute); cleared when the run starts,
            unless an unfinished attempt of the same fit left a checkpoint to continue from.
        fit: The ``python -m zoo fit`` command.
        evaluate: The evaluation command of the fit's last checkpoint; None for a calibration fit.
        stage: ``test`` or ``validate``, the evaluation's stage.
        cwd: Where the commands run (their relative paths are read from there).
        threads: Intra-op threads of each child.
        env: Variables the children get on top of the environment they start in.
        record: Fields the record carries as they are (budget, config digests, runs at once, launcher).
    """

    key: str
    combination: str
    overrides: dict[str, str]
    seed: int
    run_dir: Path
    fit: list[str]
    evaluate: list[str] | None
    stage: str
    cwd: Path
    threads: int
    env: dict[str, str] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        """The run directory as a path that does not depend on the working directory."""
        return self.cwd / self.run_dir

    def identity(self) -> dict[str, Any]:
        """What every record of this run says of it, whatever became of it (finished or stopped)."""
        return {
            "run": self.key,
            "combination": self.combination,
            "overrides": self.overrides,
            "seed": self.seed,
            "command": shown(self.fit),
            "run_dir": str(self.run_dir),
        }


def _here(command: list[str]) -> list[str]:
    """``command`` with this machine's interpreter: the one that submitted it may sit elsewhere."""
    return [sys.executable, *command[1:]]


def _child(
    spec: RunSpec, command: list[str], log: Path, env: Mapping[str, str], poll: Callable[[], None] | None = None
) -> ChildResult:
    """Run a child of ``spec``; a failure is one :class:`RunFailed` line with the last line of its output."""
    result = run_child(_here(command), log, spec.threads, env, spec.cwd, poll)
    if result.returncode != 0:
        lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        raise RunFailed(
            f"Run {spec.key} failed ({command[3]} exited with {result.returncode}): "
            f"{lines[-1].strip() if lines else 'no output'} (full output: {spec.run_dir / log.name})."
        )
    return result


def execute(
    spec: RunSpec, env: Mapping[str, str] | None = None, while_fitting: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Run ``spec``, write its record to ``<run directory>/record.json`` and return it. The fit
    continues an unfinished earlier attempt of the same fit from its ``last.ckpt`` (the record
    says ``resumed``; ``fit_seconds`` is this attempt's time and the earlier attempts' training up to
    the checkpoint, ``train_seconds`` every attempt's training, the per-step times this attempt's);
    any other earlier attempt is cleared.
    ``env`` adds variables for this attempt (the devices a launcher chose); ``while_fitting`` is
    called every few milliseconds while the fit runs, and once after it (a scheduler reads the
    fit's progress there). Raises :class:`RunFailed` if a child fails."""
    import torch  # the record names the torch of the machine that ran it

    env = spec.env | dict(env or {})
    directory = spec.directory
    resumed = _resumable(spec)
    if not resumed:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        atomic_write_text(directory / ATTEMPT_FILE, json.dumps(_attempt(spec), sort_keys=True) + "\n")
    fit_command = [*spec.fit, "--ckpt_path=last"] if resumed else spec.fit
    earlier = metric_rows(directory / "fit" / "metrics.csv") if resumed else []
    fit = _child(spec, fit_command, directory / "fit.log", env, while_fitting)
    if resumed:
        join_metric_rows(earlier, directory / "fit" / "metrics.csv")
    timing = read_timing(directory / "fit")
    record: dict[str, Any] = {
        **spec.identity(),
        "fit_seconds": round(fit.seconds + timing.get("earlier_train_seconds", 0.0), 3),
        "steps": timing.get("steps"),
        "seconds_per_step": timing.get("seconds_per_step"),
        "wall_seconds_per_step": timing.get("wall_seconds_per_step"),
        "samples_per_second": timing.get("samples_per_second"),
        "train_seconds": timing.get("train_seconds"),
        "peak_rss_mib": round(fit.peak_rss_mib, 1),
        "parameters": timing.get("parameters"),
        "resumed": resumed,
        "metrics": {},
        "threads": spec.threads,
        "devices": env.get("CUDA_VISIBLE_DEVICES"),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "host": platform.node(),
        **spec.record,
    }
    if spec.evaluate is not None:
        evaluation = _child(spec, spec.evaluate, directory / f"{spec.stage}.log", env)
        record |= {
            "eval_command": shown(spec.evaluate),
            "eval_seconds": round(evaluation.seconds, 3),
            "metrics": _fit_validation(directory, spec.stage)
            | last_metrics(directory / spec.stage / "metrics.csv", STAGE_PREFIX[spec.stage]),
        }
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    atomic_write_text(directory / RECORD_FILE, json.dumps(record, sort_keys=True) + "\n")
    return record


def _fit_validation(directory: Path, stage: str) -> dict[str, float]:
    """The fit's last validation metrics where the run is judged on its test split: a sweep can
    then choose on validation (``--select val/accuracy``) and report test, as the papers do."""
    return last_metrics(directory / "fit" / "metrics.csv", STAGE_PREFIX["validate"]) if stage == "test" else {}


def _attempt(spec: RunSpec) -> dict[str, Any]:
    """What :data:`ATTEMPT_FILE` says of an attempt at ``spec``: its fit command and configuration files."""
    return {"command": shown(spec.fit), "config_digests": spec.record.get("config_digests")}


def _resumable(spec: RunSpec) -> bool:
    """Whether an earlier attempt at ``spec``'s own fit (not a calibration fit) left a ``last.ckpt``."""
    if spec.evaluate is None:
        return False
    try:
        attempt = json.loads((spec.directory / ATTEMPT_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return attempt == _attempt(spec) and (spec.directory / "fit" / "checkpoints" / "last.ckpt").is_file()


def finished_record(spec: RunSpec) -> dict[str, Any] | None:
    """The record a finished run of ``spec`` left in its directory, if it ran ``spec``'s command."""
    file = spec.directory / RECORD_FILE
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if record.get("command") == shown(spec.fit) else None


def shown(command: list[str]) -> str:
    """A child's command as a shell line, ``python -m zoo ...`` whichever interpreter runs it."""
    return shlex.join(["python", *command[1:]])
