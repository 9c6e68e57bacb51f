"""Page faults, time and peak memory of a layer's training step with glibc's allocator defaults
and with freed memory kept in the process, each case in a fresh process.

glibc's ``malloc`` gives large freed blocks back to the system (its mmap threshold and heap
trimming adapt to what a process frees) and faults them in again, a zero-filled 4 KiB page at a
time, when a step allocates them anew. ``retain`` sets glibc's own variables so that it keeps
them (``MALLOC_MMAP_THRESHOLD_`` 32 MiB, the largest it accepts; ``MALLOC_TRIM_THRESHOLD_`` never;
``MALLOC_TOP_PAD_`` 256 MiB), as PyTorch's CPU guide keeps them by preloading jemalloc or
TCMalloc. ``benchmarks/RESULTS.md`` section 40b: the faults fall 1.5-17x, the time does not follow
on this machine, and the zoo leaves the allocator as it is.

A layer's forward and backward over one causal sequence (width 256, 8 heads, batch 1), as
``python -m zoo bench attention`` times it: one step to warm up, then ``--steps`` steps whose minor
page faults (``getrusage``) and time are averaged. The two settings alternate per case, defaults
first::

    python benchmarks/allocator_faults.py --cases floor gated_deltanet mamba2 rwkv7 --lengths 8192 16384 \\
        --out benchmarks/results/allocator_faults.json

Run it alone on the machine: the times are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch

from zoo.bench.report import environment, write_json

#: one case in a fresh process: prints a JSON line of faults, seconds a step and peak RSS
STEP = textwrap.dedent(
    """
    import json, resource, sys, time
    import torch
    from zoo.attention import create_attention
    from zoo.attention.context import AttentionContext
    from zoo.bench.baselines import SDPAFloor
    name, length, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    x = torch.randn(1, length, 256, requires_grad=True)
    if name == "floor":
        layer = SDPAFloor(256, 8)
        step = lambda: layer(x, None, True).sum().backward()
    else:
        layer = create_attention(name, embed_dim=256, num_heads=8)
        context = AttentionContext.build(1, length, valid_lens=None, is_causal=True)
        step = lambda: layer(x, context).output.sum().backward()
    step()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - started) / steps
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"faults_per_step": (after.ru_minflt - usage.ru_minflt) / steps,
                      "ms_per_step": seconds * 1e3, "peak_rss_mib": after.ru_maxrss / 1024}))
    """
)


#: glibc's variables for ``retain`` (read once, at the process's start)
RETAIN = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1),
    "MALLOC_TOP_PAD_": str(256 << 20),
}


def run_case(name: str, length: int, steps: int, allocator: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("MALLOC_")}
    env |= RETAIN if allocator == "retain" else {}
    result = subprocess.run(
        [sys.executable, "-c", STEP, name, str(length), str(steps)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["floor", "gated_deltanet", "mamba2", "rwkv7"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[8192, 16384])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for length in args.lengths:
        for name in args.cases:
            for allocator in ("system", "retain"):
                row = {
                    "case": name,
                    "length": length,
                    "allocator": allocator,
                    **run_case(name, length, args.steps, allocator),
                }
                rows.append(row)
                print(
                    f"{name:16} {length:6} {row['allocator'][:6]:6} faults/step {row['faults_per_step']:9.0f} "
                    f"ms/step {row['ms_per_step']:8.0f} peak RSS {row['peak_rss_mib']:6.0f} MiB",
                    flush=True,
                )
    if args.out:
        info = environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/allocator_faults.py")
        write_json(args.out, {"environment": info, "steps": args.steps, "rows": rows})


if __name__ == "__main__":
    main()
