"""The ``softmax`` layer's named recipes: :class:`~zoo.attention.variants.softmax.SoftmaxAttention`
with other defaults, one name each for the attention a model family ships (the options' equations
and papers are in :mod:`~zoo.attention.variants.softmax`). Each takes every option of the layer, so
``{name: gated_attention, qk_norm: true}`` is Qwen3-Next's attention.
"""

from __future__ import annotations

from functools import partialmethod

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.variants.softmax import SoftmaxAttention

__all__ = ["GatedAttention", "QKNormAttention", "SinkAttention", "StreamingAttention"]


@register_attention_layer("qk_norm", aliases=("qknorm",))
class QKNormAttention(SoftmaxAttention):
    """``softmax`` with ``qk_norm=True`` by default (Qwen3's, Gemma 3's attention)."""

    family = "softmax"
    cost = "L²"

    __init__ = partialmethod(SoftmaxAttention.__init__, qk_norm=True)


@register_attention_layer("gated_attention", aliases=("gated_softmax",))
class GatedAttention(SoftmaxAttention):
    """``softmax`` with ``gate="elementwise"`` by default (Qiu et al., 2025); Qwen3-Next's is
    ``{name: gated_attention, qk_norm: true}``."""

    family = "softmax"
    cost = "L²"

    __init__ = partialmethod(SoftmaxAttention.__init__, gate="elementwise")


@register_attention_layer("sink_attention", aliases=("attention_sinks",))
class SinkAttention(SoftmaxAttention):
    """``softmax`` with ``sinks=True`` and ``sink_tokens=0`` by default (gpt-oss: its sliding
    layers are ``{name: sink_attention, window: 128}``, its full layers this)."""

    family = "softmax"
    cost = "L²"

    __init__ = partialmethod(SoftmaxAttention.__init__, sinks=True, sink_tokens=0)


@register_attention_layer("streaming", aliases=("streaming_llm",))
class StreamingAttention(SoftmaxAttention):
    """``softmax`` with ``window=128`` by default (and ``sink_tokens`` 4): StreamingLLM's window
    with its first tokens, a fixed-size cache, at gpt-oss's window."""

    family = "sparse"
    cost = "L"

    __init__ = partialmethod(SoftmaxAttention.__init__, window=128)
