"""Canon layers: a residual short causal convolution at up to four places of a causal block.

Allen-Zhu (2025), "Physics of Language Models: Part 4.1, Architecture Design and the Magic of
Canon Layers" (code: facebookresearch/PhysicsLM4). A Canon layer mixes each channel of a hidden
state ``h_t`` with the same channel at the previous ``K - 1`` positions and adds the result back:

    h_t <- h_t + sum_{s=0}^{K-1} w[c, K - 1 - s] * h_{t-s}[c]      (per channel c, K = 4)

(a causal depthwise 1-D convolution, no bias, no activation, ``nn.Conv1d``'s default uniform
initialisation: standard deviation ``1 / sqrt(3 K)``, about 0.29, which the reference keeps and
the GPT's 0.02 initialisation leaves alone). The paper places it, in its own notation:

* **A**: on the block's input to the attention, after the norm (``canon_a``, ``d_model`` wide);
* **B**: inside the attention, on its projected queries, keys and values (the attention layer's
  own short convolutions, made residual: ``q_conv``, ``k_conv``, ``v_conv``);
* **C**: on the MLP's input, after the norm (``canon_c``, ``d_model`` wide);
* **D**: inside the MLP, on its hidden pre-activation, after the up projection and before the
  nonlinearity and the down projection (the feed-forward's ``canon_d``, ``ffn_hidden`` wide).

``canon`` names any subset, ``"ABCD"`` all four; ``""`` (the default) none, so models saved
before the option rebuild as they were.

Where the zoo departs from the reference, and why:

* Canon-D: the reference's MLP is gated (SwiGLU) and convolves the gate's and the up projection's
  outputs together, before ``act(gate) * up``; the zoo's MLP has one up projection, whose output
  is convolved before the activation: the same place.
* Canon-B reuses the short convolution the zoo's layers already own
  (:class:`~zoo.attention.modules.convolved.ShortConvolved`), not a second one. A scoring
  attention (``dot_product``, ``sigmoid``, ...) is run by the ``softmax`` layer over it
  (``{name: softmax, scores: NAME, conv_size: 4}``, the same projections with the convolutions
  added), a layer of the softmax family without a convolution (``softmax`` and its recipes,
  ``forgetting``, ``differential``, ``mla``, ``moba``, ``nsa``) gets ``conv_size`` 4, and the
  convolutions are made residual (:attr:`~zoo.attention.modules.convolved.ShortConvolved.conv_residual`).
  A layer that already convolves its projections (the recurrent families, or a softmax layer
  given ``conv_size``) keeps its own convolution as its Canon-B and gets no second one: that is
  the paper's point about those families, and its linear models' "Canon-AbCD" (lower-case ``b``:
  the family's own non-residual SiLU convolution in B's place). A layer with neither (``rwkv7``,
  whose token shift mixes neighbours instead; a plugin's layer without the hook) is refused.
* The kernel is the paper's 4, a constant; the reference's options for a bias, an activation or
  no residual are not offered.

Decoding: each convolution continues from its last ``K - 1`` inputs. A block keeps those of A, C
and D in a :class:`CanonCache` around its attention's cache; B's live in the attention layer's
own :class:`~zoo.attention.contract.cache.ConvolvedCache`. The sums are
:func:`~zoo.attention.kernels.short_conv.causal_conv1d`'s, the recurrent families' kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from torch import Tensor, nn

from zoo.attention.build.spec import AttentionSpec
from zoo.attention.contract.base import IncompatibleAttentionError
from zoo.attention.contract.cache import LayerCache
from zoo.attention.kernels.short_conv import causal_conv1d, short_convolutions
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.errors import DataError

__all__ = [
    "CANON_KERNEL",
    "CANON_PLACES",
    "CanonCache",
    "canon_attention",
    "canon_convolution",
    "check_canon",
    "check_canon_attention",
    "residual_conv",
]

#: the places a Canon layer can take, in the paper's notation
CANON_PLACES = "ABCD"
#: taps of every Canon convolution (the paper's)
CANON_KERNEL = 4


def check_canon(canon: str) -> str:
    """``canon`` if it names each of some of :data:`CANON_PLACES` at most once; else a one-line
    :class:`~zoo.errors.DataError` naming the valid letters."""
    if not isinstance(canon, str) or set(canon) - set(CANON_PLACES) or len(set(canon)) != len(canon):
        raise DataError(
            f"canon takes any of the letters {', '.join(CANON_PLACES)} once each (A: before the attention, B: on its "
            f"queries, keys and values, C: before the MLP, D: inside it; '' for none); got {canon!r}."
        )
    return canon


def canon_convolution(width: int) -> nn.Conv1d:
    """One Canon layer's depthwise filters over ``width`` channels (``nn.Conv1d``'s default init)."""
    (conv,) = short_convolutions("Canon layer", CANON_KERNEL, [width])
    return conv


def residual_conv(conv: nn.Conv1d, x: Tensor, window: Tensor | None) -> tuple[Tensor, Tensor]:
    """``x + conv(x)`` over ``x`` ``(B, T, C)`` after ``window`` (its ``K - 1`` earlier inputs;
    None: a sequence's start), and the window after ``x``."""
    y, after = causal_conv1d(x, conv.weight, None, window)
    return x + y, after


def canon_attention(spec: AttentionSpec) -> tuple[AttentionSpec, bool]:
    """The spec a block with Canon-B builds its attention from, and whether the layer's
    convolutions must be made residual (False: the layer's own convolution stands in for B, see the
    module docstring). Layers that cannot take it are refused by :func:`check_canon_attention`
    once built."""
    if not spec.is_layer:
        variant = spec.variant
        if spec.kwargs or not (variant.reads_queries and variant.reads_keys):
            raise IncompatibleAttentionError(
                f"{_where(spec)}: Canon-B runs the scoring attention {spec.name!r} inside the softmax layer "
                "({name: softmax, scores: NAME}), which takes one that reads queries and keys, without arguments; "
                f"got {spec.describe()!r}. Leave B out of canon, or choose such an attention."
            )
        return replace(spec, name="softmax", kwargs={"scores": spec.name, "conv_size": CANON_KERNEL}), True
    own = issubclass(spec.variant, RecurrentLayer)  # convolves by default: its own convolution is its B
    if issubclass(spec.variant, ShortConvolved) and not own and not spec.kwargs.get("conv_size"):
        return replace(spec, kwargs={**spec.kwargs, "conv_size": CANON_KERNEL}), True
    return spec, False


def check_canon_attention(layer: nn.Module, spec: AttentionSpec) -> None:
    """Refuse, in one line, a built layer that has no short convolution on its projections to
    serve as its Canon-B."""
    if not (isinstance(layer, ShortConvolved) and layer.convolves):
        raise IncompatibleAttentionError(
            f"{_where(spec)}: Canon-B sits on the attention's projected queries, keys and values, and {spec.describe()!r} "
            "has no short convolution there (conv_size 0, or none at all); give it conv_size > 0 where it takes one, "
            "use a scoring attention, a softmax-family or recurrent layer, or leave B out of canon."
        )


def _where(spec: AttentionSpec) -> str:
    """The layer an error names (from 1)."""
    return "every layer" if spec.layer_index is None else f"layer {spec.layer_index + 1}"


@dataclass(frozen=True)
class CanonCache:
    """A causal block's decoding cache with Canon layers: its attention's cache (``inner``) and the
    last ``K - 1`` inputs of each of its Canon-A, -C and -D convolutions (``windows``, by place,
    ``(B, K - 1, width)`` each), which the next positions continue from."""

    inner: LayerCache
    windows: Mapping[str, Tensor]

    @property
    def length(self) -> int:
        return self.inner.length

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes + sum(window.nbytes for window in self.windows.values())

    def select(self, index: Tensor) -> CanonCache:
        windows = {place: window.index_select(0, index) for place, window in self.windows.items()}
        return CanonCache(self.inner.select(index), MappingProxyType(windows))

    @staticmethod
    def unwrap(cache: LayerCache | None, *, canon: bool) -> tuple[LayerCache | None, Mapping[str, Tensor]]:
        """A block's ``cache`` as its attention's and the Canon windows (empty at a sequence's
        start, or for a block with no Canon-A, -C or -D: ``canon`` False); a ``TypeError`` for a
        cache of the other kind."""
        if cache is not None and isinstance(cache, CanonCache) != canon:
            wanted = "a CanonCache" if canon else "its attention's cache, not a CanonCache"
            raise TypeError(f"a causal block {'with' if canon else 'without'} Canon A, C or D continues {wanted}.")
        return (cache.inner, cache.windows) if isinstance(cache, CanonCache) else (cache, MappingProxyType({}))

    @staticmethod
    def wrap(inner: LayerCache, windows: Mapping[str, Tensor]) -> LayerCache:
        """The cache a block hands back: ``inner``, in a :class:`CanonCache` when it has windows."""
        return CanonCache(inner, MappingProxyType(dict(windows))) if windows else inner
