"""MAD's benchmark settings and the ``mad`` data module: a task of
:mod:`~zoo.datamodules.recall.mad_tasks` in one of the settings MAD's code defines.

MAD (``configs/tasks/*.yml`` and ``make_benchmark_mad_configs`` in ``mad/configs.py``) runs each
task in a baseline setting and in settings that change one factor of it at a time: the vocabulary,
the sequence length, the number of training examples, and for some tasks the noise or the number
of ids to copy. Every setting tests on 1,280 examples. A task's MAD score is the mean over its
settings of the best test accuracy over a grid of learning rates (1e-4, 5e-4, 1e-3) and weight
decays (0, 0.1); the grid is the sweep's business, not the data's.

Setting names are ``baseline`` and ``<factor>=<value>`` with MAD's factor names
(``vocab_size=32``, ``num_train_examples=800``, ``frac_noise=0.4``); :func:`mad_settings` lists a
task's, :func:`mad_setting` gives one's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from zoo.datamodules.base import check_minimums
from zoo.datamodules.recall.base import AUTOENCODER, LANGUAGE_MODEL, Examples, RecallDataModule
from zoo.datamodules.recall.draws import shared_generator, split_generator
from zoo.datamodules.recall.mad_tasks import (
    compression,
    fuzzy_in_context_recall,
    in_context_recall,
    memorization,
    memorization_map,
    selective_copying,
)
from zoo.datamodules.registry import register_datamodule
from zoo.errors import DataError

__all__ = ["MAD_TASKS", "MADDataModule", "MADTask", "mad_setting", "mad_settings"]

BASELINE = "baseline"
TRAIN_SIZES = (6_400, 3_200, 1_600, 800)
"""The smaller training sets every task but memorization is run with."""


@dataclass(frozen=True)
class MADTask:
    """A MAD task: its generator, its baseline parameters and the values each factor is changed to.

    Attributes:
        generate: The generator (:mod:`~zoo.datamodules.recall.mad_tasks`).
        baseline: The baseline setting's parameters, ``num_train_examples`` among them.
        changes: Each factor MAD varies and the values it takes, one factor at a time.
        shorthand: MAD's abbreviation (its paper's tables).
        length: Tokens an example holds, from a setting's parameters.
        backbone: The model MAD trains on it (its ``backbone``): ``language_model``, or
            ``autoencoder`` for compression, whose targets are the inputs themselves.
    """

    generate: Callable[..., Examples]
    baseline: Mapping[str, int | float]
    changes: Mapping[str, tuple[int | float, ...]]
    shorthand: str
    length: Callable[[Mapping[str, Any]], int]
    backbone: str = LANGUAGE_MODEL


def _next_token_length(parameters: Mapping[str, Any]) -> int:
    return parameters["seq_len"] - 1  # the model reads all but the last token


def _full_length(parameters: Mapping[str, Any]) -> int:
    return parameters["seq_len"]


def _pairs_length(parameters: Mapping[str, Any]) -> int:
    return 2 * (parameters["seq_len"] // 2)


_RECALL_CHANGES = {"vocab_size": (32, 64, 128), "seq_len": (256, 512, 1024), "num_train_examples": TRAIN_SIZES}

MAD_TASKS: Mapping[str, MADTask] = MappingProxyType(
    {
        "in_context_recall": MADTask(
            in_context_recall,
            {"vocab_size": 16, "seq_len": 128, "num_train_examples": 12_800},
            _RECALL_CHANGES,
            "CR",
            _next_token_length,
        ),
        "noisy_in_context_recall": MADTask(
            in_context_recall,
            {"vocab_size": 32, "seq_len": 128, "num_train_examples": 12_800, "noise_vocab_size": 16, "frac_noise": 0.2},
            {
                "vocab_size": (48, 80, 144),  # 16 of the ids are noise
                "seq_len": (256, 512, 1024),
                "num_train_examples": TRAIN_SIZES,
                "frac_noise": (0.4, 0.6, 0.8),
            },
            "NR",
            _next_token_length,
        ),
        "fuzzy_in_context_recall": MADTask(
            fuzzy_in_context_recall,
            {"vocab_size": 16, "seq_len": 128, "num_train_examples": 12_800, "k_motif_size": 3, "v_motif_size": 3},
            _RECALL_CHANGES,
            "FR",
            _full_length,
        ),
        "memorization": MADTask(
            memorization,
            {"vocab_size": 256, "seq_len": 32, "num_train_examples": 256},
            {"vocab_size": (512, 1024, 2048, 4096, 8192)},
            "M",
            _pairs_length,
        ),
        "compression": MADTask(
            compression,
            {"vocab_size": 16, "seq_len": 32, "num_train_examples": 12_800},
            {"vocab_size": (32, 64, 128), "seq_len": (64, 128, 256), "num_train_examples": TRAIN_SIZES},
            "C",
            _full_length,
            backbone=AUTOENCODER,
        ),
        "selective_copying": MADTask(
            selective_copying,
            {"vocab_size": 16, "seq_len": 256, "num_train_examples": 12_800, "num_tokens_to_copy": 16},
            {
                "vocab_size": (32, 64, 128),
                "seq_len": (512, 1024),
                "num_train_examples": TRAIN_SIZES,
                "num_tokens_to_copy": (32, 64, 96),
            },
            "SC",
            _full_length,
        ),
    }
)
"""MAD's six tasks by name (MAD's names, ``_`` for ``-``), with the settings of its configs."""


def _task(name: str) -> MADTask:
    task = MAD_TASKS.get(name.replace("-", "_"))
    if task is None:
        raise DataError(f"MAD has no task {name!r}; its tasks: {', '.join(MAD_TASKS)}.")
    return task


def mad_settings(task: str) -> list[str]:
    """The names of ``task``'s settings: ``baseline``, then ``<factor>=<value>`` in MAD's order.

    Raises:
        DataError: a task MAD does not define.
    """
    changes = _task(task).changes
    return [BASELINE, *(f"{factor}={value}" for factor, values in changes.items() for value in values)]


def mad_setting(task: str, setting: str = BASELINE) -> dict[str, int | float]:
    """The parameters of ``task`` in ``setting``: the baseline's, with the one factor changed.

    Raises:
        DataError: a task or a setting MAD does not define.
    """
    spec = _task(task)
    parameters = dict(spec.baseline)
    if setting == BASELINE:
        return parameters
    factor, _, value = setting.partition("=")
    for allowed in spec.changes.get(factor, ()):
        if value == str(allowed):
            return parameters | {factor: allowed}
    raise DataError(f"MAD defines no setting {setting!r} for {task}; its settings: {', '.join(mad_settings(task))}.")


@register_datamodule("mad")
class MADDataModule(RecallDataModule):
    """One of MAD's six tasks in one of its settings (see :mod:`~zoo.datamodules.recall.mad` and
    :mod:`~zoo.datamodules.recall.mad_tasks`), nothing downloaded.

    Batches hold ``inputs``, ``targets`` (what MAD trains on: every next token for the three recall
    tasks, the answers alone for the others, -100 elsewhere) and ``scored`` (what MAD's accuracy
    counts: the recalled values, the copies, the memorized values, every position of compression).
    The training set has the setting's ``num_train_examples``; validation and test are two draws of
    MAD's test distribution (fuzzy recall tests on keys of its longest size), ``num_test`` each.
    ``vocab_size``, ``block_size`` (tokens an example holds) and ``backbone`` (the auto-encoder
    for compression, as MAD's ``train.py`` switches it) are what a model links.

    Args:
        task: ``in_context_recall``, ``fuzzy_in_context_recall``, ``noisy_in_context_recall``,
            ``selective_copying``, ``compression`` or ``memorization`` (MAD's names with ``-`` work too).
        setting: ``baseline`` or one of MAD's harder settings, ``<factor>=<value>``
            (:func:`mad_settings` lists a task's).
        num_test: Validation and test examples each (MAD: 1,280).
        batch_size: Examples per batch (MAD: 128).
        generator_seed: Seed of the data: the same seed gives the same examples (and, for
            memorization, the same key-value map).
        seed: Seed of the order of training batches, not of the data.
        num_workers: DataLoader worker processes; ``None``: none on a CPU, a few on a GPU.
    """

    name = "mad"

    def __init__(
        self,
        task: str = "in_context_recall",
        setting: str = BASELINE,
        num_test: int = 1_280,
        batch_size: int = 128,
        generator_seed: int = 0,
        seed: int = 0,
        num_workers: int | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, generator_seed=generator_seed, seed=seed, num_workers=num_workers)
        check_minimums(num_test=(num_test, 1))
        self.task = task.replace("-", "_")
        self.spec = _task(task)
        self.parameters = mad_setting(task, setting)
        self.num_train = int(self.parameters["num_train_examples"])
        self.num_test = num_test
        self.vocab_size = int(self.parameters["vocab_size"])
        self.block_size = self.spec.length(self.parameters)
        self.backbone = self.spec.backbone

    def build_split(self, split: str) -> list[Examples]:
        arguments: dict[str, Any] = {k: v for k, v in self.parameters.items() if k != "num_train_examples"}
        if self.spec.generate is fuzzy_in_context_recall:
            arguments["training"] = split == "train"
        if self.spec.generate is memorization:
            arguments["value_of"] = memorization_map(shared_generator(self.generator_seed), self.vocab_size)
        size = self.num_train if split == "train" else self.num_test
        return [self.spec.generate(split_generator(self.generator_seed, split, 0), size, **arguments)]
