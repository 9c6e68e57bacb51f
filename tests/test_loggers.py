"""One seeded run logged by TensorBoard, CSV and Weights & Biases (offline): each logger's files
hold the same metrics, and the W&B run holds the full resolved configuration; the commands run
in a run directory are recorded as they are typed again."""

from __future__ import annotations

import csv
import json
import os
import shlex
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.wandb_offline import wandb_records
from zoo.commands import main
from zoo.loggers import command_line, read_commands, record_command

FIT = [
    "fit",
    "--model",
    "nadaraya_watson",
    "--model.attention_kwargs",
    '{"bandwidth": 0.7}',
    "--trainer.max_epochs",
    "3",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def _tensorboard(run: Path) -> dict[str, float]:
    events = EventAccumulator(str(run))
    events.Reload()
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}


def _csv(run: Path) -> dict[str, float]:
    values: dict[str, float] = {}
    with (run / "metrics.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            values |= {key: float(value) for key, value in row.items() if value}
    return values


def _wandb(root: Path) -> tuple[dict[str, float], dict]:
    """The last logged value of each metric, and the run's configuration, from the offline run."""
    (log,) = root.glob("wandb/offline-run-*/run-*.wandb")
    metrics, config = {}, {}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            for item in record.history.item:
                value = json.loads(item.value_json)
                if isinstance(value, float):
                    metrics[item.key or "/".join(item.nested_key)] = value
        elif kind in ("run", "config"):
            updates = record.run.config.update if kind == "run" else record.config.update
            config |= {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in updates}
    return metrics, config


@pytest.fixture
def wandb_offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    import wandb

    wandb.finish()  # Lightning leaves the run open for the process to finish


def test_every_logger_records_the_same_metrics(in_tmp, wandb_offline) -> None:
    main(FIT)  # TensorBoard, the default
    (tensorboard_run,) = in_tmp.glob("runs/nadaraya_watson/version_*")
    main([*FIT, "--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", "csv"])
    (csv_run,) = in_tmp.glob("csv/*/version_*")
    main([*FIT, "--trainer.logger", "WandbLogger"])
    import wandb

    wandb.finish()

    tensorboard, table, (summary, config) = _tensorboard(tensorboard_run), _csv(csv_run), _wandb(in_tmp / "runs")
    for name in ("val/mse", "val/mse_truth", "train/loss"):
        assert tensorboard[name] == pytest.approx(table[name], rel=1e-6) == pytest.approx(summary[name], rel=1e-6)
    assert tensorboard["val/mse"] < 1.5  # a model that learned, not an empty log

    # The full resolved configuration, defaults included, recorded in the W&B run.
    model = config["model"]
    assert model["class_path"] == "zoo.tasks.regression.NadarayaWatson"
    assert model["init_args"]["attention_kwargs"] == {"bandwidth": 0.7} and model["init_args"]["lr"] == 5.0
    assert config["data"]["init_args"]["num_train"] == 50 and config["trainer"]["max_epochs"] == 3
    # W&B runs default to runs/<model>/<run id>, beside the TensorBoard versions.
    (wandb_run,) = (path for path in in_tmp.glob("runs/nadaraya_watson/*") if not path.name.startswith("version_"))
    assert (wandb_run / "checkpoints" / "last.ckpt").is_file() and (wandb_run / "config.yaml").is_file()
    assert (wandb_run / "images" / "val_fit.png").is_file()


def test_runs_claim_distinct_directories_even_when_they_start_together(tmp_path) -> None:
    """Twelve claims racing on one directory (Lightning's listing would give several the same
    ``version_N``) get twelve directories; an existing ``version_4`` is skipped, not reused."""
    from concurrent.futures import ThreadPoolExecutor

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from zoo.loggers import claim_run_directory

    (tmp_path / "model" / "version_4").mkdir(parents=True)

    def claim(index: int) -> Path:
        logger = (TensorBoardLogger, CSVLogger)[index % 2](save_dir=str(tmp_path), name="model")
        directory = claim_run_directory(logger)
        assert directory is not None and Path(logger.log_dir) == directory
        return directory

    with ThreadPoolExecutor(12) as pool:
        claimed = list(pool.map(claim, range(12)))
    assert sorted(int(path.name[8:]) for path in claimed) == list(range(5, 17))
    assert all(path.is_dir() for path in claimed)


def test_commands_are_recorded_as_typed_again_plugins_included(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ZOO_IMPORTS", os.pathsep.join(["/plugins/cosine.py", "my_package.attention"]))
    fit = command_line(["fit", "--model", "sentiment", "--model.attention", "[local, cosine]"])
    assert fit == ["python", "-m", "zoo", "--import", "/plugins/cosine.py", "--import", "my_package.attention",
                   "fit", "--model", "sentiment", "--model.attention", "[local, cosine]"]  # fmt: skip
    record_command(tmp_path, fit)
    record_command(tmp_path, command_line(["fit", "--model", "sentiment", "--ckpt_path", "last"]))
    with (tmp_path / "commands.jsonl").open("a") as handle:
        handle.write('{"argv": ["python", "-m", "zo')  # torn by a crash
    commands = read_commands(tmp_path)
    assert commands[0] == shlex.join(fit) and "'[local, cosine]'" in commands[0]
    assert len(commands) == 2 and commands[1].endswith("fit --model sentiment --ckpt_path last")
    assert read_commands(tmp_path / "elsewhere") == []
