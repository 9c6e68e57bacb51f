"""Where runs log, and how their resolved configuration is recorded.

TensorBoard is the default logger (``runs/<model>/version_N``); ``--trainer.logger CSVLogger``
and ``--trainer.logger WandbLogger`` work as in Lightning. A Weights & Biases run defaults to
``save_dir=runs`` and a project named after the model, so its checkpoints and images land in
``runs/<model>/<run id>`` beside the TensorBoard versions, and W&B's own files in
``runs/wandb``. ``WANDB_MODE=offline`` keeps everything on disk, for ``wandb sync`` later.

Every run records the full resolved configuration: ``config.yaml`` in the run directory
(:class:`SaveConfigToRun`), ``versions.json`` beside it and, for loggers that keep a run
configuration of their own (W&B), that configuration too, so a W&B run can be reproduced from
W&B alone. ``commands.jsonl`` beside them holds the command line of every command that ran in
the directory (one JSON line each: a fit, then each ``fit --ckpt_path last`` that resumed it),
as it is typed again, so that an exported model's card shows the command that trained it.

Runs started in the same instant from one directory (several seeds at once) never share a
directory: :func:`claim_run_directory` creates ``version_N`` with one atomic ``mkdir`` before the
logger exists, where Lightning would pick ``N`` by listing the directory.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from zoo.distributed import run_directory
from zoo.plugins import ENV_VAR as IMPORTS_VARIABLE
from zoo.provenance import package_versions

__all__ = [
    "COMMANDS_FILE",
    "PROGRAM",
    "SaveConfigToRun",
    "apply_logger_defaults",
    "claim_run_directory",
    "command_line",
    "read_commands",
    "record_command",
]

#: The file of a run directory that lists the commands run in it, one JSON line each.
COMMANDS_FILE = "commands.jsonl"
#: How a recorded command starts: the zoo's command line.
PROGRAM = ("python", "-m", "zoo")

#: Carries the claimed version to the other processes that Lightning starts for a DDP run.
VERSION_VARIABLE = "ZOO_RUN_VERSION"


def claim_run_directory(logger: Logger | None) -> Path | None:
    """Create the next free ``<root_dir>/version_N`` atomically and pin ``logger`` to it.

    Applies to a TensorBoard or CSV logger whose version is not set yet; others are left
    alone. ``mkdir`` fails for every process but one that asks for the same ``N``, and the
    losers try ``N + 1``. The processes that Lightning starts for the other ranks of a DDP run
    read the claimed version from the environment instead of claiming their own. The
    configuration keeps ``version: null``, so rerunning a saved ``config.yaml`` claims anew.
    Returns the directory, or None if nothing was claimed.
    """
    if not isinstance(logger, (TensorBoardLogger, CSVLogger)) or logger._version is not None:
        return None
    root = Path(logger.root_dir)
    if os.environ.get("LOCAL_RANK", "0") != "0" and VERSION_VARIABLE in os.environ:
        logger._version = int(os.environ[VERSION_VARIABLE])
        return root / f"version_{logger._version}"
    root.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
    version = max(taken, default=-1) + 1
    while True:
        try:
            (root / f"version_{version}").mkdir()
            break
        except FileExistsError:  # another run took it between the listing and now
            version += 1
    logger._version = version
    os.environ[VERSION_VARIABLE] = str(version)
    return root / f"version_{version}"


def apply_logger_defaults(config: Namespace, model_name: str | None) -> None:
    """Give a W&B logger of the parsed ``config`` the zoo's defaults where it has Lightning's.

    ``save_dir`` ``"."`` becomes ``runs`` and a missing project becomes ``model_name``. The run
    name the TensorBoard default carries over (the model's name, which would name every run of
    the project alike) is dropped, so that W&B names each run. Other loggers are left as configured.
    """
    logger = config.get("trainer", {}).get("logger")
    if not isinstance(logger, Namespace) or not str(logger.get("class_path", "")).endswith(".WandbLogger"):
        return
    init = logger.get("init_args") or Namespace()
    if init.get("save_dir") in (None, "."):
        init.save_dir = "runs"
    if init.get("project") is None and model_name is not None:
        init.project = model_name
    if init.get("name") == model_name:
        init.name = None
    logger.init_args = init


def command_line(args: Sequence[str]) -> list[str]:
    """The command that ran ``args`` (what follows ``python -m zoo``), as one types it again:
    :data:`PROGRAM`, an ``--import`` flag for each plugin this process imported (they are not
    in ``args`` any more, see :mod:`zoo.plugins`), then ``args``."""
    imports = [spec for spec in os.environ.get(IMPORTS_VARIABLE, "").split(os.pathsep) if spec]
    return [*PROGRAM, *(part for spec in imports for part in ("--import", spec)), *args]


def record_command(directory: Path, command: Sequence[str]) -> None:
    """Append ``command`` (an argument list) to the run's :data:`COMMANDS_FILE`, with the time."""
    entry = {"argv": list(command), "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    with (directory / COMMANDS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def read_commands(directory: Path) -> list[str]:
    """The commands recorded in a run directory, oldest first, each as one shell line (none
    when it records none: a run from before they were recorded, or not from the command line)."""
    path = directory / COMMANDS_FILE
    if not path.is_file():
        return []
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line torn by a crash
            continue
        if isinstance(entry, dict) and isinstance(entry.get("argv"), list):
            commands.append(shlex.join(str(part) for part in entry["argv"]))
    return commands


class SaveConfigToRun(SaveConfigCallback):
    """Writes the resolved ``config.yaml`` and ``versions.json`` to the run directory, appends
    the command to its ``commands.jsonl``, and gives the configuration to loggers that keep
    their own (W&B).

    Use with ``save_to_log_dir=False``: Lightning's own saving writes to ``Trainer.log_dir``,
    which for W&B is the ``save_dir`` every run shares; the run directory
    (:func:`zoo.distributed.run_directory`) is the run's own, where its checkpoints are.
    Lightning calls :meth:`save_config` on global zero only, once per command.

    Args:
        command: The command line that runs (:func:`command_line`); empty records none.
        args: Lightning's :class:`~lightning.pytorch.cli.SaveConfigCallback` arguments.
    """

    def __init__(self, *args: Any, command: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command = list(command)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        directory = run_directory(trainer)
        directory.mkdir(parents=True, exist_ok=True)
        self.parser.save(
            self.config,
            str(directory / self.config_filename),
            skip_none=False,
            overwrite=self.overwrite,
            multifile=self.multifile,
        )
        (directory / "versions.json").write_text(json.dumps(package_versions(), indent=2) + "\n", encoding="utf-8")
        if self.command:
            record_command(directory, self.command)
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if not isinstance(logger, (TensorBoardLogger, CSVLogger)):  # these have config.yaml beside them
                logger.log_hyperparams(config)
