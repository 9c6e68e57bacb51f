"""Page faults, time and peak memory with glibc's allocator defaults (``ZOO_MALLOC=system``) and
with the zoo's setting (:mod:`zoo.allocator`: no block from ``mmap``, the heap never trimmed), each
case in a fresh process, the two settings in turn (defaults first) ``--pairs`` times.

Two kinds of case:

* ``--fits ATTENTION:WIDTH ...``: ``python -m zoo fit`` of the recall model at MQAR's (256, 16)
  cell (batch 64, two heads, ``--fit-steps`` steps, nothing validated, logged or saved), one
  thread, as ``zoo compare`` runs each fit: the product's own path, start-up included. The
  process's wall time, user and system CPU time, minor page faults and peak RSS (``os.wait4``).
* ``--cases NAME ...`` at ``--lengths``: a layer's forward and backward over one causal sequence
  (width 256, 8 heads, batch 1), as ``python -m zoo bench attention`` times it (``floor`` is its
  SDPA floor; a scoring attention runs in a self-attention layer, and ``NAME/heads`` alone on
  per-head queries, keys and values, as the bench's scoring cases run it): one step to warm up, then
  ``--steps`` steps whose faults and time are averaged, and the process's peak RSS.

``--allocators`` picks the settings (both by default); a case that fails (out of memory under
``ulimit -v``) is recorded with its error.

::

    python benchmarks/allocator_faults.py --fits dot_product:64 rwkv7:32 --fit-steps 80 --pairs 2 \\
        --cases floor mamba2 rwkv7 --lengths 8192 16384 --out benchmarks/results/allocator_faults_43.json

Run it alone on the machine: the times are wall-clock. ``docs/results/speed.md``, the CPU allocator.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import torch

from zoo.bench.report import environment, write_json

ROOT = Path(__file__).resolve().parents[1]

#: one layer case in a fresh process: prints a JSON line of faults, time a step and peak RSS
STEP = textwrap.dedent(
    """
    import json, resource, sys, time
    import torch
    from zoo.allocator import allocator_setting, retain_freed_memory
    retain_freed_memory()
    from zoo.attention import SelfAttention, create_attention, create_scoring_attention
    from zoo.attention.build.factory import layer_names
    from zoo.attention.contract.context import AttentionContext
    from zoo.bench.baselines import SDPAFloor
    name, length, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    x = torch.randn(1, length, 256, requires_grad=True)
    if name.endswith("/heads"):  # the scoring attention alone on per-head leaves, as the bench's scoring cases
        attention = create_scoring_attention(name.removesuffix("/heads"), head_dim=32)
        q, k, v = (torch.randn(1, 8, length, 32, requires_grad=True) for _ in range(3))
        step = lambda: attention(q, k, v, is_causal=True).output.sum().backward()
    elif name == "floor":
        layer = SDPAFloor(256, 8)
        step = lambda: layer(x, None, True).sum().backward()
    else:
        # a scoring attention runs per head in a self-attention layer
        layer = create_attention(name, embed_dim=256, num_heads=8) if name in layer_names() else SelfAttention(256, 8, name)
        context = AttentionContext.build(1, length, valid_lens=None, is_causal=True)
        step = lambda: layer(x, context).output.sum().backward()
    step()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - started) / steps
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"allocator": allocator_setting(), "faults_per_step": (after.ru_minflt - usage.ru_minflt) / steps,
                      "ms_per_step": seconds * 1e3, "peak_rss_mib": after.ru_maxrss / 1024}))
    """
)

#: the recall fit of a ``--fits`` case, before its attention, width and steps
FIT = [
    sys.executable, "-m", "zoo", "fit", "--model", "recall", "--config", str(ROOT / "configs" / "recall.yaml"),
    "--data.random_non_queries", "false", "--data.batch_size", "64", "--data.num_train", "6400",
    "--data.num_test", "64", "--model.lr", "3e-3", "--model.num_heads", "2", "--trainer.limit_val_batches", "0",
    "--trainer.enable_progress_bar", "false", "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
]  # fmt: skip


def _environment(allocator: str) -> dict[str, str]:
    """This process's variables without any allocator tuning, and ``ZOO_MALLOC=system`` for glibc's defaults."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ZOO_MALLOC") and not k.startswith("MALLOC_")}
    return env | ({"ZOO_MALLOC": "system"} if allocator == "system" else {})


def run_case(name: str, length: int, steps: int, allocator: str) -> dict[str, Any]:
    """A layer's steps in a fresh process, or its allocator and the last line of its error."""
    result = subprocess.run(
        [sys.executable, "-c", STEP, name, str(length), str(steps)],
        env=_environment(allocator), capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode:
        return {"allocator": allocator, "error": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_fit(attention: str, width: int, steps: int, allocator: str, directory: Path) -> dict[str, Any]:
    """A recall fit in a fresh process, one thread; what ``os.wait4`` says of it."""
    command = [*FIT, "--model.attention", attention, "--model.d_model", str(width), "--trainer.max_steps", str(steps)]
    env = _environment(allocator) | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status:
        raise SystemExit(f"{attention} fit failed: {child.stderr.read().decode()[-2000:] if child.stderr else ''}")
    return {
        "wall_s": round(wall, 2), "user_s": round(usage.ru_utime, 2), "system_s": round(usage.ru_stime, 2),
        "faults": usage.ru_minflt, "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fits", nargs="*", default=[], help="ATTENTION:WIDTH recall fits")
    parser.add_argument("--fit-steps", type=int, default=80)
    parser.add_argument("--cases", nargs="*", default=[])
    parser.add_argument("--lengths", nargs="+", type=int, default=[8192, 16384])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=1, help="times each case runs under both settings")
    parser.add_argument("--allocators", nargs="+", choices=("system", "retain"), default=["system", "retain"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for pair in range(args.pairs):
        for fit in args.fits:
            attention, width = fit.split(":")
            for allocator in args.allocators:
                with tempfile.TemporaryDirectory() as directory:  # the fit's files
                    row = {"fit": attention, "width": int(width), "steps": args.fit_steps, "pair": pair,
                           "allocator": allocator, **run_fit(attention, int(width), args.fit_steps, allocator, Path(directory))}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
        for length in args.lengths if args.cases else []:
            for name in args.cases:
                for allocator in args.allocators:
                    row = {
                        "case": name,
                        "length": length,
                        "pair": pair,
                        **run_case(name, length, args.steps, allocator),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        info = environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/allocator_faults.py")
        write_json(args.out, {"environment": info, "steps": args.steps, "fit_steps": args.fit_steps, "rows": rows})


if __name__ == "__main__":
    main()
