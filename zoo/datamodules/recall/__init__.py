"""Generated recall and copying tasks, nothing downloaded: the synthetic benchmarks on which
attention families differ most.

* :mod:`.mqar`: multi-query associative recall as Zoology generates it (data module ``mqar``);
* :mod:`.mad_tasks` and :mod:`.mad`: MAD's six tasks and its benchmark settings (``mad``);
* :mod:`.mamba`: the Mamba paper's selective copying and induction heads, tested at lengths beyond
  training (``selective_copying``, ``induction_heads``);
* :mod:`.state_tracking` (tasks in :mod:`.state_tracking_tasks`, groups in :mod:`.groups`): state
  tracking, trained short and tested long (``parity``, ``modular_arithmetic``, ``cycle_navigation``,
  ``even_pairs``, ``word_problem``);
* :mod:`.needles` (generator :mod:`.needle_tasks`, haystacks :mod:`.haystacks`): RULER's needles, tested by length
  and depth (``needle``);
* :mod:`.base`: what they share: the batch every task serves (``inputs``, ``targets``, ``scored``),
  seeded draws, resumable loaders and the data-module base.

Importing the package registers its data modules (the registry imports it on first lookup).
"""

from __future__ import annotations

from zoo.datamodules.recall.base import AUTOENCODER, BACKBONES, IGNORE_INDEX, LANGUAGE_MODEL, Examples, RecallDataModule
from zoo.datamodules.recall.mad import MAD_TASKS, MADDataModule, mad_setting, mad_settings
from zoo.datamodules.recall.mamba import (
    InductionHeadsDataModule,
    SelectiveCopyingDataModule,
    induction_heads,
    selective_copying,
)
from zoo.datamodules.recall.mqar import MIXTURES, PAPER_GRID, MQARDataModule, multiquery_ar
from zoo.datamodules.recall.needles import NeedleDataModule
from zoo.datamodules.recall.needle_tasks import needles  # after .needles, whose import names the submodule
from zoo.datamodules.recall.state_tracking import (
    CycleNavigationDataModule,
    EvenPairsDataModule,
    ModularArithmeticDataModule,
    ParityDataModule,
    WordProblemDataModule,
)

__all__ = [
    "AUTOENCODER",
    "BACKBONES",
    "IGNORE_INDEX",
    "LANGUAGE_MODEL",
    "MAD_TASKS",
    "MIXTURES",
    "PAPER_GRID",
    "CycleNavigationDataModule",
    "EvenPairsDataModule",
    "Examples",
    "InductionHeadsDataModule",
    "MADDataModule",
    "ModularArithmeticDataModule",
    "MQARDataModule",
    "NeedleDataModule",
    "ParityDataModule",
    "RecallDataModule",
    "SelectiveCopyingDataModule",
    "WordProblemDataModule",
    "induction_heads",
    "mad_setting",
    "mad_settings",
    "multiquery_ar",
    "needles",
    "selective_copying",
]
