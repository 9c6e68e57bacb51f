"""Parallel hybrid attention: several attention layers side by side on one input, their outputs summed.

Falcon-H1 (Zuo et al., Falcon-LLM Team, 2025, "Falcon-H1: A Family of Hybrid-Head Language Models Redefining
Efficiency and Performance", arXiv:2507.22448) runs softmax attention and Mamba-2 in parallel in
every block, where Jamba and Samba interleave them layer by layer. With the block's normed input
``x`` and each branch ``f_b`` with an input multiplier ``m_b`` and an output multiplier ``n_b``::

    y = sum_b  n_b * f_b(m_b * x)

Falcon-H1's decoder layer is two branches: ``attn_out_multiplier * attention(attention_in_multiplier
* x) + ssm_out_multiplier * mamba(ssm_in_multiplier * x)`` (transformers'
``models/falcon_h1/modeling_falcon_h1.py``, ``FalconH1DecoderLayer.forward``, where the mixer applies
``ssm_in_multiplier`` to its own input). The multipliers are muP scalings: fixed numbers, not
parameters; they all default to 1.

**Branches.** ``branches`` names them as a stack names its layers' attention: each entry a
registered name or a mapping ``{name: NAME, **arguments}`` (``[softmax, {name: mamba2, d_state:
16}]``); a scoring attention (``dot_product``) runs in a multi-head layer. A mapping may set the
branch's own ``num_heads`` (``FalconH1Config`` gives Mamba-2 its own, ``mamba_n_heads``: 128 beside
32 attention heads by default); the others have the stack's. Each branch is built the way a stack
builds a layer (:func:`~zoo.attention.modules.multi_head.self_attention_layer` from an
:class:`~zoo.attention.build.spec.AttentionSpec`), with the stack's width, heads, ``bias``,
``num_kv_heads``, attention dropout and depth where its constructor takes them. The stack's position
scheme goes to the branches ``positioned`` marks, by default every branch that can take it: Falcon-H1
rotates the attention's queries and keys and not Mamba-2's ``C`` and ``B``, so its layers are
``positioned: [true, false]``. A stack checks the branches when it checks the layer
(:meth:`ParallelHybridAttention.require_parts`): a name that is not registered is refused with the
closest names, a branch that cannot do what the stack needs (causal masking, decoding) with the names
that can.

**Capabilities.** What every branch can do (a branch that is a causal recurrence makes the layer
causal only, one that takes key padding only makes it take key padding only), except the weights:
``need_weights`` returns the first branch's weights alone (Falcon-H1's: the softmax attention's
``(B, H, L, L)``), since the branches' maps mix different projections and do not add into one map;
the layer returns weights when its first branch does. The other branches run without weights.

**Decoding.** The cache is a :class:`BranchCaches`: one cache per branch, each of its branch's kind
(a key/value cache beside a Mamba-2 state), which every branch extends by the new positions.

**Forms.** Each branch keeps its own forms (Mamba-2's parallel, chunkwise and recurrent, chosen with
its own ``mode``): the layer adds none. Departure from Falcon-H1: its attention multiplies the keys
by ``key_multiplier`` and its mixer scales the input projection's parts by ``ssm_multipliers``
(``mup_vector``); those are the branches' own options, which the zoo's ``softmax`` and ``mamba2`` do
not have, so a Falcon-H1 layer maps here when they are 1 (or folded into the projections' weights).
Falcon-H1's mixer may also skip Mamba-2's gated norm (``mamba_rms_norm``, off in ``FalconH1Config``'s
defaults) or norm before the gate; the zoo's ``mamba2`` always gates, then norms
(:mod:`zoo.integrations.hf_layers.falcon_h1` refuses the other configs in one line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import reduce
from operator import add, and_
from typing import Any

from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import AttentionNeeds, register_attention_layer, require_attention
from zoo.attention.build.spec import AttentionEntry, AttentionSpec, split_entry, takes_position
from zoo.attention.contract.base import AttentionOutput, Capabilities, capabilities
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.modules.multi_head import self_attention_layer
from zoo.errors import UnknownNameError
from zoo.positions import PositionScheme

__all__ = ["BranchCaches", "ParallelHybridAttention"]

#: Falcon-H1's pair: softmax attention beside Mamba-2
DEFAULT_BRANCHES: tuple[AttentionEntry, ...] = ("softmax", "mamba2")


@dataclass(frozen=True)
class BranchCaches:
    """A parallel hybrid layer's cache: one cache per branch, in the order of the branches."""

    caches: tuple[LayerCache, ...]

    @property
    def length(self) -> int:
        return self.caches[0].length

    @property
    def nbytes(self) -> int:
        return sum(cache.nbytes for cache in self.caches)

    def select(self, index: Tensor) -> BranchCaches:
        return BranchCaches(tuple(cache.select(index) for cache in self.caches))


def _branch_entries(branches: object) -> list[tuple[str, dict[str, Any]]]:
    """The branches as names and arguments; a ``ValueError`` in one line for anything but two
    entries or more."""
    if isinstance(branches, (str, Mapping)) or not isinstance(branches, Sequence) or len(branches) < 2:
        raise ValueError(
            f"parallel_hybrid: branches must be a list of two attention entries or more, e.g. [softmax, mamba2]; "
            f"got {branches!r}."
        )
    return [split_entry(entry, f"parallel_hybrid branch {index + 1}") for index, entry in enumerate(branches)]


def _multipliers(values: Sequence[float] | None, count: int, name: str) -> tuple[float, ...]:
    """One finite multiplier per branch (1.0 each when None); a ``ValueError`` in one line otherwise."""
    if values is None:
        return (1.0,) * count
    if (
        isinstance(values, str)
        or not isinstance(values, Sequence)
        or len(values) != count
        or not all(isinstance(value, (int, float)) and math.isfinite(value) for value in values)
    ):
        raise ValueError(f"parallel_hybrid: {name} must be {count} finite numbers, one per branch; got {values!r}.")
    return tuple(float(value) for value in values)


@register_attention_layer("parallel_hybrid", aliases=("parallel",))
class ParallelHybridAttention(AttentionLayer):
    """Attention layers side by side on one input, their scaled outputs summed (see the module docstring).

    Args:
        embed_dim: The block's width: every branch's input and output size.
        num_heads: The stack's heads, handed to every branch.
        branches: Two attention entries or more: registered names, or mappings of a name and its
            arguments, which may give the branch its own ``num_heads`` (Falcon-H1's Mamba-2 has more
            heads than its attention).
        input_multipliers: Per branch, the number its input is multiplied by; None: 1 each.
        output_multipliers: Per branch, the number its output is multiplied by; None: 1 each.
        positioned: Per branch, whether it gets the stack's position scheme; None: each branch that
            can take it.
        position: The stack's rotary or bias scheme, or None.
        bias: Biases in the branches' projections (the stack's ``bias``).
        num_kv_heads, dropout, layer_index: The stack's, handed to the branches that take them.
    """

    supports_rotary = True
    supports_position_bias = True
    #: the class declares its default branches' (Mamba-2 attends to earlier positions only, with
    #: key masks); a built layer's capabilities are its branches' (:attr:`capabilities`)
    supports_bidirectional = False
    supports_query_mask = False
    family = "hybrid"
    #: the softmax branch's, with Falcon-H1's pair (a branch's cost is its own)
    cost = "L²"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        branches: Sequence[AttentionEntry] = DEFAULT_BRANCHES,
        input_multipliers: Sequence[float] | None = None,
        output_multipliers: Sequence[float] | None = None,
        positioned: Sequence[bool] | None = None,
        position: PositionScheme | None = None,
        bias: bool = True,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        layer_index: int | None = None,
    ) -> None:
        super().__init__()
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads)
        entries = _branch_entries(branches)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.input_multipliers = _multipliers(input_multipliers, len(entries), "input_multipliers")
        self.output_multipliers = _multipliers(output_multipliers, len(entries), "output_multipliers")
        reaches = self._positioned(entries, positioned, position)
        built = []
        for index, ((name, arguments), gets_position) in enumerate(zip(entries, reaches, strict=True)):
            where = f"parallel_hybrid branch {index + 1}"
            heads = arguments.pop("num_heads", num_heads)
            if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
                raise ValueError(f"{where}: num_heads must be a positive integer (the branch's heads); got {heads!r}.")
            try:
                spec = AttentionSpec(
                    name, arguments, num_kv_heads, position if gets_position else None, dropout, layer_index
                )
            except (KeyError, TypeError, ValueError) as error:  # an unknown name is a KeyError
                raise type(error)(f"{where}: {error}") from None
            built.append(self_attention_layer(spec, embed_dim, heads, bias=bias))
        self.branches = nn.ModuleList(built)

    @staticmethod
    def _positioned(
        entries: list[tuple[str, dict[str, Any]]], positioned: Sequence[bool] | None, position: PositionScheme | None
    ) -> list[bool]:
        """Which branches get ``position``: ``positioned``, checked, or each that can take it."""
        count = len(entries)
        if positioned is not None and (
            isinstance(positioned, str)
            or not isinstance(positioned, Sequence)
            or len(positioned) != count
            or not all(isinstance(flag, bool) for flag in positioned)
        ):
            raise ValueError(
                f"parallel_hybrid: positioned must be {count} booleans, one per branch; got {positioned!r}."
            )
        if position is None:
            return [False] * count
        if positioned is None:
            positioned = [takes_position(require_attention(name, layers=True), position.kind) for name, _ in entries]
        if not any(positioned):
            raise ValueError(
                f"parallel_hybrid: the {position.kind} scheme {type(position).__name__} reaches no branch; give a "
                "branch that takes it, or set positioned to choose one."
            )
        return list(positioned)

    @classmethod
    def require_parts(
        cls, kwargs: Mapping[str, Any], *, role: str = "this architecture", **needs: Unpack[AttentionNeeds]
    ) -> None:
        """Check the branches a spec names (its ``kwargs``) against what ``role`` needs: every
        branch must serve each need but weights, which the first branch alone returns."""
        for index, (name, _) in enumerate(_branch_entries(kwargs.get("branches", DEFAULT_BRANCHES))):
            wanted: AttentionNeeds = {**needs, "weights": needs.get("weights", False) and index == 0}
            try:
                require_attention(
                    name, role=f"{role}, as branch {index + 1} of 'parallel_hybrid'", layers=True, **wanted
                )
            except UnknownNameError as error:
                raise UnknownNameError(f"parallel_hybrid branch {index + 1}: {error}") from None

    @property
    def capabilities(self) -> Capabilities:
        """What every branch serves, and the first branch's weights (see the module docstring)."""
        each = [capabilities(branch) for branch in self.branches]
        first = each[0]
        served = reduce(and_, each)
        return replace(served, supports_weights=first.supports_weights, normalized_weights=first.normalized_weights)

    def _scaled(self) -> list[tuple[nn.Module, float, float]]:
        """Each branch with its input and output multipliers."""
        return list(zip(self.branches, self.input_multipliers, self.output_multipliers, strict=True))

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """The sum of the branches' scaled outputs on ``x`` (each branch checks the context itself);
        the first branch's weights when the context asks for weights."""
        first, *others = self._scaled()
        branch, scale_in, scale_out = first
        output, weights = branch(x * scale_in, context)
        total = output * scale_out
        unweighted = context.replace(need_weights=False)
        for branch, scale_in, scale_out in others:
            total = total + branch(x * scale_in, unweighted).output * scale_out
        return AttentionOutput(total, weights)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` after ``cache`` (a :class:`BranchCaches`, or None before the first):
        the sum of the branches' scaled outputs, and each branch's cache extended by them."""
        if cache is not None and (not isinstance(cache, BranchCaches) or len(cache.caches) != len(self.branches)):
            raise TypeError(
                f"{type(self).__name__} continues a BranchCaches of {len(self.branches)} caches; got {cache!r:.80}."
            )
        held = (None,) * len(self.branches) if cache is None else cache.caches
        outputs, caches = [], []
        for (branch, scale_in, scale_out), branch_cache in zip(self._scaled(), held, strict=True):
            output, extended = branch.attend_cached(x * scale_in, branch_cache, context)
            outputs.append(output * scale_out)
            caches.append(extended)
        return reduce(add, outputs), BranchCaches(tuple(caches))
