"""Full training runs behind the README's results tables.

Usage (on an otherwise idle machine; each run takes minutes to tens of minutes):

    python benchmarks/full_runs.py --data ../shared/data RUN [RUN ...] [--extra --model.dropout 0.3 ...]
    python benchmarks/full_runs.py --list

Each run fits through the zoo's CLI (its default config plus the flags below), then tests
the last checkpoint, and appends one JSON line to ``benchmarks/results.jsonl`` with the
command, the run directory, the fit wall time (validation included) and the test metrics
(read from the test's ``metrics.csv``). Each command's directory is the one it reports
(``run directory: ...``), so several scripts may run at once. Fresh processes per run keep
one run's memory state from slowing the next.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from zoo.summary import RUN_DIRECTORY_LABEL

RESULTS = Path(__file__).with_name("results.jsonl")
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def runs(data: str) -> dict[str, list[str]]:
    """Run name -> the ``fit`` arguments (the test reuses them)."""
    fra = ["--data.path", f"{data}/fra-eng.zip"]
    return {
        "nw_average": ["--model", "nadaraya_watson", "--model.attention", "average"],
        "nw_fixed": ["--model", "nadaraya_watson", "--model.learnable", "false"],
        "nw_learned": ["--model", "nadaraya_watson"],
        "sst2": ["--model", "sentiment", "--data.path", f"{data}/sst2"],
        "sst2_local": [
            "--model",
            "sentiment",
            "--config",
            "zoo/configs/sentiment_local.yaml",
            "--data.path",
            f"{data}/sst2",
        ],
        "imdb": ["--model", "sentiment", "--config", "zoo/configs/sentiment_imdb.yaml", "--data.path", f"{data}/imdb"],
        "transformer": ["--model", "transformer", *fra],
        "seq2seq": ["--model", "seq2seq", *fra],
    }


def _run_directory(stdout: str) -> Path:
    """The directory a zoo command reports in its closing lines (never the newest one on disk,
    which is another run's when two overlap)."""
    for line in stdout.splitlines():
        if line.startswith(RUN_DIRECTORY_LABEL):
            return Path(line.removeprefix(RUN_DIRECTORY_LABEL).strip())
    raise RuntimeError(f"the command reported no '{RUN_DIRECTORY_LABEL}' line")


def _zoo(*args: str) -> str:
    """Run ``python -m zoo ARGS`` in a fresh process, echo its standard output, return it."""
    out = subprocess.run(
        [sys.executable, "-m", "zoo", *args, *QUIET], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    print(out, end="", flush=True)
    return out


def run(name: str, fit_args: list[str]) -> dict:
    """Fit, then test the last checkpoint, in fresh processes; return the record."""
    model = fit_args[fit_args.index("--model") + 1]
    start = time.perf_counter()
    run_dir = _run_directory(_zoo("fit", *fit_args))
    fit_seconds = time.perf_counter() - start
    csv_logger = [
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir",
        "runs",
        "--trainer.logger.name",
        f"{model}_test",
    ]
    test_dir = _run_directory(
        _zoo("test", *fit_args, "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt"), *csv_logger)
    )
    with (test_dir / "metrics.csv").open(newline="", encoding="utf-8") as handle:
        metrics = {
            key: float(value)
            for row in csv.DictReader(handle)
            for key, value in row.items()
            if key.startswith("test/") and value
        }
    return {
        "run": name,
        "command": "python -m zoo fit " + " ".join(fit_args),
        "run_dir": str(run_dir),
        "fit_seconds": round(fit_seconds, 1),
        "test": metrics,
        "torch": torch.__version__,
        "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
        "date": time.strftime("%Y-%m-%d"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="runs to do (default: all)")
    parser.add_argument("--data", default="../shared/data", help="directory of the local corpora")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more fit arguments for every run (last)")
    args = parser.parse_args()
    table = runs(args.data)
    if args.list:
        print("\n".join(f"{k}: {' '.join(v)}" for k, v in table.items()))
        return
    for name in args.names or list(table):
        record = run(name, table[name] + args.extra)
        with RESULTS.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
