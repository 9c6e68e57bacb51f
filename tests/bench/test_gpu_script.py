"""benchmarks/gpu.sh: each call's stages fit ten minutes with the largest share to nanoGPT's
Shakespeare recipe beside the zoo's, bad arguments are refused, and (slow) its CPU dry run takes
every stage end to end, the other calls' too."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "benchmarks" / "gpu.sh"
#: the first call's stages, in order; the backends, the older measurements and the Transformer's
#: budget run are calls of their own
STAGES = ["install", "environment", "cuda_backends", "cuda_tests"]
BACKENDS = ["install", "environment", "bench_backends_recurrent", "bench_backends_flex", "shakespeare_parity"]
SECOND = ["install", "environment", "bench_attention", "bench_recurrent", "bench_state", "shakespeare_fit",
          "bench_attention_all", "bench_train", "bench_decode", "bench_train_compiled"]  # fmt: skip
BUDGET = ["budget_fit", "budget_test"]
MATRIX = ["install", "environment", "matrix_steps"]


def _shares(*flags: str) -> tuple[dict[str, int], int]:
    lines = subprocess.run(
        ["bash", str(SCRIPT), "--list", *flags], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    shares = {name: int(seconds) for name, seconds in (line.split() for line in lines)}
    return shares, shares.pop("total")


@pytest.mark.parametrize("script", ["gpu.sh", "fetch_gpu_wheels.sh"])
def test_the_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(PROJECT_ROOT / "benchmarks" / script)], check=True)


def test_each_call_fits_ten_minutes_and_the_shakespeare_recipe_gets_the_most() -> None:
    shares, total = _shares()
    assert list(shares) == STAGES
    assert sum(shares.values()) <= total <= 570  # ten minutes less start-up and copying
    backends, _ = _shares("--only", ",".join(BACKENDS))
    assert max(backends, key=backends.get) == "shakespeare_parity" and sum(backends.values()) <= total
    for part in (SECOND, BUDGET, MATRIX):
        shares, _ = _shares("--only", ",".join(part))
        assert list(shares) == part and sum(shares.values()) <= total
    dry, _ = _shares("--dry-run")
    assert list(dry) == STAGES


def test_a_shorter_lease_replaces_shares_and_the_total() -> None:
    shares, total = _shares("--share", "cuda_tests:200", "--share", "environment:30", "--total", "300")
    assert shares == {"install": 25, "environment": 30, "cuda_backends": 200, "cuda_tests": 200} and total == 300


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--share", "cuda_tests"], "gpu.sh: --share takes STAGE:SECONDS, not cuda_tests"),
        (["--share", "cuda_test:20"], "gpu.sh: unknown stage cuda_test (see --list)"),
        (["--total", "ten"], "gpu.sh: --total takes seconds, not ten"),
    ],
)
def test_a_bad_share_or_total_is_refused_in_one_line(flags: list[str], message: str) -> None:
    result = subprocess.run(["bash", str(SCRIPT), "--list", *flags], check=False, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip() == message


def test_an_unknown_stage_is_refused_in_one_line() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT), "--list", "--only", "cuda_test"], check=False, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu.sh: unknown stage cuda_test (see --list)"


def test_an_unknown_argument_is_refused_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT), "--gpus", "2", "--out", str(tmp_path)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu.sh: unknown argument --gpus (see --help)"


def _fake_wheel(folder: Path) -> None:
    """A wheel of a distribution no environment has, to see the install stage install it."""
    folder.mkdir()
    with zipfile.ZipFile(folder / "zoo_gpu_probe-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("zoo_gpu_probe.py", "FOUND = True\n")
        wheel.writestr(
            "zoo_gpu_probe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zoo-gpu-probe\nVersion: 1.0\n"
        )
        wheel.writestr(
            "zoo_gpu_probe-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr("zoo_gpu_probe-1.0.dist-info/RECORD", "")


#: a nanoGPT checkout beside the project (gitignored; the fetch tool's copy), which the Shakespeare
#: stage runs beside the zoo; without one that stage is skipped, and says so
NANOGPT = PROJECT_ROOT / ".nanogpt"


def _dry_run(tmp_path: Path, data: Path, out: Path, *only: str) -> None:
    """Run the script's dry run into ``out``; assert every stage it ran says ``ok`` (the Shakespeare
    stage ``skipped`` without a nanoGPT checkout)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", str(SCRIPT), "--dry-run", "--data", str(data), "--wheels", str(tmp_path / "wheels"),
                    "--nanogpt", str(NANOGPT), "--out", str(out), "--python", sys.executable, *only],
                   env=env, check=False, timeout=1800)  # fmt: skip
    with (out / "stages.tsv").open() as handle:
        stages = {row["stage"]: row["status"] for row in csv.DictReader(handle, delimiter="\t")}
    expected = dict.fromkeys(only[1].split(",") if only else STAGES, "ok")
    if "shakespeare_parity" in expected and not (NANOGPT / "train.py").is_file():
        expected["shakespeare_parity"] = f"skipped: no nanoGPT checkout at {NANOGPT} (--nanogpt)"
    assert stages == expected, {
        name: (status, (out / f"{name}.log").read_text()[-2000:]) for name, status in stages.items() if status != "ok"
    }


@pytest.mark.slow
def test_the_dry_run_takes_every_stage_end_to_end(tmp_path: Path, shared_data: Path) -> None:
    _fake_wheel(tmp_path / "wheels")
    out = tmp_path / "results"
    _dry_run(tmp_path, shared_data, out)
    assert "installed: zoo-gpu-probe" in (out / "install.log").read_text()  # the missing distribution, and only it
    assert (out / "cuda_tests.xml").is_file()
    backends = tmp_path / "backends"
    _dry_run(tmp_path, shared_data, backends, "--only", ",".join(BACKENDS))
    for result in ["bench_backends_recurrent.json", "bench_backends_flex.json"]:
        assert (backends / result).is_file(), result
    if (NANOGPT / "train.py").is_file():
        assert "seconds_per_iteration" in (backends / "shakespeare_parity.json").read_text()
    second = tmp_path / "second"
    _dry_run(tmp_path, shared_data, second, "--only", ",".join(SECOND))
    for result in ["bench_attention.json", "bench_attention.png", "bench_recurrent.json", "bench_state.json",
                   "bench_attention_all.json", "bench_train.json", "bench_train_compiled.json", "bench_decode.json",
                   "shakespeare.txt"]:  # fmt: skip
        assert (second / result).is_file(), result
    assert "val/loss" in next((second / "runs" / "gpt_shakespeare").glob("version_*/metrics.csv")).read_text()
    _dry_run(tmp_path, shared_data, tmp_path / "budget", "--only", ",".join(BUDGET))
    metrics = next((tmp_path / "budget" / "runs" / "transformer_gpu_test").glob("version_*/metrics.csv")).read_text()
    assert "test/bleu" in metrics
    _dry_run(tmp_path, shared_data, tmp_path / "matrix", "--only", ",".join(MATRIX))
    estimate = (tmp_path / "matrix" / "matrix_estimate.md").read_text()
    assert "| parity | 216 |" in estimate and "One device, a fit at a time:" in estimate


def test_a_cuda_failure_is_logged_the_moment_it_is_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu.sh's ``cuda_failures.txt``: the controller writes each failed report (a report has no
    config to ask whether it is a worker: asking for one stopped a lease's pytest), a worker none."""
    from tests.cuda.conftest import pytest_runtest_logreport

    log = tmp_path / "failures.txt"
    monkeypatch.setenv("ZOO_FAILURE_LOG", str(log))
    report = SimpleNamespace(failed=True, nodeid="tests/cuda/test_x.py::test_y", when="call", longreprtext="boom")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    pytest_runtest_logreport(report)
    assert not log.exists()
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    pytest_runtest_logreport(report)
    assert log.read_text() == "== tests/cuda/test_x.py::test_y (call)\nboom\n\n"
