"""A recurrent model's training step on the CPU, side by side: the generalized delta rule's in-chunk
matrices as an earlier commit formed them against today's, and chunks of 64 steps against the CPU's
default (``docs/results/speed.md``, 16-step chunks on the CPU).

Usage: python benchmarks/chunk_speed.py [--before 570a96a] [--attentions kda rwkv7 gated_deltanet] [--repeats 5]

``RecallLM`` at MQAR's (256, 16) cell (width 64, 2 heads, batch 64, loss on the last 16 positions
of each example, as MQAR scores its queries), forward and backward, one thread. Three setups per
attention, timed round-robin in one process after a warm-up, medians printed:

* ``before (64)``: ``kernels/dplr.py`` and ``kernels/decay.py`` of the commit ``--before``, loaded
  from ``git show`` into a temporary folder, their ``_matrices`` in place of today's; 64-step chunks;
* ``shared factors (64)``: today's kernels, 64-step chunks;
* ``default``: today's kernels and the device's chunk (:data:`zoo.attention.modules.recurrent.CPU_CHUNK_SIZE`).

The three setups of an attention run one model (the same weights and batch), so only the kernel
and the chunk differ; a family whose kernels are not the generalized delta rule's
(``gated_deltanet``) differs between its first two columns by nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from zoo.attention.kernels import dplr
from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.models.recall import RecallLM

VOCAB, LENGTH, BATCH, SCORED = 8192, 256, 64, 16


def load_before(revision: str, folder: Path) -> Callable[..., object]:
    """``_matrices`` of ``kernels/dplr.py`` at ``revision``, with that revision's ``kernels/decay.py``."""
    for name in ("decay", "dplr"):
        source = subprocess.run(
            ["git", "show", f"{revision}:zoo/attention/kernels/{name}.py"], check=True, capture_output=True, text=True
        ).stdout
        source = source.replace("from zoo.attention.kernels.decay import", "from before_decay import")
        (folder / f"before_{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("before_dplr", folder / "before_dplr.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._matrices


def steps(attention: str, setups: dict[str, tuple[Callable[..., object], int | None]]) -> dict[str, Callable[[], None]]:
    """One forward and backward of one model per setup: the same weights, ``matrices`` in the dplr
    kernel and the recurrent layers' ``chunk_size`` set before each call."""
    model = RecallLM(VOCAB, block_size=LENGTH, attention=attention, d_model=64, num_heads=2)
    layers = [module for module in model.modules() if isinstance(module, RecurrentLayer)]
    tokens = torch.randint(VOCAB, (BATCH, LENGTH))
    scored = torch.zeros(BATCH, LENGTH, dtype=torch.bool)
    scored[:, -SCORED:] = True

    def setup(matrices: Callable[..., object], chunk_size: int | None) -> Callable[[], None]:
        def run() -> None:
            dplr._matrices = matrices
            for layer in layers:
                layer.chunk_size = chunk_size
            logits, _ = model(tokens, output_mask=scored)
            F.cross_entropy(logits, tokens[scored]).backward()

        return run

    return {name: setup(*arguments) for name, arguments in setups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="570a96a", help="the commit whose in-chunk matrices to time")
    parser.add_argument("--attentions", nargs="+", default=["kda", "rwkv7", "gated_deltanet"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    today = dplr._matrices
    with tempfile.TemporaryDirectory() as folder:
        before = load_before(args.before, Path(folder))
        setups = {"before (64)": (before, 64), "shared factors (64)": (today, 64), "default": (today, None)}
        cases = {(a, s): run for a in args.attentions for s, run in steps(a, setups).items()}
        for run in cases.values():  # warm-up
            run()
        times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
        for _ in range(args.repeats):
            for case, run in cases.items():
                start = time.perf_counter()
                run()
                times[case].append(time.perf_counter() - start)
    dplr._matrices = today
    print("| attention | " + " | ".join(setups) + " |")
    print("|---" * (len(setups) + 1) + "|")
    for attention in args.attentions:
        base = statistics.median(times[attention, "before (64)"])
        cells = [f"{statistics.median(times[attention, s]) * 1e3:,.0f} ms" for s in setups]
        cells = [cells[0]] + [
            f"{cell} ({base / statistics.median(times[attention, s]):.2f}x)"
            for cell, s in zip(cells[1:], list(setups)[1:])
        ]
        print(f"| `{attention}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
