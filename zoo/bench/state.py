"""``python -m zoo bench state``: what one new token costs to decode after a long context.

For each attention, one block's self-attention layer (``d_model`` 256 and 8 heads by default: the
layer a recurrent family is, or a ``self`` layer over a scoring attention) encodes a context of
``L`` random positions into its cache (``attend_cached`` with none: a recurrent layer runs its
chunkwise form and keeps a state and its convolutions' windows, ``dot_product`` keeps every key
and value), then decodes
one more position from that cache, ``repeats`` times after ``warmup`` untimed calls, each from the
same context. Reported per length: the time of that step (median and quartiles), the bytes the
cache holds after it, and the step's peak memory above what it started with. A recurrent
variant's state has the same size whatever ``L``, so its step should cost the same at 16k tokens
as at 1k; a key/value cache grows with ``L``, and so does the step (it reads, and here copies,
every key). The table gives each quantity at the longest length over the shortest. A layer that
fails at a length (out of memory, or refusing it: a log-linear layer past its levels' reach) is
recorded there with its status, as ``bench attention`` records one, and the others go on: one row
of a matrix's column does not cost the rest.

An entry of ``--attentions`` is a registered name or, as in a model's ``attention`` list, a
mapping of a name and its arguments (``'{name: mla, mode: naive}'``: MLA decoding without the
absorbed form), reported under the text given. An entry of ``--recipes`` (``LABEL=PATH``, a CPU
recipe's overlay) is decoded as its whole stack, every layer's cache counted
(:mod:`zoo.bench.recipe_stack`), and reported as ``recipe LABEL``.

The prompt is encoded without gradients, as decoding runs, in the layer's float32.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import yaml
from torch import Tensor

from zoo.attention import get_attention, self_attention_layer
from zoo.attention.build.factory import layer_names
from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.layer import AttentionLayer
from zoo.bench.measure import peak_memory, time_call
from zoo.bench.recipe_stack import RecipeStack, StackCache, parse_recipe, recipe_case, recipe_settings
from zoo.bench.report import markdown_table
from zoo.bench.sweep import failure_status, time_cell
from zoo.errors import ConfigurationError, ZooError

__all__ = ["StateBenchConfig", "recipe_stack", "recurrent_names", "run_state_bench", "state_layer", "state_table"]


def recurrent_names() -> list[str]:
    """The registered layers that decode from a fixed-size state (``fixed_state``), plugins included."""
    return [name for name in layer_names() if get_attention(name).fixed_state]


def state_layer(entry: str, d_model: int, heads: int) -> AttentionLayer:
    """The self-attention layer an ``--attentions`` entry names, ``NAME`` or ``{name: NAME,
    ARGUMENT: VALUE, ...}``, built at ``d_model`` and ``heads``; a bad entry is one line."""
    loaded = yaml.safe_load(entry) if entry.lstrip().startswith("{") else entry
    if isinstance(loaded, dict) and isinstance(loaded.get("name"), str):
        name, arguments = loaded["name"], {key: value for key, value in loaded.items() if key != "name"}
    elif isinstance(loaded, str):
        name, arguments = loaded, {}
    else:
        raise ConfigurationError(
            f"--attentions takes names or mappings such as '{{name: mla, mode: naive}}'; got {entry!r}."
        )
    try:
        return self_attention_layer(AttentionSpec(name, arguments), d_model, heads)
    except ZooError:  # an unknown name: its own line, with the closest names
        raise
    except (TypeError, ValueError) as error:  # an argument the attention refuses
        raise ConfigurationError(f"--attentions {entry}: {error}") from None


def recipe_stack(entry: str, d_model: int, heads: int, max_len: int) -> RecipeStack:
    """The stack a ``--recipes`` entry (``LABEL=PATH`` or ``PATH``) names, at ``d_model`` and
    ``heads``, positions up to ``max_len``; a bad file or setting is one line."""
    return RecipeStack(recipe_settings(parse_recipe(entry)[1]), d_model, heads, max_len)


Decoder = AttentionLayer | RecipeStack
"""What one row decodes: a layer (over random vectors) or a recipe's stack (over random tokens)."""


@dataclass(frozen=True)
class StateBenchConfig:
    """What ``bench state`` decodes, and how often: ``attentions`` one layer each, ``recipes``
    (``LABEL=PATH``) a stack each."""

    lengths: list[int]
    attentions: list[str] = field(default_factory=lambda: [*recurrent_names(), "dot_product"])
    recipes: list[str] = field(default_factory=list)
    d_model: int = 256
    heads: int = 8
    batch: int = 1
    warmup: int = 3
    repeats: int = 20
    memory: bool = True
    seed: int = 0


def _step(layer: Decoder, x: Tensor, cache: LayerCache | StackCache) -> Callable[[], LayerCache | StackCache]:
    """One new position ``x`` (``(B, 1, d_model)``, or ``(B, 1)`` tokens) decoded after ``cache``:
    the extended cache."""

    def call() -> LayerCache | StackCache:
        return layer.attend_cached(x, cache)[1]  # type: ignore[arg-type]  (each decoder its own cache)

    return call


def _builders(config: StateBenchConfig) -> dict[str, Callable[[int], Decoder]]:
    """Each row's name and what builds it for a context of ``L`` tokens: a layer per attention,
    a stack (positions up to ``L + 1``) per recipe, under :func:`recipe_case`."""
    builders: dict[str, Callable[[int], Decoder]] = {
        name: lambda _, name=name: state_layer(name, config.d_model, config.heads) for name in config.attentions
    }
    for entry in config.recipes:
        label, path = parse_recipe(entry)
        settings = recipe_settings(path)
        builders[recipe_case(label)] = lambda length, settings=settings: RecipeStack(
            settings, config.d_model, config.heads, length + 1
        )
    return builders


@torch.inference_mode()
def _measure(
    build: Callable[[int], Decoder], config: StateBenchConfig, length: int, device: torch.device
) -> dict[str, Any]:
    """One attention, or one recipe's stack, at one context length."""
    generator = torch.Generator().manual_seed(config.seed * 100_003 + length)
    torch.manual_seed(config.seed)
    layer = build(length).to(device).eval()
    if isinstance(layer, RecipeStack):
        context = layer.random_input(config.batch, length + 1, generator).to(device)
    else:
        context = torch.randn(config.batch, length + 1, config.d_model, generator=generator).to(device)
    _, cache = layer.attend_cached(context[:, :length], None)
    step = _step(layer, context[:, length:], cache)
    timing = time_call(step, warmup=config.warmup, repeats=config.repeats)
    result = {"length": length, "status": "ok", "time_ms": timing.scaled(1e3), "cache_bytes": step().nbytes}
    if config.memory:
        try:
            result["step_peak_bytes"] = peak_memory(step, device=device)
        except Exception as error:  # the profiled step's own failure: its time and cache stand
            result["memory_status"] = failure_status(error)
    return result


def run_state_bench(config: StateBenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """Every attention and recipe of ``config`` at every length: one record each, its results by
    length, each ``{"length", "status": "ok", ...}`` or the status it failed with."""
    records = []
    for name, build in _builders(config).items():
        results = []
        for length in config.lengths:
            try:
                results.append(_measure(build, config, length, device))
            except Exception as error:  # this length's: recorded, and the next one tried
                results.append({"length": length, "status": failure_status(error)})
            gc.collect()  # a failure's traceback holds its frames' tensors in a cycle until collected
            shown = time_cell(results[-1]) if results[-1]["status"] == "ok" else results[-1]["status"]
            print(f"  {name} L={length}: {shown}", file=sys.stderr, flush=True)
        records.append({"attention": name, "results": results})
    return records


def state_table(records: list[dict[str, Any]], lengths: list[int]) -> str:
    """One row per attention: the step's time and the cache's size at each length, and both (and
    the step's peak memory) at the longest length over the shortest."""
    rows = []
    for record in records:
        results = record["results"]
        first, last = results[0], results[-1]
        times = [time_cell(r).replace(" ms ", " ") for r in results]
        caches = [f"{r['cache_bytes'] / 1024:.1f}" if r["status"] == "ok" else "-" for r in results]
        ratios = []
        if first["status"] == last["status"] == "ok":
            ratios = [
                last["time_ms"]["median"] / first["time_ms"]["median"],
                last["cache_bytes"] / first["cache_bytes"],
            ]
            if "step_peak_bytes" in first and first["step_peak_bytes"] > 0:
                ratios.append(last["step_peak_bytes"] / first["step_peak_bytes"])
        growth = " / ".join(f"{r:.2f}x" for r in ratios) or "-"
        rows.append([record["attention"], *times, *caches, growth])
    headers = [
        "attention",
        *(f"ms/token L={n}" for n in lengths),
        *(f"cache KiB L={n}" for n in lengths),
        f"L={lengths[-1]} over L={lengths[0]}: time / cache / step peak",
    ]
    return markdown_table(headers, rows)
