"""The matrix's rows: every causal attention the zoo registers (plugins included) and the
production recipes, each marked first priority or not.

First priority, run at a protocol's ``seeds``: the entries ``matrix.yaml`` names under ``first``
(softmax with and without the short convolution), every layer of the ``recurrent`` family (its
class's ``family``, as the board reads it) and every recipe. Every other row runs at
``rest_seeds`` and is marked so until a GPU or a cluster runs it at the full count.

A recipe is the overlay file of its CPU language-model recipe (``configs/gpt_shakespeare_cpu_*.yaml``):
its ``model.init_args`` (the attention pattern, and the depth or positions it sets) become the row's
model flags, so a recipe's pattern is written in one place. A recipe is the stack its language model
is, on every yardstick: an overlay that sets no depth runs at the CPU recipe's, raised to a
multiple of its pattern's length (:func:`~zoo.bench.recipe_stack.recipe_settings`; with today's 4
layers: one attention in every layer, gpt-oss's pair twice, Qwen3-Next's three Gated DeltaNet
layers to one attention once); its parameter count says what the depth adds.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from zoo.attention import ATTENTION_REGISTRY, Attention, AttentionLayer, capabilities
from zoo.bench.recipe_stack import recipe_case, recipe_settings
from zoo.errors import ConfigurationError

__all__ = ["Row", "attention_text", "causal_names", "recipe_row", "select_rows", "stackable"]


def attention_text(value: Any) -> str:
    """``value`` (a name, a mapping or a list of them) as one flow-style YAML word for a flag."""
    if isinstance(value, str):
        return value
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return text.removesuffix("...").strip()  # a scalar's document ends with an explicit end marker


@dataclass(frozen=True)
class Row:
    """One row: what ``--model.attention`` gets, and for a recipe its other model flags and its
    overlay file (which a benchmark that decodes a whole stack reads)."""

    label: str
    attention: str
    first: bool
    recipe: bool = False
    model_args: tuple[str, ...] = ()
    overlay: Path | None = None

    @property
    def case(self) -> str:
        """What a benchmark's results call this row: its attention, or a recipe's ``recipe LABEL``."""
        return recipe_case(self.label) if self.recipe else self.attention


def stackable(name: str) -> bool:
    """Whether ``name`` is a registered attention a stack takes (a scoring attention, or a layer
    built by name): the multi-head layers around them are not rows of their own."""
    if name not in ATTENTION_REGISTRY:
        return False
    cls = ATTENTION_REGISTRY.get(name)
    return issubclass(cls, Attention) or (issubclass(cls, AttentionLayer) and bool(cls.stack_layer))


def causal_names() -> list[str]:
    """Every registered attention a stack takes that runs causally, by canonical name."""
    names = []
    for entry in ATTENTION_REGISTRY.entries():
        if stackable(entry.name) and capabilities(entry.obj).supports_causal:
            names.append(entry.name)
    return names


def recipe_row(label: str, path: Path) -> Row:
    """The recipe in the overlay file ``path``: its model's init arguments as flags."""
    try:
        settings = recipe_settings(path)
    except ConfigurationError as error:
        raise ConfigurationError(f"Recipe {label!r}: {error}") from None
    attention = settings.pop("attention")
    flags = tuple(word for key, value in settings.items() for word in (f"--model.{key}", attention_text(value)))
    return Row(label, attention_text(attention), first=True, recipe=True, model_args=flags, overlay=path)


def _registry_row(name: str, first: Sequence[str]) -> Row:
    family = getattr(ATTENTION_REGISTRY.get(name), "family", None)
    return Row(name, name, first=name in first or family == "recurrent")


def select_rows(first: Sequence[Any], recipes: dict[str, Path], names: Sequence[str] | None = None) -> list[Row]:
    """The rows: ``names`` (registered names, recipe labels or ``first``'s entries as written), or
    by default every causal name, ``first``'s other entries and every recipe; first priority first."""
    first_text = [attention_text(entry) for entry in first]
    recipe_rows = {label: recipe_row(label, path) for label, path in recipes.items()}
    if names is None:
        rows = [_registry_row(name, first_text) for name in causal_names()]
        rows += [Row(text, text, first=True) for text in first_text if text not in ATTENTION_REGISTRY]
        rows += list(recipe_rows.values())
    else:
        rows = []
        for name in names:
            if name in recipe_rows:
                rows.append(recipe_rows[name])
            elif name in first_text and name not in ATTENTION_REGISTRY:
                rows.append(Row(name, name, first=True))
            elif name in ATTENTION_REGISTRY:
                rows.append(_registry_row(ATTENTION_REGISTRY.resolve(name), first_text))
            else:
                known = [*causal_names(), *recipe_rows]
                close = difflib.get_close_matches(name, known, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise ConfigurationError(f"--names: {name!r} is neither a registered attention nor a recipe.{hint}")
    return sorted(rows, key=lambda row: not row.first)
