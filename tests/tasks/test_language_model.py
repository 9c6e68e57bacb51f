"""The ``gpt`` language model end to end: a fit on Tiny Shakespeare whose loss falls, its metrics,
nanoGPT's optimisation, ``zoo generate`` and ``zoo predict`` from the checkpoint alone, and bad
input as one line."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

import zoo
from tests.helpers import SHARED_DATA
from tests.helpers.cli import QUIET, flags, latest_run
from zoo.commands import main
from zoo.tasks import LanguageModel

SMALL = flags("model", d_model=32, num_heads=2, num_layers=2, warmup_steps=10, lr=3e-3, min_lr=3e-4)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small GPT fitted for 150 steps on Tiny Shakespeare (once for the module): its run directory."""
    corpus = SHARED_DATA / "tinyshakespeare" / "input.txt"
    if not corpus.is_file():
        pytest.skip(f"Tiny Shakespeare not found at {corpus}")
    root = tmp_path_factory.mktemp("gpt")
    cwd = Path.cwd()
    try:
        os.chdir(root)
        data = flags("data", path=corpus, block_size=32, batch_size=16)
        budget = flags("trainer", max_steps=150, val_check_interval=75, limit_val_batches=20)
        main(["fit", "--model", "gpt", *SMALL, *data, *budget, *QUIET, "--trainer.logger", "CSVLogger",
              "--trainer.logger.save_dir", "runs"])  # fmt: skip
        return root / latest_run("gpt", root)
    finally:
        os.chdir(cwd)


def _metrics(run: Path) -> list[dict[str, float]]:
    import csv

    with (run / "metrics.csv").open(newline="") as handle:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(handle)]


def test_the_validation_loss_falls_and_the_metrics_agree(fitted: Path) -> None:
    rows = [row for row in _metrics(fitted) if "val/loss" in row]
    first, last = rows[0], rows[-1]
    assert last["val/loss"] < first["val/loss"] - 0.1 < math.log(65) - 1.0  # uniform guessing: ln(65) = 4.17
    assert last["val/bits_per_char"] == pytest.approx(last["val/loss"] / math.log(2), rel=1e-5)
    assert last["val/ppl"] == pytest.approx(math.exp(last["val/loss"]), rel=1e-4)


def test_the_checkpoint_carries_the_codec_and_generates_alone(fitted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(fitted / "checkpoints" / "last.ckpt")
    model = zoo.load_checkpoint(checkpoint)
    assert isinstance(model, LanguageModel) and model.codec.unit == "char" and model.codec.vocab_size == 65
    args = ["generate", "--ckpt_path", checkpoint, "--prompt", "ROMEO:", "--max_new_tokens", "40"]
    main([*args, "--seed", "1"])
    first = capsys.readouterr().out
    main([*args, "--seed", "1"])
    assert capsys.readouterr().out == first and first.startswith("ROMEO:") and len(first) >= len("ROMEO:") + 40
    main([*args, "--seed", "1", "--no_cache"])  # the same draws without the cache: the same text
    assert capsys.readouterr().out == first
    main([*args, "--num_samples", "2", "--temperature", "0"])
    greedy = capsys.readouterr().out.split("---------------\n")
    assert len(greedy) == 2 and greedy[0] == greedy[1]  # greedy: the same sample twice


def test_predict_continues_each_prompt_on_one_line(fitted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(fitted / "checkpoints" / "last.ckpt")
    main(["predict", "--ckpt_path", checkpoint, "--data.predict_texts", '["ROMEO:", "JULIET:"]'])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["ROMEO:", "JULIET:"]
    assert all(len(line.split("\t")[1]) >= 200 for line in lines)  # the task's max_new_tokens, newlines escaped


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "snow ☃"], "The prompt holds characters this model's vocabulary lacks: '☃'"),
        (["--max_new_tokens", "-1"], "--max_new_tokens must be 0 or more"),
        (["--temperature", "-1"], "--temperature must be 0 or more (0 takes the most likely token) and --top_k"),
        (
            ["--top_k", "0"],
            "--temperature must be 0 or more (0 takes the most likely token) and --top_k at least 1; got 0.8 and 0.",
        ),
    ],
)
def test_bad_generation_input_is_one_line(fitted: Path, capsys, extra: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--ckpt_path", str(fitted / "checkpoints" / "last.ckpt"), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and len(err.splitlines()) == 2


def test_generate_refuses_a_checkpoint_of_another_task(shared_data: Path, in_tmp: Path, capsys) -> None:
    main(["fit", "--model", "nadaraya_watson", "--trainer.max_epochs", "1", *QUIET])
    checkpoint = next(in_tmp.glob("runs/nadaraya_watson/version_0/checkpoints/last.ckpt"))
    with pytest.raises(SystemExit):
        main(["generate", "--ckpt_path", str(checkpoint)])
    assert "holds model 'nadaraya_watson', which does not generate text" in capsys.readouterr().err


def test_a_non_causal_attention_is_refused_in_one_line(shared_data: Path, in_tmp: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--model", "gpt", "--data.path", str(shared_data / "tinyshakespeare" / "input.txt"),
              "--model.attention", "linformer", *QUIET])  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("error: Attention 'linformer' cannot be used by the GPT") and "Compatible" in err


def test_nanogpts_optimisation_decays_matrices_only_and_ends_at_min_lr() -> None:
    task = LanguageModel(vocab_size=65, block_size=16, d_model=16, num_heads=2, num_layers=2, lr=1e-3, min_lr=1e-4)
    task.trainer = type(
        "Trainer", (), {"estimated_stepping_batches": 200, "precision_plugin": None, "gradient_clip_val": 1.0}
    )()
    config = task.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    decayed, kept = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in kept["params"])
    assert any(p is task.model.embedding.weight for p in decayed["params"])  # embeddings decay, as nanoGPT's
    assert optimizer.defaults["betas"] == (0.9, 0.99)
    rates = []
    for _ in range(200):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] == pytest.approx(1e-3 / 100) and max(rates) == pytest.approx(1e-3)
    assert rates[-1] == pytest.approx(1e-4, rel=0.01)
    torch.testing.assert_close(torch.tensor(rates[99]), torch.tensor(1e-3))
