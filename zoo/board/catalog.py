"""What the board says of each attention besides its measurements: family, causality, cost in
length; and which way each metric is better.

Causality comes from the registry's capability flags (``supports_causal``,
``supports_bidirectional``), and family and cost from the class attributes each variant declares
in its own file (``family``, ``cost``; a variant that declares none, such as a plugin's that does
not, shows ``?``), so a plugin's variant is filtered like the zoo's own. A hybrid stack is of the
family ``hybrid``, causal when every entry is, and costs what its most expensive entry costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zoo.attention import ATTENTION_REGISTRY, AttentionLayer
from zoo.matrix.rows import stackable

__all__ = ["COSTS", "RowInfo", "family_and_cost", "higher_is_better", "row_info", "stackable"]

#: Costs in the sequence length L, cheapest first (a window, block or feature count held fixed).
COSTS = ("L", "L log L", "L^1.5", "L²")
#: Metric names (their last part) where less is better; every other metric is better higher.
LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "bits_per_char", "mse", "error", "ms", "seconds", "bytes")


@dataclass(frozen=True)
class RowInfo:
    """The filters' values of one row."""

    family: str
    causal: str
    bidirectional: str
    cost: str
    kind: str


def _flag(names: Sequence[str], flag: str) -> str:
    if not names or not all(name in ATTENTION_REGISTRY for name in names):
        return "?"
    return "yes" if all(getattr(ATTENTION_REGISTRY.get(name), flag) for name in names) else "no"


def family_and_cost(name: str) -> tuple[str, str] | None:
    """The family and cost the registered variant ``name`` declares (its class's ``family`` and
    ``cost``), or None where it is not registered or declares neither."""
    if name not in ATTENTION_REGISTRY:
        return None
    cls = ATTENTION_REGISTRY.get(name)
    return None if cls.family is None or cls.cost is None else (cls.family, cls.cost)


def row_info(parts: Sequence[str]) -> RowInfo:
    """Family, causality and cost of a row whose recipe holds the attentions ``parts``."""
    canonical = [ATTENTION_REGISTRY.resolve(p) if p in ATTENTION_REGISTRY else p for p in parts]
    known = [declared for p in canonical if (declared := family_and_cost(p)) is not None]
    if len(set(canonical)) > 1:
        family = "hybrid"
    else:
        family = known[0][0] if known else "?"
    cost = max((c for _, c in known), key=COSTS.index) if len(known) == len(canonical) and known else "?"
    kinds = {
        "layer" if p in ATTENTION_REGISTRY and issubclass(ATTENTION_REGISTRY.get(p), AttentionLayer) else "scoring"
        for p in canonical
    }
    return RowInfo(
        family=family,
        causal=_flag(canonical, "supports_causal"),
        bidirectional=_flag(canonical, "supports_bidirectional"),
        cost=cost,
        kind="+".join(sorted(kinds)) if canonical else "?",
    )


def higher_is_better(metric: str, mode: str | None = None) -> bool:
    """Whether a larger value of ``metric`` is better: ``mode`` (``max``, ``min``) where the model's
    checkpoints monitor it, else by its name (:data:`LOWER_IS_BETTER`)."""
    if mode in ("max", "min"):
        return mode == "max"
    return metric.rsplit("/", 1)[-1] not in LOWER_IS_BETTER
