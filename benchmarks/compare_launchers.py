"""The same small comparison through each launcher of ``zoo compare``: equal metrics seed by seed,
the same report, and what each launcher adds to a run's wall time against ``local``.

The grid is two kernels of ``nadaraya_watson`` by two seeds (``--steps`` steps each, one thread
per run). The launchers take turns (round robin, ``--rounds`` rounds) so that a change in the
machine's load falls on all of them alike; each round of each launcher runs the whole grid
afresh in its own directory, one run at a time (``--parallel 1``, so a comparison's wall time is
the sum of its runs'), and its wall time is that of ``Comparison.run`` alone (resolving the
arguments before it is left out, as is starting Ray, which happens once and is reported apart).
A launcher's overhead per run is the median over rounds of ``(its wall time - local's wall time
in the same round) / runs``::

    python benchmarks/compare_launchers.py --rounds 3 --out benchmarks/results/compare/launchers.json

``slurm`` runs through submitit's local executor (each job a process started by submitit), the
path a cluster's jobs take without the queue. Needs the ``ray`` and ``slurm`` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from zoo.bench.report import environment, markdown_table
from zoo.compare import CompareConfig, Comparison, parse_budget
from zoo.compare.launch import Launcher
from zoo.compare.local import LocalLauncher
from zoo.compare.ray_tasks import RayLauncher
from zoo.compare.report import summary_tables
from zoo.compare.slurm import SlurmLauncher

LAUNCHERS = ("local", "ray", "slurm")
GRID = {"model.attention": ["average", "gaussian_kernel"]}
NAMES = ["attention=average", "attention=gaussian_kernel"]
#: Record fields that differ from one launcher (or one run) to the next.
COST = ("fit_seconds", "eval_seconds", "seconds_per_step", "samples_per_second", "peak_rss_mib", "launcher", "parallel")


def launcher(name: str, out: Path) -> Launcher:
    """``name``'s launcher, one run at a time with one thread."""
    if name == "ray":
        return RayLauncher(parallel=1, cpus_per_run=1)
    if name == "slurm":
        return SlurmLauncher(out / "slurm", parallel=1, cpus_per_run=1, cluster="local")
    return LocalLauncher(parallel=1, cpus_per_run=1)


def run_once(name: str, out: Path, steps: int) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds of the grid's runs through ``name``, and their records."""
    config = CompareConfig(
        base=["--model", "nadaraya_watson"], axes=GRID, seeds=2, budget=parse_budget(f"{steps}steps"), out=out
    )
    comparison = Comparison(config, launcher(name, out))
    start = time.perf_counter()
    records = comparison.run()
    return time.perf_counter() - start, records


def metric_tables(records: list[dict[str, Any]]) -> list[str]:
    """The report's tables without what differs between launchers."""
    return summary_tables([{k: v for k, v in r.items() if k not in COST} for r in records], NAMES, NAMES[0])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--steps", type=int, default=5)
    options.add_argument("--out", type=Path, help="a JSON file for the measurements")
    args = options.parse_args()
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")  # as zoo compare's own Ray: the runs at full priority
    start = time.perf_counter()
    ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - start
    seconds: dict[str, list[float]] = {name: [] for name in LAUNCHERS}
    metrics: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in LAUNCHERS}
    tables: dict[str, list[list[str]]] = {name: [] for name in LAUNCHERS}
    work = Path(tempfile.mkdtemp(prefix="compare_launchers_"))
    try:
        for round_ in range(args.rounds):
            for name in LAUNCHERS[round_ % 3 :] + LAUNCHERS[: round_ % 3]:  # who goes first turns too
                wall, records = run_once(name, work / f"{name}{round_}", args.steps)
                seconds[name].append(wall)
                metrics[name].append({r["run"]: r["metrics"] for r in records})
                tables[name].append(metric_tables(records))
                print(f"round {round_} {name}: {wall:.1f} s", flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    runs = 2 * len(NAMES)
    rows, summary = [], {}
    for name in LAUNCHERS:
        overhead = [(wall - local) / runs for wall, local in zip(seconds[name], seconds["local"])]
        same = all(m == metrics["local"][0] for m in metrics[name]) and all(
            t == tables["local"][0] for t in tables[name]
        )
        summary[name] = {"seconds": seconds[name], "overhead_per_run": overhead, "same_metrics_and_tables": same}
        rows.append(
            [name, f"{statistics.median(seconds[name]):.1f}", f"{statistics.median(seconds[name]) / runs:.2f}",
             f"{statistics.median(overhead):+.2f}", "yes" if same else "no"]
        )  # fmt: skip
    print(f"Ray started in {ray_start:.1f} s (once, not counted below); medians over {args.rounds} rounds.")
    print(markdown_table(["launcher", "grid s", "s per run", "overhead per run s", "same metrics and tables"], rows))
    print("\n".join(tables["local"][0]))
    if args.out:
        result = {"ray_start_seconds": ray_start, "runs": runs, "steps": args.steps, "launchers": summary}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        info = environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/compare_launchers.py")
        args.out.write_text(json.dumps(result | {"environment": info}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
