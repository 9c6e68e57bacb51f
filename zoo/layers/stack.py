"""One builder for a model's attention stacks: each stack's position scheme and blocks.

GPT, the sequence classifier and the Transformer's encoder and decoder build a stack the same
way: the registered position scheme (an absolute one acts on the embeddings, a rotary or bias
one is shared by the layers' self-attention), one checked
:class:`~zoo.attention.build.spec.AttentionSpec` per layer (:func:`~zoo.attention.build.spec.layer_specs`,
whose errors name the layer and the fix), and one block per spec from the stack's
:class:`~zoo.layers.BlockConfig`. A model states what its stacks share once, in a
:class:`StackConfig`, and what each stack is in a :class:`StackPlan`; :func:`build_stacks` does
the rest, so the sequence is written here rather than in every model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from torch import nn

from zoo.attention.build.spec import AttentionChoice, AttentionSpec, layer_specs
from zoo.errors import DataError
from zoo.layers.block_config import BlockConfig
from zoo.positions import PositionScheme, create_position

__all__ = ["BlockFactory", "Stack", "StackConfig", "StackPlan", "build_stacks"]

BlockFactory = Callable[[BlockConfig, AttentionSpec], nn.Module]
"""One layer's block from the stack's config and the layer's spec (``EncoderBlock``, ``CausalBlock``, ...)."""


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    """What every attention stack of a model shares, from the model's arguments (keywords only:
    eight fields, several of one type, which a reordering would swap silently).

    Args:
        block: The blocks' sizes and options (``d_model`` and ``num_heads`` size the positions too).
        attention: Registered scoring attention or attention layer, or a list for a hybrid stack
            (:func:`~zoo.attention.build.spec.layer_specs`).
        attention_kwargs: Extra keyword arguments for a single named attention.
        num_kv_heads: Key/value heads of a multi-head layer; ``None``: ``num_heads``.
        attention_dropout: Dropout on the attention weights; ``None``: the blocks' ``dropout``.
        position: Registered positional scheme, one built per stack.
        position_kwargs: Extra keyword arguments for it (a size given here replaces the model's).
        max_len: Longest sequence an absolute scheme covers.
    """

    block: BlockConfig
    attention: AttentionChoice = "dot_product"
    attention_kwargs: Mapping[str, Any] | None = None
    num_kv_heads: int | None = None
    attention_dropout: float | None = None
    position: str = "sinusoidal"
    position_kwargs: Mapping[str, Any] | None = None
    max_len: int = 4096

    def position_scheme(self, causal: bool) -> PositionScheme:
        """The scheme of one stack, whose self-attention is ``causal`` or not."""
        sizes = {"d_model": self.block.d_model, "num_heads": self.block.num_heads, "max_len": self.max_len}
        return create_position(self.position, causal=causal, **{**sizes, **(self.position_kwargs or {})})

    def specs(self, plan: StackPlan, position: PositionScheme) -> list[AttentionSpec]:
        """One spec per layer of ``plan``'s stack, checked against what the stack needs."""
        return layer_specs(
            self.attention,
            self.attention_kwargs,
            plan.num_layers,
            num_kv_heads=self.num_kv_heads,
            position=position.for_attention,
            dropout=self.block.dropout if self.attention_dropout is None else self.attention_dropout,
            causal=plan.causal,
            padding=plan.padding,
            decoding=plan.decoding,
            role=plan.role,
            stack=plan.layer_name,
            kv_sharing=plan.kv_sharing,
        )


@dataclass(frozen=True)
class StackPlan:
    """One stack of a model: its depth, its blocks, and what its self-attention must do.

    Args:
        num_layers: Blocks in the stack.
        block: Builds each block (``EncoderBlock``, ``CausalBlock``, or a decoder's with its
            cross-attention).
        role: The stack as errors name it, with its masks: ``"the GPT (causal self-attention)"``.
        causal: Causal self-attention (and a causal position scheme); else both directions.
        padding: The stack reads padded batches, so its attention must take padding masks.
        decoding: The stack runs its positions through its layers' caches (a decoder's), so its
            attention must decode.
        layer_name: How errors name one of its layers: ``"layer"``, ``"encoder layer"``.
        kv_sharing: The model hands one forward's keys and values from layer to layer (a
            :class:`~zoo.attention.contract.kv_sharing.KeyValueStore` on its context, as the GPT's),
            so an entry may take ``kv_source``.
    """

    num_layers: int
    block: BlockFactory
    role: str
    causal: bool = False
    padding: bool = False
    decoding: bool = False
    layer_name: str = "layer"
    kv_sharing: bool = False


class Stack(NamedTuple):
    """A built stack: the position scheme (the model applies an absolute one) and the blocks."""

    position: PositionScheme
    blocks: nn.ModuleList


def build_stacks(config: StackConfig, *plans: StackPlan) -> list[Stack]:
    """The stacks ``plans`` describe, in order, from the choices in ``config``.

    Every stack's position scheme is built first, then every stack's specs (so a wrong choice
    fails before any block is built), then the blocks: the order in which the models drew their
    initial weights before this builder, so a seed still gives the same parameters (a learned or
    T5 scheme draws them too). Canon layers (``config.block.canon``) are causal convolutions:
    a stack that attends both ways refuses them.
    """
    if config.block.canon and (both_ways := [plan.role for plan in plans if not plan.causal]):
        raise DataError(
            f"canon {config.block.canon!r}: Canon layers are causal convolutions, for causal stacks (the GPT's); "
            f"{', '.join(both_ways)} attends both ways. Leave canon empty."
        )
    positions = [config.position_scheme(plan.causal) for plan in plans]
    specs = [config.specs(plan, position) for plan, position in zip(plans, positions)]
    return [
        Stack(position, nn.ModuleList(plan.block(config.block, spec) for spec in layers))
        for plan, position, layers in zip(plans, positions, specs)
    ]
