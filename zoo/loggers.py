"""Where runs log, and how their resolved configuration is recorded.

TensorBoard is the default logger (``runs/<model>/version_N``); ``--trainer.logger CSVLogger``
and ``--trainer.logger WandbLogger`` work as in Lightning. A Weights & Biases run defaults to
``save_dir=runs`` and a project named after the model, so its checkpoints and images land in
``runs/<model>/<run id>`` beside the TensorBoard versions, and W&B's own files in
``runs/wandb``. ``WANDB_MODE=offline`` keeps everything on disk, for ``wandb sync`` later.

Every run records the full resolved configuration: ``config.yaml`` in the run directory
(:class:`SaveConfigToRun`), ``versions.json`` beside it and, for loggers that keep a run
configuration of their own (W&B), that configuration too, so a W&B run can be reproduced from
W&B alone.

Runs started in the same instant from one directory (several seeds at once) never share a
directory: :func:`claim_run_directory` creates ``version_N`` with one atomic ``mkdir`` before the
logger exists, where Lightning would pick ``N`` by listing the directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from zoo.distributed import run_directory
from zoo.provenance import package_versions

__all__ = ["SaveConfigToRun", "apply_logger_defaults", "claim_run_directory"]

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


class SaveConfigToRun(SaveConfigCallback):
    """Writes the resolved ``config.yaml`` and ``versions.json`` to the run directory, and gives
    the configuration to loggers that keep their own (W&B).

    Use with ``save_to_log_dir=False``: Lightning's own saving writes to ``Trainer.log_dir``,
    which for W&B is the ``save_dir`` every run shares; the run directory
    (:func:`zoo.distributed.run_directory`) is the run's own, where its checkpoints are.
    Lightning calls :meth:`save_config` on global zero only.
    """

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
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if not isinstance(logger, (TensorBoardLogger, CSVLogger)):  # these have config.yaml beside them
                logger.log_hyperparams(config)
