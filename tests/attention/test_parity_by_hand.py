"""Parity by hand: one layer of ``deltanet``, ``gated_deltanet``, ``mamba2`` and ``mamba1`` with
``negative_eigenvalues``, and ``mamba3`` with its rotation, set by hand to track the parity of a
bit stream at every one of 2,000 positions (the chunkwise forms, far past any chunk), where the
same weights with the option off (``mamba3``: with its angles zeroed) only tell whether a 1 has
been seen.

What it shows: the layers as built can express what Grazzi et al. (2025) and Mamba-3 claim, so the
training runs that end at chance (``docs/results/state_tracking.md``) fail to find the solution
within their budget, not to hold it. The constructions, on inputs ``u_t = (1, bit_t, 0, 0)``:

* ``deltanet`` (and ``gated_deltanet``, its decay held at 1): unit keys and queries ``e_0``, value
  ``v``, ``beta_t = 2`` on a 1 and ``0`` on a 0, so the state's ``(0, 0)`` entry steps
  ``s <- s + beta (v - s)``: ``-s + 2v`` on a 1, kept on a 0;
* ``mamba2``, ``mamba1``: ``dt_t`` large on a 1 (``a_t = 2 exp(-dt A) - 1 = -1``) and vanishing on a 0
  (``a_t = 1``), and a write ``dt B x`` on a 1 only: ``s <- -s + w``;
* ``mamba3``: ``dt_t = 1`` and ``pi tanh(.) dt_t = pi`` on a 1 (the pair turns by ``R(pi) = -I``),
  ``dt_t`` vanishing on a 0, a write on a 1 only: the output sums the writes with alternating signs,
  ``w`` after an odd count of 1s and near 0 after an even one.

Each ``s`` is ``0`` after an even count and ``w`` (or about ``w``) after an odd one; with the
option off, a 1 resets the state to ``w`` and it stays there.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import Tensor, nn

import zoo
from tests.helpers.layers import run_layer

LENGTH, WIDTH = 2000, 4
BIG = 40.0  # a pre-activation that saturates a sigmoid or a softplus in float64


def bits(seed: int = 0) -> Tensor:
    return torch.randint(0, 2, (2, LENGTH), generator=torch.Generator().manual_seed(seed))


def embedded(stream: Tensor) -> Tensor:
    """``u_t = (1, bit_t, 0, 0)``."""
    u = torch.zeros(*stream.shape, WIDTH, dtype=torch.float64)
    u[..., 0], u[..., 1] = 1.0, stream.double()
    return u


def by_hand(layer: nn.Module, **values: list) -> nn.Module:
    """``layer`` in float64 with every parameter zero but ``values`` (dotted names)."""
    layer = layer.double().eval()
    parameters = dict(layer.named_parameters())
    unknown = set(values) - set(parameters)
    assert not unknown, f"no such parameters: {sorted(unknown)}"
    with torch.no_grad():
        for name, parameter in parameters.items():
            parameter.copy_(torch.tensor(values[name], dtype=torch.float64) if name in values else 0.0)
    return layer


def identity_out(embed: int = WIDTH, inner: int = WIDTH) -> list:
    """An output projection that passes the first feature to the first output."""
    weight = [[0.0] * inner for _ in range(embed)]
    weight[0][0] = 1.0
    return weight


def first_row(width: int, row: list[float], rows: int | None = None) -> list:
    """A ``(rows, width)`` weight whose first row is ``row`` and the rest zero."""
    weight = [[0.0] * width for _ in range(rows or width)]
    weight[0] = row
    return weight


def deltanet(negative_eigenvalues: bool, family: str = "deltanet") -> nn.Module:
    layer = zoo.create_attention(
        family, embed_dim=WIDTH, num_heads=1, conv_size=0, negative_eigenvalues=negative_eigenvalues
    )
    on = first_row(WIDTH, [3.0, 0.0, 0.0, 0.0])  # silu(3) on the first feature, then L2-normalized
    # Gated DeltaNet's decay held at 1 (its step size vanishes), its output gate open on the first feature
    gated = {"decay.dt_bias": [-BIG], "gate.weight": on} if family == "gated_deltanet" else {}
    return by_hand(
        layer,
        **{
            "q_proj.weight": on,
            "k_proj.weight": on,
            "v_proj.weight": on,
            "beta.weight": [[-BIG, 2 * BIG, 0.0, 0.0]],  # sigmoid(-40) on a 0, sigmoid(40) on a 1
            "norm.weight": [1.0] * WIDTH,
            "out_proj.weight": identity_out(),
            **gated,
        },
    )


def mamba2(negative_eigenvalues: bool) -> nn.Module:
    layer = zoo.create_attention(
        "mamba2",
        embed_dim=WIDTH,
        num_heads=1,
        expand=1.0,
        d_state=1,
        conv_size=0,
        negative_eigenvalues=negative_eigenvalues,
    )
    return by_hand(
        layer,
        **{
            "q_proj.weight": [[3.0, 0.0, 0.0, 0.0]],  # C = silu(3)
            "k_proj.weight": [[3.0, 0.0, 0.0, 0.0]],  # B = silu(3)
            "v_proj.weight": first_row(WIDTH, [3.0, 0.0, 0.0, 0.0]),  # x = (silu(3), 0, 0, 0)
            "decay.proj.weight": [[-BIG, BIG + 60.0, 0.0, 0.0]],  # dt: softplus(-40) on a 0, 60 on a 1
            "decay.A_log": [0.0],  # A = 1
            "gate.weight": first_row(WIDTH, [3.0, 0.0, 0.0, 0.0]),
            "norm_weight": [1.0] * WIDTH,
            "out_proj.weight": identity_out(),
        },
    )


def mamba1(negative_eigenvalues: bool) -> nn.Module:
    layer = zoo.create_attention(
        "mamba1", embed_dim=WIDTH, num_heads=1, expand=0.5, d_state=1, conv_size=0,
        negative_eigenvalues=negative_eigenvalues,
    )  # fmt: skip
    # two channels: x_0 = silu(10 bit) carries the bit, x_1 = silu(3) is a constant for B and C
    return by_hand(
        layer,
        **{
            "v_proj.weight": [[0.0, 10.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]],
            "k_proj.weight": [[0.0, 1.0]],
            "q_proj.weight": [[0.0, 1.0]],
            "dt_down.weight": [[1.0, 0.0]],  # the low rank reads x_0
            "dt_proj.weight": [[10.0], [0.0]],
            "dt_proj.bias": [-BIG, -BIG],  # dt_0: softplus(-40) on a 0, about 60 on a 1
            "A_log": [[0.0], [0.0]],
            "gate.weight": first_row(WIDTH, [3.0, 0.0, 0.0, 0.0], rows=2),
            "out_proj.weight": identity_out(inner=2),
        },
    )


def mamba3(rotation: bool) -> nn.Module:
    layer = zoo.create_attention(
        "mamba3", embed_dim=WIDTH, num_heads=1, expand=1.0, d_state=2, rope_fraction=1.0, bias=False
    )
    return by_hand(
        layer,
        **{
            "v_proj.weight": first_row(WIDTH, [3.0, 0.0, 0.0, 0.0]),
            # dt: softplus(-40) on a 0 and exactly softplus(log(e - 1)) = 1 on a 1; A at its floor;
            # lambda = sigmoid(40): the exponential-Euler rule
            "steps.weight": [[-BIG, BIG + math.log(math.e - 1), 0.0, 0.0], [-1e9, 0.0, 0.0, 0.0], [BIG, 0.0, 0.0, 0.0]],
            "angles.weight": [[0.0, BIG if rotation else 0.0, 0.0, 0.0]],  # pi tanh(40) dt = pi on a 1
            "B_bias": [[[1.0, 0.0]]],  # B = C = (1, 0) before the turn: B and C's maps are zero
            "C_bias": [[[1.0, 0.0]]],
            "B_norm": [1.0, 1.0],
            "C_norm": [1.0, 1.0],
            "gate.weight": first_row(WIDTH, [3.0, 0.0, 0.0, 0.0]),
            "out_proj.weight": identity_out(),
        },
    )


LAYERS = {
    "deltanet": deltanet,
    "gated_deltanet": functools.partial(deltanet, family="gated_deltanet"),
    "mamba2": mamba2,
    "mamba1": mamba1,
    "mamba3": mamba3,
}


def accuracy(build, option: bool, stream: Tensor) -> float:
    """The layer's first output feature, read as odd where it passes half its largest value."""
    with torch.no_grad():
        read = run_layer(build(option), embedded(stream), is_causal=True).output[..., 0]
    odd = read > read.max() / 2
    parity = stream.cumsum(-1) % 2 == 1
    return (odd == parity).double().mean().item()


@pytest.mark.parametrize("family", LAYERS)
def test_one_layer_tracks_parity_with_a_sign_and_not_without(family: str) -> None:
    stream = bits()
    assert accuracy(LAYERS[family], True, stream) == 1.0
    assert accuracy(LAYERS[family], False, stream) < 0.6
