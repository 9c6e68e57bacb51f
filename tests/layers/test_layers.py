"""Tests of the shared building blocks: positional encoding, position-wise FFN, add & norm."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import zoo


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def sinusoid(position: int, column: int, d_model: int) -> float:
    """Entry ``(position, column)`` of the encoding, straight from the formula."""
    j = column // 2
    angle = position / 10000 ** (2 * j / d_model)
    return math.sin(angle) if column % 2 == 0 else math.cos(angle)


# -- PositionalEncoding ----------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [8, 7, 1], ids=["even", "odd", "one"])
def test_positional_encoding_matches_formula(d_model: int) -> None:
    encoding = zoo.PositionalEncoding(d_model, max_len=64)
    length = 50
    out = encoding(torch.zeros(1, length, d_model))
    expected = torch.tensor([[sinusoid(i, c, d_model) for c in range(d_model)] for i in range(length)])
    assert out.shape == (1, length, d_model)
    torch.testing.assert_close(out[0], expected, rtol=0, atol=1e-6)


def test_positional_encoding_adds_to_the_input() -> None:
    encoding = zoo.PositionalEncoding(6, max_len=10)
    x = torch.randn(3, 4, 6)
    torch.testing.assert_close(encoding(x) - x, encoding(torch.zeros_like(x)))
    torch.testing.assert_close(encoding(x)[0] - x[0], encoding(x)[2] - x[2])  # the same for every sequence


def test_positional_encoding_offset_shifts_positions() -> None:
    encoding = zoo.PositionalEncoding(8, max_len=20)
    full = encoding(torch.zeros(1, 12, 8))
    shifted = encoding(torch.zeros(1, 4, 8), offset=5)
    torch.testing.assert_close(shifted, full[:, 5:9])
    step = encoding(torch.zeros(1, 1, 8), offset=11)  # one token of cached decoding
    torch.testing.assert_close(step[0, 0], torch.tensor([sinusoid(11, c, 8) for c in range(8)]), rtol=0, atol=1e-6)


def test_positional_encoding_up_to_max_len_is_allowed() -> None:
    encoding = zoo.PositionalEncoding(4, max_len=10)
    assert encoding(torch.zeros(1, 10, 4)).shape == (1, 10, 4)
    assert encoding(torch.zeros(1, 3, 4), offset=7).shape == (1, 3, 4)


@pytest.mark.parametrize(("length", "offset"), [(11, 0), (4, 7)])
def test_positional_encoding_too_long_raises(length: int, offset: int) -> None:
    encoding = zoo.PositionalEncoding(4, max_len=10)
    with pytest.raises(ValueError, match=rf"{length + offset} positions exceeds max_len=10"):
        encoding(torch.zeros(2, length, 4), offset=offset)


def test_positional_encoding_negative_offset_raises() -> None:
    encoding = zoo.PositionalEncoding(4, max_len=10)
    with pytest.raises(ValueError, match="offset"):
        encoding(torch.zeros(1, 1, 4), offset=-2)


def test_positional_encoding_wrong_feature_size_raises() -> None:
    with pytest.raises(ValueError, match=r"\(batch, length, 4\)"):
        zoo.PositionalEncoding(4)(torch.zeros(1, 3, 5))


def test_positional_encoding_table_not_in_state_dict() -> None:
    encoding = zoo.PositionalEncoding(8, max_len=32)
    assert "table" not in encoding.state_dict()
    assert len(encoding.state_dict()) == 0
    longer = zoo.PositionalEncoding(8, max_len=128)
    longer.load_state_dict(encoding.state_dict())  # max_len may change between runs
    torch.testing.assert_close(longer.table[:32], encoding.table)


def test_positional_encoding_keeps_input_dtype() -> None:
    encoding = zoo.PositionalEncoding(4, max_len=8)
    for dtype in (torch.float64, torch.bfloat16):
        assert encoding(torch.zeros(1, 3, 4, dtype=dtype)).dtype == dtype


def test_positional_encoding_dropout_only_in_training() -> None:
    encoding = zoo.PositionalEncoding(16, dropout=0.5, max_len=8)
    x = torch.randn(2, 8, 16)
    encoding.eval()
    torch.testing.assert_close(encoding(x), encoding(x))
    encoding.train()
    assert (encoding(x) == 0).any()


# -- PositionWiseFFN ------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_ffn_applies_the_same_mlp_at_every_position(activation: str) -> None:
    ffn = zoo.PositionWiseFFN(6, 10, activation=activation).eval()
    x = torch.randn(2, 5, 6)
    out = ffn(x)
    assert out.shape == (2, 5, 6)
    for b in range(2):
        for i in range(5):
            torch.testing.assert_close(out[b, i], ffn(x[b, i].reshape(1, 1, 6))[0, 0])


def test_ffn_permuting_positions_permutes_outputs() -> None:
    ffn = zoo.PositionWiseFFN(4, 8).eval()
    x = torch.randn(3, 7, 4)
    permutation = torch.randperm(7)
    torch.testing.assert_close(ffn(x[:, permutation]), ffn(x)[:, permutation])


def test_ffn_matches_two_layer_mlp() -> None:
    ffn = zoo.PositionWiseFFN(4, 8).eval()
    first, second = (m for m in ffn.modules() if isinstance(m, nn.Linear))
    x = torch.randn(2, 3, 4)
    expected = torch.relu(x @ first.weight.T + first.bias) @ second.weight.T + second.bias
    torch.testing.assert_close(ffn(x), expected)


def test_ffn_unknown_activation_raises() -> None:
    with pytest.raises(ValueError, match="Unknown activation 'tanhh'.*relu"):
        zoo.PositionWiseFFN(4, 8, activation="tanhh")


# -- AddNorm ----------------------------------------------------------------------------------


def test_add_norm_equals_layer_norm_of_sum_in_eval() -> None:
    add_norm = zoo.AddNorm(6, dropout=0.5).eval()
    with torch.no_grad():  # non-trivial affine parameters
        add_norm.norm.weight.normal_()
        add_norm.norm.bias.normal_()
    reference = nn.LayerNorm(6)
    reference.load_state_dict(add_norm.norm.state_dict())
    x, y = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    torch.testing.assert_close(add_norm(x, y), reference(x + y))


def test_add_norm_normalizes_each_position() -> None:
    add_norm = zoo.AddNorm(16).eval()
    out = add_norm(torch.randn(3, 5, 16) * 7 + 3, torch.randn(3, 5, 16))
    torch.testing.assert_close(out.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0)


def test_add_norm_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        zoo.AddNorm(4)(torch.zeros(2, 3, 4), torch.zeros(2, 2, 4))


def test_add_norm_dropout_in_training() -> None:
    add_norm = zoo.AddNorm(8, dropout=0.9).train()
    x, y = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    assert not torch.allclose(add_norm(x, y), add_norm.norm(x + y))
