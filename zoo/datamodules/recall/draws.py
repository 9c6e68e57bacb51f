"""The draws every recall generator needs, each from a NumPy ``Generator`` keyed by the data's
seed, the split and the set (never a global random state), so that every process, platform and
run draws the same data; and the two vectorised samplers without replacement that Zoology's
100,000-row MQAR sets and its power-law key positions need.
"""

from __future__ import annotations

import numpy as np

from zoo.datamodules.base import SPLITS

__all__ = ["distinct_integers", "shared_generator", "split_generator", "weighted_draws_without_replacement"]

_SPLIT_CODES = {split: code for code, split in enumerate(SPLITS)}


def split_generator(generator_seed: int, split: str, *keys: int) -> np.random.Generator:
    """The generator of one set of ``split``: ``generator_seed``'s stream spawned with the key
    ``(split's code, *keys)`` (NumPy's ``SeedSequence`` spawn keys, which tell ``(0,)`` from
    ``(0, 0)`` where a plain list of seeds would not), so that splits and sets draw apart and every
    process draws the same."""
    return np.random.default_rng(np.random.SeedSequence(generator_seed, spawn_key=(_SPLIT_CODES[split], *keys)))


def shared_generator(generator_seed: int) -> np.random.Generator:
    """The generator of what every split shares (MAD's memorization map), apart from every split's."""
    return np.random.default_rng(np.random.SeedSequence(generator_seed, spawn_key=(len(SPLITS),)))


def distinct_integers(rng: np.random.Generator, rows: int, k: int, n: int) -> np.ndarray:
    """``(rows, k)`` integers of ``[0, n)``, each row ``k`` distinct ones in uniformly random order:
    a uniform ordered sample without replacement per row, as ``rng.choice(n, k, replace=False)``
    draws one.

    Floyd's algorithm (Bentley and Floyd, 1987), run on all rows at once: for ``j = n - k ... n - 1``
    draw ``t`` in ``[0, j]`` and keep ``t``, or ``j`` when ``t`` is already kept; that makes a
    uniform ``k``-subset, which a per-row shuffle puts in uniform order. ``rng.choice`` per row
    would do the same one row at a time, eight times slower for Zoology's 100,000 rows.
    """
    chosen = np.empty((rows, k), dtype=np.int64)
    for i, j in enumerate(range(n - k, n)):
        draw = rng.integers(0, j + 1, size=rows)
        taken = (chosen[:, :i] == draw[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, j, draw)
    return rng.permuted(chosen, axis=1)


def weighted_draws_without_replacement(rng: np.random.Generator, rows: int, k: int, weights: np.ndarray) -> np.ndarray:
    """``(rows, k)`` indices of ``weights``, each row drawn without replacement with probabilities
    proportional to ``weights``, in the order drawn: the first index is drawn from all weights, the
    next from the weights left, and so on (what ``numpy.random.choice(len(weights), k,
    replace=False, p=weights / weights.sum())`` draws).

    The Gumbel top-k trick (Vieira, 2014; Kool et al., 2019): the ``k`` largest of
    ``log(weights) + Gumbel noise``, largest first, are such a draw; it runs on all rows at once.
    """
    keys = np.log(weights) + rng.gumbel(size=(rows, len(weights)))
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)
