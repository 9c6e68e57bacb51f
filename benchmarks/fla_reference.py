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
naive file) and ``fla/ops/gated_delta_product/naive.py``. A family whose file the tree lacks is
reported as missing and skipped.

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
)

B, H, T, DK, DV = 2, 3, 128, 16, 16


def load_naive(root: Path, family: str) -> ModuleType:
    """Load ``fla/ops/<family>/naive.py`` under ``root`` as a standalone module."""
    path = root / "fla" / "ops" / family / "naive.py"
    spec = importlib.util.spec_from_file_location(f"fla_naive_{family.replace('/', '_')}", path)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fla_root", type=Path, help="an unpacked fla-core wheel: the folder holding fla/ops")
    parser.add_argument("--site", type=Path, default=None, help="a folder holding einops, put on the import path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time", type=int, nargs="*", default=[], metavar="LENGTH", help="also time chunked forms")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each form and length")
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
    compare_gla(load_naive(args.fla_root, "gla"), q, k, v, state, gen)
    compare_delta_rule(load_naive(args.fla_root, "delta_rule"), q, k, v, state, beta)
    compare_gated_delta_rule(load_naive(args.fla_root, "gated_delta_rule"), q, k, v, state, beta, gen)
    newer = {
        "kda": lambda naive: compare_kda(naive, q, k, v, state, beta, gen),
        "generalized_delta_rule/dplr": lambda naive: compare_rwkv7(naive, q, k, v, state, gen),
        "gated_delta_product": lambda naive: compare_gated_delta_product(naive, q, state, gen),
    }
    for family, compare in newer.items():
        if (args.fla_root / "fla" / "ops" / family / "naive.py").exists():
            compare(load_naive(args.fla_root, family))
        else:
            print(f"{family}: no fla/ops/{family}/naive.py under {args.fla_root} (an older fla); skipped")
    if args.time:
        time_chunkwise(args.fla_root, args.time, args.repeats, gen)


if __name__ == "__main__":
    main()
