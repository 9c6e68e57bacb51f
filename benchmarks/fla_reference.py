"""Compare ``zoo.attention.kernels`` with flash-linear-attention's pure-PyTorch reference functions, on CPU.

Usage: python benchmarks/fla_reference.py FLA_ROOT [--site DIR] [--seed 0] [--time LENGTH ...]

``FLA_ROOT`` is an unpacked ``fla-core`` wheel (the folder that holds ``fla/ops``; since 0.5 the
``flash-linear-attention`` wheel holds only layers and models, its kernels come from
``fla-core``), for example::

    pip download fla-core==0.6.0 --no-deps -d /tmp/fla && unzip -q /tmp/fla/fla_core-*.whl -d /tmp/fla/core
    pip install --target /tmp/fla/site einops
    python benchmarks/fla_reference.py /tmp/fla/core --site /tmp/fla/site

or, for the recurrences of 2025, a newer tree: the ``fla/ops`` folder of a fetched copy of
``fla-org/flash-linear-attention`` (``git archive HEAD fla/ops | tar -x -C /tmp/fla``), which holds
``fla/ops/kda/naive.py``, ``fla/ops/generalized_delta_rule/dplr/naive.py`` (RWKV-7's recurrence:
fla's ``chunk_rwkv7`` is its DPLR kernel with ``a = -kk``, ``b = kk * a``; ``fla/ops/rwkv7`` has no
naive file), ``fla/ops/gated_delta_product/naive.py``, ``fla/ops/gdn2/naive.py``,
``fla/ops/comba/naive.py``, ``fla/ops/mesa_net/naive.py``, ``fla/ops/gsa/naive.py`` and RWKV-6's
``fla/ops/rwkv6/recurrent_naive.py`` and ``chunk_naive.py`` (it has no ``naive.py``). A family whose file the
tree lacks is reported as missing and skipped.

``--mamba MAMBA_ROOT`` (a fetched ``state-spaces/mamba`` tree, ``git archive HEAD tests/ops``) also
compares Mamba-3's recurrence with the pure-PyTorch references in ``mamba_ssm``'s kernel tests
(fla has no ``fla/ops/mamba3``): see :func:`compare_mamba3`.
With ``mamba_ssm/ops`` in that tree too (``git archive HEAD tests/ops mamba_ssm/ops``) it compares
Mamba-1's selective scan with ``selective_scan_ref`` (:func:`compare_mamba1`). The older families'
fla files, where the tree has them: ``fla/ops/based/naive.py`` (:func:`compare_based`) and
``fla/ops/hgrn/naive.py`` (:func:`compare_hgrn`).

No fla code is kept in this project, and fla is never installed: each ``fla/ops/*/naive.py`` is
loaded on its own (``importlib.util.spec_from_file_location``), so fla's package ``__init__`` and
its Triton kernels are never imported. Several of those files import ``einops``; ``--site`` puts a
folder that holds it on the import path.

Every reference function and the matching zoo kernel get the same float64 inputs (fla's layout is
``(B, T, H, D)``, or ``(B, H, T, D)`` for ``delta_rule``; zoo's is ``(B, H, T, D)``), and the
largest absolute differences of the outputs, final states and weight matrices are printed. Most
references cast their inputs to float32, so differences near 1e-6 are agreement there; those that
keep float64 (``delta_rule_chunkwise``, in chunks and as one) agree to rounding.

``--time LENGTH ...`` then times the chunkwise forms side by side in float32 (batch 1, 8 heads of
32, chunks of 64, forward only): fla's ``naive_chunk_simple_gla``, ``delta_rule_chunkwise``,
``naive_chunk_gated_delta_rule`` and, where the tree has it, ``naive_chunk_kda`` (lengths that are
whole chunks) against the zoo's kernel of the same recurrence, the calls of one length in turn,
after a warm-up, median of ``--repeats``. GLA's per-dimension decay has no chunked reference in
fla (only ``naive_recurrent_gla``, a loop over tokens), so it is left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels import (
    corrected_values,
    corrected_values_recurrent,
    decay_chunkwise,
    decay_recurrent,
    decay_weights,
    delta_product_chunkwise,
    delta_product_recurrent,
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_weights,
    dplr_chunkwise,
    dplr_recurrent,
    mesa_chunkwise,
    mesa_recurrent,
    path_recurrent,
    path_scores,
)
from zoo.attention.kernels.fenwick import level_count
from zoo.attention.kernels.log_linear import log_linear_chunkwise, log_linear_recurrent, log_linear_weights
from zoo.attention.modules.bonus_recurrence import BonusRecurrence
from zoo.attention.modules.slot_recurrence import SlotRecurrence
from zoo.attention.variants.lightning_attention import LightningAttention

B, H, T, DK, DV = 2, 3, 128, 16, 16


def load_naive(root: Path, family: str, file: str = "naive.py") -> ModuleType:
    """Load ``fla/ops/<family>/<file>`` (``naive.py`` unless given) under ``root`` as a standalone module."""
    path = root / "fla" / "ops" / family / file
    spec = importlib.util.spec_from_file_location(f"fla_{Path(file).stem}_{family.replace('/', '_')}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fla_layout(x: Tensor) -> Tensor:
    """zoo's ``(B, H, T, ...)`` -> fla's ``(B, T, H, ...)``, and back (the swap is its own inverse)."""
    return x.transpose(1, 2)


def largest_difference(fla: Tensor, zoo: Tensor) -> str:
    """``max |fla - zoo|`` in float64, and ``max |zoo|`` for scale: ``"1.2e-07 (of 3.4e+00)"``."""
    difference = (fla.double() - zoo).abs().max().item()
    return f"{difference:.1e} (of {zoo.abs().max().item():.1e})"


def report(name: str, zoo_name: str, **differences: str) -> None:
    """Print one comparison: ``fla function vs zoo function output ..., state ...``."""
    cells = ", ".join(f"{key} {value}" for key, value in differences.items())
    print(f"{name:34s} vs {zoo_name:24s} {cells}")


def compare_simple_gla(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """Scalar decay: ``naive_{recurrent,chunk,parallel}_simple_gla`` (``scale=1``)."""
    log_decay = -torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    args = (fla_layout(q), fla_layout(k), fla_layout(v), fla_layout(log_decay))
    scalar = log_decay.unsqueeze(-1)  # one decay per step: width 1
    output, final = decay_recurrent(q, k, v, scalar, state=state)

    fla_output, fla_final = naive.naive_recurrent_simple_gla(
        *args, scale=1.0, initial_state=state, output_final_state=True
    )
    report(
        "naive_recurrent_simple_gla",
        "decay_recurrent (scalar)",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )
    chunk_output, chunk_final = decay_chunkwise(q, k, v, scalar, initial_state=state)
    # It works in float32 but adds the initial state as given: float64 would not mix.
    fla_output, fla_final = naive.naive_chunk_simple_gla(
        *args, initial_state=state.float(), output_final_state=True, chunk_size=64, scale=1.0
    )
    report(
        "naive_chunk_simple_gla",
        "decay_chunkwise (scalar)",
        output=largest_difference(fla_layout(fla_output), chunk_output),
        state=largest_difference(fla_final, chunk_final),
    )
    output, _ = decay_chunkwise(q, k, v, scalar, chunk_size=None)
    weights = decay_weights(q, k, scalar)
    fla_output, fla_weights = naive.naive_parallel_simple_gla(*args, scale=1.0)
    report(
        "naive_parallel_simple_gla",
        "decay_chunkwise (one chunk, scalar)",
        output=largest_difference(fla_layout(fla_output), output),
        weights=largest_difference(fla_weights, weights),
    )


def compare_lightning_attn(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor) -> None:
    """MiniMax's lightning attention (``lightning_attention``, its layer's recurrence at layer 1 of 4)
    with ``naive_{recurrent,chunk}_simple_gla`` at the same constant log decays ``-s_h`` (``scale=1``).

    fla has no ``fla/ops/lightning_attn/naive.py``: its ``chunk_lightning_attn`` is ``chunk_simple_gla``
    at ``g_gamma = -(8 / H) (1 - l / L) h``, another schedule than transformers' MiniMax slopes
    ``2^(-8 (h + 1) / H) (1 - l / (L - 1 + 1e-5) + 1e-5)``, which the zoo follows; so the slopes are the
    zoo's on both sides and this checks the recurrence the layer runs."""
    layer = LightningAttention(H * DK, H, head_dim=DK, layer_index=1, num_layers=4).double()
    recurrence = layer.prepare(q, k, v, q.new_zeros(()))  # its log decays ignore the layer's input
    log_decay = recurrence.log_decay.expand(B, H, T, 1).squeeze(-1)
    args = (fla_layout(q), fla_layout(k), fla_layout(v), fla_layout(log_decay))
    output, final = recurrence.recurrent(state, None)
    fla_output, fla_final = naive.naive_recurrent_simple_gla(
        *args, scale=1.0, initial_state=state, output_final_state=True
    )
    report(
        "naive_recurrent_simple_gla",
        "lightning_attention (recurrent)",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )
    output, final = recurrence.chunkwise(16, state, None)
    fla_output, fla_final = naive.naive_chunk_simple_gla(
        *args, initial_state=state.float(), output_final_state=True, chunk_size=64, scale=1.0
    )
    report(
        "naive_chunk_simple_gla",
        "lightning_attention (chunks of 16)",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )


def compare_gla(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """Vector decay: ``naive_recurrent_gla``, which scales the queries by ``dk ** -0.5`` itself."""
    log_decay = -torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    fla_output, fla_final = naive.naive_recurrent_gla(
        fla_layout(q), fla_layout(k), fla_layout(v), fla_layout(log_decay), initial_state=state, output_final_state=True
    )
    scaled = q * DK**-0.5
    forms = {
        "decay_recurrent": lambda: decay_recurrent(scaled, k, v, log_decay, state=state),
        "decay_chunkwise": lambda: decay_chunkwise(scaled, k, v, log_decay, initial_state=state),
        "decay_chunkwise (one chunk)": lambda: decay_chunkwise(
            scaled, k, v, log_decay, chunk_size=None, initial_state=state
        ),
    }
    for label, form in forms.items():
        result = form()
        report(
            "naive_recurrent_gla",
            label,
            output=largest_difference(fla_layout(fla_output), result[0]),
            state=largest_difference(fla_final, result[-1]),
        )


def compare_delta_rule(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, beta: Tensor) -> None:
    """DeltaNet: ``delta_rule_{recurrence,chunkwise,parallel}``, ``(B, H, T, D)``, scaling queries."""
    scaled = q * DK**-0.5
    fla_output, fla_final = naive.delta_rule_recurrence(q, k, v, beta, initial_state=state, output_final_state=True)
    output, final = delta_rule_recurrent(scaled, k, v, beta, state=state)
    report(
        "delta_rule_recurrence",
        "delta_rule_recurrent",
        output=largest_difference(fla_output, output),
        state=largest_difference(fla_final, final),
    )
    fla_output, fla_final = naive.delta_rule_chunkwise(q, k, v, beta, chunk_size=32)  # no initial state
    output, final = delta_rule_chunkwise(scaled, k, v, beta, chunk_size=32)
    report(
        "delta_rule_chunkwise",
        "delta_rule_chunkwise",
        output=largest_difference(fla_output, output),
        state=largest_difference(fla_final, final),
    )
    # fla's weights act on beta * v: ours are theirs times diag(beta).
    fla_output, fla_weights = naive.delta_rule_parallel(q, k, v, beta, BM=128, BN=32)
    output, _ = delta_rule_chunkwise(scaled, k, v, beta, chunk_size=None)
    weights = delta_rule_weights(scaled, k, beta)
    report(
        "delta_rule_parallel",
        "delta_rule_chunkwise (one chunk)",
        output=largest_difference(fla_output, output),
        weights=largest_difference(fla_weights * beta.unsqueeze(-2), weights),
    )


def compare_gated_delta_rule(
    naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, beta: Tensor, gen: torch.Generator
) -> None:
    """Gated DeltaNet: ``naive_{recurrent,chunk}_gated_delta_rule`` (``scale=1``)."""
    log_decay = -torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    fla_q, fla_k, fla_v, fla_beta, fla_g = (fla_layout(x) for x in (q, k, v, beta, log_decay))
    fla_output, fla_final = naive.naive_recurrent_gated_delta_rule(
        fla_q, fla_k, fla_v, fla_beta, fla_g, scale=1.0, initial_state=state, output_final_state=True
    )
    output, final = delta_rule_recurrent(q, k, v, beta, log_decay, state=state)
    report(
        "naive_recurrent_gated_delta_rule",
        "delta_rule_recurrent",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )
    fla_output, fla_final = naive.naive_chunk_gated_delta_rule(
        fla_q, fla_k, fla_v, fla_g, fla_beta, chunk_size=64, scale=1.0, initial_state=state, output_final_state=True
    )
    output, final = delta_rule_chunkwise(q, k, v, beta, log_decay, initial_state=state)
    report(
        "naive_chunk_gated_delta_rule",
        "delta_rule_chunkwise",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )


def compare_kda(
    naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, beta: Tensor, gen: torch.Generator
) -> None:
    """Kimi Delta Attention: ``naive_{recurrent,chunk}_kda`` (``scale=1``) against the generalized
    delta rule with ``a = -beta k``, ``b = k * exp(g)`` and the written key ``beta k``."""
    log_decay = -torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    fla_args = [fla_layout(x) for x in (q, k, v, log_decay, beta)]
    weight = beta.unsqueeze(-1)
    ours = (q, weight * k, v, -weight * k, k * log_decay.exp(), log_decay)
    fla_output, fla_final = naive.naive_recurrent_kda(
        *fla_args, scale=1.0, initial_state=state, output_final_state=True
    )
    output, final = dplr_recurrent(*ours, state=state)
    report(
        "naive_recurrent_kda",
        "dplr_recurrent",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )
    fla_output, fla_final = naive.naive_chunk_kda(
        *fla_args, scale=1.0, initial_state=state, output_final_state=True, chunk_size=64
    )
    output, final = dplr_chunkwise(*ours, initial_state=state)
    report(
        "naive_chunk_kda",
        "dplr_chunkwise",
        output=largest_difference(fla_layout(fla_output), output),
        state=largest_difference(fla_final, final),
    )


def compare_rwkv7(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """RWKV-7's recurrence as fla runs it, ``dplr_{recurrence,chunkwise}`` with ``alpha = -kappa``
    and ``beta = kappa * a`` (fla's DPLR files scale the queries by ``dk ** -0.5`` themselves, keep
    ``(B, H, T, D)``, and run in float32)."""
    kappa = F.normalize(torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64), dim=-1)
    rate = torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    log_w = -0.6 * torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    ours = (q * DK**-0.5, k, v, -(rate * kappa), kappa, log_w)
    fla_args = [x.float() for x in (q, k, v, -kappa, kappa * rate, log_w)]  # it mixes dtypes otherwise
    fla_output, fla_final = naive.dplr_recurrence(*fla_args, initial_state=state.float())
    output, final = dplr_recurrent(*ours, state=state)
    report(
        "dplr_recurrence (RWKV-7)",
        "dplr_recurrent",
        output=largest_difference(fla_output, output),
        state=largest_difference(fla_final, final),
    )
    fla_output, fla_final = naive.dplr_chunkwise(*fla_args, initial_state=state.float(), chunk_size=32)
    output, final = dplr_chunkwise(*ours, chunk_size=32, initial_state=state)
    report(
        "dplr_chunkwise (RWKV-7)",
        "dplr_chunkwise",
        output=largest_difference(fla_output, output),
        state=largest_difference(fla_final, final),
    )


def compare_rwkv6(root: Path, q: Tensor, k: Tensor, v: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """RWKV-6's read before the write with a bonus ``u`` (:mod:`zoo.attention.modules.bonus_recurrence`,
    the decay kernels with the writes delayed a step) against ``naive_recurrent_rwkv6`` (from a state)
    and ``naive_chunk_rwkv6`` (from zeros, whole chunks), fla's files in ``fla/ops/rwkv6``, which keep
    ``(B, H, T, D)`` and run in float32; ``w`` is the log decay, strong ones included (``-exp(d)``)."""
    log_w = -torch.exp(torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64) - 1)
    u = torch.randn(H, DK, generator=gen, dtype=torch.float64)
    ours = BonusRecurrence(q * DK**-0.5, k, v, log_w, u[:, None])
    fla_output, fla_final = load_naive(root, "rwkv6", "recurrent_naive.py").naive_recurrent_rwkv6(
        q, k, v, log_w, u, initial_state=state, output_final_state=True
    )
    for label, (output, final) in {
        "recurrent": ours.recurrent(state, None),
        "chunkwise": ours.chunkwise(64, state, None),
    }.items():
        report(
            "naive_recurrent_rwkv6",
            f"BonusRecurrence.{label}",
            output=largest_difference(fla_output, output),
            state=largest_difference(fla_final, final),
        )
    fla_output = load_naive(root, "rwkv6", "chunk_naive.py").naive_chunk_rwkv6(q * DK**-0.5, k, v, log_w, u)
    report(
        "naive_chunk_rwkv6",
        "BonusRecurrence.chunkwise",
        output=largest_difference(fla_output, ours.chunkwise(32, None, None)[0]),
    )


def compare_gsa(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, gen: torch.Generator) -> None:
    """Gated Slot Attention's two slot passes and the softmax between them
    (:mod:`zoo.attention.modules.slot_recurrence`, both on the decay kernels) against
    ``naive_recurrent_gsa`` from a state, its gates given (``s = 1 - exp(g)``, as fla's layer passes
    them), no scale (the layer's ``scale=1``); fla keeps ``(B, T, H, D)`` and runs in float32."""
    slots = 8
    log_forget = F.logsigmoid(torch.randn(B, H, T, slots, generator=gen, dtype=torch.float64)) / 8
    state = torch.randn(B, H, slots, DK + DV, generator=gen, dtype=torch.float64)
    slot_keys, slot_values = state[..., :DK].mT, state[..., DK:]  # fla's (K, M) and (M, V)
    fla_output, (fla_keys, fla_values) = naive.naive_recurrent_gsa(
        *(fla_layout(x) for x in (q, k, v, -torch.expm1(log_forget), log_forget)),
        scale=1.0, initial_state=(slot_keys, slot_values), output_final_state=True,
    )  # fmt: skip
    ours = SlotRecurrence(q, k, v, log_forget)
    for label, (output, final) in {
        "recurrent": ours.recurrent(state, None),
        "chunkwise": ours.chunkwise(64, state, None),
        "chunkwise (one chunk)": ours.chunkwise(None, state, None),
    }.items():
        report(
            "naive_recurrent_gsa",
            f"SlotRecurrence.{label}",
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(torch.cat([fla_keys.mT, fla_values], -1), final),
        )


def compare_gated_delta_product(naive: ModuleType, q: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """Gated DeltaProduct, two steps a token: ``naive_recurrent_gated_delta_product`` (keys, values
    and betas ``(B, 2 T, H, ...)``, a token's steps in turn) against the zoo's three forms."""
    steps = 2
    k = F.normalize(torch.randn(B, H, T, steps, DK, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(B, H, T, steps, DV, generator=gen, dtype=torch.float64)
    beta = 2 * torch.rand(B, H, T, steps, generator=gen, dtype=torch.float64)
    log_decay = -torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    fla_output, fla_final = naive.naive_recurrent_gated_delta_product(
        fla_layout(q), fla_layout(k.flatten(2, 3)), fla_layout(v.flatten(2, 3)), fla_layout(log_decay),
        fla_layout(beta.flatten(2, 3)), 1.0, None, initial_state=state.clone(), output_final_state=True,
        num_householder=steps,
    )  # fmt: skip
    forms = {
        "delta_product_recurrent": lambda: delta_product_recurrent(q, k, v, beta, log_decay, state=state),
        "delta_product_chunkwise": lambda: delta_product_chunkwise(q, k, v, beta, log_decay, initial_state=state),
        "delta_product_chunkwise (one chunk)": lambda: delta_product_chunkwise(
            q, k, v, beta, log_decay, chunk_size=None, initial_state=state
        ),
    }
    for label, form in forms.items():
        output, final = form()
        report(
            "naive_recurrent_gated_delta_product",
            label,
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(fla_final, final),
        )


def compare_gdn2(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, gen: torch.Generator) -> None:
    """Gated DeltaNet-2: ``naive_{recurrent,chunk}_gdn2`` (``scale=1``; erase gate ``b`` per key
    channel, write gate ``w`` per value channel) against the generalized delta rule with ``a = -k``,
    ``b = b * k * exp(g)``, the written key ``k`` and value ``w * v``."""
    log_decay = -torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    erase = torch.rand(B, H, T, DK, generator=gen, dtype=torch.float64)
    write = torch.rand(B, H, T, DV, generator=gen, dtype=torch.float64)
    fla_args = [fla_layout(x) for x in (q, k, v, log_decay, erase, write)]
    ours = (q, k, write * v, -k, erase * k * log_decay.exp(), log_decay)
    for name, fla_form, label, zoo_form in (
        ("naive_recurrent_gdn2", naive.naive_recurrent_gdn2, "dplr_recurrent", partial(dplr_recurrent, state=state)),
        ("naive_chunk_gdn2", naive.naive_chunk_gdn2, "dplr_chunkwise", partial(dplr_chunkwise, initial_state=state)),
    ):
        fla_output, fla_final = fla_form(*fla_args, scale=1.0, initial_state=state, output_final_state=True)
        output, final = zoo_form(*ours)
        report(
            name,
            label,
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(fla_final, final),
        )


def compare_comba(
    naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, beta: Tensor, gen: torch.Generator
) -> None:
    """Comba: ``naive_chunk_comba`` (``scale=1``; read key ``p``, scalar log decay ``g``) against the
    generalized delta rule with ``a = -beta k``, ``b = p``, the written key ``beta k`` and ``g`` on
    every key dimension, the state read before the decay as fla's kernels do; ``naive_recurrent_comba``
    decays first, so it is compared with ``b = p exp(g)`` (and, for the size of the gap, with the
    kernels' form)."""
    p = F.normalize(torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64), dim=-1)
    log_decay = -torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    every_dim = log_decay.unsqueeze(-1).expand_as(k)
    weight = beta.unsqueeze(-1)
    kernels = (q, weight * k, v, -weight * k, p, every_dim)
    decay_first = (q, weight * k, v, -weight * k, p * every_dim.exp(), every_dim)
    q_, k_, v_, p_, g_, beta_ = (fla_layout(x) for x in (q, k, v, p, log_decay, beta))
    fla_output, fla_final = naive.naive_chunk_comba(
        q_, k_, v_, p_, g_, beta_, chunk_size=64, scale=1.0, initial_state=state, output_final_state=True
    )
    for label, form in (
        ("dplr_chunkwise", partial(dplr_chunkwise, initial_state=state)),
        ("dplr_recurrent", partial(dplr_recurrent, state=state)),
    ):
        output, final = form(*kernels)
        report(
            "naive_chunk_comba",
            label,
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(fla_final, final),
        )
    fla_output, fla_final = naive.naive_recurrent_comba(
        q_, k_, v_, p_, beta_, g_, scale=1.0, initial_state=state, output_final_state=True
    )
    for label, inputs in (("dplr_recurrent (b = p exp(g))", decay_first), ("dplr_recurrent (kernels' form)", kernels)):
        output, final = dplr_recurrent(*inputs, state=state)
        report(
            "naive_recurrent_comba",
            label,
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(fla_final, final),
        )


def compare_mesa_net(
    naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, state: Tensor, beta: Tensor, gen: torch.Generator
) -> None:
    """MesaNet (``dk == dv``, as fla's naive functions need): ``naive_mesa_net_exact``
    (``torch.linalg.solve`` per token) against ``mesa_chunkwise`` at 30 and 200 conjugate-gradient
    steps; ``naive_mesa_net_CG`` (30 steps from zero in chunks of 64, its divisions offset by
    ``1e-5``) against ``mesa_chunkwise`` at 30; ``naive_mesa_net_decoding_one_step`` (30 steps from
    a Jacobi guess) against ``mesa_recurrent`` on the first token. Queries L2-normalized, the
    ridge in ``(0.25, 1.25)``, ``H_0 = A A^T / dk`` and ``G_0`` the shared state; the states are
    compared as the zoo keeps them, ``[H | G]``. The zoo's 30 steps reach the exact solve (to
    float32, which fla's functions compute in); fla's differ from it by about 2e-3, all of it their
    ``1e-5`` offsets (removed in a scratch copy, both agree to 6e-7)."""
    query = F.normalize(q, dim=-1)
    log_decay = F.logsigmoid(torch.randn(B, H, T, generator=gen, dtype=torch.float64) + 3)
    lam = 0.25 + torch.rand(H, DK, generator=gen, dtype=torch.float64)
    root = torch.randn(B, H, DK, DK, generator=gen, dtype=torch.float64)
    h_init = root @ root.mT / DK
    initial = torch.cat([h_init, state], -1)
    q_, k_, v_, g_, beta_ = (fla_layout(x) for x in (query, k, v, log_decay, beta))
    inits = {"h_kk_init": h_init, "h_kv_init": state}
    exact = naive.naive_mesa_net_exact(q_, k_, v_, g_, lam, beta_, **inits)
    solved = naive.naive_mesa_net_CG(  # float32 throughout there: a float64 ridge would promote half its products
        q_, k_, v_, g_, lam.float(), beta_, chunk_size=64, max_CG_iteration=30, **inits
    )
    for name, (fla_output, h_kk, h_kv), steps in (
        ("naive_mesa_net_exact", exact, 30),
        ("naive_mesa_net_exact", exact, 200),
        ("naive_mesa_net_CG", solved, 30),
    ):
        output, final = mesa_chunkwise(
            query, k, v, beta, log_decay, lam, steps=steps, chunk_size=64, initial_state=initial
        )
        report(
            name,
            f"mesa_chunkwise ({steps} steps)",
            output=largest_difference(fla_layout(fla_output), output),
            state=largest_difference(torch.cat([h_kk, h_kv], -1), final),
        )
    first = [x[:, 0] for x in (q_, k_, v_, g_)]
    fla_output, h_kk, h_kv = naive.naive_mesa_net_decoding_one_step(
        *first, lam, beta_[:, 0], h_init, state, max_CG_iteration=30
    )
    output, final = mesa_recurrent(
        query[..., :1, :], k[..., :1, :], v[..., :1, :], beta[..., :1], log_decay[..., :1], lam, steps=30, state=initial
    )
    report(
        "naive_mesa_net_decoding_one_step",
        "mesa_recurrent (30 steps)",
        output=largest_difference(fla_output, output.squeeze(-2)),
        state=largest_difference(torch.cat([h_kk, h_kv], -1), final),
    )


def compare_log_linear_attn(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, gen: torch.Generator) -> None:
    """Log-linear attention over a scalar decay (log-linear Mamba-2's): ``naive_log_linear_attn``
    (the hierarchical mask built level by level, no initial or final state) against the zoo's three
    forms (chunks of 16). fla has no reference for log-linear Gated DeltaNet."""
    log_decay = -torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    levels = torch.rand(B, H, T, level_count(T), generator=gen, dtype=torch.float64)
    fla_output = fla_layout(naive.naive_log_linear_attn(*(fla_layout(x) for x in (q, k, v, log_decay, levels))))
    parallel = log_linear_weights(q, k, levels, log_decay) @ v
    chunkwise, _ = log_linear_chunkwise(q, k, v, levels, log_decay, chunk_size=16, final_state=False)
    recurrent, _ = log_linear_recurrent(q, k, v, levels, log_decay)
    differences = {
        form: largest_difference(fla_output, output)
        for form, output in (("parallel", parallel), ("chunkwise", chunkwise), ("recurrent", recurrent))
    }
    report("naive_log_linear_attn", "log_linear_*", **differences)


def causal_softmax_read(logits: Tensor, values: Tensor) -> Tensor:
    """``softmax(logits)`` over the keys ``j <= i`` of each row, times ``values``."""
    length = logits.shape[-1]
    later = torch.ones(length, length, dtype=torch.bool).triu(1)
    return torch.softmax(logits.masked_fill(later, float("-inf")), dim=-1) @ values


def compare_path_attn(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, gen: torch.Generator) -> None:
    """PaTH-FoX: ``naive_path_attn`` (blocks of 64, in float32) against the zoo's Householder
    scores in their three forms (naive, blockwise in chunks of 16, recurrent), scaled, plus
    ``forgetting``'s decay, then a causal softmax. fla scales the decay with the scores, so it gets
    the log gates divided by the scale."""
    w = F.normalize(torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64), dim=-1)
    strength = 2 * torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    log_forget = F.logsigmoid(2 + torch.randn(B, H, T, generator=gen, dtype=torch.float64))
    scale = DK**-0.5
    fla_args = [fla_layout(x) for x in (q, k, v, w, strength, log_forget / scale)]
    fla_output = fla_layout(naive.naive_path_attn(*fla_args, scale=scale))
    cumulative = log_forget.cumsum(-1)
    decay = cumulative[..., :, None] - cumulative[..., None, :]
    for label, scores in (
        ("path_scores (naive)", path_scores(q, k, w, strength)),
        ("path_scores (chunks of 16)", path_scores(q, k, w, strength, chunk_size=16)),
        ("path_recurrent", path_recurrent(q, k, w, strength)[0]),
    ):
        output = causal_softmax_read(scores * scale + decay, v)
        report("naive_path_attn", label, output=largest_difference(fla_output, output))


def compare_deltaformer(naive: ModuleType, q: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> None:
    """DeltaFormer: ``naive_deltaformer_attn`` (its ``u`` in float32) against the zoo's corrected
    values read with the queries as fla's kernels are (the ``deltaformer`` layer reads with the
    keys), in one solve, in chunks of 16 and one position at a time, then a causal softmax over
    them."""
    scale = DK**-0.5
    fla_output = fla_layout(naive.naive_deltaformer_attn(*(fla_layout(x) for x in (q, k, v, beta))))
    logits = (q @ k.transpose(-1, -2)) * scale
    for label, u in (
        ("corrected_values", corrected_values(q, k, v, beta, scale=scale)),
        ("corrected_values (chunks of 16)", corrected_values(q, k, v, beta, scale=scale, chunk_size=16)),
        ("corrected_values_recurrent", corrected_values_recurrent(q, k, v, beta, scale=scale)),
    ):
        report("naive_deltaformer_attn", label, output=largest_difference(fla_output, causal_softmax_read(logits, u)))


def time_chunkwise(root: Path, lengths: list[int], repeats: int, gen: torch.Generator) -> None:
    """Median seconds of fla's chunked references and the zoo's chunkwise kernels, side by side."""
    heads, dim, chunk = 8, 32, 64
    simple_gla, delta_rule, gated = (
        load_naive(root, family) for family in ("simple_gla", "delta_rule", "gated_delta_rule")
    )
    print(f"\nforward, float32, batch 1, {heads} heads of {dim}, chunks of {chunk}: median of {repeats} (ms)")
    print(f"{'length':>6}  {'recurrence':18s} {'fla':>9} {'zoo':>9}  zoo/fla")
    for length in lengths:
        q, k, v = (torch.randn(1, heads, length, dim, generator=gen) for _ in range(3))
        k = F.normalize(k, dim=-1)
        beta = torch.rand(1, heads, length, generator=gen)
        log_decay = -torch.rand(1, heads, length, generator=gen) * 0.1
        fq, fk, fv, fbeta, fg = (fla_layout(x) for x in (q, k, v, beta, log_decay))
        pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "scalar decay": (
                partial(simple_gla.naive_chunk_simple_gla, fq, fk, fv, fg, chunk_size=chunk, scale=1.0),
                partial(decay_chunkwise, q, k, v, log_decay.unsqueeze(-1), chunk_size=chunk),
            ),
            "delta rule": (
                partial(delta_rule.delta_rule_chunkwise, q, k, v, beta, chunk_size=chunk),
                partial(delta_rule_chunkwise, q * dim**-0.5, k, v, beta, chunk_size=chunk),
            ),
            "gated delta rule": (
                partial(gated.naive_chunk_gated_delta_rule, fq, fk, fv, fg, fbeta, chunk_size=chunk, scale=1.0),
                partial(delta_rule_chunkwise, q, k, v, beta, log_decay, chunk_size=chunk),
            ),
        }
        if (root / "fla" / "ops" / "kda" / "naive.py").exists() and length % chunk == 0:  # fla's needs whole chunks
            kda = load_naive(root, "kda")
            per_key = log_decay.unsqueeze(-1).expand(-1, -1, -1, dim)
            weight = beta.unsqueeze(-1)
            pairs["kda (per-key decay)"] = (
                partial(kda.naive_chunk_kda, fq, fk, fv, fla_layout(per_key), fbeta, scale=1.0, chunk_size=chunk),
                partial(dplr_chunkwise, q, weight * k, v, -weight * k, k * per_key.exp(), per_key, chunk_size=chunk),
            )
        for name, calls in pairs.items():
            times: list[list[float]] = [[], []]
            with torch.no_grad():
                for call in calls:  # warm-up
                    call()
                for _ in range(repeats):
                    for side, call in enumerate(calls):
                        start = time.perf_counter()
                        call()
                        times[side].append(time.perf_counter() - start)
            fla_ms, zoo_ms = (1000 * statistics.median(side) for side in times)
            print(f"{length:>6}  {name:18s} {fla_ms:9.1f} {zoo_ms:9.1f}  {zoo_ms / fla_ms:.2f}x")


def compare_mamba3(mamba_root: Path, gen: torch.Generator) -> None:
    """Mamba-3's trapezoid against ``mamba_ssm``'s pure-PyTorch references, which live in its kernel
    tests (``mamba3_siso_step_ref`` and ``mamba3_siso_fwd_ref`` in ``tests/ops/triton/test_mamba3_siso.py``,
    ``mamba3_MIMO_step_ref`` in ``tests/ops/tilelang/test_mamba3_mimo.py``; fla has no ``fla/ops/mamba3``,
    its layer calls these kernels). Those files import Triton at the top, so only the reference
    functions are read out of them (by name, with ``ast``) and run. The zoo side: the layer's
    rotation (:func:`zoo.attention.variants.mamba3.rotate`, the angles summed as the layer sums them)
    and :class:`~zoo.attention.modules.trapezoid_recurrence.TrapezoidRecurrence` in chunks of 16
    tokens, from a state with a previous token (SISO) and from zeros (MIMO, rank 2). The SISO
    references keep their states in float32."""
    import ast
    import math
    from typing import Optional

    import einops

    from zoo.attention.modules.trapezoid_recurrence import TrapezoidRecurrence
    from zoo.attention.variants.mamba3 import rotate

    def functions(relative: str, *names: str) -> dict:
        path = mamba_root / relative
        tree = ast.parse(path.read_text())
        picked = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
        scope = {"torch": torch, "F": F, "math": math, "Optional": Optional, "Tuple": tuple, "Tensor": Tensor}
        scope |= {"repeat": einops.repeat, "rearrange": einops.rearrange}
        exec(compile(ast.Module(picked, type_ignores=[]), str(path), "exec"), scope)
        return scope

    siso = functions("tests/ops/triton/test_mamba3_siso.py", "_segsum", "mamba3_siso_step_ref", "mamba3_siso_fwd_ref")
    mimo = functions("tests/ops/tilelang/test_mamba3_mimo.py", "mamba3_MIMO_step_ref")
    batch, heads, steps, size, width, pairs = 2, 3, 64, 16, 8, 4
    randn = partial(torch.randn, generator=gen, dtype=torch.float64)

    def zoo_side(c, b, x, adt, dt, trap, c_bias, b_bias, angles, d, z, mix=None, start=None):
        """The zoo's output ``(B, T, H, P)`` and final state ``(B, H, P, N)`` in mamba's layout, from
        ``start``: angles, state ``(B, H, P, N)``, previous ``B`` ``(B, H, R, N)`` and values ``(B, H, R, P)``."""
        rank = c.shape[2]
        c, b = (einops.repeat(t, "b s r 1 n -> b h s r n", h=heads) for t in (c, b))
        turn = math.pi * torch.tanh(angles).transpose(1, 2) * dt.unsqueeze(-1)  # (B, H, T, n)
        before = torch.zeros_like(turn[:, :, 0]) if start is None else start[0]
        summed = torch.remainder(before.unsqueeze(-2) + turn.cumsum(-2), 2 * math.pi)
        q, k = rotate(c + c_bias.unsqueeze(-3), summed), rotate(b + b_bias.unsqueeze(-3), summed)
        v = x.transpose(1, 2).unsqueeze(-2) * (1 if mix is None else mix[0].unsqueeze(1))  # (B, H, T, R, P)
        previous_k = torch.zeros_like(k[:, :, :1]) if start is None else start[2].unsqueeze(2)
        previous_v = torch.zeros_like(v[:, :, :1]) if start is None else start[3].unsqueeze(2)
        lam = trap.sigmoid()
        keys, values = torch.cat([previous_k, k], 2), torch.cat([previous_v, v], 2)
        recurrence = TrapezoidRecurrence(q, keys, values, adt, lam * dt, (1 - lam) * dt)
        output, final = recurrence.chunkwise(16, None if start is None else start[1].mT, None)
        reads = output.unflatten(-1, (rank, -1)) + d[:, None, None, None] * v
        gate = F.silu(z.transpose(1, 2).unsqueeze(-2) * (1 if mix is None else mix[1].unsqueeze(1)))
        mixed = (reads * gate * (1 if mix is None else mix[2].unsqueeze(1))).sum(-2)
        return mixed.transpose(1, 2), final.mT

    def inputs(rank: int) -> tuple[Tensor, ...]:
        c, b = randn(batch, steps, rank, 1, size), randn(batch, steps, rank, 1, size)
        x, z = randn(batch, steps, heads, width), randn(batch, steps, heads, width)
        dt = F.softplus(randn(batch, heads, steps) - 1)
        adt = -dt * torch.rand(batch, heads, steps, generator=gen, dtype=torch.float64)
        trap, angles = randn(batch, heads, steps), randn(batch, steps, heads, pairs)
        c_bias, b_bias = randn(heads, rank, size), randn(heads, rank, size)
        return c, b, x, adt, dt, trap, c_bias, b_bias, angles, randn(heads), z

    c, b, x, adt, dt, trap, c_bias, b_bias, angles, d, z = inputs(1)
    angle = torch.rand(batch, heads, pairs, generator=gen, dtype=torch.float64) * 6
    start = (angle, randn(batch, heads, width, size), randn(batch, heads, 1, size), randn(batch, heads, 1, width))
    ours, final = zoo_side(c, b, x, adt, dt, trap, c_bias, b_bias, angles, d, z, start=start)
    start = (*start[:2], start[2].squeeze(2), start[3].squeeze(2))  # mamba's SISO layout: no rank axis
    siso_args = (c[:, :, 0], b[:, :, 0], x, adt, dt, trap, c_bias[:, 0], b_bias[:, 0], angles, d, z)
    for name, (reference, (_, state, _, _)) in {
        "mamba3_siso_step_ref": siso["mamba3_siso_step_ref"](*siso_args, Input_States=start),
        "mamba3_siso_fwd_ref": siso["mamba3_siso_fwd_ref"](*siso_args, Initial_States=start, dtype=torch.float64),
    }.items():
        differences = {"output": largest_difference(reference, ours), "state": largest_difference(state, final)}
        report(name, "TrapezoidRecurrence", **differences)

    c, b, x, adt, dt, trap, c_bias, b_bias, angles, d, z = inputs(2)
    mix = tuple(randn(heads, 2, width) for _ in range(3))
    ours, final = zoo_side(c, b, x, adt, dt, trap, c_bias, b_bias, angles, d, z, mix=mix)
    reference, (_, state, _, _) = mimo["mamba3_MIMO_step_ref"](
        c, b, x, adt, dt, trap, c_bias, b_bias, angles, mix[0], mix[2], D=d, Z=z, MIMO_Z=mix[1]
    )
    differences = {"output": largest_difference(reference, ours), "state": largest_difference(state, final)}
    report("mamba3_MIMO_step_ref", "TrapezoidRecurrence, rank 2", **differences)


def compare_based(naive: ModuleType, v: Tensor, gen: torch.Generator) -> None:
    """Based's Taylor linear attention (``based`` with ``window=0``, fla's layer: its feature map,
    the no-decay kernels and the normalization, :mod:`zoo.attention.variants.based`) against
    ``naive_parallel_based`` and ``naive_chunk_based`` (chunks of 32; both with ``scale`` ``d ** -0.5``
    and ``1e-6`` added to the denominator, which the zoo leaves out: it is at least 1/2)."""
    from zoo.attention.variants.based import BasedAttention

    q, k = (torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64) for _ in range(2))
    layer = BasedAttention(H * DV, H, feature_dim=DK, window=0)
    recurrence = layer.prepare(q, k, v, v)
    zoo_forms = {
        "Based (parallel)": recurrence.chunkwise(None, None, None)[0],
        "Based (chunks of 16)": recurrence.chunkwise(16, None, None)[0],
        "Based (recurrent)": recurrence.recurrent(None, None)[0],
    }
    references = {
        "naive_parallel_based": naive.naive_parallel_based(q, k, v, use_norm=True),
        "naive_chunk_based": naive.naive_chunk_based(q, k, v, chunk_size=32),
    }
    for name, reference in references.items():
        for label, output in zoo_forms.items():
            report(name, label, output=largest_difference(reference, layer.finish(output, v)))


def compare_hgrn(naive: ModuleType, gen: torch.Generator) -> None:
    """HGRN's elementwise recurrence ``h_t = exp(g_t) h_{t-1} + x_t`` per channel (``naive_recurrent_hgrn``,
    which casts to float32) on the decay kernels with each channel a head of width 1, the mapping
    ``mamba1`` runs its scan on. HGRN2's recurrence is GLA's (its keys ``1 - f_t``): fla has no
    ``fla/ops/hgrn2``, and :func:`compare_gla` covers that kernel."""
    channels = H * DV
    x = torch.randn(B, T, channels, generator=gen, dtype=torch.float64)
    g = F.logsigmoid(torch.randn(B, T, channels, generator=gen, dtype=torch.float64) + 2)
    start = torch.randn(B, channels, generator=gen, dtype=torch.float64)
    reference, final = naive.naive_recurrent_hgrn(x, g, initial_state=start, output_final_state=True)
    ones = torch.ones(B, channels, T, 1, dtype=torch.float64)
    per_channel = (ones, ones, x.mT.unsqueeze(-1), g.mT.unsqueeze(-1))
    for label, (output, state) in {
        "decay_chunkwise (width 1)": decay_chunkwise(*per_channel, chunk_size=16, initial_state=start[..., None, None]),
        "decay_recurrent (width 1)": decay_recurrent(*per_channel, state=start[..., None, None]),
    }.items():
        differences = {
            "output": largest_difference(reference, output[..., 0].mT),
            "state": largest_difference(final, state[..., 0, 0]),
        }
        report("naive_recurrent_hgrn", label, **differences)


def compare_mamba1(mamba_root: Path, gen: torch.Generator) -> None:
    """Mamba's selective scan against ``selective_scan_ref`` in ``mamba_ssm/ops/selective_scan_interface.py``
    (fla's Mamba layer calls the same scan). That file imports ``mamba_ssm``'s Triton layer norm and
    CUDA extension at the top, so it cannot be imported alone: the function is read out of it (by
    name, with ``ast``) and run; it computes in float32 (its state takes ``A``'s dtype: float32 here). The zoo side: ``mamba1``'s
    :meth:`~zoo.attention.variants.mamba1.Mamba1Attention.prepare` (step sizes, decays, the skip),
    its forms, and the SiLU gate, on the same convolved ``x``, ``B``, ``C`` and ``z``."""
    import ast

    import einops

    from zoo.attention.variants.mamba1 import Mamba1Attention

    path = mamba_root / "mamba_ssm" / "ops" / "selective_scan_interface.py"
    if not path.exists():
        print(f"mamba1: no {path} (git archive HEAD mamba_ssm/ops); skipped")
        return
    tree = ast.parse(path.read_text())
    picked = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "selective_scan_ref"]
    scope = {"torch": torch, "F": F, "rearrange": einops.rearrange, "repeat": einops.repeat}
    exec(compile(ast.Module(picked, type_ignores=[]), str(path), "exec"), scope)
    torch.manual_seed(0)
    layer = Mamba1Attention(H * DV // 2, 1, d_state=DK).double()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    channels = layer.num_heads
    x, z = (torch.randn(B, channels, T, generator=gen, dtype=torch.float64) for _ in range(2))
    b, c = (torch.randn(B, DK, T, generator=gen, dtype=torch.float64) for _ in range(2))
    delta = layer.dt_proj.weight @ layer.dt_down(x.mT).mT  # (B, channels, T), the bias added by the reference
    reference, last = scope["selective_scan_ref"](
        x,
        delta,
        -layer.A_log.exp().float(),
        b,
        c,
        layer.D,
        z,
        layer.dt_proj.bias,
        delta_softplus=True,
        return_last_state=True,
    )
    with torch.no_grad():
        recurrence = layer.prepare(c.mT.unsqueeze(1), b.mT.unsqueeze(1), x.unsqueeze(-1), x)
        for label, (output, state) in {
            "mamba1 (chunks of 16)": recurrence.chunkwise(16, None, None),
            "mamba1 (parallel)": recurrence.chunkwise(None, None, None),
            "mamba1 (recurrent)": recurrence.recurrent(None, None),
        }.items():
            ours = ((output + recurrence.skip) * F.silu(z.unsqueeze(-1)))[..., 0]
            differences = {
                "output": largest_difference(reference, ours),
                "state": largest_difference(last, state[..., 0]),
            }
            report("selective_scan_ref", label, **differences)


def compare_dsa(naive: ModuleType, gen: torch.Generator) -> None:
    """fla's ``naive_dsa_indexer`` and ``naive_dsa`` (DeepSeek Sparse Attention) against the zoo's ``dsa``
    layer: the layer's index queries, keys and head weights, its heads' MLA queries, keys and values
    (up-projected from the latents) go to fla, whose output passes through the layer's ``out_proj``. fla
    scores in float32 and breaks ties by ``topk`` (the zoo: float64, the earlier key), so the selections
    are compared as sets, and the outputs twice: fla's own selection and the zoo's handed to fla."""
    from zoo.attention.contract.context import AttentionContext
    from zoo.attention.contract.masking import causal_mask
    from zoo.attention.modules.lightning_indexer import top_k_selection
    from zoo.attention.variants.dsa import DeepSeekSparseAttention

    topk, width = 16, 32
    with torch.random.fork_rng():  # the layer's initialization drawn from ``gen`` too
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
        layer = DeepSeekSparseAttention(width, 4, index_topk=topk, q_lora_rank=16, index_heads=4, index_head_dim=16)
    layer = layer.double().eval()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=gen, dtype=parameter.dtype))
        x = torch.randn(B, T, width, generator=gen, dtype=torch.float64)
        context = AttentionContext(is_causal=True)
        output = layer.attend(x, context).output
        queries, down, _ = layer._down(x, context, None)
        latent, rope_key = layer._latents(down, 0, context)
        qn, qr = layer._queries(queries, 0, context)
        key_up, value_up = layer._up()
        keys = torch.cat(
            [torch.einsum("blr,hdr->bhld", latent, key_up), rope_key.unsqueeze(1).expand(-1, layer.num_heads, -1, -1)],
            dim=-1,
        )
        values = torch.einsum("blr,hdr->bhld", latent, value_up)
        indexer = layer.indexer
        q_idx = indexer.queries(layer.q_norm(queries), layer.rotary, 0, context).transpose(1, 2)
        k_idx = indexer.keys(x, layer.rotary, 0, context)
        w_idx = indexer.head_weights(x)
        scores = indexer.scores(x, layer.q_norm(queries), k_idx, layer.rotary, 0, context)
        chosen = top_k_selection(scores, causal_mask(T, T), topk).squeeze(1) & causal_mask(T, T)
        positions = torch.where(chosen, torch.arange(T), T).sort(-1).values[..., :topk]
        ours = positions.masked_fill(positions == T, -1)
        theirs = naive.naive_dsa_indexer(q_idx, k_idx, w_idx, topk=topk, activation="relu")
        rows = zip(ours.flatten(0, 1), theirs.flatten(0, 1), scores.flatten(0, 1), strict=True)
        # per query: the same keys; else the same multiset of scores (keys tied at the cut, ReLU's zeros)
        same, tied = 0, 0
        for a, b, row in rows:
            a, b = a[a >= 0], b[b >= 0]
            same += set(a.tolist()) == set(b.tolist())
            tied += torch.allclose(row[a].sort().values, row[b].sort().values, atol=1e-6, rtol=0)
        q, k, v = (fla_layout(t) for t in (torch.cat([qn, qr], -1), keys, values))
        projected = {}
        for label, indices in (("fla's selection", theirs), ("zoo's selection", ours)):
            heads = naive.naive_dsa(q, k, v, None, None, indices=indices, topk=topk, scale=layer.scale)
            projected[label] = layer.out_proj(heads.double().flatten(-2))
    report(
        "naive_dsa_indexer + naive_dsa",
        "dsa (layer)",
        **{f"output ({label})": largest_difference(value, output) for label, value in projected.items()},
        selection=f"{B * T - same} of {B * T} queries pick other keys, {B * T - tied} at other scores",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fla_root", type=Path, help="an unpacked fla-core wheel: the folder holding fla/ops")
    parser.add_argument("--site", type=Path, default=None, help="a folder holding einops, put on the import path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time", type=int, nargs="*", default=[], metavar="LENGTH", help="also time chunked forms")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each form and length")
    parser.add_argument("--mamba", type=Path, default=None, help="a state-spaces/mamba tree: compare Mamba-3 too")
    args = parser.parse_args()
    if args.site is not None:
        sys.path.insert(0, str(args.site))

    gen = torch.Generator().manual_seed(args.seed)
    q, v = (torch.randn(B, H, T, d, generator=gen, dtype=torch.float64) for d in (DK, DV))
    k = F.normalize(torch.randn(B, H, T, DK, generator=gen, dtype=torch.float64), dim=-1)
    beta = torch.rand(B, H, T, generator=gen, dtype=torch.float64)
    state = torch.randn(B, H, DK, DV, generator=gen, dtype=torch.float64)
    print(f"float64 inputs, B={B}, H={H}, T={T}, dk={DK}, dv={DV}: largest |fla - zoo| (of largest |zoo|)")

    compare_simple_gla(load_naive(args.fla_root, "simple_gla"), q, k, v, state, gen)
    compare_lightning_attn(load_naive(args.fla_root, "simple_gla"), q, k, v, state)
    compare_gla(load_naive(args.fla_root, "gla"), q, k, v, state, gen)
    compare_delta_rule(load_naive(args.fla_root, "delta_rule"), q, k, v, state, beta)
    compare_gated_delta_rule(load_naive(args.fla_root, "gated_delta_rule"), q, k, v, state, beta, gen)
    newer = {
        "kda": lambda naive: compare_kda(naive, q, k, v, state, beta, gen),
        "generalized_delta_rule/dplr": lambda naive: compare_rwkv7(naive, q, k, v, state, gen),
        "gated_delta_product": lambda naive: compare_gated_delta_product(naive, q, state, gen),
        "gdn2": lambda naive: compare_gdn2(naive, q, k, v, state, gen),
        "comba": lambda naive: compare_comba(naive, q, k, v, state, beta, gen),
        "mesa_net": lambda naive: compare_mesa_net(naive, q, k, v, state, beta, gen),
        "path_attn": lambda naive: compare_path_attn(naive, q, k, v, gen),
        "deltaformer": lambda naive: compare_deltaformer(naive, q, k, v, beta),
        "log_linear_attn": lambda naive: compare_log_linear_attn(naive, q, k, v, gen),
        "gsa": lambda naive: compare_gsa(naive, q, k, v, gen),
        "dsa": lambda naive: compare_dsa(naive, gen),
    }
    for family, compare in newer.items():
        if (args.fla_root / "fla" / "ops" / family / "naive.py").exists():
            compare(load_naive(args.fla_root, family))
        else:
            print(f"{family}: no fla/ops/{family}/naive.py under {args.fla_root} (an older fla); skipped")
    if (args.fla_root / "fla" / "ops" / "rwkv6" / "recurrent_naive.py").exists():
        compare_rwkv6(args.fla_root, q, k, v, state, gen)
    for family, compare_older in {
        "based": lambda naive: compare_based(naive, v, gen),
        "hgrn": lambda naive: compare_hgrn(naive, gen),
    }.items():
        if (args.fla_root / "fla" / "ops" / family / "naive.py").exists():
            compare_older(load_naive(args.fla_root, family))
    if args.mamba is not None:
        compare_mamba3(args.mamba, gen)
        compare_mamba1(args.mamba, gen)
    if args.time:
        time_chunkwise(args.fla_root, args.time, args.repeats, gen)


if __name__ == "__main__":
    main()
