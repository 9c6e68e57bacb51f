"""What a comparison varies: grid axes (``--grid model.attention=a,b``), seeds and the budget."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from zoo.errors import ConfigurationError

__all__ = ["Budget", "Combination", "axis_label", "combinations", "parse_budget", "parse_grid", "top_level_items"]

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_BUDGET = re.compile(r"(\d+(?:\.\d+)?)\s*(steps?|epochs?|s|sec|min|h)", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "min": 60, "h": 3600}
_EMPTY = ('""', "''")
#: the longest combination name kept whole, in bytes: a file name's limit, so every name that
#: could name a run directory before keeps its name (and its records)
_NAME_LIMIT = 255


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["model.attention=a,b", "model.num_heads=1,2"]`` -> ``{"model.attention": ["a", "b"], ...}``.

    Each spec is ``KEY=V1,V2,...`` with ``KEY`` a dotted ``fit`` flag without its dashes; values
    are passed to the flag as written. A value in brackets or braces keeps its commas, so a
    hybrid stack is one value: ``model.attention=[local,dot_product],dot_product``. ``""`` (or
    ``''``) is the empty string, passed as ``--KEY=``: ``model.canon="",AB`` compares no Canon
    layers with two. A value left blank is refused, as a slip more likely than a wish.
    """
    axes: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip().removeprefix("--")
        written = [value.strip() for value in top_level_items(values)]
        choices = ["" if value in _EMPTY else value for value in written]
        if not sep or not _KEY.fullmatch(key) or not all(written):
            raise ConfigurationError(
                f"Bad --grid {spec!r}: write KEY=V1,V2,... with KEY a fit flag without dashes and no blank "
                f'value ("" for the empty string), e.g. --grid model.attention=dot_product,local.'
            )
        if key in axes:
            raise ConfigurationError(f"--grid names {key!r} twice: give all its values in one --grid {key}=V1,V2,...")
        if len(set(choices)) != len(choices):
            raise ConfigurationError(f"--grid {spec!r} repeats a value: give each value once.")
        axes[key] = choices
    return axes


def top_level_items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and braces."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return items


def _value_label(value: str) -> str:
    """How a run directory names a value: a list of attention entries as their names (and
    arguments) joined by ``+`` (``[local, {name: linear, chunk_size: 32}]`` ->
    ``local+linear(chunk_size=32)``), anything else as written."""
    if not value.startswith("["):
        return value
    try:
        entries = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if not isinstance(entries, list):
        return value
    return "+".join(_entry_label(entry) for entry in entries)


def _entry_label(entry: object) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    arguments = ",".join(f"{key}={value}" for key, value in entry.items() if key != "name")
    return f"{entry.get('name')}({arguments})" if arguments else str(entry.get("name"))


@dataclass(frozen=True)
class Combination:
    """One point of the grid: its name (a directory name too) and the ``fit`` flags it adds."""

    name: str
    overrides: dict[str, str]

    @property
    def flags(self) -> list[str]:
        return [f"--{key}={value}" for key, value in self.overrides.items()]


def axis_label(key: str, keys: Sequence[str]) -> str:
    """The last part of a dotted key when no other axis ends the same way, else the whole key."""
    short = key.rsplit(".", 1)[-1]
    return short if sum(k.rsplit(".", 1)[-1] == short for k in keys) == 1 else key


def combinations(axes: dict[str, list[str]]) -> list[Combination]:
    """Every combination of the axes' values, the first axis slowest; one ``base`` without axes."""
    if not axes:
        return [Combination("base", {})]
    keys = list(axes)
    out = []
    for values in itertools.product(*axes.values()):
        name = ",".join(f"{axis_label(key, keys)}={_value_label(value)}" for key, value in zip(keys, values))
        out.append(Combination(_bounded(re.sub(r"[^\w.,=+-]", "_", name)), dict(zip(keys, values))))
    return out


def _bounded(name: str) -> str:
    """``name`` as a directory can hold it: one longer than a file name's ``_NAME_LIMIT`` bytes (a
    long hybrid pattern) keeps its start and ends in a digest of the whole, so two patterns that
    share their start stay apart. Shorter names are kept as they were."""
    encoded = name.encode()
    if len(encoded) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:12]
    start = encoded[: _NAME_LIMIT - len(digest) - 1].decode(errors="ignore")
    return f"{start}-{digest}"


@dataclass(frozen=True)
class Budget:
    """How long each run trains: ``steps``, ``epochs`` or wall-clock ``seconds``."""

    kind: str
    amount: float
    text: str

    def flags(self, seconds_per_step: float | None = None) -> list[str]:
        """The trainer flags of this budget; a time budget needs the measured seconds per step.

        A step or epoch budget is exact: it clears any ``max_time`` a config sets, so a run on a
        slow or busy machine still trains as long as the others. A time budget sets ``max_steps``
        to the steps that fit in it (so a schedule that spans ``max_steps`` ends with the budget)
        and ``max_time`` as a hard stop (validation counts there).
        """
        if self.kind in ("steps", "epochs"):
            limit, other = ("max_steps", "max_epochs") if self.kind == "steps" else ("max_epochs", "max_steps")
            return [
                f"--trainer.{limit}",
                str(int(self.amount)),
                f"--trainer.{other}",
                "-1",
                "--trainer.max_time",
                "null",
            ]
        if seconds_per_step is None:
            raise ValueError("a time budget needs the measured seconds per step.")
        steps = max(1, int(self.amount / seconds_per_step))
        seconds = max(1, round(self.amount))
        days, rest = divmod(seconds, 86400)
        max_time = f"{days:02d}:{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
        return ["--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1", "--trainer.max_time", max_time]


def parse_budget(text: str) -> Budget:
    """``500steps``, ``2epochs``, ``90s``, ``5min`` or ``1.5h``."""
    match = _BUDGET.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ConfigurationError(
            f"Bad --budget {text!r}: give a positive number of steps, epochs or wall time, e.g. 500steps, 2epochs, 90s, 5min or 1.5h."
        )
    amount, unit = float(match.group(1)), match.group(2).lower()
    if unit.startswith(("step", "epoch")):
        if amount != int(amount):
            raise ConfigurationError(f"Bad --budget {text!r}: steps and epochs are whole numbers.")
        return Budget("steps" if unit.startswith("step") else "epochs", amount, text)
    return Budget("seconds", amount * _SECONDS[unit], text)
