"""The six synthetic tasks of MAD, the Mechanistic Architecture Design suite (Poli et al., 2024,
*Mechanistic Design and Scaling of Hybrid Architectures*), generated as its code does
(``mad/data/instances.py`` of athms/mad-lab), with MAD's benchmark settings: multi-query recall,
no noise unless the task names it.

Each function draws ``num_examples`` examples from ``rng`` and returns
:class:`~zoo.datamodules.recall.base.Examples`. Which positions are trained and which are scored
follows MAD's code, task by task:

* **in-context recall** (``in_context_recall``): ``L / 2 - 1`` key-value pairs, each key drawn
  uniformly (with repeats) from the first half of the ids, its value fixed within the example
  (drawn uniformly from the second half at its first occurrence), then one more pair whose key is
  a uniform choice among the keys shown. The model reads the first ``L - 1`` tokens. MAD **trains
  on every next token** (``targets`` are the next ids) and **scores the values of keys seen
  before** (``scored``: the position of each repeated key, and of the last key);
* **noisy in-context recall** (the same function with ``noise_vocab_size`` and ``frac_noise``):
  the last ``noise_vocab_size`` ids are noise, and each pair but one chosen at random becomes two
  noise ids with probability ``frac_noise``. Noise is trained on as next tokens, never scored,
  and a noise pair presents no key;
* **fuzzy in-context recall** (``fuzzy_in_context_recall``): keys and values are runs of 1 to
  ``k_motif_size`` (``v_motif_size``) distinct ids, all sizes equally likely; test keys all have
  ``k_motif_size`` ids. A probe pair is inserted at a random point (unless its key comes up by
  itself first) and asked again at the end; the example is left-padded with id ``V - 1`` to ``L
  + 1`` tokens and the model reads the first ``L``. Trained on every next token; scored on each
  id of the values of repeated keys;
* **memorization** (``memorization``): ``L / 2`` pairs ``key, insert`` over a fixed key-value map
  (:func:`memorization_map`, shared by every split); the target at each ``insert`` (id ``V - 1``)
  is the key's value, the loss and the score count only those;
* **compression** (``compression``): ``L - 1`` uniform ids then the compression id ``V - 1``;
  the targets are the inputs themselves, every position scored. MAD trains it as an
  auto-encoder: its model encodes the sequence, pools the last position and decodes every
  position from that one vector, so a causal language model that reads the inputs would copy
  them trivially;
* **selective copying** (``selective_copying``): ``n = num_tokens_to_copy`` ids, blanks (id
  ``V - 2``) inserted among them (each blank before a uniformly chosen one of the ``n``), the copy
  id ``V - 1`` and ``n`` more blanks; the targets of those last blanks are the ``n`` ids in order,
  the only positions trained and scored.

Where the zoo departs from MAD's code: the draws come from one seeded NumPy ``Generator`` per set
and are made for all examples at once where the task allows (MAD calls its generator once per
example, and its selective copying draws the blanks' places from the global ``np.random`` state);
the distributions are MAD's. One case MAD's code cannot produce is refused by redrawing: a noisy
example whose every pair became noise (MAD's generator then fails).
"""

from __future__ import annotations

import numpy as np

from zoo.datamodules.recall.base import IGNORE_INDEX, Examples
from zoo.errors import DataError

__all__ = [
    "compression",
    "fuzzy_in_context_recall",
    "in_context_recall",
    "memorization",
    "memorization_map",
    "selective_copying",
]


def _next_token_examples(sequences: np.ndarray, scored_answers: np.ndarray, vocab_size: int) -> Examples:
    """Examples read as a language model reads them: ``inputs = sequences[:, :-1]``, ``targets =
    sequences[:, 1:]``, ``scored = scored_answers[:, 1:]`` (the answers' own positions, shifted onto
    the positions that predict them)."""
    return Examples.from_arrays(sequences[:, :-1], sequences[:, 1:], scored_answers[:, 1:], vocab_size)


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """``(N, P)`` booleans: whether ``keys[n, p]`` is the first occurrence of its value in row ``n``."""
    order = np.argsort(keys, axis=1, kind="stable")
    ordered = np.take_along_axis(keys, order, axis=1)
    first_in_order = np.ones_like(ordered, dtype=bool)
    first_in_order[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.empty_like(first_in_order)
    np.put_along_axis(first, order, first_in_order, axis=1)
    return first


def in_context_recall(
    rng: np.random.Generator,
    num_examples: int,
    vocab_size: int = 16,
    seq_len: int = 128,
    noise_vocab_size: int = 0,
    frac_noise: float = 0.0,
) -> Examples:
    """In-context recall, or noisy in-context recall with ``frac_noise > 0`` (module docstring):
    ``seq_len - 1`` tokens an example.

    Raises:
        DataError: an odd ``seq_len``, a vocabulary without a key and a value beside the noise, or
            noise without noise ids.
    """
    if seq_len % 2 or seq_len < 4:
        raise DataError(f"In-context recall needs an even seq_len of at least 4 (pairs of two tokens), got {seq_len}.")
    non_special = vocab_size - noise_vocab_size
    if non_special < 2:
        raise DataError(
            f"vocab_size={vocab_size} leaves {non_special} ids beside {noise_vocab_size} noise ids; "
            f"recall needs at least a key and a value."
        )
    if not 0 <= frac_noise < 1 or (frac_noise > 0 and noise_vocab_size < 1):
        raise DataError(f"frac_noise must be in [0, 1) and needs noise_vocab_size > 0, got {frac_noise}.")
    key_count = non_special // 2
    pairs = seq_len // 2 - 1
    rows = np.arange(num_examples)[:, None]

    noise = np.zeros((num_examples, pairs), dtype=bool)
    if frac_noise > 0:
        redraw = np.ones(num_examples, dtype=bool)
        while redraw.any():  # MAD keeps one pair (the one at a random index of L / 2) free of noise
            count = int(redraw.sum())
            kept = rng.integers(0, seq_len // 2, size=count)
            noise[redraw] = (rng.random((count, pairs)) < frac_noise) & (np.arange(pairs) != kept[:, None])
            redraw = noise.all(axis=1)

    keys = rng.integers(0, key_count, size=(num_examples, pairs))
    value_of = rng.integers(key_count, non_special, size=(num_examples, key_count))
    values = value_of[rows, keys]
    presented = np.where(noise, key_count + np.arange(pairs), keys)  # a noise pair presents no key
    repeated = ~_first_occurrences(presented) & ~noise

    shown = np.zeros((num_examples, key_count), dtype=bool)
    example, slot = np.nonzero(~noise)
    shown[example, keys[example, slot]] = True
    probe = np.argmax(np.where(shown, rng.random((num_examples, key_count)), -1.0), axis=1)

    body = np.stack([keys, values], axis=2)
    if frac_noise > 0:
        body[noise] = rng.integers(non_special, vocab_size, size=(int(noise.sum()), 2))
    sequences = np.concatenate(
        [body.reshape(num_examples, -1), probe[:, None], value_of[rows[:, 0], probe][:, None]], 1
    )
    answers = np.zeros_like(sequences, dtype=bool)
    answers[:, 1:-2:2] = repeated
    answers[:, -1] = True
    return _next_token_examples(sequences, answers, vocab_size)


def _distinct_runs(uniforms: np.ndarray, count: int) -> np.ndarray:
    """Runs of distinct ids of ``[0, count)``: ``uniforms[..., j]`` in ``[0, 1)`` picks the ``j``-th
    id uniformly among those not yet in its run, so that each prefix of a run is a uniform ordered
    draw without replacement (an element of MAD's ``itertools.permutations``)."""
    runs = np.empty(uniforms.shape, dtype=np.int64)
    for j in range(uniforms.shape[-1]):
        pick = np.floor(uniforms[..., j] * (count - j)).astype(np.int64)
        for taken in np.sort(runs[..., :j], axis=-1).transpose(-1, *range(runs.ndim - 1)):
            pick += pick >= taken  # skip the ids already taken, smallest first
        runs[..., j] = pick
    return runs


def fuzzy_in_context_recall(
    rng: np.random.Generator,
    num_examples: int,
    vocab_size: int = 16,
    seq_len: int = 128,
    k_motif_size: int = 3,
    v_motif_size: int = 3,
    training: bool = True,
) -> Examples:
    """Fuzzy in-context recall (module docstring): ``seq_len`` tokens an example; ``training``
    draws keys of every size, otherwise keys of ``k_motif_size`` ids, as MAD's test sets.

    The random draws are made for all examples at once; the pairs are then laid out example by
    example, exactly as MAD's loop lays them out.

    Raises:
        DataError: too short a sequence for the motifs, or too few ids for keys of ``k_motif_size``
            distinct ids and values of ``v_motif_size``.
    """
    key_count = (vocab_size - 1) // 2
    value_count = vocab_size - 1 - key_count
    if key_count < k_motif_size or value_count < v_motif_size:
        raise DataError(
            f"vocab_size={vocab_size} gives {key_count} key ids and {value_count} value ids; fuzzy recall needs "
            f"{k_motif_size} and {v_motif_size} distinct ones."
        )
    if seq_len < 4 * (k_motif_size + v_motif_size):
        raise DataError(
            f"seq_len={seq_len} is too short for fuzzy recall with these motifs; use at least {4 * (k_motif_size + v_motif_size)}."
        )
    pad = vocab_size - 1
    slots = seq_len // 2 + 2  # more than the loop can lay out: every pair takes at least two tokens
    low_key_size = 1 if training else k_motif_size
    draws = {
        "key_size": rng.integers(low_key_size, k_motif_size + 1, size=(num_examples, slots + 1)),
        "value_size": rng.integers(1, v_motif_size + 1, size=(num_examples, slots + 1)),
        "key": _distinct_runs(rng.random((num_examples, slots + 1, k_motif_size)), key_count),
        "value": key_count + _distinct_runs(rng.random((num_examples, slots + 1, v_motif_size)), value_count),
        "probe_at": rng.random(num_examples),
    }
    lists = {name: array.tolist() for name, array in draws.items()}
    sequences = np.full((num_examples, seq_len + 1), pad, dtype=np.int64)
    answers = np.zeros((num_examples, seq_len + 1), dtype=bool)
    for n in range(num_examples):
        tokens, scored = _fuzzy_layout(*(lists[name][n] for name in draws), seq_len, k_motif_size + v_motif_size)
        sequences[n, seq_len + 1 - len(tokens) :] = tokens
        answers[n, seq_len + 1 - len(tokens) :] = scored
    return _next_token_examples(sequences, answers, vocab_size)


def _fuzzy_layout(
    key_sizes: list[int],
    value_sizes: list[int],
    keys: list[list[int]],
    values: list[list[int]],
    probe_at: float,
    seq_len: int,
    longest_pair: int,
) -> tuple[list[int], list[bool]]:
    """One fuzzy example's tokens and which are scored answers, before padding: MAD's loop, reading
    slot ``m``'s draws from the lists (slot 0's are the probe pair's)."""
    probe_key = tuple(keys[0][: key_sizes[0]])
    probe_value = values[0][: value_sizes[0]]
    probe_length = len(probe_key) + len(probe_value)
    probe_index = int(probe_at * (seq_len - 2 * probe_length))
    probe_added = False
    value_of: dict[tuple[int, ...], list[int]] = {probe_key: probe_value}
    presented: set[tuple[int, ...]] = set()
    tokens: list[int] = []
    scored: list[bool] = []
    for m in range(1, len(key_sizes)):
        if len(tokens) >= seq_len - probe_length - longest_pair:
            break
        if len(tokens) >= probe_index and not probe_added:  # this slot's draws are discarded, as in MAD
            tokens += [*probe_key, *probe_value]
            scored += [False] * probe_length
            presented.add(probe_key)
            probe_added = True
            continue
        key = tuple(keys[m][: key_sizes[m]])
        probe_added |= key == probe_key
        value = value_of.setdefault(key, values[m][: value_sizes[m]])
        tokens += [*key, *value]
        scored += [False] * len(key) + [key in presented] * len(value)
        presented.add(key)
    tokens += [*probe_key, *probe_value]
    scored += [False] * len(probe_key) + [True] * len(probe_value)
    return tokens, scored


def memorization_map(rng: np.random.Generator, vocab_size: int) -> np.ndarray:
    """MAD's fixed key-value map for memorization: ``map[k]`` is key ``k``'s value, keys the first
    ``(V - 1) // 2`` ids, values drawn from the rest but the insert id ``V - 1``, no two alike (a
    uniformly random injection, as MAD's zip of two shuffled lists)."""
    key_count = (vocab_size - 1) // 2
    return key_count + rng.permutation(vocab_size - 1 - key_count)[:key_count]


def memorization(
    rng: np.random.Generator, num_examples: int, vocab_size: int, seq_len: int, value_of: np.ndarray
) -> Examples:
    """Memorization (module docstring) over the map ``value_of`` (:func:`memorization_map`):
    ``2 * (seq_len // 2)`` tokens an example.

    Raises:
        DataError: a map of another vocabulary.
    """
    if len(value_of) != (vocab_size - 1) // 2:
        raise DataError(
            f"The memorization map holds {len(value_of)} keys, not the {(vocab_size - 1) // 2} of vocab_size={vocab_size}."
        )
    keys = rng.integers(0, len(value_of), size=(num_examples, seq_len // 2))
    inputs = np.stack([keys, np.full_like(keys, vocab_size - 1)], axis=2).reshape(num_examples, -1)
    targets = np.stack([np.full_like(keys, IGNORE_INDEX), value_of[keys]], axis=2).reshape(num_examples, -1)
    return Examples.from_arrays(inputs, targets, targets != IGNORE_INDEX, vocab_size)


def compression(rng: np.random.Generator, num_examples: int, vocab_size: int = 16, seq_len: int = 32) -> Examples:
    """Compression (module docstring): ``seq_len`` tokens, the targets the inputs, all scored."""
    if vocab_size < 2 or seq_len < 2:
        raise DataError(f"Compression needs vocab_size and seq_len of at least 2, got {vocab_size} and {seq_len}.")
    inputs = np.concatenate(
        [rng.integers(0, vocab_size - 1, size=(num_examples, seq_len - 1)), np.full((num_examples, 1), vocab_size - 1)],
        axis=1,
    )
    return Examples.from_arrays(inputs, inputs, np.ones_like(inputs, dtype=bool), vocab_size)


def selective_copying(
    rng: np.random.Generator, num_examples: int, vocab_size: int = 16, seq_len: int = 256, num_tokens_to_copy: int = 16
) -> Examples:
    """MAD's selective copying (module docstring): ``seq_len`` tokens an example.

    Raises:
        DataError: no room for the ids, the copy id and their copies, or no id to copy.
    """
    copies = num_tokens_to_copy
    if seq_len <= 2 * copies + 1:
        raise DataError(f"seq_len must exceed 2 * num_tokens_to_copy + 1 = {2 * copies + 1}, got {seq_len}.")
    if vocab_size < 3:
        raise DataError(
            f"Selective copying needs vocab_size >= 3 (ids to copy, the blank, the copy id), got {vocab_size}."
        )
    blank, copy = vocab_size - 2, vocab_size - 1
    data = rng.integers(0, blank, size=(num_examples, copies))
    blanks_before = rng.multinomial(seq_len - 2 * copies - 1, np.full(copies, 1 / copies), size=num_examples)
    positions = np.cumsum(blanks_before, axis=1) + np.arange(copies)
    inputs = np.full((num_examples, seq_len), blank, dtype=np.int64)
    np.put_along_axis(inputs, positions, data, axis=1)
    inputs[:, seq_len - copies - 1] = copy
    targets = np.full((num_examples, seq_len), IGNORE_INDEX, dtype=np.int64)
    targets[:, seq_len - copies :] = data
    return Examples.from_arrays(inputs, targets, targets != IGNORE_INDEX, vocab_size)
