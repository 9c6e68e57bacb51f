"""The command line, run in-process: subcommands, names, configs and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import PROJECT_ROOT
from zoo.commands import main

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _run_dir(root: Path, model: str) -> Path:
    versions = sorted((root / "runs" / model).glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    return versions[-1]


@pytest.mark.parametrize("args", [["--nope"], ["*delta*", "extra"]], ids=["option", "two_patterns"])
def test_list_refuses_what_it_does_not_take_in_one_line(args: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["list", *args])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[0].startswith("error: list takes one name pattern")


def test_list_prints_every_registry_with_aliases(capsys) -> None:
    main(["list"])
    out = capsys.readouterr().out
    scoring, layers = out.split("positions:")[0].split("attention layers:")
    assert "dot_product (aliases: scaled_dot_product)" in scoring and "gla" not in scoring
    assert "gated_deltanet (aliases: gated_delta_net)" in layers and "dot_product" not in layers
    for expected in (
        "attention (scoring, run per head by multi_head):",
        "additive (aliases: bahdanau)",
        "multi_head",
        "models:",
        "nadaraya_watson",
        "sentiment",
        "data modules:",
        "synthetic_regression",
        "sst2",
        "imdb",
    ):
        assert expected in out


@pytest.mark.parametrize(
    "command",
    [pytest.param(["list"], marks=pytest.mark.slow), ["fit", "--model", "nadaraya_watson", "--print_config"]],
    ids=["list", "print_config"],
)
def test_output_into_a_closed_pipe_stops_quietly(command: list[str]) -> None:
    """``python -m zoo list | head -1``: the reader is gone before the output is written. Both a
    command that returns and one that prints then raises ``SystemExit`` (``--print_config``) end
    with status 1 and no ``BrokenPipeError``. In a separate process, because the fix redirects
    the process's real standard output; block-buffered, as in a shell, so that the output is
    still waiting in Python's buffer when the command ends."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zoo", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    proc.stdout.close()  # before the child has imported anything, let alone printed
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr.decode()
    assert b"BrokenPipeError" not in stderr and b"Traceback" not in stderr, stderr.decode()


def test_fit_test_predict_nadaraya_watson_by_registered_name(in_tmp, capsys) -> None:
    main(["fit", "--model", "nadaraya_watson", "--trainer.max_epochs", "5", *QUIET])
    run = _run_dir(in_tmp, "nadaraya_watson")
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "images" / "val_fit.png").is_file() and (run / "images" / "val_attention.png").is_file()
    assert list(run.glob("events.out.tfevents.*"))
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["data"]["class_path"].endswith("SyntheticRegressionDataModule")  # the model's default data
    ckpt = str(run / "checkpoints" / "last.ckpt")

    main(["test", "--model", "nadaraya_watson", "--ckpt_path", ckpt, *QUIET])
    assert "test/mse" in capsys.readouterr().out
    main(["predict", "--model", "kernel_regression", "--ckpt_path", ckpt, *QUIET])  # an alias works too
    lines = [line.split("\t") for line in capsys.readouterr().out.strip().splitlines() if line.count("\t") == 1]
    assert len(lines) == 50 and all(float(x) >= 0 for x, _ in lines)


def test_checkpointing_turned_off_writes_no_checkpoint(in_tmp, capsys) -> None:
    main(
        [
            "fit",
            "--model",
            "nadaraya_watson",
            "--trainer.max_epochs",
            "2",
            "--trainer.enable_checkpointing",
            "false",
            *QUIET,
        ]
    )
    run = _run_dir(in_tmp, "nadaraya_watson")
    assert (run / "config.yaml").is_file() and not (run / "checkpoints").exists()
    assert "val/mse" in capsys.readouterr().out


def test_validate_accepts_class_name_and_class_path(in_tmp, capsys) -> None:
    for model in ("NadarayaWatson", "zoo.tasks.regression.NadarayaWatson"):
        main(["validate", "--model", model, "--data", "synthetic_regression", *QUIET])
        assert "val/mse" in capsys.readouterr().out


def test_print_config_round_trips_into_fit(in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "nadaraya_watson", "--model.attention", "average", "--print_config"])
    assert exit_info.value.code in (0, None)
    config_file = in_tmp / "printed.yaml"
    config_file.write_text(capsys.readouterr().out)
    assert yaml.safe_load(config_file.read_text())["model"]["init_args"]["attention"] == "average"
    main(["fit", "--config", str(config_file), "--trainer.fast_dev_run", "true", *QUIET])


def test_one_attention_mapping_is_taken_from_the_command_line(in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "gpt", "--model.attention", "{name: softmax, conv_size: 4}", "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["attention"]
    assert printed == {"name": "softmax", "conv_size": 4}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("induction_heads", {"vocab_size": 16, "batch_size": 8}),
        ("mad", {"batch_size": 128}),
        (None, {"vocab_size": 8192}),
    ],
)
def test_a_named_data_module_keeps_its_own_defaults(in_tmp, capsys, data: str | None, expected: dict) -> None:
    """``--data NAME`` builds that module with its defaults, not the model's default module's
    values for the arguments they share (jsonargparse carries those over to a replacing class):
    Mamba's induction heads with 16 ids in batches of 8, not MQAR's 8,192 and 64."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "recall", *(["--data", data] if data else []), "--print_config"])
    assert exit_info.value.code in (0, None)
    arguments = yaml.safe_load(capsys.readouterr().out)["data"]["init_args"]
    assert {key: arguments[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "--model", "nadaraya_watsn"], "Did you mean 'nadaraya_watson'"),
        (["fit", "--model", "nadaraya_watson", "--data", "synthetic_regresion"], "Did you mean 'synthetic_regression'"),
        (
            ["fit", "--model", "nadaraya_watson", "--model.attention", "gausian_kernel"],
            "Did you mean 'gaussian_kernel'",
        ),
        (["fit", "--model", "nadaraya_watson", "--model.attention", "multi_head"], "Compatible registered names"),
    ],
)
def test_bad_names_fail_before_training_with_suggestions(in_tmp, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Lightning's own check of a trainer setting (a MisconfigurationException)
        (["--trainer.max_epochs", "-5"], "`max_epochs` must be a non-negative integer or -1. You passed in -5."),
        # a constructor's own message, without jsonargparse's dump of the namespace after it
        (
            ["--model.attention_kwargs", '{"bandwidth": -1.0}', "--model.learnable", "false"],
            "bandwidth must be positive, got -1.0.",
        ),
        (["--data.noise", "-1"], "noise must be non-negative, got -1.0."),
    ],
)
def test_bad_settings_end_in_one_line(in_tmp, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "nadaraya_watson", *args])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"error: {lines[0].removeprefix('error: ')}", "(set ZOO_DEBUG=1 to see the traceback)"]
    assert message in lines[0] and "Namespace(" not in lines[0]


def test_fits_started_together_each_get_a_complete_run_directory(in_tmp) -> None:
    """Two seeds started at once from one directory: two run directories, each named by
    the run's own closing line, each with its config, checkpoint and metrics."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    command = [sys.executable, "-m", "zoo", "fit", "--model", "nadaraya_watson", "--trainer.max_epochs", "2", *QUIET]
    procs = [
        subprocess.Popen(
            [*command, "--seed_everything", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in range(2)
    ]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err[-2000:] for _, err in outputs]
    reported = [
        next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("run directory: "))
        for out, _ in outputs
    ]
    assert len(set(reported)) == 2 and sorted(
        p.name for p in (in_tmp / "runs" / "nadaraya_watson").iterdir()
    ) == sorted(Path(r).name for r in reported)
    for seed, run in enumerate(reported):
        config = yaml.safe_load((in_tmp / run / "config.yaml").read_text())
        assert config["seed_everything"] == seed
        assert (in_tmp / run / "checkpoints" / "last.ckpt").is_file() and list(
            (in_tmp / run).glob("events.out.tfevents.*")
        )


def test_make_train_ends_with_the_test_metric_run_directory_and_plots(in_tmp, capsys) -> None:
    main(["fit", "--model", "nadaraya_watson", "--trainer.max_epochs", "2", "--test_after_fit", "true", *QUIET])
    lines = capsys.readouterr().out.strip().splitlines()[-4:]
    run = "runs/nadaraya_watson/version_0"
    assert lines[0].startswith("zoo fit: test/mse ") and float(lines[0].split()[3].rstrip(",")) > 0
    assert lines[1] == f"run directory: {run}"
    assert lines[2].startswith(f"best checkpoint: {run}/checkpoints/epoch=1-step=2.ckpt (val/mse ")
    assert lines[3].startswith("plots: ") and f"{run}/images/test_fit.png" in lines[3]
    assert all((in_tmp / path).is_file() for path in lines[3].removeprefix("plots: ").split(", "))


def test_help_names_every_command_a_line_each(capsys) -> None:
    """``python -m zoo --help`` (and a bare ``python -m zoo``, which exits 2) finds every command,
    not only Lightning's four; each line names a command the dispatcher runs."""
    main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m zoo COMMAND")
    listed = [line.split()[0] for line in out.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == [
        "fit", "validate", "test", "predict", "generate", "export", "list", "bench", "compare", "matrix", "board"
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2 and capsys.readouterr().err == out
    for command in ("bench", "compare", "matrix", "board", "generate", "export", "fit"):  # each command is dispatched
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0, command
    capsys.readouterr()
