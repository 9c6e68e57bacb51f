"""The ``softmax`` layer's options: their types, the keywords layers built on it hand on, the
checks that refuse a combination the layer cannot compute, each in one line naming the fix, and how
a layer shows those it was built with (:class:`~zoo.attention.variants.softmax.SoftmaxAttention`
documents what each option computes)."""

from __future__ import annotations

from typing import Literal, TypedDict

from zoo.attention.modules.multi_head import SelfAttention
from zoo.attention.variants.dot_product import DotProductAttention
from zoo.positions import PositionScheme

__all__ = ["NORM_EPS", "Gate", "SoftmaxOptions", "ValueSource", "check_options", "describe_options"]

Gate = Literal["elementwise", "headwise"]
ValueSource = Literal["projected", "keys"]


class SoftmaxOptions(TypedDict, total=False):
    """The ``softmax`` layer's arguments that a layer built on it takes as they are and hands on
    (``**options: Unpack[SoftmaxOptions]``), as :class:`SoftmaxAttention` documents them; the window
    and its sink tokens are left to layers that honour them, as is the scale."""

    qk_norm: bool
    gate: Gate | None
    sinks: bool
    conv_size: int
    num_kv_heads: int | None
    dropout: float
    position: PositionScheme | None
    bias: bool


#: QK-norm's epsilon (Qwen3's, OLMo 2's and Gemma 3's)
NORM_EPS = 1e-6


def check_options(
    name: str,
    *,
    dot_products: bool,
    reads_keys: bool,
    scores: str,
    gate: Gate | None,
    sinks: bool,
    window: int | None,
    sink_tokens: int,
    conv_size: int,
    scale: float | None,
    value_scale: float | None,
    values: ValueSource,
    v_head_dim: int,
    head_dim: int,
    v_norm: bool,
    kv_source: int | None,
) -> None:
    """Refuse, in one ``ValueError`` line naming the fix, options of layer ``name`` that cannot work
    together: ``dot_products`` and ``reads_keys`` say what its heads' scoring attention does."""
    if (sinks or window is not None) and not dot_products:
        raise ValueError(
            f"{name}: sinks and windows act on softmax over dot products; scores={scores!r} takes neither. "
            "Leave scores out (dot_product) or drop sinks and window."
        )
    if scale is not None and (not dot_products or not scale > 0):
        raise ValueError(
            f"{name}: scale scales dot products for softmax, a positive number; got {scale!r} with "
            f"scores={scores!r}. Leave scores out (dot_product), or scale out (head_dim ** -0.5)."
        )
    if value_scale is not None and not (isinstance(value_scale, (int, float)) and value_scale > 0):
        raise ValueError(f"{name}: value_scale must be a positive number or None; got {value_scale!r}.")
    if values not in ("projected", "keys"):
        raise ValueError(f"{name}: values must be 'projected' or 'keys'; got {values!r}.")
    if values == "keys" and (conv_size or v_head_dim != head_dim or not reads_keys):
        raise ValueError(
            f"{name}: values='keys' reads the key projection as the values, so it needs scores that read keys "
            f"and takes neither conv_size nor a v_head_dim other than head_dim; got scores={scores!r}, "
            f"conv_size={conv_size}, v_head_dim={v_head_dim}."
        )
    if gate not in (None, "elementwise", "headwise"):
        raise ValueError(f"{name}: gate must be 'elementwise', 'headwise' or None; got {gate!r}.")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"{name}: window must be a positive integer or None; got {window!r}.")
    if not isinstance(sink_tokens, int) or sink_tokens < 0:
        raise ValueError(f"{name}: sink_tokens must be 0 or a positive integer; got {sink_tokens!r}.")
    if kv_source is not None and (isinstance(kv_source, bool) or not isinstance(kv_source, int) or kv_source < 0):
        raise ValueError(f"{name}: kv_source must be an earlier layer's index (0 or more) or None; got {kv_source!r}.")
    if kv_source is not None and (conv_size or v_norm or values != "projected" or value_scale is not None):
        raise ValueError(
            f"{name}: kv_source={kv_source} reads that layer's keys and values, so this layer takes no conv_size, "
            "v_norm, values or value_scale (they act on keys and values it does not compute); set them on the source."
        )


def describe_options(layer: SelfAttention) -> str:
    """The options ``layer`` (a ``softmax`` layer) was built with that differ from the plain layer's, as ``extra_repr`` shows them."""
    options = [
        f"embed_dim={layer.embed_dim}, num_heads={layer.num_heads}",
        f"num_kv_heads={layer.num_kv_heads}" if layer.num_kv_heads != layer.num_heads else "",
        f"head_dim={layer.head_dim}" if layer.head_dim * layer.num_heads != layer.embed_dim else "",
        "qk_norm=True" if layer.q_norm is not None else "",
        f"gate={layer.gate!r}" if layer.gate is not None else "",
        "sinks=True" if layer.sinks is not None else "",
        f"window={layer.window}, sink_tokens={layer.sink_tokens}" if layer.window is not None else "",
        f"scale={layer.scale}" if layer.scale is not None else "",
        f"v_head_dim={layer.v_head_dim}" if layer.v_head_dim != layer.head_dim else "",
        f"value_scale={layer.value_scale}" if layer.value_scale is not None else "",
        "values='keys'" if layer.values == "keys" else "",
        "v_norm=True" if layer.v_norm is not None else "",
        f"kv_source={layer.kv_source}" if layer.kv_source is not None else "",
        "" if type(layer.score_attention) is DotProductAttention else f"scores={layer.scores!r}",
    ]
    return ", ".join(filter(None, options))
