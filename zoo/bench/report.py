"""What the benchmarks report: growth exponents, Markdown tables, JSON with its provenance, plots."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo.allocator import allocator_setting
from zoo.text.files import atomic_write_text

__all__ = ["environment", "growth_exponent", "markdown_table", "plot_growth", "write_json"]


def growth_exponent(lengths: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of ``log(value)`` against ``log(length)``: ``value ~ length ** slope``.

    ``None`` with fewer than two distinct lengths.
    """
    points = [(math.log(n), math.log(v)) for n, v in zip(lengths, values) if n > 0 and v > 0]
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return covariance / variance


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (pastes into the pages of ``docs/results/``), columns padded to line up."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _git_commit() -> str | None:
    try:
        root = Path(zoo.__file__).resolve().parents[1]
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(device: torch.device, argv: Sequence[str], program: str = "python -m zoo") -> dict[str, Any]:
    """The machine, the versions and the command: what a result needs to be reproduced.

    ``program`` is what ran ``argv``: the zoo's command line by default, a script's path for a
    benchmark script.
    """
    info: dict[str, Any] = {
        "command": f"{program} {shlex.join(argv)}",
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "system": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "allocator": allocator_setting(),
        "device": str(device),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "lightning": _version("lightning"),
        "zoo": zoo.__version__,
        "git_commit": _git_commit(),
    }
    if device.type == "cuda":
        info["cuda_device"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, atomically, creating the parent directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
    return path


def plot_growth(series: dict[str, tuple[list[int], list[float], float | None]], path: str | Path, title: str) -> Path:
    """Log-log plot of time against length, one line per case, labelled with its exponent.

    ``series`` maps a case name to ``(lengths, times in ms, exponent or None)``.
    """
    from matplotlib.figure import Figure  # no pyplot: no backend to switch, nothing left open

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(8, 5.5))
    axes = figure.subplots()
    for name, (lengths, times, exponent) in series.items():
        if not lengths:
            continue
        label = f"{name} (slope {exponent:.2f})" if exponent is not None else name
        axes.plot(lengths, times, marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("sequence length (tokens)")
    axes.set_ylabel("forward + backward time (ms, median)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path
