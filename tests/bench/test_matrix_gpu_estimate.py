"""benchmarks/matrix_gpu_estimate.py: the calibration is each group's own command cut to a few
steps, one seed and one rate, and a measured run is priced at the protocol's steps and validations
(the GPU measurement itself is the slow dry run of benchmarks/gpu.sh, tests/bench/test_gpu_script.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers import PROJECT_ROOT
from zoo.matrix.cli import groups

SPEC = importlib.util.spec_from_file_location(
    "matrix_gpu_estimate", PROJECT_ROOT / "benchmarks" / "matrix_gpu_estimate.py"
)
estimate = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(estimate)


def _group(yardstick: str, size: str = "full"):
    (group, *_), _, _ = groups(["--size", size, "--yardsticks", yardstick, "--names", "gated_deltanet"])
    return group


@pytest.mark.parametrize(("yardstick", "steps"), [("mqar", 8000), ("parity", 20000), ("language_model", 5000)])
def test_the_calibration_is_the_groups_command_cut_to_a_few_steps_one_seed_and_one_rate(
    yardstick: str, steps: int
) -> None:
    group = _group(yardstick)
    assert estimate.protocol_steps(group.command()) == steps  # each protocol's own way of stating it
    words = estimate.calibration_command(group, 30, Path("out"), ["--trainer.accelerator", "gpu"])
    assert estimate.protocol_steps(["compare", *words]) == 30
    assert "--sweep" not in words and "--select" not in words and words[words.index("--model.lr") + 1] == "1e-3"
    assert words[-6:] == ["--seeds", "1", "--out", "out", "--trainer.accelerator", "gpu"]
    assert words.count("--seeds") == 1 and words.count("--out") == 1
    if "--trainer.val_check_interval" in words:  # a validation within the few steps, not after 1,000
        assert words[words.index("--trainer.val_check_interval") + 1] == "30"
    kept = [w for w in group.command()[1:] if w.startswith("--") and w not in (*estimate.DROPPED, "--name")]
    assert set(kept) <= set(words)  # every other flag of the protocol stays


def test_a_measured_run_is_priced_at_the_protocols_steps_and_validations() -> None:
    parity = _group("parity")
    assert estimate.protocol_validations(parity.command(), 20000) == 20  # every 1,000 steps
    assert estimate.protocol_validations(_group("mqar").command(), 8000) == 1  # no interval: once
    record = {"steps": 30, "seconds_per_step": 0.1, "wall_seconds_per_step": 0.2, "fit_seconds": 20.0,
              "train_seconds": 6.0, "eval_seconds": 5.0}  # fmt: skip
    # start-up 14 s, 1,000 steps at 0.1 s, two validations of 3 s ((0.2 - 0.1) x 30), the evaluation 5 s
    assert estimate._fit_seconds(record, 1000, 2) == pytest.approx(14 + 100 + 6 + 5)


def test_a_protocol_without_a_step_budget_is_refused_in_one_line() -> None:
    with pytest.raises(estimate.ConfigurationError, match="no step budget"):
        estimate.protocol_steps(["compare", "--model", "recall", "--budget", "5min"])
