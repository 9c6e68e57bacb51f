"""``python -m zoo bench classify``: the classifier's training step per attention over lengths."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from zoo.attention import get_attention
from zoo.bench.build import build_from_cli
from zoo.bench.classify import TEXT_CPU_CONFIGS, ClassifyBenchConfig, TrainingStep
from zoo.commands import main

TINY = ["--batch", "2", "--warmup", "1", "--repeats", "2"]


def test_bench_classify_on_a_tiny_grid(in_tmp, capsys) -> None:
    main(["bench", "classify", "--lengths", "32", "64", "--attentions", "dot_product", "local", "synthesizer",
          *TINY, "--out", "classify.json"])  # fmt: skip
    payload = json.loads(Path("classify.json").read_text())
    out = capsys.readouterr().out
    assert [c["name"] for c in payload["cases"]] == ["dot_product", "local", "synthesizer"]
    assert payload["config"]["configs"] == list(TEXT_CPU_CONFIGS)
    for case in payload["cases"]:
        assert [r["length"] for r in case["results"]] == [32, 64]
        for result in case["results"]:
            assert result["status"] == "ok", (case["name"], result)
            t = result["time_ms"]
            assert 0 < t["min"] <= t["median"] <= t["max"] and t["repeats"] == 2
            assert result["peak_memory_mib"] > 0
    assert "Training steps per second (speed-up over dot_product)" in out
    baseline_rows = [line for line in out.splitlines() if line.startswith("| dot_product")]
    assert len(baseline_rows) == 2 and all(row.count("(1.00x)") == 2 for row in baseline_rows)  # speed, memory
    # a case's cells are its steps/s and its speed-up, from the medians in the JSON
    result = {c["name"]: c["results"] for c in payload["cases"]}
    local, dense = result["local"][1]["time_ms"]["median"], result["dot_product"][1]["time_ms"]["median"]
    speed_row = next(line for line in out.splitlines() if line.startswith("| local"))
    assert f"{1e3 / local:.3g} ({dense / local:.2f}x)" in speed_row.split("|")[3]


def test_a_timed_call_is_one_training_step_of_the_configured_recipe() -> None:
    step = TrainingStep.build(ClassifyBenchConfig(lengths=[48], batch=4), "local", 48, torch.device("cpu"))
    task = step.task
    assert task.hparams.d_model == 64 and task.hparams.num_layers == 2  # the Text task's CPU overlay
    assert task.hparams.attention == "local" and step.tokens.shape == (4, 48) and step.clip == 1.0
    assert all((step.tokens[i, int(n) :] == task.hparams.padding_idx).all() for i, n in enumerate(step.valid_lens))
    before = [p.detach().clone() for p in task.parameters()]
    workload = step.workload
    workload.reset()
    workload.step()
    assert all(p.grad is not None for p in task.parameters())
    assert all(not torch.equal(a, p) for a, p in zip(before, task.parameters()))  # the optimizer stepped
    assert step.scheduler.last_epoch == 1  # and the learning-rate schedule with it
    workload.reset()
    assert all(p.grad is None for p in task.parameters())


def test_a_build_holds_back_lightnings_start_up_lines(caplog: pytest.LogCaptureFixture) -> None:
    """One model per case: Lightning's seed, accelerator and tip lines would come between the timings."""
    args = ClassifyBenchConfig(lengths=[32]).cli_arguments("dot_product", 32)
    levels = [logging.getLogger(name).level for name in ("lightning.pytorch", "lightning.fabric")]
    with caplog.at_level(logging.INFO):
        assert build_from_cli(args).model.hparams.attention == "dot_product"
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("lightning")]
    assert [logging.getLogger(name).level for name in ("lightning.pytorch", "lightning.fabric")] == levels


@pytest.mark.parametrize("name", ["synthesizer", "linformer"])
def test_a_fixed_length_attention_is_built_for_the_length_it_runs_at(name: str) -> None:
    config = ClassifyBenchConfig(lengths=[40], batch=2, attention_kwargs={"linformer": {"k": 8}})
    task = TrainingStep.build(config, name, 40, torch.device("cpu")).task
    built = [m for m in task.modules() if isinstance(m, get_attention(name))]
    assert built and all(m.max_len == 41 for m in built)  # 40 tokens and the classification token
    assert name != "linformer" or all(m.k == 8 for m in built)  # given kwargs are kept


def test_bench_classify_refuses_unknown_names_in_one_line(in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "classify", "--attentions", "dot_prodct", "--out", "x.json"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and "Did you mean 'dot_product'" in err
    with pytest.raises(SystemExit):
        main(["bench", "classify", "--attentions", "local", "--lengths", "16", *TINY, "--out", "x.json"])
    assert "baseline 'dot_product' is not among" in capsys.readouterr().err
