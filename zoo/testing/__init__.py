"""Conformance checks for attention variants: :func:`check_attention`.

A plugin author runs them in their own test suite, on a scoring attention or an attention layer::

    import zoo

    def test_cosine_attention_keeps_the_contract():
        zoo.testing.check_attention(CosineAttention)        # a class, a registered name or an instance

    def test_my_recurrence_keeps_the_contract():
        zoo.testing.check_attention(MyRecurrence, embed_dim=16, num_heads=4)   # a layer: the same checks

The checks treat the variant as a black box: they perturb inputs and watch the outputs, so they
hold whatever the implementation (explicit scores, a fused kernel, no score matrix at all):

* ``shape``: the output has shape ``(B, Lq, Dv)`` (``(B, Lq, embed_dim)`` for a layer), is
  finite, and depends on the values of visible keys; no weights unless asked.
* ``padding``: changing a key or value that ``valid_lens`` or ``attn_mask`` hides changes no
  output of a query it is hidden from.
* ``causal``: with ``is_causal=True`` changing a later key or value changes no earlier output
  (bottom-right alignment when there are more keys than queries).
* ``fully_masked``: a query with no visible key gets a finite output (zero for a scoring
  attention) and all-zero weights.
* ``weights``: the weights are non-negative and zero on hidden keys; a query's weights sum to
  one, or are all zero where the variant sees no key for it (a window over padding only), and
  then no key or value changes its output; they do not change the output, and give it as
  ``weights @ values`` (scoring attentions).
* ``float16`` / ``bfloat16``: the variant runs in half precision, stays finite forwards and
  backwards, and stays close to the same computation in float32.
* ``gradients``: queries, keys and values get finite gradients, every trainable parameter gets
  one over 32 keys (DistributedDataParallel fails on parameters that get none; 32, so that a
  layer's blocks fill, as NSA's compression blocks of 8 do), and the gradients match finite
  differences in float64 over a few tokens.

**Layers.** An attention layer a stack builds by name (the recurrent families, a plugin's
layer) is fed the block's input ``x`` as a stack feeds it: the same checks hold with ``x`` as the
queries, keys and values at once (a later ``x`` must not change an earlier output, a hidden
position must not change a visible one), and every parameter it owns (gates, convolutions,
norms) must get a gradient. Such a layer takes a rotary or bias scheme as its ``position``.

**Recurrent variants.** A variant whose ``attend_cached`` keeps a fixed-size state (a
:class:`~zoo.attention.contract.cache.StateCache`, as ``retention``, ``gla``, ``deltanet``,
``gated_deltanet`` and ``mamba2`` do; the kit asks it for a short prompt's cache) gets two more:

* ``state_decoding``: a prompt, then one position at a time through ``attend_cached``, gives the
  outputs of one causal pass over the whole sequence (the parallel form), in float64, with and
  without left-padded rows;
* ``state_size``: the cache holds as many bytes after many positions as after one, counts the
  positions seen, and ``select`` keeps the rows it picks.

Its weights are the parallel form's decayed scores, not a distribution: they are checked to be
zero where a query cannot see, not to be non-negative or to sum to one. So are the weights of a
variant that declares ``normalized_weights = False`` (sigmoid and softpick attention,
stick-breaking, a softmax with a learned sink, differential attention), whose all-zero rows need
not mean that a query sees no key either. A causal-only variant (``supports_bidirectional = False``) is checked causally
throughout (``causal`` too: the output at a position does not depend on later inputs) and must
refuse a non-causal call; one that takes key padding only (``supports_query_mask = False``) is
checked with key masks (lengths, left padding) and must refuse a mask per query.

Every check runs on the ``device`` given (``check_attention(CosineAttention, device="cuda")``
checks a variant's CUDA kernels, half precision included); inputs are drawn on the CPU from a
seeded generator and moved there, so a device sees the same numbers as the CPU.

``check_attention(variant, position=NAME)`` runs the same checks with a positional scheme applied
as a model applies it: a layer that takes positions (``self``, ``multi_head``) is built with a
rotary or bias scheme; around a scoring attention the harness rotates queries and keys itself
(query ``i`` at ``Lk - Lq + i``, key ``j`` at ``j``) or hands the bias over as ``position_bias``;
an absolute scheme is added to the queries and keys. Masked keys and later positions must stay
invisible whatever the scheme adds.

A variant that declares it cannot do something (``supports_padding_mask``, ``supports_causal``,
``supports_weights`` set to False) is not tested for it, but must refuse it with
:class:`~zoo.attention.IncompatibleAttentionError` instead of silently ignoring the request. One
that declares ``supports_cross_attention = False`` (queries and keys must be one sequence, as
for a sliding window) is checked on equal lengths and must refuse unequal ones the same way.

The package: :mod:`~zoo.testing.contract` runs the checks and builds the report,
:mod:`~zoo.testing.harness` builds and feeds the variant (:mod:`~zoo.testing.placement` applies a
positional scheme around it), :mod:`~zoo.testing.checks` holds the mask, causality and weights
checks, :mod:`~zoo.testing.numerics` the half-precision and gradient ones and
:mod:`~zoo.testing.decoding` the recurrent state's.
"""

from zoo.testing.contract import check_attention
from zoo.testing.report import AttentionContractError, ContractReport

__all__ = ["AttentionContractError", "ContractReport", "check_attention"]
