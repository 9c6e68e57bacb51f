"""The ``softmax`` layer's options: their types, the keywords layers built on it hand on, and the
checks that refuse a combination the layer cannot compute, each in one line naming the fix
(:class:`~zoo.attention.variants.softmax.SoftmaxAttention` documents what each option computes)."""

from __future__ import annotations

from typing import Literal, TypedDict

from zoo.positions import PositionScheme

__all__ = ["NORM_EPS", "Gate", "SoftmaxOptions", "ValueSource", "check_options"]

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
