"""``zoo compare`` on a GPU machine: the local launcher hands each run its devices through
``CUDA_VISIBLE_DEVICES`` and the runs train there. The CPU twin, on a faked device list, is
``tests/compare/test_placement.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.commands import main
from zoo.compare.devices import visible_gpus
from zoo.compare.records import load_records


@pytest.mark.cuda
def test_local_runs_train_on_the_gpus_they_are_given(in_tmp: Path) -> None:
    """Two runs with half a GPU each (``--gpus_per_run 0.5``): on the first two GPUs, or both on
    the one GPU of a machine that has one; each sees its device alone."""
    gpus = visible_gpus()
    main(["compare", "--model", "nadaraya_watson", "--seeds", "2", "--budget", "5steps", "--gpus_per_run", "0.5",
          "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--out", "cmp"])  # fmt: skip
    records = load_records(Path("cmp/records.jsonl"))
    assert len(records) == 2 and {record["devices"] for record in records} == set(gpus[:2])
    assert all(record["parallel"] == 2 * len(gpus) for record in records)
    for record in records:
        assert "GPU available: True (cuda), used: True" in Path(record["run_dir"], "fit.log").read_text()
