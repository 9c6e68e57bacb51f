"""The zoo's ``gpt`` against nanoGPT's own ``train.py`` on the ``shakespeare_char`` CPU recipe,
side by side on this machine: validation loss after the recipe's iterations, and the time of a
training iteration (median, evaluations left out).

nanoGPT is not part of the zoo: give a checkout of it (karpathy/nanoGPT, MIT) with ``--nanogpt``;
its ``data/shakespeare_char`` is prepared from ``--data`` by its own ``prepare.py`` (which
downloads nothing when ``input.txt`` is there). The runs alternate, nanoGPT first, ``--rounds``
times, each in a fresh process, alone on the machine::

    python benchmarks/nanogpt_parity.py --nanogpt /path/to/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --rounds 2 --out benchmarks/results/nanogpt_parity.json

Both use nanoGPT's README command for CPUs: 4 layers, 4 heads, width 128, block 64, batch 12,
2,000 iterations, learning rate 1e-3 decayed to 1e-4 after 100 warm-up iterations, beta2 0.99,
no dropout, weight decay 0.1, clipping at 1.0, no biases (``configs/gpt_shakespeare.yaml`` with
``configs/gpt_shakespeare_cpu.yaml`` on it, as nanoGPT's command overrides its recipe).
nanoGPT estimates the validation loss on ``eval_iters`` random batches (20 in that command); the
zoo evaluates every validation window once. Extra arguments after ``--`` go to the zoo's fit.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from zoo.bench.report import environment

ROOT = Path(__file__).resolve().parents[1]

NANOGPT_FLAGS = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1",
    "--block_size=64", "--batch_size=12", "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
"""nanoGPT's README command for a CPU, but for its shape (``--n_layer``, ``--n_head``, ``--n_embd``:
:func:`shape_flags`), ``--max_iters`` and ``--out_dir``, added per run."""

#: the README command's shape: 4 layers, 4 heads, width 128
README_SHAPE = (4, 4, 128)


def shape_flags(layers: int, heads: int, width: int) -> tuple[list[str], list[str]]:
    """The same model shape as nanoGPT's flags and as the zoo's (the zoo's recipe has the README's)."""
    nanogpt = [f"--n_layer={layers}", f"--n_head={heads}", f"--n_embd={width}"]
    if (layers, heads, width) == README_SHAPE:
        return nanogpt, []
    return nanogpt, [f"--model.num_layers={layers}", f"--model.num_heads={heads}", f"--model.d_model={width}"]


_ITERATION = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
_EVALUATION = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def prepare_nanogpt(nanogpt: Path, data: Path) -> None:
    """nanoGPT's character data, from ``data`` by its own ``prepare.py``."""
    folder = nanogpt / "data" / "shakespeare_char"
    shutil.copyfile(data, folder / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True, capture_output=True)


def run_nanogpt(nanogpt: Path, iterations: int, shape: list[str]) -> dict[str, Any]:
    """One nanoGPT run: its iteration times (evaluation iterations left out) and validation losses."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "train.py", *NANOGPT_FLAGS, *shape, f"--max_iters={iterations}", f"--out_dir={out}"]
        lines = subprocess.run(command, cwd=nanogpt, check=True, capture_output=True, text=True).stdout.splitlines()
    evaluations = {int(m[1]): float(m[3]) for line in lines if (m := _EVALUATION.match(line))}
    times = [float(m[2]) / 1e3 for line in lines if (m := _ITERATION.match(line)) and int(m[1]) not in evaluations]
    return {
        "seconds_per_iteration": statistics.median(times[5:]),  # nanoGPT too lets 5 iterations settle
        "val_loss": evaluations,
        "final_val_loss": evaluations[max(evaluations)],
    }


def run_zoo(data: Path, iterations: int, extra: list[str]) -> dict[str, Any]:
    """One zoo run of the recipe: the StepTimer's median step and the validation losses."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "zoo", "fit", "--model", "gpt", "--config", str(ROOT / "configs/gpt_shakespeare.yaml"),
            "--config", str(ROOT / "configs/gpt_shakespeare_cpu.yaml"),
            "--data.path", str(data), "--trainer.max_steps", str(iterations), "--trainer.enable_progress_bar", "false",
            "--trainer.logger.init_args.save_dir", out, "--trainer.callbacks+=zoo.compare.timing.StepTimer", *extra,
        ]  # fmt: skip
        output = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        run = Path(next(line.split(": ", 1)[1] for line in output.splitlines() if line.startswith("run directory: ")))
        timing = json.loads(((run if run.is_absolute() else ROOT / run) / "timing.json").read_text())
    final = float(re.search(r"val/loss ([\d.]+)", output)[1])  # the closing line: zoo fit: ..., val/loss X
    return {"seconds_per_iteration": timing["seconds_per_step"], "final_val_loss": final}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    options.add_argument("--data", type=Path, required=True, help="Tiny Shakespeare's input.txt")
    options.add_argument("--iterations", type=int, default=2000)
    options.add_argument("--rounds", type=int, default=2)
    options.add_argument("--out", type=Path)
    options.add_argument(
        "--shape", type=int, nargs=3, default=README_SHAPE, metavar=("LAYERS", "HEADS", "WIDTH"),
        help="the model's layers, heads and width, the same for both (default: the README command's 4 4 128)",
    )  # fmt: skip
    args, extra = options.parse_known_args()
    nanogpt_shape, zoo_shape = shape_flags(*args.shape)
    extra = [*zoo_shape, *(a for a in extra if a != "--")]
    prepare_nanogpt(args.nanogpt, args.data)
    runs: dict[str, list[dict[str, Any]]] = {"nanogpt": [], "zoo": []}
    for round_ in range(args.rounds):
        runs["nanogpt"].append(run_nanogpt(args.nanogpt, args.iterations, nanogpt_shape))
        runs["zoo"].append(run_zoo(args.data, args.iterations, extra))
        for name in runs:
            last = runs[name][-1]
            print(f"round {round_}: {name:8s} {1e3 * last['seconds_per_iteration']:.1f} ms/iteration, "
                  f"val loss {last['final_val_loss']:.4f}", flush=True)  # fmt: skip
    ratios = [z["seconds_per_iteration"] / n["seconds_per_iteration"] for n, z in zip(runs["nanogpt"], runs["zoo"])]
    summary = {name: {
        "seconds_per_iteration": statistics.median(r["seconds_per_iteration"] for r in rs),
        "final_val_loss": [r["final_val_loss"] for r in rs],
    } for name, rs in runs.items()}  # fmt: skip
    summary["time_ratio_zoo_to_nanogpt"] = ratios
    print(json.dumps(summary, indent=1))
    if args.out:
        payload = {"environment": environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/nanogpt_parity.py"),
                   "runs": runs, "summary": summary}  # fmt: skip
        args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
