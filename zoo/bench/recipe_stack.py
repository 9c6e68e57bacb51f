"""A production recipe as ``bench state`` decodes it: the whole GPT its overlay file describes, at
the benchmark's width.

A recipe is the overlay of its CPU language-model recipe (``configs/gpt_shakespeare_cpu_*.yaml``):
``model.init_args`` holds its attention pattern and what it sets of the model beside it (depth,
positions, key/value heads, shared keys and values). One layer of a recipe says little of what
the recipe holds when it decodes: Qwen3-Next keeps three Gated DeltaNet states and one layer's
keys and values, Gemma 4's later layers read an earlier layer's keys and values and keep none of
their own. So a recipe is measured as its stack: a prompt of ``L`` random tokens through the GPT
with its caches, then one more token; the cache is every layer's, their bytes summed
(:class:`StackCache`), and the step is the model's (its MLPs and output layer included).

A recipe is named on the command line as ``LABEL=PATH`` (the matrix's label, as
``configs/matrix/matrix.yaml`` lists it) or ``PATH`` (labelled by the file's stem), and its results
are recorded under :func:`recipe_case`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor, nn

from zoo.attention.contract.cache import LayerCache
from zoo.errors import ConfigurationError
from zoo.models import GPT

__all__ = ["RecipeStack", "StackCache", "parse_recipe", "recipe_case", "recipe_settings"]

#: the CPU language-model recipe every overlay is written against: its depth is a recipe's when the
#: overlay sets none
CPU_RECIPE = Path(__file__).parents[1] / "configs" / "gpt_shakespeare_cpu.yaml"

#: the tokens a recipe stack reads: enough to be a language model's, small enough that its
#: embedding and output layer cost little beside the attention
VOCAB_SIZE = 256


def recipe_case(label: str) -> str:
    """What a benchmark's results call the recipe ``label``: ``recipe LABEL``, which no
    ``--attentions`` entry (a name or a mapping) can be."""
    return f"recipe {label}"


def recipe_settings(path: Path) -> dict[str, Any]:
    """The model arguments the overlay ``path`` sets (its ``model.init_args``), with the depth made
    explicit: the overlay's own, else the depth of the CPU recipe it is written against
    (:data:`CPU_RECIPE`) raised to a multiple of its pattern's length, so that the stack measured
    (the matrix's rows, ``bench state``) is the language model the overlay builds and each layer
    of a pattern keeps its place. One line when it names no attention."""
    init = _init_args(path)
    if "attention" not in init:
        raise ConfigurationError(f"{path} sets no model.init_args.attention; point it at a recipe overlay.")
    if "num_layers" in init:
        return dict(init)
    pattern = len(init["attention"]) if isinstance(init["attention"], list) else 1
    return {"num_layers": -(-_init_args(CPU_RECIPE)["num_layers"] // pattern) * pattern, **init}


def _init_args(path: Path) -> dict[str, Any]:
    """The ``model.init_args`` of the config file ``path`` (empty where it sets none)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise ConfigurationError(f"Recipe {path}: {error.strerror}; give a recipe overlay file.") from None
    model = raw.get("model") if isinstance(raw, dict) else None
    return (model.get("init_args") if isinstance(model, dict) else None) or {}


def parse_recipe(entry: str) -> tuple[str, Path]:
    """``LABEL=PATH`` or ``PATH`` (labelled by its stem) as the label and the file."""
    label, equals, path = entry.partition("=")
    return (label, Path(path)) if equals else (Path(entry).stem, Path(entry))


@dataclass(frozen=True)
class StackCache:
    """Every layer's cache after the same positions; its bytes are theirs summed (a layer that
    reads an earlier layer's keys and values holds none of its own)."""

    caches: tuple[LayerCache, ...]

    @property
    def nbytes(self) -> int:
        return sum(cache.nbytes for cache in self.caches)


class RecipeStack(nn.Module):
    """The GPT of a recipe's ``settings`` at ``d_model`` and ``heads``, positions up to
    ``max_len``, decoded as one layer is: :meth:`attend_cached` takes tokens and a
    :class:`StackCache` and returns the logits and the extended cache."""

    def __init__(self, settings: dict[str, Any], d_model: int, heads: int, max_len: int) -> None:
        super().__init__()
        try:
            self.model = GPT(VOCAB_SIZE, **{**settings, "d_model": d_model, "num_heads": heads, "block_size": max_len})
        except (TypeError, ValueError) as error:  # a setting the GPT or a layer refuses
            raise ConfigurationError(f"recipe at d_model {d_model}, {heads} heads: {error}") from None

    def random_input(self, batch: int, length: int, generator: torch.Generator) -> Tensor:
        """``length`` random tokens per sequence."""
        return torch.randint(VOCAB_SIZE, (batch, length), generator=generator)

    def attend_cached(self, tokens: Tensor, cache: StackCache | None) -> tuple[Tensor, StackCache]:
        logits, caches = self.model(tokens, None if cache is None else list(cache.caches), use_cache=True)
        return logits, StackCache(tuple(caches))
