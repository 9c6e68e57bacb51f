"""``python -m zoo matrix``: every family on every yardstick, one resumable command.

    python -m zoo matrix                                    # the quick size, every row, here
    python -m zoo matrix --names gated_deltanet,softmax --yardsticks mqar,parity
    python -m zoo matrix --size full --launcher slurm --slurm_partition gpu
    python -m zoo matrix --dry_run                          # the commands and the runs they need

``configs/matrix/matrix.yaml`` orders the yardsticks and names the first-priority rows and the
recipes (their overlay files, relative to it); ``configs/matrix/yardsticks/NAME.yaml`` is each yardstick's protocol
(:mod:`zoo.matrix.protocol`). Each group of rows runs as one ``zoo compare`` (or ``zoo bench``)
into ``--out/SIZE/YARDSTICK/GROUP`` (:mod:`zoo.matrix.plan`), one after another; flags this
command does not know (``--launcher``, ``--parallel``, the Ray and SLURM flags) go to every
comparison, and ``--column_args YARDSTICK=FLAGS`` to one column's (the language model's corpus on
disk: ``--column_args language_model='--data.path input.txt'``). Ctrl-C or SIGTERM stops the comparison running and every fit it started (as
``zoo compare`` stops), and the matrix with it; the same command continues where it stopped.
``zoo board --records OUT`` draws the records.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
from pathlib import Path

import yaml

from zoo.command_parser import command_parser
from zoo.compare.grid import top_level_items
from zoo.errors import ConfigurationError
from zoo.matrix.cost import GroupCost, group_cost
from zoo.matrix.plan import Group, plan
from zoo.matrix.protocol import SIZES, load_yardsticks
from zoo.matrix.rows import select_rows

__all__ = ["PROTOCOLS", "flags", "groups", "main", "parser"]

PROTOCOLS = Path(__file__).parents[1] / "configs" / "matrix"
"""The zoo's matrix: ``matrix.yaml`` and ``yardsticks/`` (``configs/matrix`` in a checkout)."""


def parser() -> argparse.ArgumentParser:
    """The matrix's own options; the rest go to each ``zoo compare``."""
    root = command_parser("matrix", __doc__)
    root.add_argument(
        "--names", default=None,
        help="rows, comma-separated: registered attentions or recipe labels (default: every causal name and recipe)",
    )  # fmt: skip
    root.add_argument("--yardsticks", default=None, help="columns, comma-separated (default: matrix.yaml's list)")
    root.add_argument("--size", choices=SIZES, default="quick", help="quick: a laptop; full: a GPU or a cluster")
    root.add_argument(
        "--protocols",
        type=Path,
        default=PROTOCOLS,
        help="a folder with matrix.yaml and yardsticks/ (default: the zoo's)",
    )
    root.add_argument("--out", type=Path, default=Path("runs/matrix"), help="records (reuse to resume)")
    root.add_argument("--dry_run", action="store_true", help="print each command and its runs; run nothing")
    root.add_argument(
        "--column_args", action="append", default=[], metavar="YARDSTICK=FLAGS",
        help="flags for one column's comparisons only, e.g. language_model='--data.path input.txt' (repeatable)",
    )  # fmt: skip
    return root


def _column_args(given: list[str], yardsticks: list[str]) -> dict[str, list[str]]:
    """``--column_args NAME=FLAGS`` as {yardstick: its flags}; a name matrix.yaml lacks is refused."""
    columns: dict[str, list[str]] = {}
    for item in given:
        name, _, flags = item.partition("=")
        if name not in yardsticks:
            close = difflib.get_close_matches(name, yardsticks, n=1, cutoff=0.0)
            raise ConfigurationError(
                f"--column_args {item!r}: {name!r} is not a yardstick of matrix.yaml (did you mean {close[0]}?); "
                "give YARDSTICK=FLAGS."
            )
        columns.setdefault(name, []).extend(shlex.split(flags))
    return columns


def flags(group: Group, passthrough: list[str], options: argparse.Namespace) -> list[str]:
    """What ``group``'s command is given besides its protocol: every column's flags (a launcher's),
    then its own column's ``--column_args``."""
    return [*passthrough, *options.column_args.get(group.yardstick.name, [])]


def _split(text: str | None) -> list[str] | None:
    """``a,{name: b, c: 1}`` -> ``["a", "{name: b, c: 1}"]``: commas in brackets and braces stay."""
    return None if text is None else [part.strip() for part in top_level_items(text) if part.strip()]


def _read_matrix(folder: Path) -> dict:
    path = folder / "matrix.yaml"
    if not path.is_file():
        raise ConfigurationError(f"No {path}: pass --protocols DIR holding matrix.yaml (the zoo's: configs/matrix).")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw.get("yardsticks"), list) or not raw["yardsticks"]:
        raise ConfigurationError(f"{path} lists no yardsticks: give `yardsticks: [NAME, ...]`.")
    return raw


def groups(args: list[str]) -> tuple[list[Group], list[str], argparse.Namespace]:
    """The matrix's groups for ``args``, the flags passed on to compare, and the options."""
    options, passthrough = parser().parse_known_args(args)
    matrix = _read_matrix(options.protocols)
    chosen = _split(options.yardsticks) or list(matrix["yardsticks"])
    unknown = [name for name in chosen if name not in matrix["yardsticks"]]
    if unknown:
        raise ConfigurationError(f"--yardsticks: {unknown} not in matrix.yaml's list {matrix['yardsticks']}.")
    options.column_args = _column_args(options.column_args, list(matrix["yardsticks"]))
    recipes = {label: options.protocols / path for label, path in (matrix.get("recipes") or {}).items()}
    rows = select_rows(matrix.get("first") or [], recipes, _split(options.names))
    sticks = load_yardsticks(options.protocols / "yardsticks", chosen)
    return plan(list(sticks.values()), rows, options.size, options.out), passthrough, options


def _describe(group: Group, cost: GroupCost, passthrough: list[str]) -> str:
    """The group's header line (its runs and CPU minutes, recorded and to run), its command, and
    where ``zoo compare`` would refuse its records (the first reason and how many runs), the line
    the real run would stop on."""
    state = f"{cost.recorded_runs} recorded ({cost.recorded_minutes:.0f} CPU minutes)"
    if cost.remaining_runs:
        state += f", {cost.remaining_runs} to run (about {cost.remaining_minutes:.0f} CPU minutes)"
    else:
        state += ", done"
    command = group.command(passthrough)
    lines = [
        f"# {group.yardstick.name} / {group.label}: {group.runs} run(s), {state}",
        shlex.join(["python", "-m", "zoo", *command]),
    ]
    if group.yardstick.kind != "bench" and (group.out / "records.jsonl").is_file():
        from zoo.compare.cli import dry_run_refusals

        if refusals := dry_run_refusals(command[1:]):
            lines.append(f"# refused ({len(refusals)} recorded run(s)): {refusals[0]}")
    return "\n".join(lines)


def _summary(costs: list[tuple[Group, GroupCost]]) -> str:
    """CPU hours per yardstick and in all: recorded (measured) plus the estimate of the rest."""
    hours: dict[str, list[float]] = {}
    for group, cost in costs:
        spent = hours.setdefault(group.yardstick.name, [0.0, 0.0])
        spent[0] += cost.recorded_minutes / 60
        spent[1] += cost.remaining_minutes / 60
    parts = ", ".join(f"{name} {done + left:.1f} ({done:.1f} recorded)" for name, (done, left) in hours.items())
    done = sum(value[0] for value in hours.values())
    total = done + sum(value[1] for value in hours.values())
    return (
        f"# CPU hours by yardstick, recorded runs as measured and the rest estimated (cost.py): {parts}; "
        f"in all {total:.1f} ({done:.1f} recorded; one fit per core)"
    )


def main(args: list[str]) -> None:
    """Run (or, with ``--dry_run``, print) every group not yet done, in order."""
    plan_groups, passthrough, options = groups(args)
    if options.dry_run:
        costs = [(group, group_cost(group)) for group in plan_groups]
        print("\n".join(_describe(group, cost, flags(group, passthrough, options)) for group, cost in costs))
        print(_summary(costs))
        return
    from zoo.bench.cli import main as bench_main
    from zoo.compare.cli import main as compare_main

    for index, group in enumerate(plan_groups, 1):
        print(f"matrix [{index}/{len(plan_groups)}] {group.yardstick.name} / {group.label}", flush=True)
        if group.done:
            continue
        command = group.command(flags(group, passthrough, options))
        if group.yardstick.kind == "bench":
            group.out.parent.mkdir(parents=True, exist_ok=True)
            bench_main(command[1:])
        else:
            compare_main(command[1:])
