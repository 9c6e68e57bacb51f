"""``zoo compare`` with real runs on each launcher: one tiny grid (two kernels by two seeds, five
steps, one thread a run) run locally once for the module; a copy of it stopped halfway and
finished on Ray (a real local Ray with 2 CPUs, started once for the module), another finished by
a job of submitit's local executor: the same metrics seed by seed and the same tables. Also:
resources no Ray node has, Ray's retry of a failed run then the run recorded as failed, Ctrl-C
stopping every run (Ray and submitit), ASHA stopping the run that cannot win, and W&B offline.

The default run keeps the local grid and the refusal of resources; the rest (about four minutes
of real processes on 2 cores) is marked ``slow``."""

from __future__ import annotations

import _thread
import contextlib
import io
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import zoo.compare.run as runs
from tests.helpers.processes import processes_mentioning, sigterm_once_training
from tests.helpers.wandb_offline import wandb_records
from zoo.commands import main
from zoo.compare.records import load_records
from zoo.compare.report import summary_tables
from zoo.tasks import MODEL_REGISTRY

NAMES = ["attention=average", "attention=gaussian_kernel"]
#: What differs from one launcher to another: the cost columns, and the conditions they were timed in.
COST = ("fit_seconds", "seconds_per_step", "samples_per_second", "peak_rss_mib", "launcher", "parallel", "threads")
#: A flaky fit: a callback that fails the first try of seed 0 and every try of seed 1, counting tries.
FLAKY = """
import os
from pathlib import Path

import lightning as L


class Flaky(L.Callback):
    def __init__(self, tries: str) -> None:
        self.tries = tries

    def on_fit_start(self, trainer, pl_module) -> None:
        seed = int(os.environ["PL_GLOBAL_SEED"])
        tries = Path(self.tries, f"seed{seed}")
        with tries.open("a") as handle:
            handle.write("try\\n")
        if seed == 1 or len(tries.read_text().splitlines()) == 1:
            raise RuntimeError(f"flaky seed {seed} fails")
"""


def _grid(out: Path, *extra: str) -> list[str]:
    return [
        "compare", "--model", "nadaraya_watson", "--grid", "model.attention=average,gaussian_kernel", "--seeds", "2",
        "--budget", "5steps", "--cpus_per_run", "1", "--out", str(out), *extra,
    ]  # fmt: skip


def _metric_tables(records: list[dict]) -> list[str]:
    """The report's tables without the cost columns (times differ from one run to the next) and the
    note on the conditions they were timed in."""
    stripped = [{key: value for key, value in record.items() if key not in COST} for record in records]
    return summary_tables(stripped, NAMES, NAMES[0], "test/mse")


def _compare(args: list[str]) -> str:
    """``main(args)``, its standard output."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(args)
    return printed.getvalue()


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The grid run locally, two runs at once, from a directory of its own with ``--out cmp``
    (so that its commands hold relative paths, and a copy of it resumes elsewhere): its output
    directory and what it printed."""
    here, cwd = tmp_path_factory.mktemp("local"), Path.cwd()
    try:
        os.chdir(here)
        return here / "cmp", _compare(_grid(Path("cmp"), "--parallel", "2"))
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """A real local Ray with 2 CPUs for the module's tests, quiet, shut down after them."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _resume_without(local: Path, tmp_path: Path, removed: list[str], monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """A copy of the local comparison as ``cmp`` in ``tmp_path`` (made the working directory)
    without the runs ``removed`` (records and directories), as if it had been stopped before them;
    their records."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(local, "cmp")
    records = load_records(Path("cmp/records.jsonl"))
    Path("cmp/records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["run"] not in removed))
    for run in removed:
        shutil.rmtree(Path("cmp/runs", run))
    return [record for record in records if record["run"] in removed]


def test_local_grid_end_to_end(local_grid: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Real fits and tests, records and report; started again, nothing runs."""
    out, printed = local_grid
    printed = printed.replace("  ", " ").replace("  ", " ")
    assert "| `attention=gaussian_kernel` | 2 " in printed and "## Paired differences" in printed  # the tables, printed
    records = load_records(out / "records.jsonl")
    assert sorted(r["run"] for r in records) == [f"{name}/seed{seed}" for name in NAMES for seed in (0, 1)]
    for record in records:
        run_dir = out.parent / record["run_dir"]
        assert (run_dir / "fit" / "checkpoints" / "last.ckpt").is_file()
        assert json.loads((run_dir / "record.json").read_text()) == record
        assert record["steps"] == 5 and record["peak_rss_mib"] > 50 and record["samples_per_second"] > 0
        assert (record["parallel"], record["threads"], record["launcher"]) == (2, 1, "local")
        # the test's metrics, and the fit's last validation ones (what a sweep can choose on)
        assert set(record["metrics"]) == {"test/mse", "test/mse_truth", "val/mse", "val/mse_truth"}
    counted = {r["combination"]: r["parameters"] for r in records}  # the trained module's, as built here
    built = {name: sum(p.numel() for p in MODEL_REGISTRY.get("nadaraya_watson")(attention=name.split("=")[1]).parameters())
             for name in NAMES}  # fmt: skip
    assert counted == built and built["attention=gaussian_kernel"] > built["attention=average"]
    mse = {r["run"]: r["metrics"]["test/mse"] for r in records}
    for seed in (0, 1):  # the learned kernel beats average pooling even after five steps
        assert mse[f"attention=gaussian_kernel/seed{seed}"] < mse[f"attention=average/seed{seed}"]
    report = (out / "report.md").read_text()
    assert "| `attention=gaussian_kernel` | 2 " in report.replace("  ", " ").replace("  ", " ")
    assert "## Paired differences against `attention=average`" in report
    assert (
        "Data (before the grid and seeds): `SyntheticRegressionDataModule(num_train=50, num_val=50, num_test=50, noise=0.5, seed=0)`"
        in report
    )
    assert (out / "plot.png").stat().st_size > 1000
    calls: list[list[str]] = []
    monkeypatch.setattr(runs, "run_child", lambda *a, **k: calls.append(a[0]))
    monkeypatch.chdir(out.parent)
    assert "4 runs recorded" in _compare(_grid(Path("cmp"), "--parallel", "2")) and calls == []


# -- Ray -----------------------------------------------------------------------------------------


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
def test_ray_resumes_a_local_comparison_with_the_same_metrics(
    local_grid: tuple[Path, str], ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped halfway locally, finished on Ray: only the missing runs run, with the local runs'
    metrics seed by seed (one thread each on both), and the report's tables are the local ones."""
    out = Path("cmp")
    removed = _resume_without(local_grid[0], tmp_path, [f"{name}/seed1" for name in NAMES], monkeypatch)
    _compare(_grid(out, "--launcher", "ray"))
    records = load_records(out / "records.jsonl")
    on_ray = [record for record in records if record["launcher"] == "ray"]
    assert sorted(r["run"] for r in on_ray) == sorted(r["run"] for r in removed)
    assert {r["run"]: r["metrics"] for r in on_ray} == {r["run"]: r["metrics"] for r in removed}
    assert all((r["parallel"], r["threads"]) == (2, 1) for r in on_ray)  # 2 CPUs, one per run
    assert _metric_tables(records) == _metric_tables(load_records(local_grid[0] / "records.jsonl"))
    assert "timed under different conditions (2 on local with 1 thread each, 2 at once; 2 on ray" in (
        out / "report.md"
    ).read_text().replace("\n", " ")


@pytest.mark.parametrize(
    ("flags", "largest"),
    [(["--cpus_per_run", "3"], "3 CPU(s) and 0 GPU(s)"), (["--gpus_per_run", "1"], "1 CPU(s) and 1 GPU(s)")],
)
def test_resources_no_node_has_are_refused_before_any_run(
    ray_session: None, in_tmp: Path, flags: list[str], largest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "--model", "nadaraya_watson", "--out", "cmp", "--launcher", "ray", *flags])
    assert exit_.value.code == 2 and not Path("cmp/runs").exists()
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: A run asks for {largest} (--cpus_per_run, --gpus_per_run), more than any node of the Ray cluster "
        "has (the largest: 2 CPUs, 0 GPUs): ask for less, or add a node that has them."
    )


def _flaky(tmp_path: Path, module: str) -> list[str]:
    """Fit arguments whose fit fails the first try of seed 0 and every try of seed 1 (a plugin
    file named ``module``, a name this process has not imported yet)."""
    (tmp_path / "tries").mkdir()
    (tmp_path / f"{module}.py").write_text(FLAKY)
    return ["--import", str(tmp_path / f"{module}.py"), f"--trainer.callbacks+={module}.Flaky",
            f"--trainer.callbacks.tries={tmp_path / 'tries'}"]  # fmt: skip


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
def test_a_failed_ray_run_is_retried_once_then_recorded_as_failed(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray's own retry of a task whose run failed, real runs: one that fails once, one that always fails."""
    out, flaky = tmp_path / "cmp", _flaky(tmp_path, "flaky")
    args = ["compare", "--model", "nadaraya_watson", *flaky, "--seeds", "2", "--budget", "3steps", "--out", str(out)]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--launcher", "ray", "--cpus_per_run", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        "error: 1 run(s) failed after their retries (listed in "
        f"{out / 'report.md'} and {out / 'failures.jsonl'}); the first: Run base/seed1 failed (fit exited with 1): "
        "RuntimeError: flaky seed 1 fails (full output: "
    )
    assert [len((tmp_path / "tries" / f"seed{seed}").read_text().splitlines()) for seed in (0, 1)] == [2, 2]
    assert [record["run"] for record in load_records(out / "records.jsonl")] == ["base/seed0"]  # after its retry
    assert "Run base/seed1 failed" in load_records(out / "failures.jsonl")[0]["error"]
    assert (
        "- Run base/seed1 failed (fit exited with 1): RuntimeError: flaky seed 1 fails"
        in (out / "report.md").read_text()
    )


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
@pytest.mark.parametrize("launcher", ["ray", "slurm"])
def test_ctrl_c_cancels_every_run(launcher: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Ctrl-C while two long fits run as Ray tasks, or as jobs of submitit's local executor: both
    stop (no process left writing to the comparison), nothing is recorded, and the comparison is
    left to start again."""
    if launcher == "ray":
        request.getfixturevalue("ray_session")
        where = ["--launcher", "ray"]
    else:
        pytest.importorskip("submitit")
        where = ["--launcher", "slurm", "--slurm_cluster", "local"]
    out = tmp_path / "cmp"
    logs = [out / "runs" / "base" / f"seed{seed}" / "fit.log" for seed in (0, 1)]

    def interrupt_once_both_run() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(processes_mentioning(f"{out}/runs/base")) < 2:
            time.sleep(0.2)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        main(["compare", "--model", "nadaraya_watson", "--seeds", "2", "--budget", "100000steps", "--out", str(out),
              *where, "--cpus_per_run", "1"])  # fmt: skip
    assert all(log.is_file() for log in logs)  # both had started
    deadline = time.monotonic() + 10
    while processes_mentioning(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(out)) == []  # the fits, and submitit's job processes
    assert load_records(out / "records.jsonl") == []


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
def test_asha_stops_the_run_that_cannot_win(
    ray_session: None, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tune trials under ASHA, one at a time: the learned kernel first, trained to the end; then
    average pooling, worse at the first rung (one validation), stopped there and recorded as
    stopped; its fit ends (no process left) and the report lists it apart."""
    pytest.importorskip("ray.tune")
    printed = _compare(["compare", "--model", "nadaraya_watson", "--grid", "model.attention=gaussian_kernel,average",
                        "--budget", "20steps", "--out", "cmp", "--launcher", "ray", "--ray_scheduler", "asha",
                        "--parallel", "1", "--cpus_per_run", "1"])  # fmt: skip
    finished, stopped = load_records(Path("cmp/records.jsonl"))
    assert finished["run"] == "attention=gaussian_kernel/seed0" and finished["steps"] == 20
    assert set(finished["metrics"]) == {"test/mse", "test/mse_truth"}
    assert stopped["run"] == "attention=average/seed0" and stopped["metrics"] == {}
    assert (stopped["stopped"]["by"], stopped["stopped"]["metric"], stopped["stopped"]["step"]) == (
        "asha",
        "val/mse",
        1,
    )
    deadline = time.monotonic() + 10
    while processes_mentioning("-m zoo", cwd=in_tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning("-m zoo", cwd=in_tmp) == []
    assert len(Path("cmp/runs/attention=average/seed0/fit/validation.jsonl").read_text().splitlines()) < 20
    report = Path("cmp/report.md").read_text()
    assert (
        "Stopped by ASHA (recorded; not in the tables):\n\n- attention=average/seed0, after step 1: val/mse" in report
    )
    assert "| `attention=average`" not in report and "2 runs recorded" in printed


# -- SLURM (submitit's local executor) ---------------------------------------------------------------


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
def test_slurm_resumes_a_local_comparison_with_the_same_metrics(
    local_grid: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of the grid as a job of submitit's local executor (a real subprocess): the same
    metrics as the local run, the same tables; submitit's files in the job's folder."""
    pytest.importorskip("submitit")
    out = Path("cmp")
    removed = _resume_without(local_grid[0], tmp_path, ["attention=gaussian_kernel/seed0"], monkeypatch)
    _compare(_grid(out, "--launcher", "slurm", "--slurm_cluster", "local"))
    records = load_records(out / "records.jsonl")
    on_slurm = [record for record in records if record["launcher"] == "slurm"]
    assert {r["run"]: r["metrics"] for r in on_slurm} == {r["run"]: r["metrics"] for r in removed}
    assert _metric_tables(records) == _metric_tables(load_records(local_grid[0] / "records.jsonl"))
    (log,) = (out / "slurm").glob("*/*_log.out")  # one job, its folder named by its id
    assert log.parent.name == log.name.split("_", 1)[0]


# -- W&B -----------------------------------------------------------------------------------------


@pytest.mark.slow  # real processes over tens of seconds: make test PYTEST_ARGS="-m slow"
def test_wandb_offline_run_has_the_group_and_the_grid(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One real run logging to W&B offline: what the logger was given (the run's resolved
    config.yaml) and what W&B kept (its offline run's config)."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    _compare(["compare", "--model", "nadaraya_watson", "--trainer.logger", "WandbLogger", "--grid",
              "model.attention=average", "--budget", "2steps", "--out", "sweep", "--evaluate", "validate"])  # fmt: skip
    run = in_tmp / "sweep" / "runs" / "attention=average" / "seed0"
    given = yaml.safe_load((run / "fit" / "config.yaml").read_text())["trainer"]["logger"][1]["init_args"]
    assert (given["group"], given["name"], given["job_type"], given["project"]) == (
        "sweep", "attention=average/seed0", "fit", "nadaraya_watson"
    )  # fmt: skip
    grid = {"comparison": "sweep", "combination": "attention=average", "seed": 0, "model.attention": "average"}
    assert given["config"] == grid
    kept = {}  # job type -> (group, name, config) of each W&B run, as W&B wrote them
    for log in run.glob("wandb/offline-run-*/run-*.wandb"):
        (record,) = [record.run for record in wandb_records(log) if record.WhichOneof("record_type") == "run"]
        config = {item.key: json.loads(item.value_json) for item in record.config.update}
        kept[record.job_type] = (record.run_group, record.display_name, {key: config[key] for key in grid})
    assert kept == {stage: ("sweep", "attention=average/seed0", grid) for stage in ("fit", "validate")}


def _compare_stopped_while_training(out: Path, run: Path, *options: str) -> tuple[int, str]:
    """``zoo compare`` of the Nadaraya-Watson model into ``out`` with ``options``, sent SIGTERM once
    ``run`` trains: its status and standard error."""
    args = [
        "compare",
        "--model",
        "nadaraya_watson",
        *options,
        "--out",
        str(out),
        "--parallel",
        "1",
        "--cpus_per_run",
        "1",
    ]
    return sigterm_once_training(args, run)


def test_a_stopped_comparison_reports_the_runs_that_finished(tmp_path: Path) -> None:
    """Stopped while its second run trains, a comparison still writes ``report.md`` for the first,
    saying it was interrupted and how many of the planned runs are recorded."""
    out = tmp_path / "cmp"
    second = out / "runs" / "max_steps=100000" / "seed0"
    status, stderr = _compare_stopped_while_training(out, second, "--grid", "trainer.max_steps=2,100000")
    assert status == 143, stderr
    assert [record["combination"] for record in load_records(out / "records.jsonl")] == ["max_steps=2"]
    report = (out / "report.md").read_text()
    assert "**Interrupted**: 1 run(s) recorded of the 2 planned" in report
    assert "| `max_steps=2` " in report and "`max_steps=100000`" not in report.split("Interrupted")[1]


def test_sigterm_stops_the_comparison_and_its_fits_and_records_nothing_of_them(tmp_path: Path) -> None:
    """SIGTERM, as a scheduler or ``kill`` sends it, reaches the comparison alone (not its process
    group, as Ctrl-C does): the running fit is sent it too, saves ``last.ckpt`` and stops; it is
    neither tested nor recorded (the fit ends with status 0 once saved); the comparison says so in
    one line with status 143, and nothing is left running."""
    out = tmp_path / "cmp"
    run = out / "runs" / "base" / "seed0"
    status, stderr = _compare_stopped_while_training(out, run, "--budget", "100000steps")
    assert status == 143
    assert stderr.strip().splitlines()[-1].startswith("compare: stopped by SIGTERM with its running fits,")
    assert processes_mentioning(str(out)) == []
    assert list(run.rglob("last.ckpt"))  # the fit stopped as on its own SIGTERM
    assert (
        load_records(out / "records.jsonl") == []
        and not (run / "test.log").exists()
        and not (out / "report.md").exists()
    )
