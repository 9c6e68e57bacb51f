"""The attention contract: :class:`AttentionOutput`, :class:`Attention` and :class:`AttentionLayer`.

A *scoring attention* (subclass of :class:`Attention`) maps queries ``(*batch, Lq, Dq)``, keys
``(*batch, Lk, Dk)`` and values ``(*batch, Lk, Dv)`` to ``(*batch, Lq, Dv)``. A subclass
usually implements only :meth:`Attention.score`; the base class validates inputs, merges the
padding and user masks, applies causality, the masked softmax and dropout, and returns the weights
when asked. A variant whose computation has no score matrix (linear attention, say) overrides
:meth:`Attention.attend`, never ``forward``, and declares what it supports; checks of its own
(one sequence, a length limit) go in an override of :meth:`Attention.check_layout`.

A call goes ``forward`` -> :meth:`Attention.attend`. ``forward`` takes either the raw masks
(``valid_lens``, ``attn_mask``, ``is_causal``: a scoring attention called on its own validates and
merges them, as a model's entry does) or the :class:`~zoo.attention.contract.context.AttentionContext` a
model built once for its forward (a multi-head layer hands its heads that); it refuses what the
variant declares it cannot do, answers an empty input, and calls ``attend(queries, keys, values,
context)``, the one hook a variant overrides besides ``score``. A class whose hook has the
shape the contract had before the context (``attend(queries, keys, values, mask, *, is_causal,
need_weights)``) is refused when it is created, in one line naming the rename.

An *attention layer* (:class:`zoo.attention.contract.layer.AttentionLayer`) owns its projections, gates,
convolutions and cache: ``multi_head`` runs a registered scoring attention per head; the
recurrent families are layers of their own.

Each class declares what it supports as class attributes, checked when an architecture is built;
what a built module serves is read in one place, :func:`capabilities`: the class's flags narrowed
by how it was built (a multi-head layer serves what its heads serve; short convolutions take key
padding only). The refusals, the kit and the models read that; no flag is set on an instance.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from zoo.attention.contract.context import AttentionContext, refuse_hooks_without_context
from zoo.attention.contract.masking import (
    key_column,
    masked_softmax,
    with_causal,
)
from zoo.attention.kernels.position_bias import PositionBias, position_bias_grid
from zoo.attention.kernels.sdpa import repeat_kv_heads
from zoo.errors import ZooError

__all__ = [
    "Attention",
    "AttentionContext",
    "AttentionOutput",
    "Capabilities",
    "IncompatibleAttentionError",
    "PositionBias",
    "capabilities",
    "position_bias_grid",
]


class IncompatibleAttentionError(ZooError, ValueError):
    """An attention variant was asked for something it declares it cannot do."""


class AttentionOutput(NamedTuple):
    """What every attention returns: ``output`` and, when ``need_weights=True``, ``weights``.

    Unpacks like a tuple: ``out, weights = attention(q, k, v, need_weights=True)``.
    ``weights`` has shape ``(*batch, Lq, Lk)`` for a scoring attention and
    ``(B, num_heads, Lq, Lk)`` for a multi-head layer.
    """

    output: Tensor
    weights: Tensor | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a built attention serves: the flags of :class:`_Capabilities` (their meanings are
    there), as one built module answers them."""

    supports_padding_mask: bool = True
    supports_query_mask: bool = True
    supports_causal: bool = True
    supports_bidirectional: bool = True
    supports_cross_attention: bool = True
    supports_weights: bool = True
    normalized_weights: bool = True
    supports_decoding: bool = True

    @classmethod
    def declared(cls, owner: object) -> Capabilities:
        """The flags ``owner`` (a class, or a module of any kind) declares; the defaults where it declares none."""
        return cls(**{flag.name: getattr(owner, flag.name, flag.default) for flag in fields(cls)})

    def __and__(self, other: Capabilities) -> Capabilities:
        """What both serve: each flag true only where it is true in both."""
        return Capabilities(
            **{flag.name: getattr(self, flag.name) and getattr(other, flag.name) for flag in fields(self)}
        )


def capabilities(module: object) -> Capabilities:
    """What ``module`` serves: its :attr:`~_Capabilities.capabilities` where it is a zoo attention,
    else the flags it declares (a plugin module of any kind)."""
    built = getattr(module, "capabilities", None)
    return built if isinstance(built, Capabilities) else Capabilities.declared(module)


class _Capabilities:
    """Capability flags shared by scoring attentions and layers, declared by a class; an instance
    answers them through :attr:`capabilities`."""

    #: accepts ``valid_lens`` / ``attn_mask`` (padding and arbitrary boolean masks)
    supports_padding_mask: ClassVar[bool] = True
    #: accepts masks that differ from query to query (``valid_lens`` of shape ``(B, Lq)``, an
    #: ``attn_mask`` with a query axis); False for a variant that takes key padding only, the same
    #: for every query (a recurrence writes each key once into a state that every later query reads)
    supports_query_mask: ClassVar[bool] = True
    #: honours ``is_causal=True``
    supports_causal: ClassVar[bool] = True
    #: can return attention weights (``need_weights=True``)
    supports_weights: ClassVar[bool] = True
    #: has a fused kernel used whenever weights are not requested
    has_fused_path: ClassVar[bool] = False
    #: each query's weights are a distribution over the keys it sees (non-negative, summing to
    #: one); False where they are not: sigmoid and softpick weights, stick-breaking's, a softmax
    #: that leaves mass on a learned sink, differential attention's difference of two maps
    normalized_weights: ClassVar[bool] = True
    #: attends in both directions when not causal (an encoder's self-attention, cross-attention);
    #: False for a causal recurrence (retention, DeltaNet), which encoders refuse
    supports_bidirectional: ClassVar[bool] = True
    #: decodes new positions after a cache of earlier ones (``attend_cached``): a scoring
    #: attention does inside a multi-head layer (from its keys and values); a layer that
    #: implements no ``attend_cached`` does not, and a decoder refuses it
    supports_decoding: ClassVar[bool] = True
    #: what the leaderboard files the variant under (``"softmax"``, ``"recurrent"``, ``"sparse"``,
    #: ...; :mod:`zoo.board.catalog`), declared in the variant's own file; None: not filed (``?``)
    family: ClassVar[str | None] = None
    #: the cost of one forward in the length ``L``, one of :data:`zoo.board.catalog.COSTS`
    #: (a window, block, feature or state size held fixed); None: not stated (``?``)
    cost: ClassVar[str | None] = None

    @property
    def capabilities(self) -> Capabilities:
        """What this module serves: its class's flags; a class whose construction narrows them
        (a multi-head layer, short convolutions) overrides this, and nothing else."""
        return Capabilities.declared(type(self))

    def check_request(self, context: AttentionContext) -> None:
        """Refuse, in one line, a call this module cannot serve (its :attr:`capabilities`)."""
        name, mask, can = type(self).__name__, context.mask, self.capabilities
        if mask is not None and not can.supports_padding_mask:
            raise IncompatibleAttentionError(f"{name} does not support padding masks (valid_lens / attn_mask).")
        if mask is not None and not can.supports_query_mask and key_column(mask) is None:
            raise IncompatibleAttentionError(
                f"{name} takes key padding masks only, the same for every query (valid_lens of shape (B,), an "
                f"attn_mask of shape (B, 1, Lk)); got a mask of shape {tuple(mask.shape)} that differs per query."
            )
        if context.is_causal and not can.supports_causal:
            raise IncompatibleAttentionError(f"{name} does not support causal masking (is_causal=True).")
        if context.need_weights and not can.supports_weights:
            raise IncompatibleAttentionError(f"{name} cannot return attention weights (need_weights=True).")
        if not context.is_causal and not can.supports_bidirectional:
            raise IncompatibleAttentionError(
                f"{name} is a causal recurrence: it attends to earlier positions only; call it with is_causal=True "
                "(a decoder's self-attention), or use a variant that attends both ways."
            )

    def require_positive(self, **values: int | None) -> None:
        """Refuse, naming it, the first constructor argument of ``values`` that is set (not None)
        but not a positive integer."""
        for label, value in values.items():
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{type(self).__name__}: {label} must be a positive integer, got {value!r}.")


class Attention(_Capabilities, nn.Module):
    """Base class of scoring attentions (additive, dot-product, Gaussian kernel, plugins).

    Args:
        dropout: Dropout probability applied to the attention weights during training.
    """

    #: the variant needs queries and keys of the same feature size
    requires_equal_qk_dims: ClassVar[bool] = True
    #: queries and keys may come from two different sequences (cross-attention); False for a
    #: variant defined by positions within one sequence, such as a sliding window
    supports_cross_attention: ClassVar[bool] = True
    #: adds a positional bias scheme (``alibi``, ``t5``) to its scores; the base class's score
    #: path does. A subclass that overrides ``attend`` or ``forward`` without declaring this
    #: flag itself is taken not to (set False by :meth:`__init_subclass__`), so a bias is
    #: refused rather than silently dropped
    supports_position_bias: ClassVar[bool] = True
    #: scores queries and keys that a rotary scheme (``rope``) has rotated per head; False for
    #: a variant whose scores are not built from their dot products
    supports_rotary: ClassVar[bool] = True
    #: takes keys and values with fewer heads (axis -3) than the queries, each shared by a group
    #: of query heads (grouped-query attention); a layer repeats them for a variant without it
    supports_grouped_kv: ClassVar[bool] = False
    #: reads the content of the queries; a multi-head layer builds no query projection for a
    #: variant that reads only their shape (an instance may set it, as ``synthesizer`` does by mode)
    reads_queries: bool = True
    #: reads the content of the keys; a multi-head layer builds no key projection for a variant
    #: that does not (shared-QK ``reformer``, ``synthesizer``) and hands it the values in their place
    reads_keys: bool = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that replaces the score path (``attend`` or ``forward``) and does not say
        whether it adds a positional bias is taken not to: refused, never silently dropped."""
        super().__init_subclass__(**kwargs)
        if "reads_layer_input" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}: reads_layer_input is gone. A variant whose gates read the layer's input is an "
                "attention layer now: subclass zoo.AttentionLayer (or zoo.RecurrentLayer for a linear recurrence) "
                "and register it with @zoo.register_attention_layer (docs/plugins.md, 'Writing a layer')."
            )
        overrides = "attend" in cls.__dict__ or "forward" in cls.__dict__
        if overrides and "supports_position_bias" not in cls.__dict__:
            cls.supports_position_bias = False
        refuse_hooks_without_context(cls, "queries, keys, values")

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
        self.dropout = nn.Dropout(dropout)

    @property
    def active_dropout(self) -> float:
        """The dropout probability on the weights now: ``dropout.p`` in training, else 0 (what a
        fused kernel's ``dropout_p`` takes, and what a path that never forms weights must check)."""
        return self.dropout.p if self.training else 0.0

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Unnormalized scores ``(*batch, Lq, Lk)``; higher means more attention."""
        raise NotImplementedError(f"{type(self).__name__} must implement score(queries, keys), or override attend().")

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        position_bias: PositionBias | None = None,
        context: AttentionContext | None = None,
    ) -> AttentionOutput:
        """Attend from ``queries`` over ``keys``/``values``.

        Args:
            queries: ``(*batch, Lq, Dq)``.
            keys: ``(*batch, Lk, Dk)``.
            values: ``(*batch, Lk, Dv)``.
            valid_lens: ``batch`` or ``(*batch, Lq)``: how many leading keys each sequence (or
                query) may attend to.
            attn_mask: boolean, broadcastable to ``(*batch, Lq, Lk)``, True = attend.
            is_causal: forbid attending to later positions (aligned bottom-right).
            need_weights: also return the ``(*batch, Lq, Lk)`` weights.
            position_bias: a bias positional scheme (``alibi``, ``t5``) whose bias is added to
                the scores, query ``i`` at position ``Lk - Lq + i``; its head axis lines up
                with dimension -3 of the queries (a layer's heads), or is 1.
            context: Instead of the five above, the context a model built once for its forward
                (:class:`~zoo.attention.contract.context.AttentionContext`): its mask is merged and
                validated already, so nothing is checked again here but what the variant
                declares it cannot do.
        """
        if context is None:
            self.check_tensors(queries, keys, values)
            context = AttentionContext.build(
                queries.shape[:-2], queries.shape[-2], keys.shape[-2], valid_lens=valid_lens, attn_mask=attn_mask,
                is_causal=is_causal, need_weights=need_weights, position_bias=position_bias, owner=type(self).__name__,
            )  # fmt: skip
        elif valid_lens is not None or attn_mask is not None or is_causal or need_weights or position_bias is not None:
            raise TypeError(
                f"{type(self).__name__}: give either a context or the raw masks (valid_lens, attn_mask, is_causal, "
                "need_weights, position_bias), not both: the context holds them already."
            )
        self.check_request(context)
        self.check_layout(queries, keys, context.is_causal)
        keys, values = self._expand_groups(queries, keys, values)
        if not (queries.shape[-2] and keys.shape[-2]):  # nothing to score: no variant's attend() sees it
            return self.empty_output(queries, keys, values, context.need_weights)
        return self.attend(queries, keys, values, context)

    def check_request(self, context: AttentionContext) -> None:
        """Refuse, in one line, what this variant declares it cannot do (the capability flags)."""
        super().check_request(context)
        if context.position_bias is not None and not self.supports_position_bias:
            raise IncompatibleAttentionError(
                f"{type(self).__name__} does not add a positional bias to its scores (position_bias); "
                "use an absolute or rotary scheme with it."
            )

    def _expand_groups(self, queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values with as many heads as the queries (axis -3) for a variant that takes
        no grouped heads; as they are otherwise."""
        return (keys, values) if self.supports_grouped_kv else repeat_kv_heads(queries, keys, values)

    def attend(self, queries: Tensor, keys: Tensor, values: Tensor, context: AttentionContext) -> AttentionOutput:
        """The computation on checked inputs: the hook a variant overrides (this one runs
        :meth:`score`, the masked softmax and dropout).

        Args:
            queries, keys, values: As in :meth:`forward`, already checked.
            context: The forward's :class:`~zoo.attention.contract.context.AttentionContext`: ``mask``
                (padding and user masks merged, boolean, broadcastable to ``(*batch, Lq, Lk)``,
                True = attend, or None; never causality), ``is_causal`` (forbid later positions,
                aligned bottom-right), ``need_weights`` (also return the ``(*batch, Lq, Lk)``
                weights), ``position_bias`` (a bias scheme added to the scores on the full grid,
                :meth:`~zoo.attention.contract.context.AttentionContext.bias_grid`; a variant that takes
                it declares ``supports_position_bias``).
        """
        mask = context.mask
        if context.is_causal:
            mask = with_causal(mask, queries.shape[-2], keys.shape[-2], queries.device)
        scores = self.score(queries, keys)
        bias = context.bias_grid(queries.shape[-2], keys.shape[-2], queries.device)
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        weights = self.weigh(scores, mask)
        output = torch.matmul(self.dropout(weights), values)
        return AttentionOutput(output, weights if context.need_weights else None)

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        """The weights ``(*batch, Lq, Lk)`` of the scores under ``mask`` (boolean, True = attend,
        causality merged in, bottom-right aligned; or None): the masked softmax here. A variant
        that maps scores to weights another way (a sigmoid, softpick) overrides this alone; its
        weights must be zero on hidden keys."""
        return masked_softmax(scores, mask=mask)

    @staticmethod
    def empty_output(queries: Tensor, keys: Tensor, values: Tensor, need_weights: bool) -> AttentionOutput:
        """The answer when there is nothing to score (no queries or no keys): a zero output, as
        for a fully masked row, and empty weights. ``forward`` returns it before ``attend``, so
        blockwise and kernelized ``attend`` overrides never see an empty sequence."""
        output = values.new_zeros((*queries.shape[:-1], values.shape[-1]))
        return AttentionOutput(
            output, values.new_zeros((*queries.shape[:-1], keys.shape[-2])) if need_weights else None
        )

    def check_one_sequence(self, queries: Tensor, keys: Tensor, is_causal: bool, what: str) -> None:
        """Refuse a non-causal call over two sequences for a variant defined by positions within
        one (``supports_cross_attention`` False); ``what`` names its rule ("window", "pattern")."""
        num_queries, num_keys = queries.shape[-2], keys.shape[-2]
        if not is_causal and num_queries != num_keys:
            raise IncompatibleAttentionError(
                f"{type(self).__name__}: a non-causal {what} needs queries and keys of one sequence; got "
                f"{num_queries} queries and {num_keys} keys. Use it for self-attention (a causal call also takes "
                f"fewer queries than keys, aligned bottom-right, as in cached decoding)."
            )

    def _grouped(self, queries: Tensor, keys: Tensor, values: Tensor) -> bool:
        """Whether keys and values hold grouped heads this variant takes: fewer heads at axis -3,
        dividing the queries' heads, and the same batch otherwise."""
        if not self.supports_grouped_kv or queries.dim() < 4 or keys.shape[:-2] != values.shape[:-2]:
            return False
        heads, kv_heads = queries.shape[-3], keys.shape[-3]
        return queries.shape[:-3] == keys.shape[:-3] and kv_heads > 0 and heads % kv_heads == 0

    def check_dims(self, query_dim: int, key_dim: int, value_dim: int) -> None:
        """Raise ``ValueError`` if this variant cannot take these feature sizes."""
        if self.requires_equal_qk_dims and query_dim != key_dim:
            raise ValueError(
                f"{type(self).__name__} needs queries and keys of the same feature size; got "
                f"{query_dim} and {key_dim}. Project them to a common size, or use 'additive', "
                f"which accepts different sizes."
            )

    def check_tensors(self, queries: Tensor, keys: Tensor, values: Tensor) -> None:
        """Validate the tensors of a :meth:`forward` call given raw masks (their masks are
        validated where they become a context, :meth:`AttentionContext.build`)."""
        name = type(self).__name__
        for label, tensor in (("queries", queries), ("keys", keys), ("values", values)):
            if not isinstance(tensor, Tensor):
                raise TypeError(f"{name}: {label} must be a tensor, got {type(tensor).__name__}.")
            if tensor.dim() < 3:
                raise ValueError(
                    f"{name}: {label} must have shape (batch, length, features); got "
                    f"{tuple(tensor.shape)}. Add a batch axis with .unsqueeze(0)."
                )
            if not tensor.is_floating_point():
                raise ValueError(f"{name}: {label} must be floating point, got {tensor.dtype}.")
        if not queries.shape[:-2] == keys.shape[:-2] == values.shape[:-2] and not self._grouped(queries, keys, values):
            raise ValueError(
                f"{name}: batch shapes differ: queries {tuple(queries.shape[:-2])}, keys "
                f"{tuple(keys.shape[:-2])}, values {tuple(values.shape[:-2])}; they must be equal."
            )
        if keys.shape[-2] != values.shape[-2]:
            raise ValueError(
                f"{name}: keys and values must have the same length; got {keys.shape[-2]} keys "
                f"and {values.shape[-2]} values."
            )
        self.check_dims(queries.shape[-1], keys.shape[-1], values.shape[-1])

    def check_layout(self, queries: Tensor, keys: Tensor, is_causal: bool) -> None:
        """A variant's own checks of the query and key layout, run on every call (from a layer
        too) before :meth:`attend` (none here); raise a one-line error naming the fix."""
