"""Records for the board's tests, written by the real ``zoo compare`` runner: an MQAR grid over
attention, width and length, two seeds, whose child processes are replaced by a stand-in that
writes what a fit and a validation would (timing, a training curve, the metrics). So the records,
run directories and file names are exactly those ``zoo compare`` writes; only the numbers are
made up, by :func:`accuracy`, which the tests use again to know what the page must show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo.compare.run as runs
import zoo.compare.runner as runner
from zoo.compare import CompareConfig, Comparison, LocalLauncher, parse_budget
from zoo.compare.process import ChildResult

ATTENTIONS = ("dot_product", "retention", "[local, gla]")
WIDTHS = (32, 64)
LENGTHS = (64, 128)
SEEDS = 2
#: What fit resolves for the grid's keys (the runner checks them before it starts).
RESOLVED = {
    "model": {"class_path": "zoo.tasks.language_model.LanguageModel", "init_args": {"attention": "x", "d_model": 1}},
    "data": {"class_path": "zoo.datamodules.recall.mqar.MQARDataModule", "init_args": {"seq_len": 1, "seed": 0}},
}


def accuracy(attention: str, width: int, length: int, seed: int) -> float:
    """The made-up validation accuracy of a run: wider helps, longer hurts, recurrences recall less."""
    base = {"dot_product": 0.9, "retention": 0.5, "[local, gla]": 0.7}[attention]
    return round(min(1.0, base * (width / 64) ** 0.5 * (64 / length) ** 0.25) - 0.01 * seed, 6)


def _fake_child(command: list[str], log: Path, threads: int, env=None, cwd=None, poll=None) -> ChildResult:
    """Writes what ``fit`` (timing, metrics.csv with a curve) or ``validate`` (metrics.csv) would."""
    flags = dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)
    directory = Path(flags["--trainer.logger.init_args.save_dir"], flags["--trainer.logger.init_args.name"])
    stage = flags["--trainer.logger.init_args.version"]
    (directory / stage).mkdir(parents=True, exist_ok=True)
    log.write_text(f"{stage} done\n", encoding="utf-8")
    value = accuracy(
        flags["--model.attention"],
        int(flags["--model.d_model"]),
        int(flags["--data.seq_len"]),
        int(flags["--seed_everything"]),
    )
    if stage == "fit":
        timing = {"steps": 20, "seconds_per_step": 0.01, "wall_seconds_per_step": 0.012, "samples_per_second": 800.0}
        (directory / "fit" / "timing.json").write_text(json.dumps(timing), encoding="utf-8")
        rows = [f"{step},{value * step / 20:.6f},,{2.0 - step / 20:.6f}" for step in (5, 10, 15, 20)]
        (directory / "fit" / "metrics.csv").write_text(
            "step,val/accuracy,epoch,train/loss\n" + "\n".join(rows) + "\n", encoding="utf-8"
        )
    else:
        (directory / stage / "metrics.csv").write_text(
            f"epoch,step,val/accuracy,val/loss,val/recall_at_2\n0,20,{value},{1 - value:.6f},{value / 2:.6f}\n",
            encoding="utf-8",
        )
    return ChildResult(0, 0.5, 100.0)


def write_mqar_comparison(out: Path) -> Path:
    """Run the synthetic MQAR grid into ``out`` through :class:`zoo.compare.Comparison`; return ``out``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runs, "run_child", _fake_child)
        patch.setattr(runner, "resolve_base", lambda base: RESOLVED)
        config = CompareConfig(
            base=["--model", "gpt", "--data", "mqar"],
            axes={
                "model.attention": list(ATTENTIONS),
                "model.d_model": [str(w) for w in WIDTHS],
                "data.seq_len": [str(n) for n in LENGTHS],
            },
            seeds=SEEDS,
            budget=parse_budget("20steps"),
            out=out,
            evaluate="validate",
        )
        Comparison(config, LocalLauncher(parallel=1)).run()
    return out


@pytest.fixture(scope="session")
def mqar_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the synthetic MQAR comparison (``records/mqar``)."""
    root = tmp_path_factory.mktemp("records")
    write_mqar_comparison(root / "mqar")
    return root


@pytest.fixture(scope="session")
def mqar_site(mqar_records: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The board of :func:`mqar_records`, built once: its ``index.html``."""
    from zoo.board.site import build_site

    return build_site([mqar_records], tmp_path_factory.mktemp("site")).index
