"""``python -m zoo fit --model recall`` end to end: a recurrent family and a hybrid stack train on
MQAR with their positions chosen by family, a fit interrupted (SIGTERM) and resumed with
``--ckpt_path last`` on the same losses as one straight run, MAD's compression on its
auto-encoder, and bad input as one line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

import zoo
from tests.helpers.cli import QUIET, SMALL, flags, latest_run
from tests.helpers.steplog import read_losses
from zoo.commands import main
from zoo.models import SequenceAutoEncoder
from zoo.positions.absolute import LearnedPositions, NoPositions

TINY = SMALL["recall"]
"""Width 32, and a tiny MQAR cell (32 tokens, 2 pairs, 64 ids): 40 training batches an epoch."""


def _fit(log: Path, *extra: str, attention: str = "dot_product", steps: int = 12, small: list[str] = TINY) -> list[str]:
    return [
        "fit", "--model", "recall", *small, "--model.attention", attention, "--trainer.max_steps", str(steps),
        "--trainer.val_check_interval", "12", "--trainer.limit_val_batches", "2",
        "--trainer.callbacks+=tests.helpers.steplog.StepLosses", "--trainer.callbacks.path", str(log),
        "--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", "runs", "--trainer.logger.name", "recall",
        *QUIET, *extra,
    ]  # fmt: skip


def _last_metrics(run: Path) -> dict[str, float]:
    with (run / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {key: float(value) for row in rows for key, value in row.items() if value}


@pytest.mark.parametrize(
    ("attention", "positions"),
    [
        ("gated_deltanet", NoPositions),
        ("[gated_deltanet, dot_product]", NoPositions),
        ("dot_product", LearnedPositions),
    ],
)
def test_a_family_trains_on_mqar_from_the_command_line(attention, positions, in_tmp: Path, capsys) -> None:
    main(_fit(in_tmp / "losses.jsonl", attention=attention, steps=40))
    losses = read_losses(in_tmp / "losses.jsonl")
    assert sorted(losses) == list(range(1, 41))
    assert sum(losses[s] for s in range(37, 41)) / 4 < sum(losses[s] for s in range(1, 5)) / 4 - 0.3, losses
    out = capsys.readouterr().out
    assert "val/accuracy" in out and "val/accuracy/num_kv_pairs_2" in out
    run = latest_run("recall", in_tmp)
    metrics = _last_metrics(run)
    assert 0 <= metrics["val/accuracy"] <= 1 and metrics["val/loss"] > 0
    model = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt"))
    assert isinstance(model.model.position, positions)  # positions by family, as Zoology sets them
    assert all(block.ffn is None for block in model.model.blocks)  # the default config: no MLP


def test_an_interrupted_fit_resumes_on_the_straight_runs_losses(in_tmp: Path) -> None:
    main(_fit(in_tmp / "straight.jsonl", "--trainer.logger.version", "straight"))
    straight = read_losses(in_tmp / "straight.jsonl")
    with pytest.raises(SystemExit):  # SIGTERM after step 6: last.ckpt is saved, the fit stops
        main(_fit(in_tmp / "first.jsonl", "--trainer.callbacks.signal_after_step", "6"))
    main(_fit(in_tmp / "resumed.jsonl", "--ckpt_path", "last"))
    resumed = read_losses(in_tmp / "first.jsonl") | read_losses(in_tmp / "resumed.jsonl")
    assert sorted(resumed) == list(range(1, 13))
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], rel=1e-5), f"step {step}"


def test_mads_compression_trains_its_autoencoder_and_reloads_it(in_tmp: Path) -> None:
    small = [*flags("model", d_model=32, num_heads=2, lr=1e-2), "--data", "mad"]
    small += flags("data", task="compression", num_test=32, batch_size=32)
    main(_fit(in_tmp / "losses.jsonl", steps=24, small=small))
    losses = read_losses(in_tmp / "losses.jsonl")
    assert sum(losses[s] for s in range(21, 25)) / 4 < sum(losses[s] for s in range(1, 5)) / 4 - 0.05, losses
    run = latest_run("recall", in_tmp)
    assert 0 <= _last_metrics(run)["val/accuracy"] <= 1
    model = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt"))
    assert model.hparams.backbone == "autoencoder" and isinstance(model.model, SequenceAutoEncoder)
    tokens = torch.randint(0, 15, (2, 32))
    assert model(tokens).shape == (2, 32, 16)  # every position decoded from the pooled last one


def _one_line_error(capsys, args: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2  # the error and the ZOO_DEBUG hint
    return err


def test_bad_input_is_one_line(in_tmp: Path, capsys) -> None:
    fit = ["fit", "--model", "recall", "--trainer.fast_dev_run", "true", *QUIET]
    corpus = in_tmp / "corpus.txt"
    corpus.write_text("a text without labels.\n" * 40)
    text = ["--data", "zoo.datamodules.text.TextDataModule", *flags("data", path=corpus, block_size=16)]
    assert "these batches lack inputs, targets, scored" in _one_line_error(capsys, [*fit, *text])
    width = flags("model", d_model=30, num_heads=4)
    assert "must be divisible by num_heads (4)" in _one_line_error(capsys, [*fit, *TINY, *width])
    assert "needs 0 < lr" in _one_line_error(capsys, [*fit, *TINY, "--model.lr", "0"])
    assert "target_accuracy is an accuracy" in _one_line_error(capsys, [*fit, *TINY, "--model.target_accuracy", "2"])
