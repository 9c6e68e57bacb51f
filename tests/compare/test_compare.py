"""``zoo compare``: grid and budget parsing, statistics against hand-computed values, resume,
time-budget calibration (with a stand-in child), the report. A tiny real grid end to end, on
every launcher: test_launchers.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers.compare import FakeChild
from zoo.commands import main
from zoo.compare import CompareConfig, Comparison, paired_differences, parse_budget, parse_grid, summarize, t_quantile
from zoo.compare.grid import combinations
from zoo.compare.records import join_metric_rows, metric_rows
from zoo.errors import ConfigurationError

# -- statistics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452), (120, 1.9799)]
)
def test_t_quantile_matches_the_printed_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_matches_scipy_where_installed() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 50, 400):
        for p in (0.6, 0.9, 0.995, 0.025):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)


def test_summary_and_interval_by_hand() -> None:
    summary = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    # sd = sqrt(10 / 4); half-width = t(0.975, 4) * sd / sqrt(5) = 2.7764451 * 1.5811388 / 2.2360680
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert (summary.n, summary.mean, summary.sd) == (5, 3.0, pytest.approx(math.sqrt(2.5)))
    assert (summary.low, summary.high) == (pytest.approx(3 - half), pytest.approx(3 + half))
    assert summarize([0.7]).sd is None


def test_paired_differences_use_only_shared_seeds() -> None:
    diff = paired_differences({0: 0.80, 1: 0.83, 2: 0.81, 5: 0.99}, {0: 0.78, 1: 0.80, 2: 0.80, 7: 0.10})
    assert diff is not None and diff.n == 3
    assert diff.mean == pytest.approx((0.02 + 0.03 + 0.01) / 3)
    assert diff.sd == pytest.approx(0.01)
    assert diff.high - diff.mean == pytest.approx(4.3026527 * 0.01 / math.sqrt(3))
    assert paired_differences({0: 1.0}, {1: 1.0}) is None


# -- grid and budget ---------------------------------------------------------------------------


def test_grid_combinations_and_names() -> None:
    axes = parse_grid(["model.attention=average,gaussian_kernel", "--model.num_heads=1,2"])
    names = [c.name for c in combinations(axes)]
    assert names == [
        "attention=average,num_heads=1",
        "attention=average,num_heads=2",
        "attention=gaussian_kernel,num_heads=1",
        "attention=gaussian_kernel,num_heads=2",
    ]
    assert combinations(axes)[1].flags == ["--model.attention=average", "--model.num_heads=2"]
    assert [c.name for c in combinations({})] == ["base"]


def test_a_hybrid_stack_is_one_grid_value_and_names_its_run_directory() -> None:
    axes = parse_grid(["model.attention=[local,dot_product],dot_product,[{name: local, window: 3}, linear]"])
    assert axes == {"model.attention": ["[local,dot_product]", "dot_product", "[{name: local, window: 3}, linear]"]}
    combos = combinations(axes)
    assert [c.name for c in combos] == [
        "attention=local+dot_product",
        "attention=dot_product",
        "attention=local_window=3_+linear",
    ]
    assert combos[0].flags == ["--model.attention=[local,dot_product]"]


def test_a_long_pattern_names_a_directory_the_file_system_can_make(tmp_path: Path) -> None:
    """Gemma 4's twelve-layer pattern wrote an 844-character name that no directory can take (the
    matrix stopped there); a name over 255 bytes keeps its start and ends in a digest of the whole,
    so two patterns that differ only at their end stay apart, and shorter names are unchanged."""
    entry = "{name: qk_norm, window: 16, sink_tokens: 0, scale: 1.0, v_norm: true}"
    first, second = (f"[{', '.join([entry] * 11)}, {last}]" for last in ("qk_norm", "local"))
    long, other, short = combinations(parse_grid([f"model.attention={first},{second},dot_product"]))
    assert len(long.name.encode()) <= 255 and long.name.startswith("attention=qk_norm_window=16,sink_tokens=0")
    assert long.name != other.name and short.name == "attention=dot_product"
    assert long.overrides == {"model.attention": first}
    (tmp_path / long.name / "seed0").mkdir(parents=True)
    # a name a directory could take before keeps it, and so its records (a first cut at 200
    # characters renamed Qwen3.5's recipe, whose records were written)
    (kept,) = combinations(parse_grid([f"model.attention=[{', '.join([entry] * 4)}]"]))
    assert kept.name == "attention=" + "+".join(["qk_norm_window=16,sink_tokens=0,scale=1.0,v_norm=True_"] * 4)
    assert 200 < len(kept.name.encode()) <= 255


@pytest.mark.parametrize("empty", ['""', "''"])
def test_a_quoted_empty_value_is_the_empty_string(empty: str) -> None:
    """``model.canon="",AB``: the flag is given empty (jsonargparse reads ``--KEY=`` as ``""``), not
    the two quote characters."""
    combos = combinations(parse_grid([f"model.canon={empty},AB"]))
    assert [c.overrides for c in combos] == [{"model.canon": ""}, {"model.canon": "AB"}]
    assert combos[0].flags == ["--model.canon="]
    assert [c.name for c in combos] == ["canon=", "canon=AB"]


def test_the_empty_flag_reaches_the_model_as_the_empty_string(capsys: pytest.CaptureFixture[str]) -> None:
    """What ``fit`` makes of the flag the grid writes: ``canon: ''`` (no Canon layers)."""
    (flag,) = combinations(parse_grid(['model.canon="",A']))[0].flags
    with pytest.raises(SystemExit):
        main(["fit", "--model", "recall", "--config", "configs/recall.yaml", flag, "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["canon"] == ""


def test_both_spellings_of_the_empty_value_are_one_value() -> None:
    with pytest.raises(ConfigurationError, match="repeats a value"):
        parse_grid(["""model.canon="",''"""])


@pytest.mark.parametrize(
    "spec", ["model.attention", "model.attention=", "model.attention=a,,b", "=a,b", "model attention=a"]
)
def test_bad_grid_spec_is_one_clear_line(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--grid", spec])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (
        f"error: Bad --grid {spec!r}: write KEY=V1,V2,... with KEY a fit flag without dashes and no blank value "
        '("" for the empty string), e.g. --grid model.attention=dot_product,local.'
    )


def test_fit_arguments_that_do_not_parse_are_one_line_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parser's usage (a hundred lines) is not printed: its error line is the message's."""
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--config", "no_such.yaml", "--out", str(tmp_path / "cmp")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[:-1] or [""]  # and the ZOO_DEBUG hint
    assert line.startswith('error: The fit arguments given to compare are not valid: Parser key "config"')
    assert "no_such.yaml" in line and line.endswith("(check them with python -m zoo fit ARGS --print_config).")


def test_an_option_the_data_module_does_not_take_is_named_in_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """jsonargparse names the key alone on its error line and the rejected option below it."""
    args = ["compare", "--model", "recall", "--data.no_such_option", "5", "--out", str(tmp_path / "cmp")]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[:-1] or [""]
    assert line.startswith('error: The fit arguments given to compare are not valid: Parser key "data":')
    assert "Option 'no_such_option' is not accepted" in line


def test_grid_refuses_a_repeated_axis() -> None:
    with pytest.raises(ConfigurationError, match="names 'model.lr' twice"):
        parse_grid(["model.lr=1", "model.lr=2"])


def test_budgets_become_trainer_flags() -> None:
    no_time_limit = ["--trainer.max_time", "null"]  # a config's max_time must not cut a step budget
    assert parse_budget("500steps").flags() == [
        "--trainer.max_steps",
        "500",
        "--trainer.max_epochs",
        "-1",
        *no_time_limit,
    ]
    assert parse_budget("2epochs").flags() == ["--trainer.max_epochs", "2", "--trainer.max_steps", "-1", *no_time_limit]
    # the translation recipe by hand: 10 minutes at 0.34 s/step -> 1764 steps, 10 minutes hard stop
    assert parse_budget("10min").flags(0.34) == [
        "--trainer.max_steps",
        "1764",
        "--trainer.max_epochs",
        "-1",
        "--trainer.max_time",
        "00:00:10:00",
    ]
    assert parse_budget("1.5h").amount == 5400
    for bad in ("5", "fast", "0steps", "2.5epochs", "-3min"):
        with pytest.raises(ConfigurationError, match="Bad --budget"):
            parse_budget(bad)


# -- resume and calibration with a stand-in child ------------------------------------------------


def test_resume_runs_only_what_has_no_record(tmp_path: Path, fake_child: FakeChild) -> None:
    config = CompareConfig(
        base=["--model", "nadaraya_watson"], axes={"model.attention": ["a", "b"]}, seeds=2, out=tmp_path
    )
    records = Comparison(config).run()
    assert len(fake_child.commands) == 8 and len(records) == 4
    assert {r["metrics"]["test/mse"] for r in records} == {0.5, 1.5}
    assert all(f"--data.seed={r['seed']}" in r["command"] for r in records)
    # stopped: the third run finished while nobody waited (a SLURM job of a comparison stopped
    # meanwhile), so its line is missing but its directory holds its record; the fourth was cut
    # off, its directory half written
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    (tmp_path / "records.jsonl").write_text("\n".join(lines[:2]) + "\n")
    missing = json.loads(lines[3])["run_dir"]
    (Path(missing) / "record.json").unlink()
    (Path(missing) / "stale.txt").write_text("from the interrupted attempt")
    fake_child.commands.clear()
    records = Comparison(config).run()
    assert len(fake_child.commands) == 2 and len(records) == 4  # the fourth alone ran again
    assert sorted(json.loads(line)["run"] for line in (tmp_path / "records.jsonl").read_text().splitlines()) == sorted(
        json.loads(line)["run"] for line in lines
    )
    assert not (Path(missing) / "stale.txt").exists()
    fake_child.commands.clear()
    Comparison(config).run()
    assert fake_child.commands == []


def test_a_dry_run_prints_each_run_and_starts_none(
    tmp_path: Path, fake_child: FakeChild, capsys: pytest.CaptureFixture[str]
) -> None:
    config = CompareConfig(
        base=["--model", "nadaraya_watson"], axes={"model.attention": ["a", "b"]}, seeds=2, out=tmp_path
    )
    Comparison(config).run([(Comparison(config).combinations[0], [0])])
    fake_child.commands.clear()
    lines = Comparison(config).describe()
    assert fake_child.commands == [] and len(lines) == 4
    assert lines[0] == "attention=a/seed0: recorded"
    assert lines[3].startswith("attention=b/seed1: python -m zoo fit --model nadaraya_watson --model.attention=b")
    assert "--seed_everything=1" in lines[3]
    main(["compare", "--model", "nadaraya_watson", "--grid", "model.attention=a,b", "--sweep", "model.lr=0.1,0.2",
          "--select", "test/mse:min", "--out", str(tmp_path / "swept"), "--dry_run"])  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:4]] == [
        "attention=a,lr=0.1/seed0", "attention=a,lr=0.2/seed0", "attention=b,lr=0.1/seed0", "attention=b,lr=0.2/seed0"
    ]  # fmt: skip
    assert printed[4] == "then 1 seed(s) at each combination's best value by test/mse"
    assert fake_child.commands == [] and not (tmp_path / "swept").exists()


def _stop_before_its_record(out: Path, index: int) -> tuple[dict, Path]:
    """Make run ``index`` of ``out``'s records one stopped before its record, its fit saved in
    ``last.ckpt`` (as SIGTERM leaves it); its old record and that file."""
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("".join(line + "\n" for i, line in enumerate(lines) if i != index))
    record = json.loads(lines[index])
    (Path(record["run_dir"]) / "record.json").unlink()
    checkpoint = Path(record["run_dir"]) / "fit" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"saved on SIGTERM")
    return record, checkpoint


def test_a_run_stopped_before_its_record_continues_its_fit(tmp_path: Path, fake_child: FakeChild) -> None:
    config = CompareConfig(base=["--model", "nadaraya_watson"], seeds=2, out=tmp_path)
    Comparison(config).run()
    stopped, checkpoint = _stop_before_its_record(tmp_path, 1)
    metrics = Path(stopped["run_dir"]) / "fit" / "metrics.csv"
    metrics.write_text("epoch,step,train/loss\n0,49,0.9\n")
    fake_child.commands.clear()
    records = {r["seed"]: r for r in Comparison(config).run()}
    fit, evaluation = fake_child.commands
    assert fit[-1] == "--ckpt_path=last" and "--ckpt_path=last" not in evaluation
    assert checkpoint.read_bytes() == b"saved on SIGTERM"  # its directory kept for the fit to continue
    assert records[stopped["seed"]]["resumed"] and records[stopped["seed"]]["command"] == stopped["command"]
    assert records[1 - stopped["seed"]]["resumed"] is False
    # its time: this attempt's (1 s) and the training of the attempt it continues (30 s)
    assert (records[stopped["seed"]]["fit_seconds"], records[1 - stopped["seed"]]["fit_seconds"]) == (31.0, 1.0)
    assert metrics.read_text().splitlines() == ["epoch,step,train/loss", "0,49,0.9"]  # the curve so far kept


def test_a_continued_fit_metrics_follow_the_interrupted_ones(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.csv"
    earlier = [{"epoch": "0", "step": "49", "train/loss": "0.9"}, {"epoch": "0", "step": "99", "train/loss": "0.8"},
               {"epoch": "0", "step": "149", "train/loss": "0.75"}]  # fmt: skip
    # Lightning's CSVLogger restarted the file; the checkpoint was at step 100, so 149 is replayed
    metrics.write_text("epoch,step,train/loss,val/accuracy\n0,149,0.7,\n0,199,0.6,0.5\n")
    join_metric_rows(earlier, metrics)
    assert metric_rows(metrics) == [
        {"epoch": "0", "step": "49", "train/loss": "0.9", "val/accuracy": ""},
        {"epoch": "0", "step": "99", "train/loss": "0.8", "val/accuracy": ""},
        {"epoch": "0", "step": "149", "train/loss": "0.7", "val/accuracy": ""},
        {"epoch": "0", "step": "199", "train/loss": "0.6", "val/accuracy": "0.5"},
    ]


def test_a_stopped_run_of_another_fit_starts_over(tmp_path: Path, fake_child: FakeChild) -> None:
    Comparison(CompareConfig(base=["--model", "nadaraya_watson"], out=tmp_path)).run()
    _, checkpoint = _stop_before_its_record(tmp_path, 0)
    fake_child.commands.clear()
    Comparison(CompareConfig(base=["--model", "nadaraya_watson", "--model.lr=1"], out=tmp_path)).run()
    assert "--ckpt_path=last" not in fake_child.commands[0] and not checkpoint.exists()


def test_resume_refuses_records_of_another_command_and_its_dry_run_says_so(
    tmp_path: Path, fake_child: FakeChild
) -> None:
    Comparison(CompareConfig(base=["--model", "nadaraya_watson"], out=tmp_path)).run()
    assert Comparison(CompareConfig(base=["--model", "nadaraya_watson"], out=tmp_path)).describe() == [
        "base/seed0: recorded"
    ]
    changed = Comparison(CompareConfig(base=["--model", "nadaraya_watson", "--model.lr=1"], out=tmp_path))
    [line] = changed.describe()
    assert line.startswith("base/seed0: refused: ") and "holds run base/seed0 of another command" in line
    with pytest.raises(ConfigurationError, match="holds run base/seed0 of another command"):
        changed.run()


def test_records_copied_to_another_folder_resume_there(tmp_path: Path, fake_child: FakeChild) -> None:
    """The matrix commits ``runs/``'s records under ``benchmarks/results``: resuming there reruns nothing."""
    Comparison(CompareConfig(base=["--model", "nadaraya_watson"], out=tmp_path / "runs")).run()
    committed = tmp_path / "results" / "records.jsonl"
    committed.parent.mkdir()
    committed.write_text((tmp_path / "runs" / "records.jsonl").read_text())
    fake_child.commands.clear()
    Comparison(CompareConfig(base=["--model", "nadaraya_watson"], out=tmp_path / "results", seeds=2)).run()
    assert len(fake_child.commands) == 2  # seed 1's fit and test only; seed 0 is the copied record's
    assert all("--seed_everything=1" in command for command in fake_child.commands)
    with pytest.raises(ConfigurationError, match="holds run base/seed0 of another command"):
        Comparison(CompareConfig(base=["--model", "nadaraya_watson", "--model.lr=1"], out=tmp_path / "results")).run()


def test_resume_refuses_records_whose_config_file_changed(tmp_path: Path, fake_child: FakeChild) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  init_args:\n    warmup_steps: 20\n")
    config = CompareConfig(base=["--model", "nadaraya_watson", "--config", str(recipe)], out=tmp_path / "out")
    Comparison(config).run()
    assert json.loads((tmp_path / "out" / "records.jsonl").read_text())["config_digests"].keys() == {str(recipe)}
    fake_child.commands.clear()
    Comparison(config).run()  # unchanged: nothing to run
    assert fake_child.commands == []
    recipe.write_text("model:\n  init_args:\n    warmup_steps: 150\n")  # same command, another recipe
    with pytest.raises(ConfigurationError, match=f"{recipe} changed since .* recorded run base/seed0"):
        Comparison(config).run()


def test_a_failed_run_stops_the_comparison_with_its_last_line(tmp_path: Path, fake_child: FakeChild) -> None:
    fake_child.fail_on = "--model.attention=nope"
    config = CompareConfig(
        base=["--model", "nadaraya_watson"], axes={"model.attention": ["nope", "average"]}, seeds=2, out=tmp_path
    )
    with pytest.raises(ConfigurationError) as error:
        Comparison(config).run()
    log = tmp_path / "runs" / "attention=nope" / "seed0" / "fit.log"
    assert (
        str(error.value)
        == f"Run attention=nope/seed0 failed (fit exited with 2): error: no attention named 'nope' (full output: {log})."
    )
    assert len(fake_child.commands) == 1  # the runs not yet started are cancelled
    assert not (tmp_path / "records.jsonl").exists()


def test_time_budget_is_calibrated_once(tmp_path: Path, fake_child: FakeChild) -> None:
    config = CompareConfig(
        base=["--model", "nadaraya_watson"], seeds=1, budget=parse_budget("90s"), out=tmp_path, calibration_steps=7
    )
    record = Comparison(config).run()[0]
    calibration = fake_child.commands[0]
    assert "--trainer.max_steps" in calibration and calibration[calibration.index("--trainer.max_steps") + 1] == "7"
    assert "--trainer.max_steps 360 --trainer.max_epochs -1 --trainer.max_time 00:00:01:30" in record["command"]
    assert json.loads((tmp_path / "calibration.json").read_text()) == {"base": 0.25}
    (tmp_path / "records.jsonl").unlink()
    shutil.rmtree(tmp_path / "runs")  # the run starts over, its calibration is kept
    fake_child.commands.clear()
    Comparison(config).run()
    assert len(fake_child.commands) == 2  # fit and test, no second calibration


# -- report ----------------------------------------------------------------------------------


def test_report_table_and_paired_differences_by_hand(tmp_path: Path) -> None:
    from zoo.compare.report import write_report

    def record(combination: str, seed: int, acc: float) -> dict:
        return {
            "combination": combination,
            "seed": seed,
            "metrics": {"test/acc": acc, "test/f1": acc},
            "fit_seconds": 10.0 + seed,
            "seconds_per_step": 0.5,
            "samples_per_second": 64.0,
            "peak_rss_mib": 300.0,
        }

    records = [record("a", s, v) for s, v in enumerate([1.0, 2.0, 3.0, 4.0, 5.0])]
    records += [record("b", s, v) for s, v in enumerate([1.5, 2.5, 3.5, 4.0, 6.0])] + [record("b", 9, 0.0)]
    report = write_report(records, tmp_path, ["a", "b"], "a", "header", metric="test/f1").read_text()
    # a: mean 3, sd sqrt(2.5) = 1.58, half-width 2.7764 * 1.5811 / sqrt(5) = 1.963
    assert "| `a`         | 5     | 3.000 ± 1.581 [1.037, 4.963]" in report
    assert "| test/f1 " in report.split("\n")[6] and report.split("\n")[6].index("test/f1") < report.split("\n")[
        6
    ].index("test/acc")
    # b - a on seeds 0-4: 0.5, 0.5, 0.5, 0, 1 -> mean 0.5, sd sqrt(0.125) = 0.354, half-width 2.7764 * 0.3536 / sqrt(5) = 0.439
    assert "| `b`         | 5            | 0.500 ± 0.354 [0.061, 0.939]" in report
    assert (tmp_path / "plot.png").is_file()
    assert "different conditions" not in report


def test_report_says_when_runs_were_timed_under_different_conditions(tmp_path: Path) -> None:
    from zoo.compare.report import write_report

    def record(seed: int, parallel: int | None, threads: int) -> dict:
        timing = {"parallel": parallel} if parallel else {}  # records from before runs at once were kept
        return {
            "combination": "a",
            "seed": seed,
            "metrics": {"val/acc": 0.5},
            "fit_seconds": 9.0,
            "threads": threads,
            **timing,
        }

    records = [record(0, None, 2), record(1, 2, 1), record(2, 2, 1)]
    report = write_report(records, tmp_path, ["a"], "a", "header").read_text()
    assert (
        "different conditions (1 with 2 threads each, how many at once not recorded; "
        "2 with 1 thread each, 2 at once): the cost columns mix them." in report
    )


def test_unknown_baseline_suggests_the_combinations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "compare",
                "--model",
                "nadaraya_watson",
                "--grid",
                "model.attention=average,gaussian_kernel",
                "--baseline",
                "attention=avrage",
            ]
        )
    assert (
        "error: --baseline 'attention=avrage' is not a combination of the grid; did you mean attention=average"
        in capsys.readouterr().err
    )


# -- the papers' protocol: sweep, keep the best, then seeds ---------------------------------------


def test_a_sweep_keeps_each_combinations_best_value_then_runs_the_seeds_there(tmp_path: Path, fake_child) -> None:
    """``--sweep model.lr``: every value once, the best of each attention by test/mse (lowest),
    then three seeds at it (the sweep's run there reused); the report compares the kept runs."""
    import math

    from zoo.compare.cli import main

    best = {"a": -3, "b": -2}  # log10 of each attention's best learning rate
    fake_child.score = lambda flags: (
        int(flags["--seed_everything"]) + abs(math.log10(float(flags["--model.lr"])) - best[flags["--model.attention"]])
    )
    main(["--model", "nadaraya_watson", "--grid", "model.attention=a,b", "--sweep", "model.lr=1e-4,1e-3,1e-2",
          "--select", "test/mse:min", "--seeds", "3", "--out", str(tmp_path)])  # fmt: skip
    fits = [c for c in fake_child.commands if c[c.index("-m") + 2] == "fit"]
    assert len(fits) == 6 + 2 * 2  # 2 x 3 values once, then seeds 1 and 2 at each kept value
    report = " ".join((tmp_path / "report.md").read_text().split())  # the tables' padding aside
    assert "| `attention=a` | 1.0000 | **0.0000** | 1.0000 | 1e-3 |" in report
    assert "| `attention=b` | 2.0000 | 1.0000 | **0.0000** | 1e-2 |" in report
    assert "`attention=a,lr=1e-3` | 3 |" in report and "`attention=b,lr=1e-2` | 3 |" in report


def test_a_row_added_by_a_later_command_leaves_the_earlier_rows_in_the_report(tmp_path: Path, fake_child) -> None:
    """Two commands into one folder (as ``zoo matrix`` adds rows to a group): the second's report
    has its own rows in its tables and the first command's rows in a section of their own."""
    from zoo.compare.cli import main

    fake_child.score = lambda flags: {"a": 1.0, "b": 2.0}[flags["--model.attention"]]
    for row in ("a", "b"):
        main(["--model", "nadaraya_watson", "--grid", f"model.attention={row}", "--seeds", "2",
              "--out", str(tmp_path)])  # fmt: skip
    report = " ".join((tmp_path / "report.md").read_text().split())
    own, earlier = report.split("## Rows recorded here by other commands")
    assert "| `attention=b` | 2 | 2.000 ± 0.000" in own and "attention=a" not in own
    assert "2 run(s) of 1 combination(s) that this command's grid does not hold" in earlier
    assert "| `attention=a` | 2 | 1.000 ± 0.000" in earlier and "attention=b" not in earlier


def test_two_sweeps_choose_among_every_combination_of_their_values(tmp_path: Path, fake_child) -> None:
    """Two settings swept together, as MAD sweeps its rates and weight decays: each of the 2 x 2
    pairs once per attention, the best pair kept (a different one per attention)."""
    from zoo.compare.cli import main

    best = {"a": ("1e-3", "16"), "b": ("1e-2", "64")}
    fake_child.score = lambda flags: (
        int(flags["--seed_everything"])
        + (flags["--model.lr"] != best[flags["--model.attention"]][0])
        + 2 * (flags["--model.d_model"] != best[flags["--model.attention"]][1])
    )
    main(["--model", "nadaraya_watson", "--grid", "model.attention=a,b", "--sweep", "model.lr=1e-3,1e-2",
          "--sweep", "model.d_model=16,64", "--select", "test/mse:min", "--seeds", "2",
          "--out", str(tmp_path)])  # fmt: skip
    fits = [c for c in fake_child.commands if c[c.index("-m") + 2] == "fit"]
    assert len(fits) == 2 * 4 + 2  # every pair once, then seed 1 at each kept pair
    report = " ".join((tmp_path / "report.md").read_text().split())
    assert "Sweep of `model.lr` and `model.d_model`" in report
    assert (
        "| combination | lr=1e-3,d_model=16 | lr=1e-3,d_model=64 | lr=1e-2,d_model=16 | lr=1e-2,d_model=64 |" in report
    )
    assert "| `attention=a` | **0.0000** | 2.0000 | 1.0000 | 3.0000 | lr=1e-3,d_model=16 |" in report
    assert "| `attention=b` | 3.0000 | 1.0000 | 2.0000 | **0.0000** | lr=1e-2,d_model=64 |" in report
    assert "`attention=a,lr=1e-3,d_model=16` | 2 |" in report


def test_a_sweep_with_no_metric_reported_is_refused_in_one_line(tmp_path: Path, fake_child) -> None:
    from zoo.compare.cli import main

    with pytest.raises(ConfigurationError, match=r"No run of base reported test/accuracy in the sweep of model.lr"):
        main(["--model", "nadaraya_watson", "--sweep", "model.lr=1e-3,1e-2", "--select", "test/accuracy",
              "--out", str(tmp_path)])  # fmt: skip
    with pytest.raises(ConfigurationError, match="--select and --sweep_seeds go with --sweep"):
        main(["--model", "nadaraya_watson", "--select", "test/mse", "--out", str(tmp_path)])


# -- a metric against one axis: Zoology's Figure 2 ---------------------------------------------


def test_plot_against_an_axis_pivots_the_kept_runs_means(tmp_path: Path, fake_child) -> None:
    """``--plot_against model.d_model`` with a sweep: one row per attention, one column per width,
    each cell the mean over the seeds of the runs kept at the best rate (the swept rate not a line)."""
    import math

    from zoo.compare.cli import main

    fake_child.score = lambda flags: (
        int(flags["--seed_everything"]) + 64 / int(flags["--model.d_model"]) + abs(math.log10(float(flags["--model.lr"])) + 3)
        + (flags["--model.attention"] == "b")
    )  # fmt: skip
    main(["--model", "nadaraya_watson", "--grid", "model.attention=a,b", "--grid", "model.d_model=16,64",
          "--sweep", "model.lr=1e-3,1e-2", "--select", "test/mse:min", "--seeds", "2",
          "--plot_against", "model.d_model", "--metric", "test/mse", "--out", str(tmp_path)])  # fmt: skip
    report = " ".join((tmp_path / "report.md").read_text().split())
    # a at width 16: 64/16 = 4 at the kept rate 1e-3, seeds 0 and 1 -> 4.5; at 64: 1.5; b one more
    assert "| test/mse \\ d_model | 16 | 64 |" in report
    assert "| attention=a | 4.500 (2 seeds) | 1.500 (2 seeds) |" in report
    assert "| attention=b | 5.500 (2 seeds) | 2.500 (2 seeds) |" in report
    assert (tmp_path / "plot_d_model.png").stat().st_size > 0


def test_plot_against_a_categorical_axis_ends_on_each_lines_mean_over_it(tmp_path: Path, fake_child) -> None:
    """MAD's score in shape: against an axis of names (here the attentions; MAD's task settings),
    the table ends on each line's mean over the axis's values."""
    from zoo.compare.cli import main

    fake_child.score = lambda flags: 64 / int(flags["--model.d_model"]) + (flags["--model.attention"] == "b")
    main(["--model", "nadaraya_watson", "--grid", "model.d_model=16,64", "--grid", "model.attention=a,b",
          "--plot_against", "model.attention", "--metric", "test/mse", "--out", str(tmp_path)])  # fmt: skip
    report = " ".join((tmp_path / "report.md").read_text().split())
    assert "| test/mse \\ attention | a | b | mean over attention |" in report
    assert "| d_model=16 | 4.000 | 5.000 | 4.500 |" in report
    assert "| d_model=64 | 1.000 | 2.000 | 1.500 |" in report


def test_plot_against_refuses_what_is_not_a_grid_axis(tmp_path: Path, fake_child) -> None:
    from zoo.compare.cli import main

    with pytest.raises(
        ConfigurationError, match=r"--plot_against 'model.d_mode' is not a --grid axis .* 'model.d_model'"
    ):
        main(["--model", "nadaraya_watson", "--grid", "model.d_model=16,64", "--plot_against", "model.d_mode",
              "--out", str(tmp_path)])  # fmt: skip
    with pytest.raises(ConfigurationError, match="the axis has one value"):
        main(["--model", "nadaraya_watson", "--grid", "model.d_model=16", "--plot_against", "model.d_model",
              "--out", str(tmp_path)])  # fmt: skip
    assert not fake_child.commands


def test_plot_against_a_split_reads_the_metric_per_set_in_numeric_order(tmp_path: Path) -> None:
    """``--plot_against length``: Mamba's extrapolation plot from the metrics a task logs per test
    length, one line per combination, the lengths in numeric order (not as text: 256 before 1024)."""
    from zoo.compare.against import against_section, check_against

    def record(combination: str, seed: int, accuracies: dict[int, float]) -> dict:
        metrics = {f"test/accuracy/length_{length}": value for length, value in accuracies.items()}
        return {"combination": combination, "seed": seed, "overrides": {}, "metrics": {"test/accuracy": 1.0, **metrics}}

    records = [
        record("attention=a", 0, {256: 1.0, 1024: 0.6, 4096: 0.2}),
        record("attention=a", 1, {256: 1.0, 1024: 0.8, 4096: 0.4}),
        record("attention=b", 0, {256: 0.9, 1024: 0.9, 4096: 0.9}),
    ]
    axes = {"model.attention": ["a", "b"]}
    assert check_against("length", axes) == "length"
    section = " ".join(" ".join(against_section(records, "length", axes, "test/accuracy", tmp_path)).split())
    assert "| test/accuracy \\ length | 256 | 1024 | 4096 |" in section
    assert "| attention=a | 1.000 (2 seeds) | 0.700 (2 seeds) | 0.300 (2 seeds) |" in section
    assert "| attention=b | 0.900 | 0.900 | 0.900 |" in section
    assert (tmp_path / "plot_length.png").stat().st_size > 0
    missing = " ".join(against_section(records, "num_kv_pairs", axes, "test/accuracy", tmp_path))
    assert "No record has test/accuracy along num_kv_pairs" in missing
