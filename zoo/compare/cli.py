"""``python -m zoo compare``: a grid of ``fit`` overrides times seeds, each run in fresh processes,
reported as means with confidence intervals, paired differences and cost.

    python -m zoo compare --model sentiment --data.path PATH/TO/sst2 \\
        --grid model.attention=dot_product,local,linear --seeds 5 --budget 5min

Every argument that is not one of compare's own below is passed to each ``fit`` (and to the
evaluation of its last checkpoint). Started again with the same ``--out``, a comparison skips the
runs already finished.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
from pathlib import Path

from zoo.compare.grid import combinations, parse_budget, parse_grid
from zoo.compare.report import summary_tables, write_report
from zoo.compare.runner import CompareConfig, Comparison
from zoo.errors import ConfigurationError

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """compare's own options; everything else is a ``fit`` argument."""
    root = argparse.ArgumentParser(
        prog="python -m zoo compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    root.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2",
        help="an axis to vary (repeatable): a fit flag without dashes and its values",
    )  # fmt: skip
    root.add_argument(
        "--seeds", type=int, default=1,
        help="runs per combination, seeds 0..N-1 (--seed_everything, and --data.seed where the data has one)",
    )  # fmt: skip
    root.add_argument(
        "--budget",
        default=None,
        help="training length of each run: 500steps, 2epochs, 90s, 5min, 1.5h (default: the config's)",
    )
    root.add_argument("--parallel", type=int, default=1, help="runs at once; the cores are split between them")
    root.add_argument(
        "--out", type=Path, default=Path("runs/compare"), help="records, runs and report (reuse to resume)"
    )
    root.add_argument(
        "--baseline", default=None, help="the combination paired differences are taken against (default: the first)"
    )
    root.add_argument(
        "--evaluate", choices=("test", "validate"), default="test", help="what runs on each fit's last checkpoint"
    )
    root.add_argument(
        "--metric",
        default=None,
        help="the metric listed first and plotted (default: the one the model's checkpoints monitor)",
    )
    root.add_argument(
        "--calibration_steps", type=int, default=20, help="steps of the fit that measures step time for a time budget"
    )
    return root


def main(args: list[str]) -> None:
    """Parse, run every unfinished run, write the report, print its tables and where it is."""
    options, base = parser().parse_known_args(args)
    axes = parse_grid(options.grid)
    names = [combination.name for combination in combinations(axes)]
    baseline = options.baseline or names[0]
    if baseline not in names:
        close = difflib.get_close_matches(baseline, names, n=3, cutoff=0.0)
        raise ConfigurationError(
            f"--baseline {baseline!r} is not a combination of the grid; did you mean {', '.join(close)}?"
        )
    config = CompareConfig(
        base=base,
        axes=axes,
        seeds=options.seeds,
        budget=parse_budget(options.budget) if options.budget else None,
        out=options.out,
        parallel=options.parallel,
        evaluate=options.evaluate,
        calibration_steps=options.calibration_steps,
    )
    comparison = Comparison(config)
    records = comparison.run()
    header = (
        f"`python -m zoo fit {shlex.join(base)}` with {', '.join(f'`{k}` in {v}' for k, v in axes.items()) or 'no grid'}; "
        f"{config.seeds} seed(s); budget {options.budget or 'from the configuration'}; {config.evaluate} of each run's last checkpoint; "
        f"{config.parallel} run(s) at once, {comparison.threads} thread(s) each. Records: `{comparison.records_file}`.\n\n"
        f"Data (before the grid and seeds): `{comparison.data_description}`."
    )
    metric = options.metric or comparison.default_metric
    report = write_report(records, config.out, names, baseline, header, metric)
    print("\n".join(summary_tables(records, names, baseline, metric)))
    print(f"{len(records)} runs recorded in {comparison.records_file}; report: {report}")
