"""A yardstick's protocol: one checked-in YAML file per column of the matrix
(``configs/matrix/yardsticks/``; ``configs/matrix/matrix.yaml`` orders them).

A protocol fixes, as Zoology and MAD fix theirs, everything but the attention: the task and model
(``zoo compare``'s and ``fit``'s arguments), the step budget, the rate sweep, the seeds and the
metric a cell reports, at two sizes (``quick`` for a laptop, ``full`` for a GPU or a cluster; the
same code runs both)::

    title: MQAR (256, 16)
    kind: compare                 # or bench: ``python -m zoo bench`` over the rows (rows_flag names them)
    metric: test/accuracy         # what a cell shows, at the best rate
    select: val/accuracy:max      # what chooses the rate (default: what the model's checkpoints monitor)
    args: [--model, recall, --config, configs/recall.yaml, ...]
    sweep: {model.lr: [1.0e-3, 3.0e-3]}
    sizes:
      quick: {args: [--trainer.max_steps, "1000"], seeds: 3, rest_seeds: 1, minutes: 1.5}
      full: {args: [--trainer.max_steps, "8000"], seeds: 5, rest_seeds: 5}

A bench protocol names the flag that takes the rows (``rows_flag``: ``--cases`` for ``bench
attention``, ``--attentions`` for ``bench state``) and the references timed beside them
(``references``: ``floor``, causal SDPA); a bench that decodes a recipe's whole stack names the
flag that takes them (``recipes_flag``: ``--recipes`` for ``bench state``), and the recipes join
its column as one more group; a bench without it measures registered names only. ``seeds`` are
the first-priority rows' (softmax, the recurrent families, the recipes), and ``rest_seeds`` every
other row's, marked so on the board until a GPU or a cluster runs them.
``minutes`` is one run's CPU time at that size, from which the matrix states its cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from zoo.errors import ConfigurationError

__all__ = ["SIZES", "Size", "Yardstick", "load_yardstick", "load_yardsticks"]

SIZES = ("quick", "full")
"""The sizes every protocol defines."""


@dataclass(frozen=True)
class Size:
    """One size of a protocol: the arguments it adds, and its seeds."""

    args: tuple[str, ...]
    seeds: int
    rest_seeds: int
    minutes: float | None


@dataclass(frozen=True)
class Yardstick:
    """A column of the matrix, as its protocol file states it."""

    name: str
    title: str
    kind: Literal["compare", "bench"]
    rows_flag: str
    recipes_flag: str | None
    references: tuple[str, ...]
    metric: str
    select: str | None
    args: tuple[str, ...]
    sweep: dict[str, tuple[str, ...]]
    sizes: dict[str, Size]
    path: Path

    def arguments(self, size: str) -> list[str]:
        """The command's arguments at ``size``: the protocol's, then the size's."""
        return [*self.args, *self.sizes[size].args]


def _problem(path: Path, what: str) -> ConfigurationError:
    return ConfigurationError(f"{path}: {what}; see zoo/matrix/protocol.py for a protocol's fields.")


def _strings(path: Path, field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, (str, int, float)) for item in value):
        raise _problem(path, f"{field} must be a list of command-line words")
    return tuple(str(item) for item in value)


def _size(path: Path, name: str, value: Any) -> Size:
    if not isinstance(value, dict):
        raise _problem(path, f"sizes.{name} must be a mapping with args and seeds")
    unknown = set(value) - {"args", "seeds", "rest_seeds", "minutes"}
    if unknown:
        raise _problem(path, f"sizes.{name} has unknown fields {sorted(unknown)}")
    seeds, rest = value.get("seeds", 1), value.get("rest_seeds", value.get("seeds", 1))
    if not all(isinstance(n, int) and n >= 1 for n in (seeds, rest)):
        raise _problem(path, f"sizes.{name}'s seeds and rest_seeds must be positive integers")
    minutes = value.get("minutes")
    return Size(_strings(path, f"sizes.{name}.args", value.get("args", [])), seeds, rest, minutes)


def load_yardstick(path: Path) -> Yardstick:
    """The protocol in ``path`` (its stem is the yardstick's name), checked field by field."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise _problem(path, "a protocol is a mapping")
    unknown = set(raw) - {
        "title", "kind", "rows_flag", "recipes_flag", "references", "metric", "select", "args", "sweep", "sizes"
    }  # fmt: skip
    if unknown:
        raise _problem(path, f"unknown fields {sorted(unknown)}")
    kind = raw.get("kind", "compare")
    if kind not in ("compare", "bench"):
        raise _problem(path, f"kind must be compare or bench, not {kind!r}")
    sizes = raw.get("sizes")
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(SIZES):
        raise _problem(path, f"sizes must define exactly {' and '.join(SIZES)}")
    sweep = raw.get("sweep") or {}
    if not isinstance(sweep, dict) or (kind == "bench" and sweep):
        raise _problem(path, "sweep must be a mapping of a fit flag to its values (compare only)")
    if kind != "bench" and raw.get("recipes_flag") is not None:
        raise _problem(path, "recipes_flag is a bench's (a comparison runs each recipe as its own group)")
    return Yardstick(
        name=path.stem,
        title=str(raw.get("title", path.stem)),
        kind=kind,
        rows_flag=str(raw.get("rows_flag", "--attentions")),
        recipes_flag=None if raw.get("recipes_flag") is None else str(raw["recipes_flag"]),
        references=_strings(path, "references", raw.get("references", [])),
        metric=str(raw.get("metric", "")),
        select=raw.get("select"),
        args=_strings(path, "args", raw.get("args", [])),
        sweep={str(key): _strings(path, f"sweep.{key}", values) for key, values in sweep.items()},
        sizes={name: _size(path, name, sizes[name]) for name in SIZES},
        path=path,
    )


def load_yardsticks(folder: Path, names: list[str]) -> dict[str, Yardstick]:
    """The protocols ``names`` from ``folder`` (``NAME.yaml`` each), in that order."""
    missing = [name for name in names if not (folder / f"{name}.yaml").is_file()]
    if missing:
        raise ConfigurationError(f"No protocol file for {missing} in {folder}: add NAME.yaml there or drop the name.")
    return {name: load_yardstick(folder / f"{name}.yaml") for name in names}
