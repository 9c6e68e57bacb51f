"""Recurrent layers with one kernel as it is against the same kernel at an earlier commit, side by
side in one process: forward and backward over one causal sequence, round-robin.

The earlier source is read from git (``git show REV:PATH``) and executed as a module of its own;
the names given by ``--swap`` (``Class.method`` or a module-level function) are set from it on the
current module for the "before" calls and restored for the "after" ones, so every caller of the
kernel runs the earlier code without a copy of it in the tree. Width 256, 8 heads, batch 1::

    python benchmarks/revision_ab.py --rev a0b8c37 --module zoo.attention.kernels.chunk_scan \
        --swap _ChunkScan.forward _ChunkScan.backward --cases mamba2 gated_deltanet --length 8192

Run it alone: the ratio is of medians after one warm-up round; the largest difference between
the two outputs is printed beside it.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import time
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from torch import Tensor

from zoo.attention import create_attention
from zoo.attention.contract.context import AttentionContext

ROOT = Path(__file__).resolve().parent.parent


def earlier_module(module: str, rev: str) -> types.ModuleType:
    """``module`` as it was at ``rev``, executed under a name of its own."""
    path = module.replace(".", "/") + ".py"
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
    earlier = types.ModuleType(f"{module}@{rev}")
    exec(compile(source.stdout, f"{rev}:{path}", "exec"), earlier.__dict__)
    return earlier


def _owner_and_name(module: types.ModuleType, dotted: str) -> tuple[object, str]:
    *owners, name = dotted.split(".")
    owner: object = module
    for part in owners:
        owner = getattr(owner, part)
    return owner, name


@contextmanager
def swapped(current: types.ModuleType, earlier: types.ModuleType, names: list[str]) -> Iterator[None]:
    """``names`` of ``current`` set to ``earlier``'s while the block runs (raw attributes, so a
    ``staticmethod`` stays one)."""
    saved = []
    for dotted in names:
        owner, name = _owner_and_name(current, dotted)
        source, _ = _owner_and_name(earlier, dotted)
        saved.append((owner, name, vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, vars(source)[name] if isinstance(source, type) else getattr(source, name))
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def step(layer: torch.nn.Module, x: Tensor, context: AttentionContext) -> Tensor:
    """One forward and backward; the output."""
    x.grad = None
    output = layer(x, context).output
    output.sum().backward()
    return output.detach()


def side_by_side(
    layer: torch.nn.Module,
    x: Tensor,
    context: AttentionContext,
    before: Callable[[], ContextManager[object]],
    repeats: int,
) -> str:
    """``layer``'s step under ``before()`` and as it is, round-robin after one warm-up round: a
    line with both medians, their ratio and the largest difference between the two outputs."""
    with before():
        earlier = step(layer, x, context)
    difference = (earlier - step(layer, x, context)).abs().max().item()
    times: dict[str, list[float]] = {"before": [], "after": []}
    for repeat in range(repeats + 1):
        for label in times:
            with before() if label == "before" else nullcontext():
                start = time.perf_counter()
                step(layer, x, context)
                elapsed = time.perf_counter() - start
            if repeat:  # the first round warms up
                times[label].append(elapsed)
    medians = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    return (
        f"before {medians['before']:.0f} ms, after {medians['after']:.0f} ms, "
        f"after/before {medians['after'] / medians['before']:.3f}x, largest output difference {difference:.2e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the earlier commit")
    parser.add_argument("--module", required=True, help="the kernel's module, dotted")
    parser.add_argument("--swap", nargs="+", required=True, help="names in it to take from --rev")
    parser.add_argument("--cases", nargs="+", default=["mamba2", "gated_deltanet", "deltanet", "gla"])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    current = importlib.import_module(args.module)
    earlier = earlier_module(args.module, args.rev)
    for name in args.cases:
        torch.manual_seed(0)
        layer = create_attention(name, embed_dim=256, num_heads=8)
        x = torch.randn(1, args.length, 256, requires_grad=True)
        context = AttentionContext.build(1, args.length, valid_lens=None, is_causal=True)
        line = side_by_side(layer, x, context, lambda: swapped(current, earlier, args.swap), args.repeats)
        print(f"{name} L={args.length}: {line}", flush=True)


if __name__ == "__main__":
    main()
