"""``python -m zoo bench train``: training throughput through the Lightning trainer on fra-eng.

The model trains for ``warmup + steps`` steps (no validation, no checkpoints, no logger); a
callback stamps the end of every step. Over the ``steps`` steps after the warm-up it reports
non-padding target tokens per second (all tokens over all time: data loading, forward,
backward and optimizer included), the median and spread of the per-step rates, and the share
of padding in the batches (bucketing keeps it low).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import lightning as L
import torch

from zoo.bench.measure import Summary, synchronize
from zoo.bench.report import markdown_table
from zoo.bench.translation import TranslationSetup, build
from zoo.datamodules.fra_eng import padding_fraction

__all__ = ["StepClock", "TrainBenchConfig", "run_train_bench", "train_table"]


@dataclass(frozen=True)
class TrainBenchConfig:
    """How long ``bench train`` runs."""

    steps: int = 50
    warmup: int = 5
    precision: str = "32-true"


class StepClock(L.Callback):
    """Records, for every training step, when it ended, its target tokens and its padding."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ends: list[float] = []
        self.tokens: list[int] = []
        self.padding: list[float] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        synchronize(self.device)
        self.ends.append(time.perf_counter())
        self.tokens.append(int(batch["tgt_lens"].sum()))
        self.padding.append(padding_fraction(batch))


def run_train_bench(setup: TranslationSetup, config: TrainBenchConfig, device: torch.device) -> dict[str, Any]:
    """Train ``warmup + steps`` steps and summarize the last ``steps``."""
    if config.warmup < 1 or config.steps < 1:
        raise ValueError(
            "bench train needs at least one warm-up step (the first measured step starts where it ends) and one step."
        )
    task, data = build(setup)
    clock = StepClock(device)
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, precision=config.precision,
        max_steps=config.warmup + config.steps, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
    )  # fmt: skip
    trainer.fit(task, datamodule=data)
    first = config.warmup  # the first measured step runs from ends[warmup - 1] to ends[warmup]
    durations = [b - a for a, b in zip(clock.ends[first - 1 : -1], clock.ends[first:])]
    tokens = clock.tokens[first:]
    return {
        "steps": len(durations),
        "tokens_per_second": sum(tokens) / sum(durations),
        "step_tokens_per_second": asdict(Summary.of([n / t for n, t in zip(tokens, durations)])),
        "step_time_ms": Summary.of(durations).scaled(1e3),
        "target_tokens_per_batch": sum(tokens) / len(tokens),
        "padding_fraction": sum(clock.padding[first:]) / len(durations),
        "parameters": sum(p.numel() for p in task.parameters()),
        "batch": data.batch_size,
    }


def train_table(setup: TranslationSetup, result: dict[str, Any]) -> str:
    rate = result["step_tokens_per_second"]
    return markdown_table(
        [
            "model",
            "attention",
            "batch",
            "steps",
            "target tokens/s",
            "per step: median [quartiles]",
            "step ms",
            "padding",
        ],
        [
            [
                setup.model,
                setup.attention or "(model default)",
                result["batch"],
                result["steps"],
                f"{result['tokens_per_second']:.0f}",
                f"{rate['median']:.0f} [{rate['q1']:.0f}-{rate['q3']:.0f}]",
                f"{result['step_time_ms']['median']:.1f}",
                f"{result['padding_fraction']:.3f}",
            ]
        ],
    )
