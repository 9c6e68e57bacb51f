"""The ``torch_compile`` option: a compiled model trains, and checkpoints load either way."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from zoo.commands import main
from zoo.datamodules.synthetic import SyntheticRegressionDataModule
from zoo.tasks import NadarayaWatson

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _fit(root: Path, torch_compile: bool) -> Path:
    L.seed_everything(0)
    checkpoints = ModelCheckpoint(dirpath=root / "checkpoints", save_last=True)
    trainer = L.Trainer(
        max_steps=3,
        limit_val_batches=0,
        logger=False,
        callbacks=[checkpoints],
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    task = NadarayaWatson(torch_compile=torch_compile)
    trainer.fit(task, datamodule=SyntheticRegressionDataModule())
    assert task._model_compiled == torch_compile
    return root / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("compiled_first", [True, False], ids=["save_compiled", "save_eager"])
def test_checkpoints_have_the_same_keys_and_load_either_way(in_tmp, compiled_first: bool) -> None:
    checkpoint = _fit(in_tmp / "first", compiled_first)
    keys = set(torch.load(checkpoint, weights_only=False)["state_dict"])
    assert not any("_orig_mod" in key for key in keys)
    assert keys == set(NadarayaWatson().state_dict())  # an untrained, uncompiled task's keys

    reloaded = NadarayaWatson.load_from_checkpoint(checkpoint, torch_compile=not compiled_first)  # strict loading
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=in_tmp)
    metrics = trainer.test(reloaded, datamodule=SyntheticRegressionDataModule(), verbose=False)[0]
    assert reloaded._model_compiled == (not compiled_first)
    assert metrics["test/mse"] > 0


def test_cli_flag(in_tmp) -> None:
    main(["fit", "--model", "nadaraya_watson", "--model.torch_compile", "true", "--trainer.max_epochs", "2", *QUIET])
    run = sorted((in_tmp / "runs" / "nadaraya_watson").glob("version_*"))[-1]
    assert (run / "checkpoints" / "last.ckpt").is_file()
    main(["test", "--model", "nadaraya_watson", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *QUIET])
