"""``python -m zoo compare``: a grid of ``fit`` overrides times seeds, each run in fresh processes,
reported as means with confidence intervals, paired differences and cost.

    python -m zoo compare --model sentiment --data.path PATH/TO/sst2 \\
        --grid model.attention=dot_product,local,linear --seeds 5 --budget 5min

Every argument that is not one of compare's own below is passed to each ``fit`` (and to the
evaluation of its last checkpoint). ``--sweep KEY=V1,V2`` runs the papers' protocol: every
combination at every value, the best kept by ``--select``, then ``--seeds`` at it
(:mod:`zoo.compare.sweep`). Started again with the same ``--out``, a comparison skips the
runs already finished, whichever launcher ran them. ``--launcher ray`` and ``--launcher slurm``
run the runs on a Ray cluster or as SLURM jobs (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from zoo.command_parser import command_parser
from zoo.compare.against import against_section, check_against
from zoo.compare.grid import combinations, parse_budget, parse_grid
from zoo.compare.launch import Launcher
from zoo.compare.local import LocalLauncher
from zoo.compare.process import Terminated, stop_children_on_sigterm
from zoo.compare.records import load_records
from zoo.compare.report import summary_tables, write_report
from zoo.compare.run import STAGE_PREFIX
from zoo.compare.runner import REFUSED, CompareConfig, Comparison
from zoo.compare.sweep import choose, grouped, parse_select, parse_sweep, sweep_table
from zoo.errors import ConfigurationError

__all__ = ["dry_run_refusals", "main", "parser"]


def parser() -> argparse.ArgumentParser:
    """compare's own options; everything else is a ``fit`` argument."""
    root = command_parser("compare", __doc__)
    root.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2",
        help="an axis to vary (repeatable): a fit flag without dashes and its values",
    )  # fmt: skip
    root.add_argument(
        "--sweep", action="append", default=None, metavar="KEY=V1,V2",
        help="a setting to choose per combination (a learning rate): each value runs, the best is kept, then the "
        "seeds; given again, the settings are swept together, every combination of their values",
    )  # fmt: skip
    root.add_argument(
        "--select", default=None, metavar="METRIC[:max|min]",
        help="the metric a sweep keeps the best of (default: the one the checkpoints monitor, in its direction)",
    )  # fmt: skip
    root.add_argument("--sweep_seeds", type=int, default=1, help="seeds of each swept value before the choice")
    root.add_argument(
        "--seeds", type=int, default=1,
        help="runs per combination, seeds 0..N-1 (--seed_everything, and --data.seed where the data has one)",
    )  # fmt: skip
    root.add_argument(
        "--budget",
        default=None,
        help="training length of each run: 500steps, 2epochs, 90s, 5min, 1.5h (default: the config's)",
    )
    root.add_argument(
        "--parallel", type=int, default=None,
        help="runs at once (default: 1 on the CPU, one per GPU here; as many as the resources hold on Ray); "
        "locally the cores are split between them",
    )  # fmt: skip
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
    root.add_argument(
        "--plot_against", default=None, metavar="KEY",
        help="a --grid axis (model.d_model), or the split a metric is logged by (length: test/accuracy/length_<L>): "
        "the report adds the metric against its values, a line per other combination",
    )  # fmt: skip
    root.add_argument("--name", default=None, help="the comparison's name, its W&B group (default: --out's name)")
    root.add_argument(
        "--dry_run", action="store_true",
        help="check the fit arguments and print each run's fit command (a sweep: its first stage); run nothing",
    )  # fmt: skip
    where = root.add_argument_group("where the runs run (docs/scaling.md)")
    where.add_argument(
        "--launcher", choices=("local", "ray", "slurm"), default="local",
        help="local: child processes here; ray: Ray tasks (pip install 'attention-zoo[ray]'); "
        "slurm: SLURM jobs through submitit (pip install 'attention-zoo[slurm]')",
    )  # fmt: skip
    where.add_argument(
        "--cpus_per_run", type=int, default=None,
        help="CPUs (and threads) of each run (default: local, the cores split between the runs at once; else 1)",
    )  # fmt: skip
    where.add_argument(
        "--gpus_per_run", type=float, default=None,
        help="GPUs of each run, or 1/N of one for N runs per GPU (default: 1 where there are GPUs, else 0)",
    )  # fmt: skip
    where.add_argument(
        "--retries",
        type=int,
        default=None,
        help="ray, slurm: tries after a run fails, then it is recorded as failed (default 1)",
    )
    where.add_argument(
        "--ray_address",
        default=None,
        help="ray: a running cluster (HOST:PORT, ray://HOST:PORT, auto); default: start Ray here",
    )
    where.add_argument(
        "--ray_scheduler", choices=("asha",), default=None,
        help="ray: run the runs as Ray Tune trials under ASHA, which stops the runs that cannot win "
        "(by the validation metric the model's checkpoints monitor)",
    )  # fmt: skip
    where.add_argument(
        "--ray_asha_grace", type=int, default=1, help="ray, asha: validations every run gets before it can be stopped"
    )
    where.add_argument(
        "--ray_asha_reduction", type=float, default=2.0, help="ray, asha: the best 1/N of the runs at a rung go on"
    )
    where.add_argument("--slurm_partition", default=None, help="slurm: the partition (default: the cluster's)")
    where.add_argument("--slurm_time_min", type=int, default=60, help="slurm: each job's time limit in minutes")
    where.add_argument("--slurm_array", action="store_true", help="slurm: submit the runs as one job array")
    where.add_argument(
        "--slurm_param", action="append", default=[], metavar="KEY=VALUE",
        help="slurm: another sbatch setting by submitit's name without slurm_ (account=..., qos=..., mem_gb=64); repeatable",
    )  # fmt: skip
    where.add_argument(
        "--slurm_cluster", choices=("slurm", "local", "debug"), default="slurm",
        help="slurm: local runs the jobs on this machine through submitit's local executor (no cluster needed)",
    )  # fmt: skip
    return root


def _launcher(options: argparse.Namespace) -> Launcher:
    """The launcher the options ask for; a flag of another launcher than the one chosen is refused."""
    defaults = vars(parser().parse_args([]))
    for name, value in vars(options).items():
        owner = name.split("_", 1)[0]
        if owner in ("ray", "slurm") and owner != options.launcher and value != defaults[name]:
            raise ConfigurationError(f"--{name} is a flag of --launcher {owner}, not of {options.launcher}.")
    if options.launcher == "local" and options.retries is not None:
        raise ConfigurationError(
            "--retries is a flag of --launcher ray and slurm: a local run that fails stops the comparison."
        )
    resources: dict[str, Any] = {
        "parallel": options.parallel,
        "cpus_per_run": options.cpus_per_run,
        "gpus_per_run": options.gpus_per_run,
    }
    retries = 1 if options.retries is None else options.retries
    if retries < 0:
        raise ConfigurationError(f"--retries must be 0 or more, got {retries}.")
    if options.launcher == "ray" and options.ray_scheduler == "asha":
        from zoo.compare.asha import AshaLauncher

        return AshaLauncher(
            grace=options.ray_asha_grace,
            reduction=options.ray_asha_reduction,
            storage=options.out / "tune",
            address=options.ray_address,
            retries=retries,
            **resources,
        )
    if options.launcher == "ray":
        from zoo.compare.ray_tasks import RayLauncher

        return RayLauncher(address=options.ray_address, retries=retries, **resources)
    if options.launcher == "slurm":
        from zoo.compare.slurm import SlurmLauncher, slurm_parameters

        return SlurmLauncher(
            folder=options.out / "slurm",
            partition=options.slurm_partition,
            time_min=options.slurm_time_min,
            array=options.slurm_array,
            parameters=slurm_parameters(options.slurm_param),
            cluster=options.slurm_cluster,
            retries=retries,
            name=f"zoo-compare-{options.name or options.out.resolve().name}",
            **resources,
        )
    return LocalLauncher(**resources)


def _dry_run(comparison: Comparison, options: argparse.Namespace, axes: dict[str, list[Any]]) -> None:
    """Print each run the command would start (a sweep's first stage: every value at ``--sweep_seeds``;
    the kept value's seeds follow it)."""
    plan = None
    if options.sweep:
        selected, mode = parse_select(options.select, comparison.monitor, STAGE_PREFIX[comparison.config.evaluate])
        sweep = parse_sweep(options.sweep, selected, mode, options.sweep_seeds)
        plan = [(c, range(sweep.seeds)) for _, runs in grouped(sweep, axes) for c in runs]
    print("\n".join(comparison.describe(plan)))
    if options.sweep:
        print(f"then {comparison.config.seeds} seed(s) at each combination's best value by {selected}")


def dry_run_refusals(args: list[str]) -> list[str]:
    """Why the comparison of ``args`` would refuse to resume from its records (another command, a
    changed config file), a line a refused run, from its ``--dry_run``: empty where it would not.
    The matrix's dry run asks each group so (a sweep's first stage: its runs are recorded first)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _compare([*args, "--dry_run"])
    return [line.split(REFUSED, 1)[1] for line in printed.getvalue().splitlines() if REFUSED in line]


def main(args: list[str]) -> None:
    """Parse, run every unfinished run, write the report, print its tables and where it is.

    SIGTERM stops the comparison as Ctrl-C does, its running fits too (nothing of them recorded),
    with one line and status 143; either way the report is written for the runs that finished, and
    the same command then continues what is unfinished (each stopped fit from the ``last.ckpt`` it
    saved)."""
    try:
        with stop_children_on_sigterm():
            _compare(args)
    except Terminated:
        print(
            "compare: stopped by SIGTERM with its running fits, which are not recorded; "
            "the same command continues them from their last.ckpt and keeps the finished ones "
            "(report.md covers those).",
            file=sys.stderr,
        )
        raise SystemExit(128 + signal.SIGTERM) from None


def _compare(args: list[str]) -> None:
    options, base = parser().parse_known_args(args)
    axes = parse_grid(options.grid)
    against = check_against(options.plot_against, axes) if options.plot_against else None
    names = [combination.name for combination in combinations(axes)]
    baseline = options.baseline or names[0]
    if baseline not in names:
        close = difflib.get_close_matches(baseline, names, n=3, cutoff=0.0)
        raise ConfigurationError(
            f"--baseline {baseline!r} is not a combination of the grid; did you mean {', '.join(close)}?"
        )
    if options.sweep is None and (options.select is not None or options.sweep_seeds != 1):
        raise ConfigurationError("--select and --sweep_seeds go with --sweep KEY=V1,V2,...")
    swept = parse_grid(options.sweep) if options.sweep else {}
    config = CompareConfig(
        base=base,
        axes=axes | swept if not set(swept) & set(axes) else axes,
        seeds=options.seeds,
        budget=parse_budget(options.budget) if options.budget else None,
        out=options.out,
        parallel=options.parallel,
        evaluate=options.evaluate,
        calibration_steps=options.calibration_steps,
        name=options.name,
    )
    comparison = Comparison(config, _launcher(options))
    launcher = comparison.launcher
    if getattr(launcher, "metric", "") is None:  # ASHA compares the metric the checkpoints monitor
        if comparison.monitor is None:
            raise ConfigurationError("--ray_scheduler asha needs a registered model: its checkpoints' metric.")
        launcher.metric, launcher.mode = comparison.monitor
    metric = options.metric or comparison.default_metric
    if against is not None and metric is None:
        raise ConfigurationError("--plot_against needs --metric NAME: this model's checkpoints monitor no metric.")
    if options.dry_run:
        _dry_run(comparison, options, axes)
        return
    sweep_lines = ""
    try:
        if options.sweep:
            selected, mode = parse_select(options.select, comparison.monitor, STAGE_PREFIX[config.evaluate])
            sweep = parse_sweep(options.sweep, selected, mode, options.sweep_seeds)
            groups = grouped(sweep, axes)
            choices = choose(
                comparison.run([(c, range(sweep.seeds)) for _, runs in groups for c in runs]), sweep, groups
            )
            records = comparison.run([(choice.kept, range(config.seeds)) for choice in choices])
            baseline = choices[names.index(baseline)].kept.name
            names = [choice.kept.name for choice in choices]
            sweep_lines = "\n\n" + sweep_table(sweep, choices)
        else:
            records = comparison.run()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (Terminated): report what finished, then stop
        _report_recorded(comparison, options, axes, metric)
        raise
    _report(comparison, options, axes=axes, against=against, records=records, names=names, baseline=baseline,
            metric=metric, sweep_lines=sweep_lines)  # fmt: skip


def _header(comparison: Comparison, options: argparse.Namespace, axes: dict[str, list[str]]) -> str:
    """The report's opening: the fit command, the grid, seeds, budget, launcher and records file."""
    config, launcher = comparison.config, comparison.launcher
    return (
        f"`python -m zoo fit {shlex.join(config.base)}` with {', '.join(f'`{k}` in {v}' for k, v in axes.items()) or 'no grid'}; "
        f"{config.seeds} seed(s); budget {options.budget or 'from the configuration'}; {config.evaluate} of each run's last checkpoint; "
        f"{launcher.parallel or 'as many as fit'} run(s) at once, {launcher.threads} thread(s) each. Records: `{comparison.records_file}`.\n\n"
        f"Data (before the grid and seeds): `{comparison.data_description}`."
    )


def _report_recorded(
    comparison: Comparison, options: argparse.Namespace, axes: dict[str, list[str]], metric: str | None
) -> None:
    """On a stop: the report of every run recorded so far (nothing when none is), saying that the
    comparison stopped; a sweep's are its runs at every value, before any choice."""
    records = [record for record in load_records(comparison.records_file) if not record.get("stopped")]
    if not records:
        return
    names = [combination.name for combination in comparison.combinations]
    planned = "" if options.sweep else f" of the {len(names) * comparison.config.seeds} planned"
    header = _header(comparison, options, axes) + (
        f"\n\n**Interrupted**: {len(records)} run(s) recorded{planned}; the same command continues the rest."
    )
    baseline = options.baseline if options.baseline in names else names[0]
    write_report(records, comparison.config.out, names, baseline, header, metric)


def _earlier_rows(comparison: Comparison, metric: str | None) -> list[str]:
    """The report's section on the combinations other commands recorded in the same folder (rows an
    earlier command added, as ``zoo matrix`` adds rows to a group's comparison), every run of each,
    so that a folder's report covers every row its records hold."""
    own = {combination.name for combination in comparison.combinations}
    others = [
        record
        for record in load_records(comparison.records_file)
        if record["combination"] not in own and not record.get("stopped")
    ]
    if not others:
        return []
    order = list(dict.fromkeys(record["combination"] for record in others))
    return [
        "## Rows recorded here by other commands",
        "",
        f"{len(others)} run(s) of {len(order)} combination(s) that this command's grid does not hold, recorded in "
        f"`{comparison.records_file}` by earlier commands (each record names its own), every swept value shown:",
        "",
        *summary_tables(others, order, order[0], metric),
    ]


def _report(
    comparison: Comparison,
    options: argparse.Namespace,
    *,
    axes: dict[str, list[str]],
    against: str | None,
    records: list[dict[str, Any]],
    names: list[str],
    baseline: str,
    metric: str | None,
    sweep_lines: str,
) -> None:
    """Write the report of a finished comparison, print its tables and where it is; refuse, after
    that, a comparison some of whose runs failed."""
    stopped = [record for record in records if record.get("stopped")]
    records = [record for record in records if not record.get("stopped")]
    header = _header(comparison, options, axes) + sweep_lines
    if stopped:
        header += "\n\nStopped by ASHA (recorded; not in the tables):\n\n"
        header += "\n".join(
            f"- {r['run']}, after step {r['stopped'].get('step')}: {r['stopped']['metric']} "
            f"{r['stopped'].get(r['stopped']['metric'])}"
            for r in stopped
        )
    failed = [str(failure) for failure in comparison.failures]
    if failed:
        header += "\n\nFailed, after their retries (no record; started again by the same command):\n\n"
        header += "\n".join(f"- {line}" for line in failed)
    sections: list[str] = []
    if against is not None and metric is not None:
        sections = against_section(records, against, axes, metric, comparison.config.out)
    sections += _earlier_rows(comparison, metric)
    report = write_report(records, comparison.config.out, names, baseline, header, metric, sections)
    print("\n".join([*summary_tables(records, names, baseline, metric), *sections]))
    print(f"{len(records) + len(stopped)} runs recorded in {comparison.records_file}; report: {report}")
    if failed:
        raise ConfigurationError(
            f"{len(failed)} run(s) failed after their retries (listed in {report} and {comparison.failures_file}); "
            f"the first: {failed[0]}"
        )
