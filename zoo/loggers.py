"""Where runs log, and how their resolved configuration is recorded.

TensorBoard is the default logger (``runs/<model>/version_N``); ``--trainer.logger CSVLogger``
and ``--trainer.logger WandbLogger`` work as in Lightning. A Weights & Biases run defaults to
``save_dir=runs`` and a project named after the model, so its checkpoints and images land in
``runs/<model>/<run id>`` beside the TensorBoard versions, and W&B's own files in
``runs/wandb``. ``WANDB_MODE=offline`` keeps everything on disk, for ``wandb sync`` later.

Every run records the full resolved configuration: ``config.yaml`` in the run directory
(:class:`SaveConfigToRun`) and, for loggers that keep a run configuration of their own (W&B),
that configuration too, so a W&B run can be reproduced from W&B alone.
"""

from __future__ import annotations

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from zoo.distributed import run_directory

__all__ = ["SaveConfigToRun", "apply_logger_defaults"]


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
    """Writes the resolved configuration to ``<run directory>/config.yaml`` and gives it to W&B.

    Lightning's ``SaveConfigCallback`` writes to ``Trainer.log_dir``, which for W&B is the
    ``save_dir`` every run shares; the run directory (:func:`zoo.distributed.run_directory`) is
    the run's own, where its checkpoints are. Only global zero writes; nothing here
    communicates between processes.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            directory = run_directory(trainer)
            directory.mkdir(parents=True, exist_ok=True)
            self.parser.save(
                self.config, str(directory / self.config_filename), skip_none=False, overwrite=self.overwrite, multifile=self.multifile
            )
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Record the configuration in loggers that keep their own (TensorBoard and CSV have config.yaml beside them)."""
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if not isinstance(logger, (TensorBoardLogger, CSVLogger)):
                logger.log_hyperparams(config)
