"""One evaluation pass in dataset order against one in batches of similar length: padding and time.

Usage: python benchmarks/evaluation_order.py [--split test] [--repeats 3] [--out FILE.json] -- FIT_ARGS

``FIT_ARGS`` are what ``python -m zoo fit`` takes for a model whose batches hold ``tokens`` and
``valid_lens`` (``classifier``, ``sentiment``), for example ``--model classifier --config
zoo/configs/classifier_listops.yaml --config zoo/configs/classifier_listops_cpu.yaml``. The split
is read as the data module serves it (by length, :func:`~zoo.datamodules.sampling.length_batches`)
and as it did before (rows in order, cut every batch). Printed for each: the share of padded
positions, the attention-score cells a quadratic attention computes (the sum over batches of rows x
padded length squared) and, with ``--repeats`` above 0, the median seconds of a forward pass of the
freshly built model over the whole split (one pass of each order in turn per round, after one
untimed round). The metrics are the same either way; only the padding, and what it costs, differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader

from zoo.bench.build import build_from_cli
from zoo.bench.measure import time_round_robin
from zoo.bench.report import environment, write_json


def padding(loader: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The share of padded positions and the score cells (rows x padded length squared) of one pass."""
    positions = valid = cells = 0
    for batch in loader:
        rows, length = batch["tokens"].shape
        positions += rows * length
        valid += int(batch["valid_lens"].sum())
        cells += rows * length**2
    return {"padded_share": 1 - valid / positions, "score_cells": float(cells)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("validation", "test"), default="test")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes of each order (0: padding only)")
    parser.add_argument("--out", default=None, help="also write the results, machine and command here (JSON)")
    parser.add_argument("fit_args", nargs=argparse.REMAINDER, help="-- then the arguments of python -m zoo fit")
    args = parser.parse_args()
    cli = build_from_cli([arg for arg in args.fit_args if arg != "--"])
    data, model = cli.datamodule, cli.model
    data.prepare_data()
    data.setup("test" if args.split == "test" else "validate")
    by_length = data.test_dataloader() if args.split == "test" else data.val_dataloader()
    in_order = DataLoader(by_length.dataset, batch_size=data.batch_size, collate_fn=data.collator)
    loaders = {"dataset order": in_order, "by length": by_length}
    results: dict[str, dict[str, Any]] = {name: padding(loader) for name, loader in loaders.items()}
    if args.repeats > 0:
        model.eval()

        def evaluate(loader: DataLoader) -> None:
            with torch.inference_mode():
                for batch in loader:
                    model(batch["tokens"], batch["valid_lens"])

        timed = time_round_robin(
            {name: (lambda loader=loader: evaluate(loader), None) for name, loader in loaders.items()},
            warmup=1,
            repeats=args.repeats,
        )
        for name, summary in timed.items():
            if isinstance(summary, Exception):
                raise summary
            results[name]["seconds"] = summary.median
    payload = {"split": args.split, "rows": len(by_length.dataset), **results}
    print(json.dumps(payload, indent=2))
    if args.out:
        info = environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/evaluation_order.py")
        write_json(args.out, {"environment": info, **payload})


if __name__ == "__main__":
    main()
