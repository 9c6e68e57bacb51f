"""The one stack builder: each stack's position scheme and a block per layer, the order of the
seeded draws, errors naming the layer, and the three models building their stacks with it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import zoo
from zoo.attention import ATTENTION_REGISTRY
from zoo.layers import BlockConfig, CausalBlock, DecoderBlock, EncoderBlock, Stack, StackConfig, StackPlan, build_stacks
from zoo.models import GPT, SequenceClassifier, Transformer, classifier, gpt, transformer

CONFIG = BlockConfig(8, 2, 16)
ENCODER = StackPlan(2, EncoderBlock, role="an encoder", padding=True, layer_name="encoder layer")
DECODER = StackPlan(4, CausalBlock, role="a decoder", causal=True, layer_name="decoder layer")


def attention_names(blocks: nn.ModuleList) -> list[str | None]:
    """The registered attention of each block's self-attention: a scoring attention's or a layer's."""
    layers = [block.self_attention if isinstance(block, DecoderBlock) else block.attention for block in blocks]
    return [ATTENTION_REGISTRY.name_of(type(getattr(layer, "score_attention", layer))) for layer in layers]


def same(a: nn.Module, b: nn.Module) -> bool:
    """Whether two modules hold the same parameters, name by name."""
    ours, theirs = a.state_dict(), b.state_dict()
    return list(ours) == list(theirs) and all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_each_stack_gets_its_own_scheme_shared_by_its_layers_and_a_block_per_layer() -> None:
    encoder, decoder = build_stacks(
        StackConfig(block=CONFIG, attention=["local", "dot_product"], position="alibi"), ENCODER, DECODER
    )
    assert not encoder.position.causal and decoder.position.causal
    assert [type(block) for block in encoder.blocks] == [EncoderBlock] * 2
    assert [type(block) for block in decoder.blocks] == [CausalBlock] * 4
    assert attention_names(decoder.blocks) == ["local", "dot_product"] * 2
    for stack in (encoder, decoder):
        assert all(block.attention.position is stack.position for block in stack.blocks)


def test_an_absolute_scheme_stays_with_the_model() -> None:
    [(position, blocks)] = build_stacks(StackConfig(block=CONFIG, position="learned", max_len=12), ENCODER)
    assert position.kind == "absolute" and all(block.attention.position is None for block in blocks)


def test_every_position_is_drawn_before_any_block_as_the_models_drew_them() -> None:
    """A seed gives the parameters it gave before the builder: both schemes, then the blocks."""
    torch.manual_seed(0)
    encoder, decoder = build_stacks(StackConfig(block=CONFIG, position="learned", max_len=12), ENCODER, DECODER)
    torch.manual_seed(0)
    schemes = [zoo.create_position("learned", d_model=8, num_heads=2, max_len=12) for _ in range(2)]
    first = EncoderBlock(CONFIG)
    assert same(encoder.position, schemes[0]) and same(decoder.position, schemes[1])
    assert same(encoder.blocks[0], first)


def test_the_attention_dropout_defaults_to_the_blocks() -> None:
    config = BlockConfig(8, 2, 16, dropout=0.3)
    [(_, blocks)] = build_stacks(StackConfig(block=config), ENCODER)
    [(_, own)] = build_stacks(StackConfig(block=config, attention_dropout=0.1), ENCODER)
    assert blocks[0].attention.spec.dropout == 0.3 and own[0].attention.spec.dropout == 0.1


def test_an_error_names_the_stack_and_its_layer() -> None:
    with pytest.raises(zoo.IncompatibleAttentionError, match=r"a decoder, decoder layers 2, 4: .*causal masking"):
        build_stacks(StackConfig(block=CONFIG, attention=["dot_product", "bigbird"]), ENCODER, DECODER)


#: a hybrid list per model (GPT's mixes in gla, an attention layer that owns its projections), and
#: the stacks the model holds: (position scheme, blocks) attributes
HYBRIDS = {
    "gpt": ["gla", "dot_product"],
    "classifier": ["local", "dot_product"],
    "transformer": ["local", "dot_product"],
}
STACKS = {
    "gpt": [("position", "blocks")],
    "classifier": [("position", "blocks")],
    "transformer": [("encoder_position", "encoder_blocks"), ("decoder_position", "decoder_blocks")],
}
MODULES = {"gpt": gpt, "classifier": classifier, "transformer": transformer}


def small(model: str) -> nn.Module:
    """A four-layer ``model`` (each stack) with its hybrid list."""
    sizes = {"d_model": 8, "num_heads": 2, "attention": HYBRIDS[model]}
    if model == "gpt":
        return GPT(20, block_size=8, num_layers=4, **sizes)
    if model == "classifier":
        return SequenceClassifier(20, num_layers=4, **sizes)
    return Transformer(20, num_encoder_layers=4, num_decoder_layers=4, **sizes)


@pytest.mark.parametrize("model", sorted(STACKS))
def test_a_hybrid_list_gives_every_stack_of_each_model_the_attention_of_each_layer(model: str) -> None:
    built = small(model)
    for _, blocks in STACKS[model]:
        assert attention_names(getattr(built, blocks)) == HYBRIDS[model] * 2


@pytest.mark.parametrize("model", sorted(STACKS))
def test_every_model_holds_the_stacks_the_builder_built(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stacks: list[Stack] = []

    def recording(config: StackConfig, *plans: StackPlan) -> list[Stack]:
        stacks.extend(build_stacks(config, *plans))
        return stacks

    monkeypatch.setattr(MODULES[model], "build_stacks", recording)
    built = small(model)
    assert len(stacks) == len(STACKS[model])
    for stack, (position, blocks) in zip(stacks, STACKS[model]):
        assert getattr(built, position) is stack.position and getattr(built, blocks) is stack.blocks


def test_the_transformers_decoder_blocks_take_their_cross_attention_from_each_layer() -> None:
    model = Transformer(20, d_model=8, num_heads=2, num_decoder_layers=2, attention=["local", "dot_product"])
    assert [type(block) for block in model.decoder_blocks] == [DecoderBlock] * 2
    assert [block.cross_attention.attention_name for block in model.decoder_blocks] == ["dot_product"] * 2
