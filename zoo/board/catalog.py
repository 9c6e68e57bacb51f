"""What the board says of each attention besides its measurements: family, causality, cost in
length; and which way each metric is better.

Causality comes from the registry's capability flags (``supports_causal``,
``supports_bidirectional``), so a plugin's variant is filtered like the zoo's own. Family and cost
are not flags of the contract: they are kept here, in :data:`FAMILIES`, one line a variant
(a name not listed, such as a plugin's, shows ``?``). A hybrid stack is of the family ``hybrid``,
causal when every entry is, and costs what its most expensive entry costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zoo.attention import ATTENTION_REGISTRY, Attention, AttentionLayer

__all__ = ["COSTS", "FAMILIES", "RowInfo", "higher_is_better", "row_info", "stackable"]

#: Costs in the sequence length L, cheapest first (a window, block or feature count held fixed).
COSTS = ("L", "L log L", "L^1.5", "L²")
#: Each registered variant's family and cost of one forward in the length L (window, block,
#: feature or state sizes held fixed).
FAMILIES: dict[str, tuple[str, str]] = {
    "dot_product": ("softmax", "L²"),
    "additive": ("softmax", "L²"),
    "synthesizer": ("softmax", "L²"),
    "average": ("kernel smoother", "L²"),
    "gaussian_kernel": ("kernel smoother", "L²"),
    "local": ("sparse", "L"),
    "longformer": ("sparse", "L"),
    "bigbird": ("sparse", "L"),
    "sparse": ("sparse", "L^1.5"),
    "sinkhorn": ("sparse", "L²"),
    "reformer": ("hashing", "L log L"),
    "linformer": ("low rank", "L"),
    "linear": ("kernelized", "L"),
    "performer": ("kernelized", "L"),
    "retention": ("recurrent", "L"),
    "gla": ("recurrent", "L"),
    "deltanet": ("recurrent", "L"),
    "gated_deltanet": ("recurrent", "L"),
    "mamba2": ("recurrent", "L"),
    "kda": ("recurrent", "L"),
    "rwkv7": ("recurrent", "L"),
    "gated_deltaproduct": ("recurrent", "L"),
    "softmax": ("softmax", "L²"),
    "qk_norm": ("softmax", "L²"),
    "gated_attention": ("softmax", "L²"),
    "sink_attention": ("softmax", "L²"),
    "differential": ("softmax", "L²"),
    "forgetting": ("softmax", "L²"),
    "streaming": ("sparse", "L"),
    "sigmoid": ("softmax alternative", "L²"),
    "softpick": ("softmax alternative", "L²"),
    "stick_breaking": ("softmax alternative", "L²"),
    "mla": ("latent", "L²"),
    "moba": ("sparse selection", "L²"),
    "nsa": ("sparse selection", "L²"),
}
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


def stackable(name: str) -> bool:
    """Whether ``name`` is a registered attention a stack takes (a scoring attention, or a layer
    built by name): the multi-head layers around them are not rows of their own."""
    if name not in ATTENTION_REGISTRY:
        return False
    cls = ATTENTION_REGISTRY.get(name)
    return issubclass(cls, Attention) or (issubclass(cls, AttentionLayer) and bool(cls.stack_layer))


def _flag(names: Sequence[str], flag: str) -> str:
    if not names or not all(name in ATTENTION_REGISTRY for name in names):
        return "?"
    return "yes" if all(getattr(ATTENTION_REGISTRY.get(name), flag) for name in names) else "no"


def row_info(parts: Sequence[str]) -> RowInfo:
    """Family, causality and cost of a row whose recipe holds the attentions ``parts``."""
    canonical = [ATTENTION_REGISTRY.resolve(p) if p in ATTENTION_REGISTRY else p for p in parts]
    known = [FAMILIES[p] for p in canonical if p in FAMILIES]
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
