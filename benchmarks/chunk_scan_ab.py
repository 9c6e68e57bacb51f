"""The recurrent layers with the CPU kernels of RESULTS 34 against the forms they replaced, side by side.

Each layer runs twice in ``bench attention``'s round-robin: as the zoo has it (the pass between
chunks in :mod:`zoo.attention.kernels.chunk_scan`, the short convolution as shifted
multiply-adds), and as ``<name>@autograd``, with the forms before them swapped in for its calls:
the per-chunk loop left to autograd and ``F.conv1d`` on a transposed copy, written out below::

    python benchmarks/chunk_scan_ab.py --lengths 8192 --batch 1 --d-model 256 --heads 8
    python benchmarks/chunk_scan_ab.py --lengths 256 --batch 64 --d-model 64 --heads 2 --repeats 7
    python benchmarks/chunk_scan_ab.py --check-gradients   # the GPT's gradients, both ways, float64
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

import zoo.attention.kernels.decay as decay_kernels
import zoo.attention.kernels.delta_rule as delta_kernels
import zoo.attention.kernels.dplr as dplr_kernels
import zoo.attention.kernels.short_conv as short_conv
from zoo.bench import attention as bench
from zoo.bench.report import environment
from zoo.bench.sweep import Workload
from zoo.models import GPT

FAMILIES = ["retention", "gla", "deltanet", "gated_deltanet", "mamba2", "kda", "rwkv7", "gated_deltaproduct"]


def looped_scan(
    initial: Tensor, decay: Tensor, update: Tensor | None = None, **corrected: Tensor
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``chunk_scan``'s recurrence one chunk at a time, its backward left to autograd (the form
    before); ``corrected`` holds ``values``, ``from_state`` and ``written``, or nothing."""
    values, from_state, written = (corrected.get(name) for name in ("values", "from_state", "written"))
    absent = itertools.repeat(None)
    chunks = (t.unbind(-3) if t is not None else absent for t in (update, values, from_state, written))
    state, entering, reads = initial, [], []
    for d, e, u, w, a in zip(decay.unbind(-3), *chunks):
        entering.append(state)
        following = d * state if e is None else d * state + e
        if u is not None:
            reads.append(u + w @ state)
            following = following + a @ reads[-1]
        state = following
    return torch.stack(entering, -3), state, torch.stack(reads, -3) if reads else None


def conv1d_convolution(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    window: Tensor | None = None,
    *,
    activation: Literal["silu"] | None = None,
) -> tuple[Tensor, Tensor]:
    """``causal_conv1d`` through ``F.conv1d`` on the channels-first copy, SiLU after it (the form before)."""
    kernel = weight.shape[-1]
    if window is None:
        window = x.new_zeros(x.shape[0], kernel - 1, x.shape[-1])
    history = torch.cat([window.to(x.dtype), x], dim=1)
    y = F.conv1d(
        history.transpose(1, 2), weight.to(x.dtype), None if bias is None else bias.to(x.dtype), groups=x.shape[-1]
    )
    y = y.transpose(1, 2)
    return (F.silu(y) if activation else y), history[:, history.shape[1] - (kernel - 1) :]


@contextmanager
def previous_forms() -> Iterator[None]:
    """Swap the forms before RESULTS 34 into the kernels' modules for the duration."""
    scans = [(module, module.chunk_scan) for module in (decay_kernels, delta_kernels, dplr_kernels)]
    convolution = short_conv.causal_conv1d
    for module, _ in scans:
        module.chunk_scan = looped_scan
    short_conv.causal_conv1d = conv1d_convolution
    try:
        yield
    finally:
        for module, scan in scans:
            module.chunk_scan = scan
        short_conv.causal_conv1d = convolution


def with_previous_forms(build: Callable[..., Workload]) -> Callable[..., Workload]:
    """A case's builder whose timed call runs under :func:`previous_forms`."""

    def built(config: bench.AttentionBenchConfig, length: int, device: torch.device) -> Workload:
        workload = build(config, length, device)

        def step() -> object:
            with previous_forms():
                return workload.step()

        return Workload(step, workload.reset)

    return built


def check_gradients(families: list[str]) -> None:
    """Print, per family, how far a small float64 GPT's gradients with the kernels as they are lie
    from the gradients with the previous forms (one batch of random characters, 16-step chunks)."""
    tokens = torch.randint(65, (2, 49), generator=torch.Generator().manual_seed(0))

    def gradients(model: GPT) -> list[Tensor]:
        model.zero_grad()
        logits, _ = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    for name in families:
        torch.manual_seed(0)
        model = GPT(65, block_size=64, attention={"name": name, "chunk_size": 16}).double()
        now = gradients(model)
        with previous_forms():
            before = gradients(model)
        worst = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(now, before))
        print(f"{name:20s} {len(now)} gradients, largest relative difference {worst:.1e}")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--families", nargs="+", default=FAMILIES)
    options.add_argument("--lengths", nargs="+", type=int, default=[8192])
    options.add_argument("--batch", type=int, default=1)
    options.add_argument("--d-model", type=int, default=256)
    options.add_argument("--heads", type=int, default=8)
    options.add_argument("--warmup", type=int, default=1)
    options.add_argument("--repeats", type=int, default=5)
    options.add_argument("--out", type=Path)
    options.add_argument("--check-gradients", action="store_true", help="compare gradients instead of timing")
    args = options.parse_args()
    if args.check_gradients:
        check_gradients(args.families)
        return
    cases = {case.name: case for case in bench.attention_cases()}
    before = [
        dataclasses.replace(cases[name], name=f"{name}@autograd", build=with_previous_forms(cases[name].build))
        for name in args.families
    ]
    listed = bench.attention_cases
    bench.attention_cases = lambda: listed() + before
    config = bench.AttentionBenchConfig(
        lengths=args.lengths, batch=args.batch, d_model=args.d_model, heads=args.heads, causal=True, padding=False,
        warmup=args.warmup, repeats=args.repeats, memory=False,
    )  # fmt: skip
    records = bench.run_attention_bench(
        config, torch.device("cpu"), ["floor", *args.families, *(c.name for c in before)]
    )
    times = {r["name"]: {x["length"]: x.get("time_ms", {}).get("median") for x in r["results"]} for r in records}
    for length in args.lengths:
        print(f"L={length}: floor {times['floor'][length]:.0f} ms")
        for name in args.families:
            now, then = times[name][length], times[f"{name}@autograd"][length]
            print(f"  {name:20s} {now:8.1f} ms against {then:8.1f} ms: {then / now:.2f}x")
    if args.out:
        args.out.write_text(
            json.dumps({"environment": environment(torch.device("cpu"), []), "times_ms": times}, indent=1)
        )


if __name__ == "__main__":
    main()
