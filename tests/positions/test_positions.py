"""Positional schemes held against independent formulations, and their registry."""

from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch

import zoo
from tests.helpers import write_distribution
from zoo.attention import IncompatibleAttentionError
from zoo.attention.kernels.position_bias import position_bias_grid
from zoo.models import SentimentClassifier
from zoo.positions import (
    ALiBi,
    RotaryEmbedding,
    T5RelativeBias,
    alibi_slopes,
    t5_bucket,
)

# -- registry ---------------------------------------------------------------------------------


def test_builtin_schemes_are_registered_with_their_kinds() -> None:
    kinds = {name: zoo.POSITION_REGISTRY.get(name).kind for name in zoo.list_positions()}
    assert kinds == {
        "alibi": "bias",
        "learned": "absolute",
        "none": "absolute",
        "rope": "rotary",
        "sinusoidal": "absolute",
        "t5": "bias",
    }


def test_a_plugin_scheme_registers_by_decorator_and_is_built_by_name() -> None:
    @zoo.register_position("test_shifted")
    class Shifted(zoo.PositionScheme):
        kind = "absolute"

        def __init__(self, d_model: int, shift: float = 1.0) -> None:
            super().__init__()
            self.shift = shift

        def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
            return x + self.shift

    try:
        assert "test_shifted" in zoo.list_positions()
        scheme = zoo.create_position("test_shifted", d_model=4, num_heads=2, shift=2.0)
        assert torch.equal(scheme(torch.zeros(1, 3, 4)), torch.full((1, 3, 4), 2.0))
    finally:
        zoo.POSITION_REGISTRY.unregister("test_shifted")


def test_an_installed_plugin_scheme_is_found_through_its_entry_point(tmp_path, monkeypatch) -> None:
    write_distribution(
        tmp_path,
        "zoo-test-position",
        {
            "zoo_test_position": """
        import torch
        import zoo


        class Reversed(zoo.PositionScheme):
            kind = "bias"

            def __init__(self, num_heads):
                super().__init__()
                self.num_heads = num_heads

            def forward(self, query_positions, key_positions):
                return (key_positions - query_positions).float().expand(self.num_heads, -1, -1)
        """
        },
        {"zoo.positions": {"plugin_reversed": "zoo_test_position:Reversed"}},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        zoo.POSITION_REGISTRY.reload_plugins()
        assert zoo.POSITION_REGISTRY.entry("plugin_reversed").source == "zoo-test-position"
        model = SentimentClassifier(20, d_model=8, num_heads=2, num_layers=1, ffn_hidden=8, position="plugin_reversed")
        assert model.blocks[0].attention.position.num_heads == 2
    finally:
        zoo.POSITION_REGISTRY.unregister("plugin_reversed")
        sys.modules.pop("zoo_test_position", None)


def test_unknown_scheme_suggests_the_closest() -> None:
    with pytest.raises(KeyError, match="alibi"):
        zoo.create_position("albi", d_model=8, num_heads=2)


def test_create_position_fills_the_sizes_each_constructor_names() -> None:
    rope = zoo.create_position("rope", d_model=32, num_heads=4)
    t5 = zoo.create_position("t5", d_model=32, num_heads=4, causal=True)
    assert rope.head_dim == 8
    assert t5.bias.shape == (4, 32) and t5.causal


def test_a_bias_scheme_is_refused_with_a_variant_that_cannot_add_it() -> None:
    with pytest.raises(IncompatibleAttentionError) as error:
        zoo.AttentionSpec("linear", position=ALiBi(2))
    message = str(error.value)
    assert "dot_product" in message and "local" in message  # variants that take a bias
    assert (
        "rope" in message and "sinusoidal" in message and "t5" not in message.split("takes:")[1]
    )  # schemes linear takes


# -- rope -------------------------------------------------------------------------------------


def _complex_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication: feature i and i + d/2 form z_i, rotated by e^{i m theta_i}."""
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    rotated = z * torch.polar(torch.ones_like(theta), positions.double().unsqueeze(-1) * theta)
    return torch.cat([rotated.real, rotated.imag], dim=-1).float()


def test_rope_equals_the_complex_number_formulation() -> None:
    torch.manual_seed(0)
    x, positions = torch.randn(2, 3, 7, 16), torch.arange(5, 12)
    assert torch.allclose(RotaryEmbedding(16)(x, positions), _complex_rope(x, positions), atol=1e-5)


def test_rope_scores_depend_only_on_the_offset() -> None:
    torch.manual_seed(0)
    rope, q, k = RotaryEmbedding(8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    positions = torch.arange(6)
    scores = rope(q, positions) @ rope(k, positions).transpose(-2, -1)
    shifted = rope(q, positions + 37) @ rope(k, positions + 37).transpose(-2, -1)
    assert torch.allclose(scores, shifted, atol=1e-4)
    unrotated = q @ k.transpose(-2, -1)
    assert not torch.allclose(scores, unrotated, atol=1e-2)  # it did rotate
    assert torch.allclose(
        scores.diagonal(dim1=-2, dim2=-1), unrotated.diagonal(dim1=-2, dim2=-1), atol=1e-5
    )  # i - j = 0


def test_rope_refuses_an_odd_head_size() -> None:
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(7)


# -- alibi ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "exponents"),
    [
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),  # the paper: 1/2, 1/4, ..., 1/256
        (4, [2, 4, 6, 8]),
        (6, [2, 4, 6, 8, 1, 3]),  # 4 heads' slopes, then every other of 8 heads' ones
        (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
        (1, [8]),
    ],
)
def test_alibi_slopes_are_the_papers_geometric_sequence(heads: int, exponents: list[float]) -> None:
    expected = torch.tensor([2.0**-e for e in exponents])
    assert torch.allclose(alibi_slopes(heads), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_bias_is_minus_slope_times_distance(causal: bool) -> None:
    alibi, lq, lk = ALiBi(4, causal=causal), 3, 5
    bias = alibi(torch.arange(lk - lq, lk)[:, None], torch.arange(lk)[None, :])
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(lq):
            for j in range(lk):
                distance = (i + lk - lq) - j
                assert bias[h, i, j].item() == pytest.approx(
                    -slopes[h].item() * (distance if causal else abs(distance))
                )


# -- t5 ---------------------------------------------------------------------------------------


def _t5_bucket_reference(relative: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """T5's bucket function written out for one integer, as in the paper's Mesh TensorFlow code."""
    bucket, n = 0, -relative  # n: how far the key lies before the query
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            bucket += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 40)])
def test_t5_buckets_equal_a_direct_implementation(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    relative = torch.arange(-300, 301)
    buckets = t5_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    expected = [_t5_bucket_reference(int(r), bidirectional, num_buckets, max_distance) for r in relative]
    assert buckets.tolist() == expected


def test_t5_bias_reads_each_heads_learned_value_at_the_bucket() -> None:
    t5 = T5RelativeBias(3, causal=False)
    bias = t5(torch.arange(4)[:, None], torch.arange(6)[None, :])
    for i in range(4):
        for j in range(6):
            bucket = _t5_bucket_reference(j - i, bidirectional=True)
            assert torch.equal(bias[:, i, j], t5.bias[:, bucket])


class _CountingScheme(torch.nn.Module):
    """Wraps a relative scheme and records how many pairs each call evaluates."""

    relative = True

    def __init__(self, scheme: torch.nn.Module) -> None:
        super().__init__()
        self.scheme, self.pairs = scheme, []

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        self.pairs.append(torch.broadcast_shapes(query_positions.shape, key_positions.shape).numel())
        return self.scheme(query_positions, key_positions)


@pytest.mark.parametrize(
    "scheme", [T5RelativeBias(3, causal=True), T5RelativeBias(3), ALiBi(3, causal=True), ALiBi(5)], ids=repr
)
@pytest.mark.parametrize(("num_queries", "num_keys"), [(7, 7), (1, 9), (4, 300), (300, 300)])
def test_a_relative_schemes_grid_is_read_off_one_row_of_distances(scheme, num_queries: int, num_keys: int) -> None:
    """The Toeplitz grid equals the scheme at every (query, key) pair, bottom-right aligned, and
    evaluates the scheme at ``Lq + Lk - 1`` distances rather than ``Lq Lk`` pairs."""
    counting = _CountingScheme(scheme)
    grid = position_bias_grid(counting, num_queries, num_keys, torch.device("cpu"))
    queries = torch.arange(num_queries) + num_keys - num_queries
    direct = torch.stack(
        [torch.stack([scheme(queries[i], torch.tensor(j)) for j in range(num_keys)], -1) for i in range(num_queries)],
        -2,
    )
    assert torch.equal(grid, direct)
    assert counting.pairs == [num_queries + num_keys - 1]


def test_a_scheme_not_declared_relative_is_evaluated_on_the_full_grid() -> None:
    """A plugin bias that reads absolute positions keeps its meaning: no Toeplitz shortcut."""

    def absolute(query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        return (query_positions * 10 + key_positions).float().unsqueeze(0)

    grid = position_bias_grid(absolute, 2, 3, torch.device("cpu"))
    assert grid.tolist() == [[[10.0, 11.0, 12.0], [20.0, 21.0, 22.0]]]


# -- absolute ---------------------------------------------------------------------------------


def test_learned_positions_add_the_row_of_each_position() -> None:
    learned = zoo.create_position("learned", d_model=4, num_heads=1, max_len=10)
    x = torch.randn(2, 3, 4)
    assert torch.equal(learned(x, offset=5), x + learned.embedding.weight[5:8])
    with pytest.raises(ValueError, match="max_len"):
        learned(x, offset=8)
