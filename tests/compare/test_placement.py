"""Where the runs of ``zoo compare`` go, with a stand-in child: GPUs of one machine shared out
through ``CUDA_VISIBLE_DEVICES`` (a faked device list), W&B settings per run, grid keys checked
against the resolved configuration, and the launchers' bad input as one line each."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

import zoo.compare.run as runs
from tests.helpers.compare import RESOLVED, FakeChild
from zoo.commands import main
from zoo.compare import CompareConfig, Comparison
from zoo.compare.keys import check_grid_keys, flag_names
from zoo.compare.local import LocalLauncher
from zoo.errors import ConfigurationError

# -- GPUs of one machine ---------------------------------------------------------------------------


def _run_on(tmp_path: Path, fake: FakeChild, launcher: LocalLauncher, seeds: int = 4) -> list[tuple[float, float, str]]:
    """Four runs whose fits take 0.2 s each, through ``launcher``; the fits' spans and devices."""
    fake.seconds = 0.2
    fake.spans.clear()
    fake.commands.clear()
    config = CompareConfig(base=["--model", "m"], seeds=seeds, out=tmp_path, evaluate="validate")
    Comparison(config, launcher).run()
    fits = [span for span, command in zip(fake.spans, fake.commands) if command[3] == "fit"]
    assert len(fits) == seeds
    return fits


def _most_at_once(spans: list[tuple[float, float, str]], device: str | None = None) -> int:
    """The most spans (on ``device``, or on any) that overlap at one instant."""
    chosen = [(start, end) for start, end, used in spans if device is None or device in used.split(",")]
    return max(sum(start <= instant < end for start, end in chosen) for instant, _ in chosen)


def test_local_runs_take_one_free_gpu_each(tmp_path: Path, fake_child: FakeChild) -> None:
    launcher = LocalLauncher(gpus=["0", "1"])  # as if torch saw two devices
    assert launcher.parallel == 2
    fits = _run_on(tmp_path, fake_child, launcher)
    assert {device for _, _, device in fits} == {"0", "1"}
    assert _most_at_once(fits) == 2 and _most_at_once(fits, "0") == 1 and _most_at_once(fits, "1") == 1


def test_a_share_of_a_gpu_puts_several_runs_on_each(tmp_path: Path, fake_child: FakeChild) -> None:
    launcher = LocalLauncher(gpus=["3", "5"], gpus_per_run=0.5)  # CUDA_VISIBLE_DEVICES=3,5: two runs on each
    assert launcher.parallel == 4
    fits = _run_on(tmp_path, fake_child, launcher)
    assert _most_at_once(fits) == 4 and _most_at_once(fits, "3") == 2 and _most_at_once(fits, "5") == 2


def test_a_run_of_several_gpus_holds_them_all(tmp_path: Path, fake_child: FakeChild) -> None:
    launcher = LocalLauncher(gpus=["0", "1", "2"], gpus_per_run=2)
    assert launcher.parallel == 1
    fits = _run_on(tmp_path, fake_child, launcher, seeds=2)
    assert [device for _, _, device in fits] == ["0,1", "0,1"] and _most_at_once(fits) == 1


def test_gpus_hidden_when_runs_ask_for_none_and_untouched_without_gpus(tmp_path: Path, fake_child: FakeChild) -> None:
    _run_on(tmp_path / "hidden", fake_child, LocalLauncher(gpus=["0"], gpus_per_run=0), seeds=1)
    assert [env["CUDA_VISIBLE_DEVICES"] for env in fake_child.envs] == ["", ""]  # fit and validate on the CPU
    fake_child.envs.clear()
    _run_on(tmp_path / "cpu", fake_child, LocalLauncher(gpus=[]), seeds=1)
    assert all("CUDA_VISIBLE_DEVICES" not in env for env in fake_child.envs)


@pytest.mark.parametrize(
    ("gpus", "gpus_per_run", "message"),
    [
        ([], 1, "--gpus_per_run 1, but this machine shows no GPU: leave it out to run on the CPU."),
        (["0", "1"], 3, "--gpus_per_run 3 is more GPUs than this machine shows (2: 0, 1): ask for fewer."),
        (["0"], 0.3, "--gpus_per_run 0.3: give a whole number of GPUs, or a share 1/N of one"),
        (["0", "1"], 1.5, "--gpus_per_run 1.5: give a whole number of GPUs, or a share 1/N of one"),
    ],
)
def test_gpus_the_machine_cannot_give_are_refused(gpus: list[str], gpus_per_run: float, message: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        LocalLauncher(gpus=gpus, gpus_per_run=gpus_per_run)
    assert str(error.value).startswith(message)


# -- W&B -----------------------------------------------------------------------------------------


def test_wandb_runs_share_the_comparisons_group_with_the_grid_in_their_config(
    tmp_path: Path, fake_child: FakeChild, monkeypatch: pytest.MonkeyPatch
) -> None:
    wandb = {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"project": "zoo", "tags": ["x"]}}
    monkeypatch.setattr("zoo.compare.runner.resolve_base", lambda base: RESOLVED | {"trainer": {"logger": wandb}})
    config = CompareConfig(base=["--model", "m"], axes={"model.attention": ["a", "b"]}, out=tmp_path / "sweep")
    Comparison(config).run()
    for command in fake_child.commands:
        loggers = json.loads(next(arg for arg in command if arg.startswith("--trainer.logger=")).split("=", 1)[1])
        assert [logger["class_path"].rsplit(".", 1)[1] for logger in loggers] == ["CSVLogger", "WandbLogger"]
        settings = loggers[1]["init_args"]
        value = "b" if "--model.attention=b" in command else "a"
        assert settings == {
            "project": "zoo",
            "tags": ["x"],
            "save_dir": str(tmp_path / "sweep" / "runs" / f"attention={value}" / "seed0"),
            "name": f"attention={value}/seed0",
            "group": "sweep",
            "job_type": command[3],
            "config": {"comparison": "sweep", "combination": f"attention={value}", "seed": 0, "model.attention": value},
        }


# -- grid keys -----------------------------------------------------------------------------------


def test_flag_names_take_a_class_s_arguments_with_and_without_init_args() -> None:
    names = flag_names(RESOLVED | {"trainer": {"max_steps": -1, "logger": {"class_path": "L", "init_args": {"v": 1}}}})
    for name in ("model.attention", "model.init_args.attention", "data.seed", "trainer.max_steps"):
        assert name in names
    assert "trainer.logger.v" in names and "trainer.logger.init_args.v" in names and "config" in names
    with pytest.raises(ConfigurationError) as error:
        check_grid_keys(["model.atention"], RESOLVED, "model Model and data Data")
    assert str(error.value) == (
        "--grid model.atention: fit has no such flag with model Model and data Data; the closest: model.attention, "
        "model.lr, model.class_path (python -m zoo fit ARGS --print_config lists them all)."
    )


def test_a_grid_key_that_is_no_flag_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real resolution of nadaraya_watson's flags; no run starts (the child is never called)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(runs, "run_child", lambda *a, **k: calls.append(a[0]))
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--grid", "model.learnabel=true,false", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and calls == []
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(
        "error: --grid model.learnabel: fit has no such flag with model NadarayaWatson and data "
        "SyntheticRegressionDataModule; the closest: model.learnable"
    )
    assert len(err) == 2  # and the line saying how to see the traceback


# -- SLURM's retries (submitit's debug executor: the jobs run in this process) ---------------------------


@pytest.mark.parametrize("array", [False, True])
def test_a_failed_slurm_job_is_submitted_again_then_recorded_as_failed(
    tmp_path: Path, fake_child: FakeChild, array: bool
) -> None:
    pytest.importorskip("submitit")
    from zoo.compare.slurm import SlurmLauncher

    fake_child.fail_times = {"--seed_everything=0": 1, "--seed_everything=1": 99}  # once, always
    launcher = SlurmLauncher(tmp_path / "slurm", cluster="debug", array=array, parallel=1)
    comparison = Comparison(CompareConfig(base=["--model", "m"], seeds=3, out=tmp_path), launcher)
    records = comparison.run()
    assert sorted(record["run"] for record in records) == ["base/seed0", "base/seed2"]
    assert [str(failure) for failure in comparison.failures] == [
        f"Run base/seed1 failed (fit exited with 2): error: no attention named 'nope' (full output: "
        f"{tmp_path / 'runs' / 'base' / 'seed1' / 'fit.log'})."
    ]
    tries = [next(arg for arg in command if arg.startswith("--seed_everything=")) for command in fake_child.commands]
    assert sorted(tries) == ["--seed_everything=0"] * 3 + ["--seed_everything=1"] * 2 + ["--seed_everything=2"] * 2


# -- the launchers' bad input --------------------------------------------------------------------


@pytest.mark.parametrize(("launcher", "module"), [("ray", "ray"), ("slurm", "submitit")])
def test_a_launcher_whose_extra_is_missing_names_it(
    launcher: str, module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as when not installed
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--launcher", launcher])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: --launcher {launcher} needs the package '{module}', which is not installed")
    assert err[0].endswith(f"pip install 'attention-zoo[{launcher}]'.") and len(err) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ray_address", "auto"], "--ray_address is a flag of --launcher ray, not of local."),
        (["--launcher", "ray", "--slurm_array"], "--slurm_array is a flag of --launcher slurm, not of ray."),
        (["--retries", "2"], "--retries is a flag of --launcher ray and slurm: a local run that fails stops"),
        (["--launcher", "slurm", "--slurm_param", "account"], "Bad --slurm_param 'account': write KEY=VALUE"),
        (["--launcher", "slurm"], "--launcher slurm submits with sbatch, which is not on this machine's PATH"),
    ],
)
def test_launcher_flags_are_checked_in_one_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if "slurm" in flags:  # checked once submitit is imported
        pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", *flags])
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith(f"error: {message}")


def test_a_ray_address_nothing_answers_at_is_one_line(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()  # else the launcher uses the Ray this process has
    with socket.socket() as free:  # a loopback port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--launcher", "ray", "--ray_address", f"127.0.0.1:{port}"])
    assert exit_.value.code == 2 and not Path("runs").exists()
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: No Ray cluster answers at --ray_address 127.0.0.1:{port} (Connection refused): start one there "
        "(ray start --head), give the address its head printed, or leave --ray_address out to start Ray here."
    )


def test_submitit_refuses_an_unknown_setting_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    from zoo.compare.slurm import SlurmLauncher

    with pytest.raises(ConfigurationError, match="^submitit refuses the SLURM settings: Unknown argument 'no_such'"):
        SlurmLauncher(tmp_path, cluster="local", parameters={"no_such": 1})
    launcher = SlurmLauncher(tmp_path, cluster="local", parameters={"mem_gb": 8, "account": "lab"})  # generic, slurm's
    assert launcher.executor._executor.parameters["mem_gb"] == 8
