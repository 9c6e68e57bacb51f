"""What one matrix run does: per yardstick, a ``zoo compare`` (or ``zoo bench``) per group of rows.

The rows of a yardstick split into groups that share a command: the first-priority rows (at the
protocol's ``seeds``), the other rows (at ``rest_seeds``) and each recipe (its own depth and
positions). A group's records live in ``OUT/SIZE/YARDSTICK/GROUP``, so the same command resumes:
``zoo compare`` skips the runs it has recorded there (whichever launcher ran them), and a bench
whose results file exists is not run again. Rows added later join their group's comparison and
only their runs start.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zoo.attention import ATTENTION_REGISTRY
from zoo.matrix.protocol import Yardstick
from zoo.matrix.rows import Row

__all__ = ["Group", "measures", "plan"]


@dataclass(frozen=True)
class Group:
    """One command of the matrix: a yardstick's rows that share it."""

    yardstick: Yardstick
    size: str
    label: str
    rows: tuple[Row, ...]
    out: Path

    @property
    def seeds(self) -> int:
        """Seeds per row: the protocol's ``seeds`` for first-priority rows, else ``rest_seeds``."""
        size = self.yardstick.sizes[self.size]
        return size.seeds if self.rows[0].first else size.rest_seeds

    @property
    def runs(self) -> int:
        """Fits the group needs (each row at every swept value, then its other seeds), or a
        bench's rows (its ``minutes`` are a row's)."""
        if self.yardstick.kind == "bench":
            return len(self.rows)
        swept = len(list(itertools.product(*self.yardstick.sweep.values())))
        return len(self.rows) * (swept + self.seeds - 1)

    @property
    def done(self) -> bool:
        """A bench group whose results file exists (a comparison knows its own finished runs)."""
        return self.yardstick.kind == "bench" and self.out.is_file()

    def command(self, passthrough: Sequence[str] = ()) -> list[str]:
        """The group's ``python -m zoo`` arguments; ``passthrough`` (launcher flags) go to compare."""
        stick = self.yardstick
        if stick.kind == "bench" and self.rows[0].recipe:
            recipes = [f"{row.label}={_shown(row.overlay)}" for row in self.rows if row.overlay]
            return ["bench", *stick.arguments(self.size), str(stick.recipes_flag), *recipes, "--out", str(self.out)]
        if stick.kind == "bench":
            names = [*stick.references, *(row.attention for row in self.rows)]
            return ["bench", *stick.arguments(self.size), stick.rows_flag, *names, "--out", str(self.out)]
        sweep = [word for key, values in stick.sweep.items() for word in ("--sweep", f"{key}={','.join(values)}")]
        if stick.select:
            sweep += ["--select", stick.select]
        return [
            "compare",
            *stick.arguments(self.size),
            *self.rows[0].model_args,
            "--grid",
            "model.attention=" + ",".join(row.attention for row in self.rows),
            *sweep,
            "--seeds",
            str(self.seeds),
            "--out",
            str(self.out),
            "--name",
            f"matrix-{self.size}-{stick.name}-{self.label}",
            *passthrough,
        ]


def _shown(path: Path) -> Path:
    """``path`` as a command shows it: from the working folder where it lies below it."""
    path = path.resolve()
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def measures(stick: Yardstick, row: Row) -> bool:
    """Whether ``stick``'s protocol has a cell for ``row``: a comparison runs every row; a bench
    measures a registered name (no entry with arguments), and a recipe where its protocol names a
    ``recipes_flag``."""
    if stick.kind != "bench":
        return True
    return bool(stick.recipes_flag) if row.recipe else row.attention in ATTENTION_REGISTRY


def _groups(rows: Sequence[Row], stick: Yardstick) -> list[tuple[str, tuple[Row, ...]]]:
    """The rows' groups: first priority, the rest, then a group per recipe (a bench's recipes:
    one group)."""
    rows = [row for row in rows if measures(stick, row)]
    recipes = tuple(row for row in rows if row.recipe)
    groups = [
        ("first", tuple(row for row in rows if row.first and not row.recipe)),
        ("rest", tuple(row for row in rows if not row.first)),
    ]
    if stick.kind == "bench":
        groups.append(("recipes", recipes))
    else:
        groups += [(f"recipe-{row.label}", (row,)) for row in recipes]
    return [(label, members) for label, members in groups if members]


def plan(yardsticks: Sequence[Yardstick], rows: Sequence[Row], size: str, out: Path) -> list[Group]:
    """Every group of every yardstick, in the yardsticks' order."""
    groups = []
    for stick in yardsticks:
        for label, members in _groups(rows, stick):
            where = out / size / stick.name / (f"{label}.json" if stick.kind == "bench" else label)
            groups.append(Group(stick, size, label, members, where))
    return groups
