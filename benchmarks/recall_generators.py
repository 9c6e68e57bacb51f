"""Compare the zoo's recall generators with the reference code's own: Zoology's MQAR and MAD's six
tasks, generated side by side and compared on their statistics.

Usage: python benchmarks/recall_generators.py ZOOLOGY_ROOT MAD_ROOT [--examples 3000] [--seed 0]

``ZOOLOGY_ROOT`` is a checkout of HazyResearch/zoology (the folder that holds ``zoology/``),
``MAD_ROOT`` one of athms/mad-lab (the folder that holds ``mad/`` and ``configs/``), for example
from the mirrors the fetch tool brings::

    mkdir -p /tmp/ref/zoology /tmp/ref/mad-lab
    git --git-dir=/work/.mirror/HazyResearch+zoology/repo archive HEAD zoology | tar -x -C /tmp/ref/zoology
    git --git-dir=/work/.mirror/athms+mad-lab/repo archive HEAD mad configs | tar -x -C /tmp/ref/mad-lab
    python benchmarks/recall_generators.py /tmp/ref/zoology /tmp/ref/mad-lab

No reference code is kept in this project. Zoology's ``zoology.data.multiquery_ar`` is imported
from ``ZOOLOGY_ROOT`` (it needs ``pydantic``, which the zoo's environment has through its
dependencies); MAD's ``mad/data/instances.py`` is loaded on its own
(``importlib.util.spec_from_file_location``), so MAD's package, which imports its models and
``pandas``, is never imported, and its settings are read from ``configs/tasks/*.yml``.

The streams differ (the zoo draws from seeded ``Generator`` objects for all examples at once, the
references per example or from the global ``np.random`` state; the references draw with ``seed + 1``, so that no stream is
shared by chance), so examples are compared by their statistics: id ranges, how many positions
are labelled or scored and where, the MQAR query slots' distribution, the tokens' histograms. A
``p = ...`` agreement is the chi-square test that both samples come from one distribution
(two-sample, over the histogram's cells): a correct generator gives p values spread over (0, 1),
and one far below 0.001 would mean the generators differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
import yaml

from zoo.datamodules.recall import PAPER_GRID, mad_setting, mad_settings, multiquery_ar
from zoo.datamodules.recall.mad import MAD_TASKS
from zoo.datamodules.recall.mad_tasks import memorization_map

VOCAB = 8_192
PICKER_SEED = 20_240_229
"""Seeds the picks of :func:`one_per_example`, apart from every generator's seed (a pick drawn from
the stream that made the data would be correlated with it)."""
MAD_SETTINGS = (
    ("in_context_recall", "baseline"),
    ("in_context_recall", "seq_len=512"),
    ("noisy_in_context_recall", "baseline"),
    ("noisy_in_context_recall", "frac_noise=0.8"),
    ("fuzzy_in_context_recall", "baseline"),
    ("fuzzy_in_context_recall", "vocab_size=32"),
    ("memorization", "baseline"),
    ("memorization", "vocab_size=1024"),
    ("compression", "baseline"),
    ("compression", "seq_len=128"),
    ("selective_copying", "baseline"),
    ("selective_copying", "num_tokens_to_copy=64"),
)
"""Each task's baseline and one harder setting (every setting of fuzzy recall at vocab_size=128
would take MAD's generator hours: it lists every ordered triple of keys for each example)."""


def two_sample_p(first: np.ndarray, second: np.ndarray, cells: int) -> str:
    """``p = ...``, the chi-square test of homogeneity of two samples of integers in ``[0, cells)``,
    or ``one value`` when both samples hold the same single value."""
    table = np.stack([np.bincount(first, minlength=cells), np.bincount(second, minlength=cells)]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] == 1:
        return "one value"
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    degrees = torch.tensor((table.shape[1] - 1) / 2, dtype=torch.float64)
    return f"p = {float(torch.special.gammaincc(degrees, torch.tensor(statistic / 2, dtype=torch.float64))):.3f}"


def span(values: np.ndarray) -> str:
    return f"{values.min()}-{values.max()}"


class Table:
    """Rows of ``| task | setting | statistic | zoo | reference | agreement |``."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []

    def add(self, task: str, setting: str, statistic: str, zoo: Any, reference: Any, agreement: str = "") -> None:
        if not agreement:
            agreement = "same" if str(zoo) == str(reference) else "differs"
        self.rows.append((task, setting, statistic, str(zoo), str(reference), agreement))

    def print(self) -> None:
        print("| task | setting | statistic | zoo | reference | agreement |")
        print("|---|---|---|---|---|---|")
        for row in self.rows:
            print("| " + " | ".join(row) + " |")


# -- MQAR -------------------------------------------------------------------------------------------


def one_per_example(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """One of each row's ``values`` where ``where`` holds, picked uniformly: a sample independent
    across examples, as the chi-square test needs (the tokens of one example are not)."""
    scores = np.where(where, np.random.default_rng([PICKER_SEED]).random(where.shape), -1.0)
    return values[np.arange(len(values)), np.argmax(scores, axis=1)]


def in_range(zoo: np.ndarray, reference: np.ndarray, low: int, high: int) -> str:
    inside = all(low <= ids.min() and ids.max() < high for ids in (zoo, reference))
    return f"both in [{low}, {high})" if inside else f"NOT both in [{low}, {high})"


def mqar_statistics(inputs: np.ndarray, labels: np.ndarray, pairs: int) -> dict[str, np.ndarray]:
    """What an MQAR sample is made of, read from its tokens and labels alone: one entry per
    example, or per pair of each example."""
    keys, values = inputs[:, 0 : 2 * pairs : 2], inputs[:, 1 : 2 * pairs : 2]
    labelled = labels != -100
    rows, positions = np.nonzero(labelled)
    value_of = [dict(zip(k, v)) for k, v in zip(keys.tolist(), values.tolist())]
    answered = [value_of[n][inputs[n, p]] == labels[n, p] for n, p in zip(rows.tolist(), positions.tolist())]
    queried = [sorted(inputs[n, labelled[n]].tolist()) == sorted(keys[n].tolist()) for n in range(len(keys))]
    order = {(n, key): i for n, row in enumerate(keys.tolist()) for i, key in enumerate(row)}
    slots = np.full((len(keys), pairs), -1)
    for n, p in zip(rows.tolist(), positions.tolist()):
        slots[n, order[n, inputs[n, p]]] = (p - 2 * pairs) // 2
    region = np.arange(inputs.shape[1]) >= 2 * pairs
    everywhere = np.ones_like(slots, dtype=bool)
    return {
        "keys": keys,
        "values": values,
        "distinct": np.array([len(set(row)) == pairs for row in keys.tolist()]),
        "labelled": labelled.sum(axis=1),
        "first_token": (positions - 2 * pairs) % 2 == 0,
        "answered": np.array(answered),
        "queried": np.array(queried),
        "slots": slots,
        "any_slot": one_per_example(slots, everywhere),
        "any_distance": one_per_example(2 * pairs + 2 * slots - 2 * np.arange(pairs), everywhere),
        "any_filler": one_per_example(inputs, region & ~labelled),
    }


def compare_mqar(table: Table, zoology: Callable[..., Any], examples: int, seed: int) -> None:
    """Zoology's ``multiquery_ar`` against the zoo's, at each cell of the paper's grid."""
    half = VOCAB // 2
    for seq_len, pairs in PAPER_GRID:
        ours = multiquery_ar(np.random.default_rng(seed), examples, seq_len, pairs, vocab_size=VOCAB)
        theirs = zoology(
            vocab_size=VOCAB, num_examples=examples, input_seq_len=seq_len, seed=seed + 1, num_kv_pairs=pairs
        )
        z = mqar_statistics(ours.inputs.long().numpy(), ours.targets.long().numpy(), pairs)
        r = mqar_statistics(theirs.inputs.numpy(), theirs.labels.numpy(), pairs)
        slots = (seq_len - 2 * pairs) // 2
        add = partial(table.add, "mqar", f"L={seq_len}, pairs={pairs}")
        add("key ids", span(z["keys"]), span(r["keys"]), in_range(z["keys"], r["keys"], 1, half))
        add("value ids", span(z["values"]), span(r["values"]), in_range(z["values"], r["values"], half, VOCAB))
        for name, statistic in (
            ("examples whose keys are distinct", "distinct"),
            ("each key queried once", "queried"),
            ("label = the queried key's value", "answered"),
            ("labels on a slot's first token", "first_token"),
        ):
            add(name, f"{z[statistic].mean():.3f}", f"{r[statistic].mean():.3f}")
        add("labels per example", span(z["labelled"]), span(r["labelled"]))
        for i, name in ((0, "first pair's query slot"), (pairs - 1, "last pair's query slot")):
            zs, rs = z["slots"][:, i], r["slots"][:, i]
            add(f"{name}: mean (median)", f"{zs.mean():.2f} ({np.median(zs):.0f})",
                f"{rs.mean():.2f} ({np.median(rs):.0f})", two_sample_p(zs, rs, slots))  # fmt: skip
        for name, statistic, cells in (
            ("a random pair's query slot: mean", "any_slot", slots),
            ("a random pair's key-to-query distance: mean", "any_distance", seq_len),
        ):
            zs, rs = z[statistic], r[statistic]
            add(name, f"{zs.mean():.1f}", f"{rs.mean():.1f}", two_sample_p(zs, rs, cells))
        zf, rf = z["any_filler"], r["any_filler"]
        add("a random other query-region id: mean (64 bins)", f"{zf.mean():.0f}", f"{rf.mean():.0f}",
            two_sample_p(zf // 128, rf // 128, VOCAB // 128))  # fmt: skip


# -- MAD --------------------------------------------------------------------------------------------


def load_instances(root: Path) -> ModuleType:
    """MAD's ``mad/data/instances.py``, alone (it imports numpy only)."""
    path = root / "mad" / "data" / "instances.py"
    spec = importlib.util.spec_from_file_location("mad_instances", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAD_FILES = {
    "in_context_recall": "in-context-recall", "noisy_in_context_recall": "noisy-in-context-recall",
    "fuzzy_in_context_recall": "fuzzy-in-context-recall", "memorization": "memorization",
    "compression": "compression", "selective_copying": "selective-copying",
}  # fmt: skip
MAD_CONFIG_DEFAULTS = {
    "k_motif_size": 1, "v_motif_size": 1, "frac_noise": 0.0, "noise_vocab_size": 0, "num_tokens_to_copy": 0,
    "multi_query": True,
}  # fmt: skip
"""What ``MADConfig.instance_fn_kwargs`` passes a generator unless a setting says otherwise (the
generators' own defaults differ: in-context recall's ``noise_vocab_size`` is 16)."""
MAD_FUNCTIONS = {
    "in_context_recall": "generate_in_context_recall_instance",
    "noisy_in_context_recall": "generate_noisy_in_context_recall_instance",
    "fuzzy_in_context_recall": "generate_fuzzy_in_context_recall_instance",
    "memorization": "generate_memorization_instance",
    "compression": "generate_compression_instance",
    "selective_copying": "generate_selective_copying_instance",
}


def mad_config_settings(root: Path, task: str) -> list[str]:
    """The setting names MAD's ``configs/tasks/<task>.yml`` defines, written as the zoo names them."""
    config = yaml.safe_load((root / "configs" / "tasks" / f"{MAD_FILES[task]}.yml").read_text())
    return ["baseline", *(f"{k}={v}" for k, values in config["changes"].items() for v in values)]


def mad_reference(
    instances: ModuleType, task: str, parameters: dict[str, Any], examples: int, training: bool, seed: int
):
    """``examples`` of MAD's own: inputs, and the targets of its training or test sets."""
    rng = np.random.default_rng(seed)
    np.random.seed(seed)  # its selective copying draws from the global state
    kwargs = MAD_CONFIG_DEFAULTS | {k: v for k, v in parameters.items() if k != "num_train_examples"}
    kwargs |= {"is_training": training, "rng": rng}
    if task == "memorization":
        kwargs["kv_map"] = instances.generate_kv_map(vocab_size=parameters["vocab_size"] - 1, seed=seed)
    made = [getattr(instances, MAD_FUNCTIONS[task])(**kwargs) for _ in range(examples)]
    return np.stack([m[0] for m in made]).astype(np.int64), np.stack([m[1] for m in made]).astype(np.int64)


def zoo_examples(task: str, parameters: dict[str, Any], examples: int, training: bool, seed: int):
    """``examples`` of the zoo's: inputs, and what MAD's training or test targets would be."""
    spec = MAD_TASKS[task]
    kwargs: dict[str, Any] = {k: v for k, v in parameters.items() if k != "num_train_examples"}
    if task == "fuzzy_in_context_recall":
        kwargs["training"] = training
    if task == "memorization":
        kwargs["value_of"] = memorization_map(
            np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,))), parameters["vocab_size"]
        )
    made = spec.generate(np.random.default_rng(seed), examples, **kwargs)
    inputs, targets, scored = (t.long().numpy() for t in (made.inputs, made.targets, made.scored))
    return inputs, targets if training else np.where(scored, targets, -100)


def compare_mad(table: Table, root: Path, examples: int, seed: int) -> None:
    """MAD's settings against its configs, and MAD's generators against the zoo's in a few settings."""
    instances = load_instances(root)
    for task in MAD_TASKS:
        ours, theirs = mad_settings(task), mad_config_settings(root, task)
        table.add(task, "all", "settings", len(ours), len(theirs), "same" if ours == theirs else f"differs: {theirs}")
    for task, setting in MAD_SETTINGS:
        parameters = mad_setting(task, setting)
        vocab = parameters["vocab_size"]
        splits = (("train", True), ("test", False)) if task.endswith("recall") else (("train = test", True),)
        for split, training in splits:
            start = time.perf_counter()
            z_in, z_out = zoo_examples(task, parameters, examples, training, seed)
            zoo_seconds = time.perf_counter() - start
            start = time.perf_counter()
            r_in, r_out = mad_reference(instances, task, parameters, examples, training, seed + 1)
            mad_seconds = time.perf_counter() - start
            what = {"train": "trained", "test": "scored"}.get(split, "trained and scored")

            add = partial(table.add, task, f"{setting} ({split})")

            add("tokens per example", z_in.shape[1], r_in.shape[1])
            everywhere = np.ones_like(z_in, dtype=bool)
            z_id, r_id = one_per_example(z_in, everywhere), one_per_example(r_in, everywhere)
            add("input ids (an id at a random place)", span(z_in), span(r_in), two_sample_p(z_id, r_id, vocab))
            z_kept, r_kept = z_out != -100, r_out != -100
            z_count, r_count = z_kept.sum(axis=1), r_kept.sum(axis=1)
            add(f"{what} positions per example: mean", f"{z_count.mean():.2f}", f"{r_count.mean():.2f}",
                two_sample_p(z_count, r_count, max(z_count.max(), r_count.max()) + 1))  # fmt: skip
            places = np.broadcast_to(np.arange(z_out.shape[1]), z_out.shape)
            z_at, r_at = one_per_example(places, z_kept), one_per_example(places, r_kept)
            add(f"a random {what} position: mean place", f"{z_at.mean():.1f}", f"{r_at.mean():.1f}",
                two_sample_p(z_at, r_at, z_out.shape[1]))  # fmt: skip
            z_ids, r_ids = one_per_example(z_out, z_kept), one_per_example(r_out, r_kept)
            add(f"{what} target ids (one at random)", span(z_out[z_kept]), span(r_out[r_kept]),
                two_sample_p(z_ids, r_ids, vocab))  # fmt: skip
            add("seconds to generate", f"{zoo_seconds:.2f}", f"{mad_seconds:.2f}", "-")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("zoology", type=Path, help="a checkout of HazyResearch/zoology (holds zoology/)")
    parser.add_argument("mad", type=Path, help="a checkout of athms/mad-lab (holds mad/ and configs/)")
    parser.add_argument("--mqar-examples", type=int, default=3_000, help="MQAR examples per cell (Zoology's test sets)")
    parser.add_argument("--mad-examples", type=int, default=1_000, help="MAD examples per setting and split")
    parser.add_argument("--seed", type=int, default=0, help="the zoo's seed; the references draw with seed + 1")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.zoology.resolve()))
    from zoology.data.multiquery_ar import multiquery_ar as zoology_mqar

    table = Table()
    compare_mqar(table, zoology_mqar, args.mqar_examples, args.seed)
    compare_mad(table, args.mad.resolve(), args.mad_examples, args.seed)
    table.print()


if __name__ == "__main__":
    main()
