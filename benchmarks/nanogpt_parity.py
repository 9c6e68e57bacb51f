"""The zoo's ``gpt`` against nanoGPT's own ``train.py`` on a ``shakespeare_char`` recipe, side by
side on one machine: validation loss after the recipe's iterations, the time of a training
iteration (median, evaluations left out), and the training time each takes to reach a
validation loss (``--target``: its iterations up to the first evaluation at or below it, times
its median iteration).

nanoGPT is not part of the zoo: give a checkout of it (karpathy/nanoGPT, MIT) with ``--nanogpt``;
its ``data/shakespeare_char`` is prepared from ``--data`` by its own ``prepare.py`` (which
downloads nothing when ``input.txt`` is there). The runs alternate, nanoGPT first, ``--rounds``
times, each in a fresh process, alone on the machine::

    python benchmarks/nanogpt_parity.py --nanogpt /path/to/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --rounds 2 --out benchmarks/results/nanogpt_parity.json

``--recipe cpu`` (the default) is nanoGPT's README command for CPUs: 4 layers, 4 heads, width 128,
block 64, batch 12, 2,000 iterations, learning rate 1e-3 decayed to 1e-4 after 100 warm-up
iterations, beta2 0.99, no dropout, weight decay 0.1, clipping at 1.0, no biases
(``configs/gpt_shakespeare.yaml`` with ``configs/gpt_shakespeare_cpu.yaml`` on it, as nanoGPT's
command overrides its recipe). ``--recipe gpu`` is its GPU recipe (``config/train_shakespeare_char.py``:
6 layers, 6 heads, width 384, block 256, batch 64, dropout 0.2) on CUDA in bfloat16 with
``torch.compile`` on both sides (nanoGPT's defaults there; the zoo's ``bf16-mixed`` and
``--model.torch_compile true``), its schedule decayed over ``--iterations`` on both sides.
nanoGPT estimates the validation loss on ``eval_iters`` random batches (20 in the CPU command,
its default 200 in the GPU recipe); the zoo evaluates every validation window once. nanoGPT runs
with the allocator settings the zoo's command gives itself (:func:`zoo.allocator.glibc_environment`),
so the times compare the models' code, not the allocators. Extra arguments after ``--`` go to the
zoo's fit.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from zoo.allocator import glibc_environment
from zoo.bench.report import environment

ROOT = Path(__file__).resolve().parents[1]

NANOGPT_FLAGS = {
    "cpu": ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
            "--log_interval=1", "--block_size=64", "--batch_size=12", "--dropout=0.0"],
    "gpu": ["config/train_shakespeare_char.py", "--device=cuda", "--compile=True", "--dtype=bfloat16",
            "--log_interval=1"],
}  # fmt: skip
"""nanoGPT's commands for each recipe, but for its shape (``--n_layer``, ``--n_head``, ``--n_embd``:
:func:`shape_flags`), ``--max_iters``, ``--lr_decay_iters`` and ``--out_dir``, added per run."""

#: the zoo's configs and flags for each recipe (the model's shape, if not the recipe's, comes beside)
ZOO_FLAGS = {
    "cpu": ["--config", str(ROOT / "configs/gpt_shakespeare.yaml"), "--config", str(ROOT / "configs/gpt_shakespeare_cpu.yaml")],
    "gpu": ["--config", str(ROOT / "configs/gpt_shakespeare.yaml"), "--trainer.accelerator", "gpu",
            "--trainer.precision", "bf16-mixed", "--model.torch_compile", "true"],
}  # fmt: skip

#: the README command's shape: 4 layers, 4 heads, width 128; and the GPU recipe's
README_SHAPE, GPU_SHAPE = (4, 4, 128), (6, 6, 384)


def shape_flags(layers: int, heads: int, width: int, recipe: str = "cpu") -> tuple[list[str], list[str]]:
    """The same model shape as nanoGPT's flags and as the zoo's (the zoo's recipe has its own)."""
    nanogpt = [f"--n_layer={layers}", f"--n_head={heads}", f"--n_embd={width}"]
    if (layers, heads, width) == (README_SHAPE if recipe == "cpu" else GPU_SHAPE):
        return nanogpt, []
    return nanogpt, [f"--model.num_layers={layers}", f"--model.num_heads={heads}", f"--model.d_model={width}"]


_ITERATION = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
_EVALUATION = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def prepare_nanogpt(nanogpt: Path, data: Path) -> None:
    """nanoGPT's character data, from ``data`` by its own ``prepare.py``."""
    folder = nanogpt / "data" / "shakespeare_char"
    shutil.copyfile(data, folder / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True, capture_output=True)


def run_nanogpt(nanogpt: Path, recipe: str, iterations: int, shape: list[str]) -> dict[str, Any]:
    """One nanoGPT run: its iteration times (evaluation iterations left out), validation losses
    by iteration and the process's wall time."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "train.py", *NANOGPT_FLAGS[recipe], *shape, f"--max_iters={iterations}",
                   f"--lr_decay_iters={iterations}", f"--out_dir={out}"]  # fmt: skip
        started = time.perf_counter()
        env = os.environ | glibc_environment()  # the allocator the zoo's own command sets itself
        lines = subprocess.run(
            command, cwd=nanogpt, env=env, check=True, capture_output=True, text=True
        ).stdout.splitlines()
        wall = time.perf_counter() - started
    evaluations = {int(m[1]): float(m[3]) for line in lines if (m := _EVALUATION.match(line))}
    times = [float(m[2]) / 1e3 for line in lines if (m := _ITERATION.match(line)) and int(m[1]) not in evaluations]
    return {
        "seconds_per_iteration": statistics.median(times[5:] or times),  # nanoGPT too lets 5 iterations settle
        "val_loss": evaluations,
        "final_val_loss": evaluations[max(evaluations)],
        "wall_seconds": wall,
    }


def run_zoo(data: Path, recipe: str, iterations: int, extra: list[str]) -> dict[str, Any]:
    """One zoo run of the recipe: the StepTimer's median step, the validation losses by step and
    the process's wall time."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "zoo", "fit", "--model", "gpt", *ZOO_FLAGS[recipe],
            "--data.path", str(data), "--trainer.max_steps", str(iterations), "--trainer.enable_progress_bar", "false",
            "--trainer.logger", "CSVLogger", "--trainer.logger.init_args.save_dir", out,
            "--trainer.callbacks+=zoo.compare.timing.StepTimer", *extra,
        ]  # fmt: skip
        started = time.perf_counter()
        output = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - started
        run = Path(next(line.split(": ", 1)[1] for line in output.splitlines() if line.startswith("run directory: ")))
        run = run if run.is_absolute() else ROOT / run
        timing = json.loads((run / "timing.json").read_text())
        with (run / "metrics.csv").open() as metrics:
            evaluations = {int(r["step"]): float(r["val/loss"]) for r in csv.DictReader(metrics) if r.get("val/loss")}
    return {
        "seconds_per_iteration": timing["seconds_per_step"],
        "val_loss": evaluations,
        "final_val_loss": evaluations[max(evaluations)],
        "wall_seconds": wall,
    }


def seconds_to(run: dict[str, Any], target: float) -> float | None:
    """Training time to the first evaluation at or below ``target``: its iterations times the
    median iteration (compilation and evaluations left out); None if no evaluation reaches it."""
    reached = [step for step, loss in sorted(run["val_loss"].items()) if loss <= target]
    return None if not reached else reached[0] * run["seconds_per_iteration"]


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    options.add_argument("--data", type=Path, required=True, help="Tiny Shakespeare's input.txt")
    options.add_argument(
        "--recipe", choices=sorted(NANOGPT_FLAGS), default="cpu", help="nanoGPT's CPU command or GPU recipe"
    )
    options.add_argument("--iterations", type=int, default=2000)
    options.add_argument(
        "--target", type=float, default=None, help="a validation loss: each side's training time to it"
    )
    options.add_argument("--rounds", type=int, default=2)
    options.add_argument("--out", type=Path)
    options.add_argument(
        "--shape", type=int, nargs=3, default=None, metavar=("LAYERS", "HEADS", "WIDTH"),
        help="the model's layers, heads and width, the same for both (default: the recipe's, 4 4 128 or 6 6 384)",
    )  # fmt: skip
    args, extra = options.parse_known_args()
    shape = tuple(args.shape) if args.shape is not None else README_SHAPE if args.recipe == "cpu" else GPU_SHAPE
    nanogpt_shape, zoo_shape = shape_flags(*shape, recipe=args.recipe)
    extra = [*zoo_shape, *(a for a in extra if a != "--")]
    prepare_nanogpt(args.nanogpt, args.data)
    runs: dict[str, list[dict[str, Any]]] = {"nanogpt": [], "zoo": []}
    for round_ in range(args.rounds):
        runs["nanogpt"].append(run_nanogpt(args.nanogpt, args.recipe, args.iterations, nanogpt_shape))
        runs["zoo"].append(run_zoo(args.data, args.recipe, args.iterations, extra))
        for name in runs:
            last = runs[name][-1]
            print(f"round {round_}: {name:8s} {1e3 * last['seconds_per_iteration']:.1f} ms/iteration, "
                  f"val loss {last['final_val_loss']:.4f}", flush=True)  # fmt: skip
    ratios = [z["seconds_per_iteration"] / n["seconds_per_iteration"] for n, z in zip(runs["nanogpt"], runs["zoo"])]
    summary = {name: {
        "seconds_per_iteration": statistics.median(r["seconds_per_iteration"] for r in rs),
        "final_val_loss": [r["final_val_loss"] for r in rs],
        "wall_seconds": [round(r["wall_seconds"], 1) for r in rs],
        **({"seconds_to_target": [seconds_to(r, args.target) for r in rs]} if args.target is not None else {}),
    } for name, rs in runs.items()}  # fmt: skip
    summary["time_ratio_zoo_to_nanogpt"] = ratios
    print(json.dumps(summary, indent=1))
    if args.out:
        device = torch.device("cuda" if args.recipe == "gpu" else "cpu")
        payload = {"environment": environment(device, sys.argv[1:], program="python benchmarks/nanogpt_parity.py"),
                   "runs": runs, "summary": summary}  # fmt: skip
        args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
