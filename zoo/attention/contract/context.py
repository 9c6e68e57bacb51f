"""What every attention layer of one forward reads: :class:`AttentionContext`, built once a forward.

A model builds one context where its inputs enter (as Hugging Face's ``masking_utils`` builds one
mask per forward) and hands it, unchanged, to every layer of a stack, and a multi-head layer to
the scoring attention in its heads:

* ``mask``: the padding and user masks, validated and merged once into one boolean mask
  (True = attend) broadcastable to the scores ``(B, 1 or H, Lq, Lk)`` (for a scoring attention
  called on its own, ``(*batch, Lq, Lk)``); None when nothing is masked. It never holds
  causality, which travels as ``is_causal`` so that a fused kernel can take it as a flag;
* ``is_causal``: whether a query sees only keys at or before its position (bottom-right aligned:
  query ``i`` of ``Lq`` over ``Lk`` keys sits at ``Lk - Lq + i``, as in cached decoding);
* ``need_weights``: whether layers return their ``(B, H, Lq, Lk)`` weights;
* ``offset``: positions before the first query (a decoding cache's length), where rotary angles
  and bias positions start;
* ``position_bias``: the bias scheme (``alibi``, ``t5``) a scoring attention adds to its scores;
  a multi-head layer whose stack has one hands its heads :meth:`with_position_bias`;
* ``kv_store``: where layers whose keys and values later layers read hand them on, for this
  forward (:mod:`zoo.attention.contract.kv_sharing`); None in a model without such layers.

What layers compute from it and would otherwise recompute in every layer is kept on the
context for the rest of the forward (:meth:`memoized`: a rotary scheme's tables, :meth:`bias_grid`):
a context lives for one forward; build a new one for the next.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch
from torch import Tensor

from zoo.attention.contract.kv_sharing import KeyValueStore, SharedKeyValues
from zoo.attention.contract.masking import check_attn_mask, key_column, merge_masks, validate_valid_lens
from zoo.attention.kernels.position_bias import PositionBias, position_bias_grid
from zoo.errors import ConfigurationError

__all__ = ["AttentionContext", "refuse_hooks_without_context"]

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class AttentionContext:
    """One forward's masks, causality, positions and options (see the module docstring).

    ``AttentionContext()`` is a forward with nothing masked, attending both ways; build one from
    raw masks with :meth:`build`, which validates them.
    """

    mask: Tensor | None = None
    is_causal: bool = False
    need_weights: bool = False
    offset: int = 0
    position_bias: PositionBias | None = None
    kv_store: KeyValueStore | None = None
    #: what layers computed from this context, kept for the rest of the forward
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        batch: int | Sequence[int],
        num_queries: int,
        num_keys: int | None = None,
        *,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        num_heads: int | None = None,
        offset: int = 0,
        position_bias: PositionBias | None = None,
        owner: str = "attention",
    ) -> AttentionContext:
        """A context from raw masks, validated and merged once: the one place raw masks become a
        mask (a model's entry, a layer called on its own and a scoring attention called on its own
        all come here).

        Args:
            batch: A layer's batch size ``B`` (inputs ``(B, L, E)``): the mask gets a head axis,
                ``(B, 1 or H, Lq, Lk)``, and a 4-axis ``attn_mask`` is per head. Or a scoring
                attention's batch shape (inputs ``(*batch, L, d)``, heads included): the mask
                broadcasts to ``(*batch, Lq, Lk)``, nothing added.
            num_queries, num_keys: The scores' sizes (``num_keys`` defaults to ``num_queries``:
                self-attention).
            valid_lens: ``batch`` or ``(*batch, Lq)``: how many leading keys each sequence (or
                query) sees.
            attn_mask: Boolean, True = attend, broadcastable to ``(*batch, Lq, Lk)``, or per head
                ``(B, H, Lq, Lk)`` for a layer (``num_heads`` given).
            is_causal, need_weights, offset, position_bias: As the fields.
            owner: What errors name.
        """
        layer = isinstance(batch, int)
        batch_shape = torch.Size([batch] if layer else batch)
        num_keys = num_queries if num_keys is None else num_keys
        per_head = layer and attn_mask is not None and attn_mask.dim() == 4
        if attn_mask is not None:
            if per_head and num_heads is None:
                raise ValueError(f"{owner}: a per-head attn_mask (4 axes) needs num_heads to check it against.")
            target = (batch, num_heads, num_queries, num_keys) if per_head else (*batch_shape, num_queries, num_keys)
            check_attn_mask(attn_mask, target, owner)
        if valid_lens is not None:
            valid_lens = validate_valid_lens(valid_lens, batch_shape, num_queries, num_keys)
        mask = merge_masks(
            batch_shape, num_queries, num_keys, valid_lens=valid_lens, attn_mask=None if per_head else attn_mask
        )
        if mask is not None and layer:
            mask = mask.unsqueeze(-3)  # a head axis
        if per_head:
            mask = attn_mask if mask is None else mask & attn_mask
        return cls(mask, is_causal, need_weights, offset, position_bias)

    @classmethod
    def for_keys(cls, key_padding: Tensor | None, **fields: Any) -> AttentionContext:
        """A context whose mask is key padding ``(B, Lk)`` (True = a real key), the same for every
        query: ``(B, 1, 1, Lk)``; ``fields`` as the dataclass's."""
        return cls(None if key_padding is None else key_padding[:, None, None, :], **fields)

    @property
    def key_padding(self) -> Tensor | None:
        """The mask as key padding ``(*batch, 1 or H, Lk)``, True at real keys, when it is the same
        for every query; None when nothing is masked. Raises ``ValueError`` for a mask that differs
        per query (a caller that takes key padding only declares ``supports_query_mask = False``
        and is refused such a mask before it asks)."""
        if self.mask is None:
            return None
        column = key_column(self.mask)
        if column is None:
            raise ValueError(f"the mask of shape {tuple(self.mask.shape)} differs per query: it is no key padding.")
        return column.squeeze(-1)

    def replace(self, **changes: Any) -> AttentionContext:
        """This context with ``changes`` (fields), sharing what was computed from it."""
        return replace(self, **changes)

    def with_position_bias(self, position_bias: PositionBias | None) -> AttentionContext:
        """This context with the bias scheme a multi-head layer's heads add to their scores."""
        return self if position_bias is self.position_bias else replace(self, position_bias=position_bias)

    def shared_kv(self, source: int, reader: str) -> SharedKeyValues:
        """The keys and values layer ``source`` attended over in this forward, for ``reader`` (what
        errors name): a ``ConfigurationError`` without a store or before the source has run."""
        if self.kv_store is None:
            raise ConfigurationError(
                f"{reader} reads the keys and values of layer index {source}, but this forward's context carries no "
                f"KeyValueStore; run it in a GPT, or build the context with kv_store=KeyValueStore(frozenset({{{source}}}))."
            )
        return self.kv_store.get(source, reader)

    def bias_grid(self, num_queries: int, num_keys: int, device: torch.device) -> Tensor | None:
        """:attr:`position_bias` on the full ``(heads, Lq, Lk)`` grid (bottom-right aligned),
        computed once a forward for every layer that adds it whole; None without a scheme."""
        if self.position_bias is None:
            return None
        scheme = self.position_bias
        return self.memoized(
            ("bias", id(scheme), num_queries, num_keys, device),
            lambda: position_bias_grid(scheme, num_queries, num_keys, device),
        )

    def memoized(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once a forward for each ``key``: what several layers would otherwise
        compute alike (a rotary scheme's tables, a bias grid). The key names everything the
        result depends on besides this context."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]


def refuse_hooks_without_context(cls: type, inputs: str) -> None:
    """Refuse, when ``cls`` is created, a hook of the shape the contract had for a few days before
    this context: ``attend(<inputs>, mask, *, is_causal, need_weights)`` or ``attend_cached(x, cache,
    *, attn_mask=None)``, the mask and the options one by one, no ``context``. One line names the
    rename; ``inputs`` names the tensors before the context (``"queries, keys, values"`` or ``"x"``).

    Raises:
        TypeError: ``cls`` defines such a hook.
    """
    for hook, new in (("attend", f"attend({inputs}, context)"), ("attend_cached", "attend_cached(x, cache, context)")):
        function = cls.__dict__.get(hook)
        if function is None:
            continue
        parameters = inspect.signature(function).parameters
        if "context" not in parameters and any(name in parameters for name in ("mask", "attn_mask", "is_causal")):
            raise TypeError(
                f"{cls.__name__}.{hook} takes the mask and options one by one, as the contract did before the "
                f"context; rename it to {new} and read context.mask, context.is_causal, context.need_weights and "
                "context.position_bias (docs/plugins.md)."
            )
