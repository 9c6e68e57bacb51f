"""Compare the zoo's MoBA (``zoo.attention.variants.moba``) with MoonshotAI's own reference,
``moba/moba_naive.py``, on CPU.

Usage: python benchmarks/moba_reference.py MOBA_ROOT [--seed 0] [--time LENGTH ...]

``MOBA_ROOT`` is a fetched copy of ``MoonshotAI/MoBA`` holding ``moba/moba_naive.py``::

    git -C MoBA archive HEAD moba | tar -x -C /tmp/moba
    python benchmarks/moba_reference.py /tmp/moba

No MoBA code is kept in this project: ``moba_naive.py`` (which imports only ``torch`` and ``math``)
is loaded on its own (``importlib.util.spec_from_file_location``), so the package's flash-attention
kernels are never imported.

The comparison: two sequences of different lengths packed as MoBA's ``cu_seqlens`` takes them
(``(S, H, D)``), and each alone through the zoo's gate (:func:`zoo.attention.variants.moba.moba_blocks`)
and gathered attention (:func:`zoo.attention.kernels.selection.selected_block_attention`), for
several block sizes and ``top_k``; the largest difference of the outputs is printed. The reference
works in float32, so differences near 1e-6 are agreement.

``--time LENGTH ...`` then times one sequence's forward pass (8 heads of 64, blocks of 64,
``top_k`` 3; median of ``--repeats``) in MoBA's naive reference, which forms the dense ``(L, L)``
scores and masks them, and in the zoo's gathered form.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from zoo.attention.kernels.selection import selected_block_attention
from zoo.attention.variants.moba import moba_blocks

HEADS, DIM = 4, 32
LENGTHS = (300, 173)


def load_naive(root: Path) -> ModuleType:
    """``moba/moba_naive.py`` under ``root`` as a standalone module."""
    path = root / "moba" / "moba_naive.py"
    spec = importlib.util.spec_from_file_location("moba_naive", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zoo_moba(q: Tensor, k: Tensor, v: Tensor, block_size: int, top_k: int) -> Tensor:
    """The zoo's MoBA on one sequence in MoBA's layout ``(L, H, D)``."""
    q, k, v = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # (1, H, L, D)
    blocks = moba_blocks(q, k, block_size, top_k, None)
    output, _ = selected_block_attention(q, k, v, blocks, block_size=block_size, key_padding=None, scale=DIM**-0.5)
    return output.squeeze(0).transpose(0, 1)


@torch.no_grad()
def compare(naive: ModuleType, gen: torch.Generator) -> None:
    total = sum(LENGTHS)
    q, k, v = (torch.randn(total, HEADS, DIM, generator=gen) for _ in range(3))
    bounds = torch.tensor([0, LENGTHS[0], total])
    print(f"float32, sequences of {LENGTHS} tokens, {HEADS} heads of {DIM}: largest |MoBA - zoo| (of largest |zoo|)")
    for block_size, top_k in ((16, 3), (32, 2), (64, 4), (7, 5)):
        theirs = naive.moba_attn_varlen_naive(q, k, v, bounds, max(LENGTHS), block_size, top_k)
        ours = torch.cat([zoo_moba(q[a:b], k[a:b], v[a:b], block_size, top_k) for a, b in zip(bounds[:-1], bounds[1:])])
        print(
            f"moba_attn_varlen_naive vs moba_blocks + selected_block_attention, block {block_size:>2}, top_k {top_k}: "
            f"{(theirs - ours).abs().max():.1e} (of {ours.abs().max():.1e})"
        )


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


@torch.no_grad()
def time_forms(naive: ModuleType, lengths: list[int], repeats: int, gen: torch.Generator) -> None:
    heads, dim, block_size, top_k = 8, 64, 64, 3
    print(f"\nthreads {torch.get_num_threads()}, float32, {heads} heads of {dim}, blocks of {block_size}, top_k {top_k}, "
          f"forward: median of {repeats} (ms)")  # fmt: skip
    print(f"{'length':>6} {'MoBA naive':>11} {'zoo':>9}")
    for length in lengths:
        q, k, v = (torch.randn(length, heads, dim, generator=gen) for _ in range(3))
        bounds = torch.tensor([0, length])
        theirs = median_ms(partial(naive.moba_attn_varlen_naive, q, k, v, bounds, length, block_size, top_k), repeats)
        ours = median_ms(partial(zoo_moba, q, k, v, block_size, top_k), repeats)
        print(f"{length:>6} {theirs:11.1f} {ours:9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("moba_root", type=Path, help="a fetched MoBA tree: the folder holding moba/moba_naive.py")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time", type=int, nargs="*", default=[], metavar="LENGTH", help="also time both forms")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each form and length")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    naive = load_naive(args.moba_root)
    compare(naive, gen)
    if args.time:
        time_forms(naive, args.time, args.repeats, gen)


if __name__ == "__main__":
    main()
