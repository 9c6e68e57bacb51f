"""The attention variants, one per file: scoring attentions a multi-head layer runs per head, and
the recurrent families' layers. The machinery they are written against (the contracts, the
context, masking, caches, the registry, the multi-head layers, ``kernels/``) lives one level up
in :mod:`zoo.attention`.

Importing this package registers every built-in variant. :data:`MODULES` names their modules, in
the order they register.
"""

from zoo.attention.variants import (
    additive,
    average,
    dot_product,
    gaussian_kernel,
    linear,
    local,
    performer,
    linformer,
    longformer,
    bigbird,
    sparse,
    synthesizer,
    sinkhorn,
    reformer,
    retention,
    gla,
    deltanet,
    mamba2,
    patterns,
    kda,
    rwkv7,
    gated_deltaproduct,
    mla,
    moba,
    nsa,
    softmax,
    softmax_recipes,
    sigmoid,
    softpick,
    stick_breaking,
    differential,
    forgetting,
)

#: the variants' modules (``patterns`` is the base of the block-sparse ones)
MODULES = (
    additive, average, dot_product, gaussian_kernel, linear, local, performer, linformer, longformer, bigbird,
    sparse, synthesizer, sinkhorn, reformer, retention, gla, deltanet, mamba2, patterns, kda, rwkv7,
    gated_deltaproduct, mla, moba, nsa, softmax, softmax_recipes, sigmoid, softpick, stick_breaking, differential,
    forgetting,
)  # fmt: skip

__all__ = ["MODULES"]
