"""Blocks built from one residual wrapper (AddNorm, post-LN or pre-LN), with the old parameter names."""

from __future__ import annotations

import pytest
import torch

from zoo.attention import AttentionSpec
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.multi_head import CrossAttention
from zoo.layers import AddNorm, BlockConfig, DecoderBlock, EncoderBlock
from zoo.models.classifier import SequenceClassifier
from zoo.models.transformer import Transformer


@pytest.mark.parametrize("norm_first", [False, True])
def test_add_norm_places_the_norm_after_the_sum_or_before_the_sublayer(norm_first: bool) -> None:
    torch.manual_seed(0)
    wrapper, linear, x = AddNorm(6, norm_first=norm_first), torch.nn.Linear(6, 6), torch.randn(2, 3, 6)
    with torch.no_grad():
        wrapper.norm.weight.uniform_(0.5, 1.5)
        out = wrapper(x, linear(wrapper.pre(x)))
        expected = x + linear(wrapper.norm(x)) if norm_first else wrapper.norm(x + linear(x))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_is_two_residual_sublayers(norm_first: bool) -> None:
    torch.manual_seed(0)
    block, x = EncoderBlock(BlockConfig(8, 2, 16, norm_first=norm_first)).eval(), torch.randn(2, 5, 8)
    with torch.no_grad():
        norm1, norm2 = block.add_norm1.norm, block.add_norm2.norm
        if norm_first:
            h = x + block.attention(norm1(x)).output
            expected = h + block.ffn(norm2(h))
        else:
            h = norm1(x + block.attention(x).output)
            expected = norm2(h + block.ffn(h))
        torch.testing.assert_close(block(x)[0], expected)


#: the state-dict keys of the blocks before the residual wrapper (main at a0716b5)
PROJECTIONS = [f"{p}.{t}" for p in ("k_proj", "out_proj", "q_proj", "v_proj") for t in ("bias", "weight")]
FFN = ["ffn.net.0.bias", "ffn.net.0.weight", "ffn.net.3.bias", "ffn.net.3.weight"]
OLD_ENCODER_KEYS = {
    *(f"add_norm{i}.norm.{t}" for i in (1, 2) for t in ("bias", "weight")),
    *(f"attention.{p}" for p in PROJECTIONS),
    *FFN,
}
OLD_DECODER_KEYS = {
    *(f"add_norm{i}.norm.{t}" for i in (1, 2, 3) for t in ("bias", "weight")),
    *(f"{a}.{p}" for a in ("self_attention", "cross_attention") for p in PROJECTIONS),
    *FFN,
}


@pytest.mark.parametrize("norm_first", [False, True])
def test_parameter_names_are_those_of_the_two_branch_blocks(norm_first: bool) -> None:
    """Checkpoints saved before the residual wrapper load unchanged: no key moved."""
    assert set(EncoderBlock(BlockConfig(8, 2, 16, norm_first=norm_first)).state_dict()) == OLD_ENCODER_KEYS
    assert set(DecoderBlock(BlockConfig(8, 2, 16, norm_first=norm_first)).state_dict()) == OLD_DECODER_KEYS


def attention_outputs(attentions: list[torch.nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    """Each attention sublayer's output on ``x`` in training mode (cross-attention over ``x`` too)."""
    return [a.train()(x, x).output if isinstance(a, CrossAttention) else a.train()(x).output for a in attentions]


@pytest.mark.parametrize("attention_dropout, deterministic", [(0.5, False), (0.0, True)])
def test_attention_dropout_is_separate_from_the_blocks_dropout(attention_dropout, deterministic) -> None:
    """The spec's dropout acts on the attention weights alone: 0 keeps them whole (SDPA's fused
    CPU kernel) while the block's ``dropout`` still acts on the residual branches."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    spec = AttentionSpec(dropout=attention_dropout)
    config = BlockConfig(8, 2, 16, dropout=0.5)
    encoder, decoder = EncoderBlock(config, spec).train(), DecoderBlock(config, spec)
    attentions = [encoder.attention, decoder.self_attention, decoder.cross_attention]
    first, second = attention_outputs(attentions, x), attention_outputs(attentions, x)
    assert [torch.equal(a, b) for a, b in zip(first, second)] == [deterministic] * 3
    assert not torch.equal(encoder(x)[0], encoder(x)[0])


@pytest.mark.parametrize("attention_dropout, deterministic", [(None, False), (0.0, True)])
def test_models_pass_attention_dropout_to_every_attention(attention_dropout, deterministic) -> None:
    """``attention_dropout`` reaches every attention of a model; ``None`` inherits ``dropout``."""
    torch.manual_seed(0)
    options = {"vocab_size": 10, "d_model": 8, "ffn_hidden": 16, "dropout": 0.5, "attention_dropout": attention_dropout}
    classifier, transformer = SequenceClassifier(**options), Transformer(**options)
    attentions = [b.attention for b in [*classifier.blocks, *transformer.encoder_blocks]]
    attentions += [a for b in transformer.decoder_blocks for a in (b.self_attention, b.cross_attention)]
    x = torch.randn(2, 6, 8)
    same = [torch.equal(a, b) for a, b in zip(attention_outputs(attentions, x), attention_outputs(attentions, x))]
    assert same == [deterministic] * len(attentions)


def _run(block: torch.nn.Module, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    if isinstance(block, EncoderBlock):
        return block(x)[0]
    return block(x, block.project_memory(memory), AttentionContext(), context=AttentionContext(is_causal=True))[0]


@pytest.mark.parametrize(("block_type", "keys", "ffn_norm"), [(EncoderBlock, OLD_ENCODER_KEYS, "add_norm2"),
                                                              (DecoderBlock, OLD_DECODER_KEYS, "add_norm3")])  # fmt: skip
def test_a_block_without_an_ffn_is_its_attention_sublayers_alone(block_type, keys, ffn_norm) -> None:
    """``ffn_hidden=0``: no FFN and no norm for it; the same output as the block whose FFN adds nothing."""
    torch.manual_seed(0)
    full, bare = (
        block_type(BlockConfig(8, 2, 16, norm_first=True)).eval(),
        block_type(BlockConfig(8, 2, 0, norm_first=True)),
    )
    dropped = {key for key in keys if key.startswith(("ffn.", f"{ffn_norm}."))}
    assert set(bare.state_dict()) == keys - dropped
    bare.load_state_dict({key: value for key, value in full.state_dict().items() if key not in dropped})
    with torch.no_grad():
        full.ffn.net[3].weight.zero_()
        full.ffn.net[3].bias.zero_()
        x, memory = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
        torch.testing.assert_close(_run(bare.eval(), x, memory), _run(full, x, memory))
    with pytest.raises(ValueError, match="ffn_hidden must be 0"):
        BlockConfig(8, 2, -1)
