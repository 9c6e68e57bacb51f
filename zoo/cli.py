"""The CLI library: :class:`ZooCLI`, the LightningCLI behind ``fit``, ``validate``, ``test`` and
``predict``. The command dispatcher (:mod:`zoo.commands`) and the commands that build runs
(``bench``, ``compare``) use it; it imports none of them.

``ZooCLI`` is a :class:`lightning.pytorch.cli.LightningCLI` with the zoo's conveniences, all
applied before Lightning parses anything:

* ``--model transformer`` (a registered name or alias) is rewritten to the registered class;
  class names and ``class_path`` values pass through unchanged. ``--data`` likewise. A typo
  fails at once with the closest registered names.
* The model's default configuration (``configs/<model>.yaml``) is loaded first, so
  ``python -m zoo fit --model nadaraya_watson`` trains with its default data and settings;
  ``--config`` files and command-line flags override it.
* Sizes the model needs from the data (vocabulary size, padding id, class count) are linked
  from the data module at instantiation.
* Each run writes into its own directory ``runs/<model>/version_N`` (resolved config,
  checkpoints, metrics and images), claimed atomically, so runs started together never share
  one; a W&B run gets W&B defaults (:mod:`zoo.loggers`).
* ``fit`` prints which attention each layer holds beside the model summary (hybrid stacks);
  ``fit``, ``validate`` and ``test`` end with a few lines: the metrics, ``run directory: DIR``
  (what scripts read), the best checkpoint and the plots (:mod:`zoo.summary`);
  ``fit --test_after_fit true`` tests the best checkpoint in the same run first.
* SIGTERM and Ctrl-C save ``last.ckpt``; ``fit --ckpt_path last`` continues the newest run
  exactly (:mod:`zoo.resume`).
* ``--import FILE_OR_MODULE`` imports a plugin that is not installed (see :mod:`zoo.plugins`).
* A ``--ckpt_path`` is read safely first: an unreadable or unsafe file, or one saved by another
  model than ``--model``, is one clear error. Lightning then loads it with ``weights_only=True``
  (``--weights_only false`` loads a trusted older file). ``predict --ckpt_path FILE`` without
  ``--model`` or ``--config`` rebuilds the model from the checkpoint alone
  (:func:`zoo.load_checkpoint`) and predicts ``--data.predict_texts`` or ``--data.predict_file``
  without the training data.
* ``versions.json`` (package versions) is written beside each run's ``config.yaml``, and the
  command line is appended to its ``commands.jsonl`` (:mod:`zoo.loggers`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from zoo.checkpoint import verify_checkpoint
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.errors import ConfigurationError, ZooError
from zoo.flags import flag_values
from zoo.loggers import SaveConfigToRun, apply_logger_defaults, claim_run_directory, command_line
from zoo.predict import format_row
from zoo.registry import Registry
from zoo.resume import Resumable, continue_last_run
from zoo.summary import attention_by_layer, run_summary
from zoo.tasks import MODEL_REGISTRY, ZooTask

__all__ = ["CONFIG_DIR", "ZooCLI"]

CONFIG_DIR = Path(__file__).parent / "configs"
SUBCOMMANDS = ("fit", "validate", "test", "predict")
#: ``--ckpt_path`` values that Lightning resolves itself (``registry:name`` included)
LIGHTNING_CHECKPOINT_NAMES = ("last", "best", "hpc", "registry")


def _class_path(obj: type) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _rewrite_choice(args: list[str], flag: str, registry: Registry[Any]) -> tuple[list[str], str | None]:
    """Replace a registered name given to ``flag`` by its class path.

    Returns the new arguments and the chosen value (a class path, a class name, or None).
    """
    out, chosen = list(args), None
    for index, value, joined in flag_values(args, flag):
        if not value.startswith(("{", "[")) and "." not in value and not value[:1].isupper():
            value = _class_path(registry.get(value))  # raises UnknownNameError with suggestions
        out[index] = f"{flag}={value}" if joined else value
        chosen = value
    return out, chosen


def _model_from_configs(args: list[str]) -> str | None:
    """The model class path or name named by ``--config`` files, if any (the last one wins)."""
    chosen = None
    for _, path, _ in flag_values(args, "--config", "-c"):
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
        model = config.get("model") if isinstance(config, dict) else None
        if isinstance(model, dict):
            model = model.get("class_path")
        if isinstance(model, str):
            chosen = model
    return chosen


def _resolve_task(value: str | None) -> type[ZooTask] | None:
    """The task class for a model class path, class name or registered name."""
    if value is None:
        return None
    for entry in MODEL_REGISTRY.entries():
        obj = entry.obj
        if value in (entry.name, *entry.aliases, obj.__name__, _class_path(obj)):
            return obj
    return None


class ZooCLI(LightningCLI):
    """LightningCLI with registry names, per-model defaults, data-to-model links and safe checkpoints."""

    def __init__(self, args: list[str] | None = None, **kwargs: Any) -> None:
        args = list(sys.argv[1:] if args is None else args)
        command = command_line(args)  # as typed, before names become class paths
        args, model_value = _rewrite_choice(args, "--model", MODEL_REGISTRY)
        args, data_value = _rewrite_choice(args, "--data", DATAMODULE_REGISTRY)
        self.task_class = _resolve_task(model_value or _model_from_configs(args))
        self.data_named = data_value is not None
        for _, ckpt_path, _ in flag_values(args, "--ckpt_path"):
            if ckpt_path.split(":", 1)[0] not in LIGHTNING_CHECKPOINT_NAMES:
                verify_checkpoint(ckpt_path, MODEL_REGISTRY.name_of(self.task_class) if self.task_class else None)
        parser_kwargs: dict[str, Any] = {}
        if self.task_class is not None:
            name = MODEL_REGISTRY.name_of(self.task_class)
            default_config = CONFIG_DIR / f"{name}.yaml"
            if default_config.is_file():
                defaults = {"default_config_files": [str(default_config)]}
                parser_kwargs = {cmd: defaults for cmd in SUBCOMMANDS} if kwargs.get("run", True) else defaults
        # LightningCLI reads sys.argv when given no args; hand it the rewritten arguments that way.
        saved_argv, sys.argv = sys.argv, [sys.argv[0] if sys.argv else "zoo", *args]
        try:
            super().__init__(
                model_class=L.LightningModule,
                datamodule_class=L.LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                parser_kwargs=parser_kwargs,
                save_config_callback=SaveConfigToRun,
                save_config_kwargs={"overwrite": True, "save_to_log_dir": False, "command": command},
                **kwargs,
            )
        finally:
            sys.argv = saved_argv

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(Resumable, "resume")
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=False,
            help="fit only: then test the best checkpoint in the same run (its directory, metrics and plots).",
        )
        defaults: dict[str, Any] = {"checkpoint.save_last": True}
        task = self.task_class
        if task is not None:
            metric, mode = task.monitor
            defaults |= {"checkpoint.monitor": metric, "checkpoint.mode": mode}
            defaults["trainer.logger"] = {
                "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                "init_args": {"save_dir": "runs", "name": MODEL_REGISTRY.name_of(task)},
            }
            if getattr(task, "default_datamodule", None) and not self.data_named:
                # Only when --data names none: jsonargparse carries a class's values over to the
                # class that replaces it, so MQAR's 8,192 ids and batch 64 would become
                # ``--data induction_heads``'s instead of its own 16 and 8.
                defaults["data"] = {"class_path": _class_path(DATAMODULE_REGISTRY.get(task.default_datamodule))}
            for attribute in task.data_links:
                parser.link_arguments(f"data.{attribute}", f"model.init_args.{attribute}", apply_on="instantiate")
        parser.set_defaults(defaults)

    def before_instantiate_classes(self) -> None:
        """W&B logger defaults; ``fit --ckpt_path last`` continues the newest run in its directory;
        checkpoints load with ``weights_only=True`` unless ``--weights_only false`` is given (torch
        before 2.6 defaults to False)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        apply_logger_defaults(config, MODEL_REGISTRY.name_of(self.task_class) if self.task_class else None)
        if self.subcommand == "fit":
            continue_last_run(config)
        if self.subcommand and config.get("weights_only") is None:
            config["weights_only"] = True

    def instantiate_classes(self) -> None:
        """Build the data module, model and trainer, and claim the run's directory.

        A constructor's own ``ValueError`` (a bad hyperparameter, or a trainer setting Lightning
        refuses, such as FSDP on a CPU) becomes a :class:`ConfigurationError` with its message
        alone, instead of jsonargparse's wrapper that dumps the whole namespace after it or a
        traceback; a zoo error anywhere in the chain is raised as it is (the command line prints
        the first one), so its message is never replaced by its cause's."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            causes = _causes(error)
            if any(isinstance(cause, ZooError) for cause in causes):
                raise  # the zoo's own error, which the command line prints as it is
            raise ConfigurationError(str(causes[-1])) from error
        if self.subcommand in ("fit", "validate", "test"):
            claim_run_directory(self.trainer.logger)

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """Lightning's, without the zoo's ``checkpoint`` callback when ``--trainer.enable_checkpointing
        false`` turns checkpointing off, as it does with Lightning's own default callback (the
        trainer refuses a ``ModelCheckpoint`` then); nothing is written, nothing resumes."""
        callbacks = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if config.get("enable_checkpointing") is False:
            callbacks = [callback for callback in callbacks if not isinstance(callback, ModelCheckpoint)]
        return self._instantiate_trainer(config, callbacks)

    def before_fit(self) -> None:
        """Beside Lightning's model summary (when it is on): which attention each layer holds."""
        if self.trainer.is_global_zero and any(isinstance(c, ModelSummary) for c in self.trainer.callbacks):
            precision = str(self.trainer.precision)
            dtype = (
                torch.bfloat16
                if precision.startswith("bf16")
                else torch.float16
                if precision.startswith("16")
                else torch.float32
            )
            lines = attention_by_layer(self.model, self.trainer.strategy.root_device, dtype)
            if lines:
                print("attention by layer:\n  " + "\n  ".join(lines), flush=True)

    def after_fit(self) -> None:
        """``--test_after_fit true``: test the best checkpoint (the last weights without one)
        with the same trainer, so the run's metrics land in its directory; then :meth:`report`."""
        config = self.config["fit"]
        if config.get("test_after_fit"):
            best = getattr(self.trainer.checkpoint_callback, "best_model_path", "")
            self.trainer.test(
                self.model, datamodule=self.datamodule, ckpt_path=best or None, weights_only=config.get("weights_only")
            )
        self.report("fit")

    def after_validate(self) -> None:
        self.report("validate")

    def after_test(self) -> None:
        self.report("test")

    def report(self, subcommand: str) -> None:
        """Print the run's closing lines (:func:`zoo.summary.run_summary`) after Lightning's output."""
        if self.trainer.is_global_zero:
            print("\n".join(run_summary(self.trainer, subcommand)), flush=True)

    def after_predict(self) -> None:
        """Print predictions, one per line (global zero only)."""
        if not self.trainer.is_global_zero:
            return
        for batch in self.trainer.predict_loop.predictions or []:
            for item in batch:
                print(format_row(item))


def _causes(error: BaseException) -> list[BaseException]:
    """``error`` and its chain of causes, down to where it was first raised."""
    chain = [error]
    while chain[-1].__cause__ is not None and all(chain[-1].__cause__ is not e for e in chain):
        chain.append(chain[-1].__cause__)
    return chain
