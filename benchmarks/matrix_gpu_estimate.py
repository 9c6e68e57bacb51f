"""The matrix's time on a GPU and on a cluster, from a few steps of each training column measured there.

Issue 70 asks for `python -m zoo matrix`'s time on one GPU and on a cluster "from measured GPU step
times". A lease is minutes, so the whole matrix cannot run on one; this measures what the estimate
needs and prices the rest:

    python benchmarks/matrix_gpu_estimate.py measure --out gpu-results/matrix_steps --steps 30 \\
        --text .data/tinyshakespeare/input.txt --trainer.accelerator gpu
    python benchmarks/matrix_gpu_estimate.py estimate --measured gpu-results/matrix_steps --gpus 8

``measure`` runs each training yardstick's protocol at the ``--size`` (default ``full``) for a few
representative rows (``--names``: softmax attention, Gated DeltaNet, Mamba-2), each row once (one
seed, the sweep's first rate: a rate changes no step's time), every step budget of the protocol cut
to ``--steps`` (and its validation interval with it). It is ``zoo compare`` on the group's own
command, so the records under ``--out`` carry each fit's start-up, seconds per step and evaluation
seconds as every matrix record does. Flags it does not know go to each fit (``--trainer.accelerator
gpu``); ``--text`` is the language model's corpus on disk, given to that column alone.

``estimate`` prices every run of the matrix at that size (every row and recipe, every seed and
rate: ``python -m zoo matrix --size full --dry_run`` counts the same runs): a fit is its column's
median over the measured rows of start-up, the protocol's steps at the typical (median) seconds a
step, its validations at what the calibration's one validation took, and the evaluation. One GPU runs the fits one after another; a
cluster of ``--gpus`` runs them side by side, so the wall time divides, bounded below by the
longest fit. The benchmark columns (speed, decoding) are left out: they time one layer, and their
protocols state their minutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zoo.commands import main as zoo_main  # noqa: E402
from zoo.compare.records import fit_seconds, load_records  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.matrix.cli import groups  # noqa: E402
from zoo.matrix.plan import Group  # noqa: E402

#: The flags by which a protocol states its step budget, and its validation interval.
STEP_FLAGS = ("--trainer.max_steps", "--data.train_batches")
BUDGET_FLAG = "--budget"
INTERVAL_FLAG = "--trainer.val_check_interval"
#: compare's flags the calibration replaces or drops (a sweep runs every rate; one rate is enough).
DROPPED = ("--sweep", "--select", "--seeds", "--out")
DEFAULT_NAMES = "softmax,gated_deltanet,mamba2"
#: The column whose data module reads a corpus: ``--text`` is its ``--data.path`` (and no other's).
TEXT_COLUMN = "language_model"


def protocol_steps(command: Sequence[str]) -> int:
    """The steps a group's fits train for, as its command states them (the last flag given wins)."""
    steps = None
    for flag, value in zip(command, command[1:]):
        if flag in STEP_FLAGS:
            steps = int(value)
        elif flag == BUDGET_FLAG and value.endswith("steps"):
            steps = int(value.removesuffix("steps"))
    if steps is None:
        raise ConfigurationError(f"no step budget in {' '.join(command[:8])} ...: the protocol states none.")
    return steps


def calibration_command(group: Group, steps: int, out: Path, passthrough: Sequence[str]) -> list[str]:
    """``group``'s compare arguments with its steps cut to ``steps``, one seed at its sweep's first
    value, into ``out``, and ``passthrough`` for each fit."""
    command, words, i = group.command()[1:], [], 0
    while i < len(command):
        flag = command[i]
        if flag in (*STEP_FLAGS, INTERVAL_FLAG):
            words += [flag, str(steps)]
        elif flag == BUDGET_FLAG:
            words += [flag, f"{steps}steps"]
        elif flag == "--sweep":
            key, values = command[i + 1].split("=", 1)
            words += [f"--{key}", values.split(",")[0]]
        elif flag not in DROPPED:
            words.append(flag)
            i += 1
            continue
        i += 2
    return [*words, "--seeds", "1", "--out", str(out), *passthrough]


def measure(args: Sequence[str]) -> None:
    options, passthrough = _measure_parser().parse_known_args(args)
    chosen = ["--yardsticks", options.yardsticks] if options.yardsticks else []
    plan, _, _ = groups(["--size", options.size, "--names", options.names, *chosen])
    for group in plan:
        if group.yardstick.kind == "bench":
            continue
        out = options.out / group.yardstick.name / group.label
        corpus = ["--data.path", str(options.text)] if options.text and group.yardstick.name == TEXT_COLUMN else []
        print(f"measure: {group.yardstick.name} / {group.label}", flush=True)
        zoo_main(["compare", *calibration_command(group, options.steps, out, [*passthrough, *corpus])])


def estimate(args: Sequence[str]) -> None:
    options = _estimate_parser().parse_args(args)
    plan, _, _ = groups(["--size", options.size])
    by_column: dict[str, list[Group]] = {}
    for group in plan:
        if group.yardstick.kind != "bench":
            by_column.setdefault(group.yardstick.name, []).append(group)
    rows, total, longest = [], 0.0, 0.0
    for name, column in by_column.items():
        records = [r for path in (options.measured / name).glob("*/records.jsonl") for r in load_records(path)]
        if not records:
            rows.append(f"| {name} | {sum(g.runs for g in column)} | not measured | | |")
            continue
        command = column[0].command()
        steps = protocol_steps(command)
        fits = [_fit_seconds(record, steps, protocol_validations(command, steps)) for record in records]
        per_fit = statistics.median(fits)
        runs = sum(group.runs for group in column)
        total += runs * per_fit
        longest = max(longest, max(fits))
        rows.append(f"| {name} | {runs} | {per_fit / 60:.1f} | {runs * per_fit / 3600:.1f} | {len(records)} rows |")
    print(f"Size {options.size}: every run of the matrix's training columns, priced from {options.measured}.\n")
    print("| yardstick | runs | minutes a fit | device hours | measured |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    cluster = max(total / options.gpus, longest)
    print(f"\nOne device, a fit at a time: {total / 3600:.1f} hours. {options.gpus} devices side by side: "
          f"{cluster / 3600:.1f} hours (the longest fit {longest / 60:.1f} minutes).")  # fmt: skip


def _fit_seconds(record: dict, steps: int, validations: int) -> float:
    """A measured run priced at ``steps`` and ``validations``: its start-up, ``steps`` at its typical
    (median) seconds a step, ``validations`` at what its one validation took (the wall time over
    the typical steps: the calibration validates once, at its last step), and its evaluation."""
    startup = (fit_seconds(record) or 0.0) - (record.get("train_seconds") or 0.0)
    validation = max(record["wall_seconds_per_step"] - record["seconds_per_step"], 0.0) * record["steps"]
    evaluation = record.get("eval_seconds") or 0.0
    return max(startup, 0.0) + steps * record["seconds_per_step"] + validations * validation + evaluation


def protocol_validations(command: Sequence[str], steps: int) -> int:
    """How often a group's fits validate: every ``--trainer.val_check_interval`` steps, else once."""
    intervals = [int(value) for flag, value in zip(command, command[1:]) if flag == INTERVAL_FLAG]
    return max(steps // intervals[-1], 1) if intervals else 1


def _measure_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="matrix_gpu_estimate.py measure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the records' folder, a subfolder a yardstick")
    parser.add_argument("--steps", type=int, default=30, help="steps a fit (default 30)")
    parser.add_argument("--size", default="full", help="the protocols' size (default full)")
    parser.add_argument("--names", default=DEFAULT_NAMES, help=f"the rows measured (default {DEFAULT_NAMES})")
    parser.add_argument("--yardsticks", default=None, help="the columns measured (default: every training one)")
    parser.add_argument("--text", type=Path, default=None, help=f"{TEXT_COLUMN}'s corpus on disk (its --data.path)")
    return parser


def _estimate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="matrix_gpu_estimate.py estimate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", type=Path, required=True, help="measure's --out")
    parser.add_argument("--size", default="full", help="the protocols' size (default full)")
    parser.add_argument("--gpus", type=int, default=8, help="devices of the cluster (default 8)")
    return parser


def main(argv: Sequence[str]) -> None:
    commands = {"measure": measure, "estimate": estimate}
    if not argv or argv[0] not in commands:
        print(f"usage: {Path(__file__).name} {{measure,estimate}} ... (see the module docstring)", file=sys.stderr)
        raise SystemExit(2)
    try:
        commands[argv[0]](argv[1:])
    except ConfigurationError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main(sys.argv[1:])
