"""Two CPU processes (DDP, gloo) against one: the same training, the same metrics on the whole split.

Multi-process runs start ``python -m zoo`` in a subprocess (Lightning re-executes the command
line for each process, which a pytest process cannot be). Metrics are read back from the CSV
logger's ``metrics.csv``; CSV keeps every digit, so "equal" means equal.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers import PROJECT_ROOT
from tests.helpers.steplog import read_losses
from zoo.commands import main

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
TWO_PROCESSES = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]


def run_zoo(*args: str, cwd: Path, returncode: int = 0, timeout: float = 900) -> str:
    """``python -m zoo ARGS`` in ``cwd`` with this environment; its output, or a failure showing it.

    The project root is on its ``PYTHONPATH``, for this checkout's ``zoo`` and for test
    callbacks such as ``tests.helpers.steplog.StepLosses``.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "zoo", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    output = result.stdout + result.stderr
    assert result.returncode == returncode, (
        f"python -m zoo {' '.join(args)} exited with {result.returncode}:\n{output[-8000:]}"
    )
    return output


def csv_metrics(save_dir: Path) -> dict[str, float]:
    """The last value of every metric in the newest CSV run under ``save_dir``."""
    newest = max(save_dir.glob("*/version_*/metrics.csv"), key=lambda path: path.stat().st_mtime)
    values: dict[str, float] = {}
    with newest.open(newline="") as handle:
        for row in csv.DictReader(handle):
            values |= {key: float(value) for key, value in row.items() if value not in ("", None)}
    return values


def _csv(directory: Path) -> list[str]:
    return ["--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", str(directory)]


def test_two_process_fit_of_kernel_regression_matches_one_process(in_tmp) -> None:
    """Each process takes half the training queries, all attend to every training point, and
    DDP averages the two halves' gradients: the full-batch step of one process."""
    args = ["fit", "--model", "nadaraya_watson", "--trainer.max_epochs", "4", *QUIET]
    main([*args, *_csv(in_tmp / "one")])
    output = run_zoo(*args, *TWO_PROCESSES, *_csv(in_tmp / "two"), cwd=in_tmp)
    assert "distributed_backend=gloo" in output and "Starting with 2 processes" in output
    one, two = csv_metrics(in_tmp / "one"), csv_metrics(in_tmp / "two")
    assert two["val/mse"] == pytest.approx(one["val/mse"], rel=1e-5)
    assert two["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5)
    run = next((in_tmp / "two").glob("*/version_*"))
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "config.yaml").is_file()
    assert (run / "images" / "val_fit.png").is_file()  # drawn by global zero from both processes' points


@pytest.mark.slow  # a real multi-process run; make test PYTEST_ARGS="-m slow"
def test_kernel_regression_with_nothing_to_learn_refuses_several_processes_clearly(in_tmp) -> None:
    output = run_zoo(
        "fit",
        "--model",
        "nadaraya_watson",
        "--model.learnable",
        "false",
        *TWO_PROCESSES,
        *QUIET,
        cwd=in_tmp,
        returncode=2,
    )
    assert "no parameter to train" in output and "--trainer.devices 1" in output and "Traceback" not in output


# Both validation splits have an odd number of examples: two processes cannot split them evenly,
# and Lightning's own DistributedSampler would evaluate one example twice.


def _fra_txt_slice(shared_data: Path, directory: Path) -> Path:
    """The first 4,100 lines of the real corpus: 109 validation sentences."""
    with zipfile.ZipFile(shared_data / "fra-eng.zip") as archive:
        (member,) = (name for name in archive.namelist() if name.endswith("fra.txt"))
        text = archive.read(member).decode("utf-8")
    path = directory / "fra.txt"
    path.write_text("\n".join(text.splitlines()[:4100]) + "\n", encoding="utf-8")
    return path


def _sst2_odd(shared_data: Path, directory: Path) -> Path:
    """SST-2 in the hub layout with 871 of its 872 validation sentences."""
    root = directory / "sst2"
    (root / "data").mkdir(parents=True)
    shutil.copy(shared_data / "sst2" / "data" / "train-00000-of-00001.parquet", root / "data")
    validation = pq.read_table(shared_data / "sst2" / "data" / "validation-00000-of-00001.parquet")
    pq.write_table(validation.slice(0, 871), root / "data" / "validation-00000-of-00001.parquet")
    return root


def _shakespeare_slice(shared_data: Path, directory: Path) -> Path:
    """The first 60,000 characters of Tiny Shakespeare (validation: the last 6,000)."""
    path = directory / "shakespeare.txt"
    path.write_text(
        (shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:60_000], encoding="utf-8"
    )
    return path


MODELS = {
    "gpt": (
        [
            *["--model.d_model", "32", "--model.num_heads", "2", "--model.num_layers", "1"],
            *["--data.block_size", "32", "--data.batch_size", "16", "--data.train_windows", "800"],
        ],
        [],
    ),
    "sentiment": (
        [
            "--model.d_model",
            "32",
            "--model.num_heads",
            "2",
            "--model.num_layers",
            "1",
            "--model.ffn_hidden",
            "64",
            "--model.heatmap_examples",
            "0",
            "--data.limit_train",
            "2000",
        ],
        ["val/acc", "val/f1"],
    ),
    "transformer": (
        [
            "--model.d_model",
            "32",
            "--model.num_heads",
            "2",
            "--model.num_encoder_layers",
            "1",
            "--model.num_decoder_layers",
            "1",
            "--model.ffn_hidden",
            "64",
            "--model.max_decode_len",
            "12",
            "--model.heatmap_examples",
            "0",
            "--model.warmup_steps",
            "20",
            "--model.lr",
            "0.003",
            "--data.vocab_size",
            "500",
            "--data.batch_size",
            "32",
        ],
        ["val/bleu"],
    ),
}


#: gpt's in the default run; the sentiment and translation models' (45 s on 2 cores) with -m slow
SLOW_MODELS = {"sentiment", "transformer"}


@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_MODELS else m for m in MODELS])
def test_two_process_validation_equals_one_process_on_the_same_checkpoint(shared_data, in_tmp, model) -> None:
    """The whole validation split, each sentence once: exactly the single-process accuracy and BLEU."""
    small, exact = MODELS[model]
    corpus = {"sentiment": _sst2_odd, "transformer": _fra_txt_slice, "gpt": _shakespeare_slice}[model]
    data = ["--data.path", str(corpus(shared_data, in_tmp))]
    common = ["--model", model, *data, *small, *QUIET]
    main(["fit", *common, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "100"])
    checkpoint = str(next(in_tmp.glob(f"runs/{model}/version_0/checkpoints/last.ckpt")))

    main(["validate", *common, "--ckpt_path", checkpoint, *_csv(in_tmp / "one")])
    run_zoo("validate", *common, "--ckpt_path", checkpoint, *TWO_PROCESSES, *_csv(in_tmp / "two"), cwd=in_tmp)
    one, two = csv_metrics(in_tmp / "one"), csv_metrics(in_tmp / "two")
    for name in exact:
        assert two[name] == one[name], name
    assert two["val/loss"] == pytest.approx(one["val/loss"], rel=1e-6)  # float sums, in another order
    if model == "gpt":
        assert two["val/ppl"] == pytest.approx(one["val/ppl"], rel=1e-6)
        assert two["val/bits_per_char"] == pytest.approx(one["val/bits_per_char"], rel=1e-6)
    if model == "transformer":
        assert one["val/bleu"] > 0  # a real comparison, not of two zeros


@pytest.mark.slow  # a real multi-process run; make test PYTEST_ARGS="-m slow"
@pytest.mark.parametrize("attention", ["synthesizer", "average"])
def test_two_process_fit_over_an_attention_that_reads_no_keys_needs_no_unused_parameter_search(
    shared_data, in_tmp, attention
) -> None:
    """The random ``synthesizer`` and ``average`` read neither queries nor keys. Their layers build
    neither projection, so plain ``ddp`` (no ``find_unused_parameters``) trains them. A parameter
    without a gradient would stop the second step with DDP's unfinished-reduction error."""
    small, _ = MODELS["sentiment"]
    args = ["--model", "sentiment", "--data.path", str(shared_data / "sst2"), *small, *QUIET]
    args += ["--model.attention", attention, "--trainer.max_steps", "3", "--trainer.limit_val_batches", "2"]
    run_zoo("fit", *args, *TWO_PROCESSES, cwd=in_tmp)
    (checkpoint,) = in_tmp.glob("runs/sentiment/*/checkpoints/last.ckpt")
    assert torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"] == 3


@pytest.mark.parametrize(
    "signalled",
    [pytest.param("0", marks=pytest.mark.slow), pytest.param("null", marks=pytest.mark.slow)],
    ids=["first-process", "every-process"],
)
def test_two_process_run_stopped_by_sigterm_resumes_on_the_same_trajectory(in_tmp, signalled) -> None:
    """SIGTERM to the first process alone, as ``kill PID`` sends it, or to every process, as a
    scheduler does: both processes stop after the same step and save last.ckpt, and
    ``--ckpt_path last`` continues each one's losses exactly (three shuffled steps an epoch;
    the signal comes in the middle of the third epoch)."""
    fit = [
        "fit",
        "--model",
        "nadaraya_watson",
        "--data.batch_size",
        "10",
        "--trainer.max_epochs",
        "4",
        *QUIET,
        *TWO_PROCESSES,
        "--trainer.callbacks+=tests.helpers.steplog.StepLosses",
        "--trainer.callbacks.path",
    ]
    run_zoo(*fit, str(in_tmp / "reference{rank}.jsonl"), "--trainer.logger.name", "reference", cwd=in_tmp)
    output = run_zoo(
        *fit,
        str(in_tmp / "interrupted{rank}.jsonl"),
        "--trainer.callbacks.signal_after_step",
        "7",
        "--trainer.callbacks.signal_rank",
        signalled,
        cwd=in_tmp,
    )
    assert (
        "Saved" in output
        and (in_tmp / "runs" / "nadaraya_watson" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    )
    run_zoo(*fit, str(in_tmp / "resumed{rank}.jsonl"), "--ckpt_path", "last", cwd=in_tmp)
    for rank in (0, 1):
        reference = read_losses(in_tmp / f"reference{rank}.jsonl")
        interrupted, resumed = (
            read_losses(in_tmp / f"interrupted{rank}.jsonl"),
            read_losses(in_tmp / f"resumed{rank}.jsonl"),
        )
        assert (
            sorted(reference) == list(range(1, 13)) and max(interrupted) == 7 and sorted(resumed) == list(range(8, 13))
        )
        for step, loss in (interrupted | resumed).items():
            assert loss == pytest.approx(reference[step], rel=1e-6, abs=1e-9), f"process {rank}, step {step}"
