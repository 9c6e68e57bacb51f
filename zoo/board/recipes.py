"""What a ``zoo compare`` record trained: its task, its attention recipe (the board's row) and
the rest of its recipe (the setting, which with the task and a metric makes a column).

A record holds the ``fit`` command of its run. Read back:

* the attention recipe is ``--model.attention`` (and ``--model.attention_kwargs``) from the grid's
  overrides or the command, else what the configuration resolves to (the model's default, or a
  config file's); a hybrid stack (a list) is one recipe, its entries joined by ``+``;
* the task is the registered name of the data module the configuration resolves to
  (``shakespeare``, ``listops``, ``mqar``), else ``--data``, else the model's name;
* the setting is every other flag of the command, as ``key=value``: config files, trainer limits,
  the grid's other values (``d_model=64``, ``seq_len=256``), the budget; without the flags
  ``zoo compare`` adds for its own bookkeeping (seeds, loggers, the step timer, quiet output) and
  ``--data.path`` (where a machine keeps the data, not what the run did).

The configuration is resolved as ``zoo compare`` resolves it (:func:`zoo.compare.runner.resolve_base`,
``fit --print_config``), once per model, data and config files; config files are looked for from
the working directory and from the records folders and the folders above them. Where they
cannot be found, the command alone says what it can.
"""

from __future__ import annotations

import contextlib
import io
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zoo.compare.runner import QUIET, resolve_base
from zoo.errors import ZooError

__all__ = ["Recipe", "RecipeReader", "flag_key", "recipe_label"]

#: Flags ``zoo compare`` adds to every run, by key (without dashes): not part of any recipe.
HARNESS_KEYS = ("seed_everything", "data.seed")
HARNESS_PREFIXES = ("trainer.logger",)
#: Values of ``--trainer.callbacks+`` that ``zoo compare`` adds (the step timer, ASHA's progress).
HARNESS_CALLBACKS = "zoo.compare."
#: Flags that say where a machine keeps things, not what a run did.
PLACE_KEYS = ("data.path",)
#: Where a recipe's attention is set.
ATTENTION_KEY = "model.attention"
ATTENTION_KWARGS_KEY = "model.attention_kwargs"


@dataclass(frozen=True)
class Recipe:
    """A record's place on the board."""

    task: str
    model: str | None
    row: str
    parts: tuple[str, ...]
    base: tuple[str, ...]
    grid: tuple[str, ...]
    budget: str | None
    stage: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def setting(self) -> tuple[str, ...]:
        """The base command's flags, the grid's values other than the attention, the budget."""
        return (*self.base, *self.grid, *((f"budget={self.budget}",) if self.budget else ()))


def flag_key(flag: str) -> str:
    """``--model.init_args.attention`` -> ``model.attention``; ``-c`` -> ``config``."""
    key = flag.lstrip("-")
    key = "config" if key == "c" else key
    return ".".join(part for part in key.split(".") if part != "init_args")


def _pairs(tokens: Sequence[str]) -> list[tuple[str, str | None]]:
    """``(key, value)`` for each flag of ``tokens`` (``--k v``, ``--k=v``, ``--k`` alone)."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            pairs.append(("", token))
        elif "=" in token and token.startswith("--"):
            flag, value = token.split("=", 1)
            pairs.append((flag_key(flag), value))
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            pairs.append((flag_key(token), tokens[i + 1]))
            i += 1
        else:
            pairs.append((flag_key(token), None))
        i += 1
    return pairs


def _parsed(value: Any) -> Any:
    """A flag's text as the CLI reads it: YAML for a list or mapping, else the text."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


def _entry(entry: Any, kwargs: dict[str, Any] | None = None) -> tuple[str, str]:
    """``(name, label)`` of one attention entry: ``local`` or ``{name: local, window: 16}``."""
    arguments = dict(kwargs or {})
    if isinstance(entry, dict):
        arguments = {k: v for k, v in entry.items() if k not in ("name", "kwargs")} | dict(entry.get("kwargs") or {})
        entry = entry.get("name")
    name = str(entry)
    shown = ",".join(f"{k}={arguments[k]}" for k in sorted(arguments))
    return name, f"{name}({shown})" if shown else name


def recipe_label(attention: Any, kwargs: Any = None) -> tuple[str, tuple[str, ...]]:
    """The row label and attention names of an attention value (a name, an entry or a stack)."""
    attention = _parsed(attention)
    kwargs = _parsed(kwargs)
    entries = attention if isinstance(attention, list) else [attention]
    named = [_entry(entry, kwargs if isinstance(kwargs, dict) and len(entries) == 1 else None) for entry in entries]
    return "+".join(label for _, label in named), tuple(name for name, _ in named)


def _stage(record: dict[str, Any]) -> str | None:
    """``test`` or ``validate``: the subcommand of the record's evaluation."""
    tokens = shlex.split(record.get("eval_command") or "")
    return tokens[3] if len(tokens) > 3 and tokens[1:3] == ["-m", "zoo"] else None


class RecipeReader:
    """Reads records' recipes; resolves each distinct configuration once.

    Args:
        roots: The records folders: config files named by a relative path are looked for below
            the working directory, then below these and the folders above them.
    """

    def __init__(self, roots: Sequence[Path]) -> None:
        self.bases = [Path.cwd(), *(p for root in roots for p in (root.resolve(), *root.resolve().parents))]
        self._resolved: dict[tuple[str, ...], dict[str, Any] | None] = {}

    def read(self, record: dict[str, Any]) -> Recipe:
        """The recipe of ``record``."""
        tokens = shlex.split(record["command"])
        args = tokens[tokens.index("fit") + 1 :] if "fit" in tokens else tokens
        pairs = self._without_harness(_pairs(args), record)
        overrides = {flag_key(k): v for k, v in (record.get("overrides") or {}).items()}
        for key, value in overrides.items():  # the grid's values, taken apart from the base
            if (key, value) in pairs:
                pairs.remove((key, value))
        explicit = {key: value for key, value in pairs} | overrides
        model = explicit.get("model")
        resolved = self._resolve(pairs, overrides) or {}
        model_args = (resolved.get("model") or {}).get("init_args") or {}
        attention = explicit.get(ATTENTION_KEY, model_args.get("attention"))
        kwargs = explicit.get(ATTENTION_KWARGS_KEY, model_args.get("attention_kwargs"))
        notes = [] if resolved else ["its configuration could not be resolved here (config files not found)"]
        row, parts = recipe_label(attention, kwargs) if attention is not None else ("(model default)", ())
        task = self._task(resolved, explicit, model)
        skipped = (ATTENTION_KEY, ATTENTION_KWARGS_KEY, *PLACE_KEYS)
        base = tuple(f"{k}={v}" if v is not None else k for k, v in pairs if k not in skipped)
        grid = tuple(f"{k}={v}" for k, v in overrides.items() if k not in skipped)
        budget = str(record["budget"]) if record.get("budget") else None
        return Recipe(task, model, row, parts, base, grid, budget, _stage(record), tuple(notes))

    @staticmethod
    def _without_harness(pairs: list[tuple[str, str | None]], record: dict[str, Any]) -> list[tuple[str, str | None]]:
        """``pairs`` less the flags ``zoo compare`` added: seeds, the budget's trainer limits (the
        flags between the seeds and the logger, replaced by the record's ``budget``), loggers, the
        step timer, quiet output."""
        quiet = {flag_key(flag.split("=", 1)[0]) for flag in QUIET}
        kept: list[tuple[str, str | None]] = []
        in_budget = False
        for key, value in pairs:
            if key in HARNESS_KEYS:
                in_budget = bool(record.get("budget"))
                continue
            if key.startswith(HARNESS_PREFIXES):
                in_budget = False
                continue
            if in_budget or key in quiet or (key == "trainer.callbacks+" and str(value).startswith(HARNESS_CALLBACKS)):
                continue
            kept.append((key, value))
        return kept

    def _resolve(self, pairs: list[tuple[str, str | None]], overrides: dict[str, str]) -> dict[str, Any] | None:
        """The configuration of the model, data and config files of a run (None where its config
        files are not here or it does not resolve)."""
        chosen = [(k, v) for k, v in [*pairs, *overrides.items()] if k in ("model", "data", "config") and v]
        key = tuple(f"{k}={v}" for k, v in chosen)
        if key not in self._resolved:
            args: list[str] = []
            for flag, value in chosen:
                path = self._locate(value) if flag == "config" else value
                if path is None:
                    self._resolved[key] = None
                    return None
                args += [f"--{flag}", str(path)]
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    self._resolved[key] = resolve_base(args)
            except (ZooError, SystemExit):
                self._resolved[key] = None
        return self._resolved[key]

    def _locate(self, value: str) -> Path | None:
        path = Path(value)
        candidates = [path] if path.is_absolute() else [base / path for base in self.bases]
        return next((candidate for candidate in candidates if candidate.is_file()), None)

    @staticmethod
    def _task(resolved: dict[str, Any], explicit: dict[str, Any], model: str | None) -> str:
        """The registered name of the resolved data module, else ``--data``, else the model's name."""
        from zoo.datamodules import DATAMODULE_REGISTRY

        class_path = (resolved.get("data") or {}).get("class_path")
        for entry in DATAMODULE_REGISTRY.entries():
            if f"{entry.obj.__module__}.{entry.obj.__qualname__}" == class_path:
                return entry.name
        data = explicit.get("data")
        return str(data) if data and not str(data).startswith("{") else str(model or "unknown")
