"""``python -m zoo bench classify``: the classifier's training steps per second and peak memory,
per attention, over sequence lengths (the shape of the Long Range Arena paper's Table 2).

Each case is the ``classifier`` model as ``python -m zoo fit --model classifier --config ...``
builds it from the given config files (by default the Text task's at the CPU size), with
``--model.attention NAME`` and ``--data.max_length L``, so the benchmark measures the recipe the
study trains, not a separate one. One timed call is one training step on a batch of the data
module's size: forward, cross-entropy, backward, gradient clipping where the trainer's config
clips, and the recipe's AdamW and learning-rate schedule steps. The batch is random tokens padded
to ``L``, each sequence keeping a random length between half and all of ``L`` (the Text task
pads every review to the same length, so the shapes are the task's; the data itself is not
read). The steps go through the model directly rather than the Lightning trainer so that every
attention is timed round-robin with the others at each length; the trainer's own bookkeeping is
not in the time.

The report gives steps per second and peak memory at each length, both also relative to the
baseline (``dot_product``): speed-ups above 1 are faster, memory ratios below 1 smaller, as the
paper's Table 2 gives them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from zoo.attention import get_attention
from zoo.bench.build import build_from_cli
from zoo.bench.report import markdown_table
from zoo.bench.sweep import OnLength, SweepSettings, Workload, growth, sweep_lengths
from zoo.errors import ConfigurationError
from zoo.tasks import Classifier
from zoo.tasks.optim import adamw_with_warmup

__all__ = [
    "LRA_ATTENTIONS", "TEXT_CPU_CONFIGS", "ClassifyBenchConfig", "TrainingStep", "classify_tables", "run_classify_bench",
]  # fmt: skip

#: The Long Range Arena's families as the zoo names them, the paper's Table 2 rows.
LRA_ATTENTIONS = (
    "dot_product", "local", "sparse", "longformer", "linformer", "reformer",
    "sinkhorn", "synthesizer", "bigbird", "linear", "performer",
)  # fmt: skip
#: The Text task at this project's CPU size (the packaged configs the study trains).
TEXT_CPU_CONFIGS = tuple(
    str(Path(__file__).parents[1] / "configs" / name)
    for name in ("classifier_lra_text.yaml", "classifier_lra_text_cpu.yaml")
)


@dataclass(frozen=True)
class ClassifyBenchConfig(SweepSettings):
    """What ``bench classify`` builds and measures (and, from :class:`SweepSettings`, how often).

    ``attention_kwargs`` maps an attention's name to its extra arguments. An attention built for
    a fixed length (a ``max_len`` argument: ``synthesizer``'s logits, ``linformer``'s
    projections) is built for each length measured, the classification token included, unless
    ``attention_kwargs`` sets it: its parameters, and their optimizer step, then grow with the
    length as the benchmark's models do. ``batch`` ``None`` keeps the data module's batch size."""

    warmup: int = 1  # a training step at 4k takes seconds: fewer calls than bench attention's
    repeats: int = 5
    time_limit: float = 120.0
    attentions: Sequence[str] = LRA_ATTENTIONS
    configs: Sequence[str] = TEXT_CPU_CONFIGS
    attention_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch: int | None = None
    baseline: str = "dot_product"
    seed: int = 0

    def cli_arguments(self, attention: str, length: int) -> list[str]:
        """The ``python -m zoo fit`` flags that build ``attention``'s classifier at ``length``."""
        args = ["--model", "classifier"]
        for path in self.configs:
            args += ["--config", path]
        args += ["--model.attention", attention, "--data.max_length", str(length)]
        args += ["--model.heatmap_examples", "0", "--trainer.logger", "false"]
        kwargs = dict(self.attention_kwargs.get(attention, {}))
        if "max_len" in inspect.signature(get_attention(attention)).parameters:
            kwargs.setdefault("max_len", length + 1)  # built for the length it runs at, [CLS] included
        if kwargs:
            args += ["--model.attention_kwargs", json.dumps(kwargs)]
        if self.batch is not None:
            args += ["--data.batch_size", str(self.batch)]
        return args


@dataclass
class TrainingStep:
    """The recipe's classifier and optimizer at one length, with a random batch of that length;
    a call is one training step, :meth:`reset` clears the gradients (untimed)."""

    task: Classifier
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    tokens: torch.Tensor
    valid_lens: torch.Tensor
    labels: torch.Tensor
    clip: float | None

    @classmethod
    def build(cls, config: ClassifyBenchConfig, attention: str, length: int, device: torch.device) -> TrainingStep:
        """``attention``'s classifier as ``zoo fit`` builds it from ``config``'s files, and a batch."""
        torch.manual_seed(config.seed)
        cli = build_from_cli(config.cli_arguments(attention, length))
        task, hparams = cli.model.to(device), cli.model.hparams
        recipe = adamw_with_warmup(
            task.model, lr=hparams.lr, weight_decay=hparams.weight_decay, warmup_steps=hparams.warmup_steps,
            total_steps=cli.trainer.max_steps, fused=True,
        )  # fmt: skip
        generator = torch.Generator().manual_seed(config.seed * 100_003 + length)
        batch = cli.datamodule.batch_size
        valid_lens = torch.randint(max(length // 2, 1), length + 1, (batch,), generator=generator)
        tokens = torch.randint(0, hparams.vocab_size, (batch, length), generator=generator)
        tokens[torch.arange(length) >= valid_lens[:, None]] = hparams.padding_idx
        labels = torch.randint(0, hparams.num_classes, (batch,), generator=generator)
        task.train()
        return cls(
            task, recipe["optimizer"], recipe["lr_scheduler"]["scheduler"], tokens.to(device), valid_lens.to(device),
            labels.to(device), cli.trainer.gradient_clip_val,
        )  # fmt: skip

    def __call__(self) -> None:
        F.cross_entropy(self.task(self.tokens, self.valid_lens), self.labels).backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.task.parameters(), self.clip)
        self.optimizer.step()
        self.scheduler.step()

    def reset(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @property
    def workload(self) -> Workload:
        return Workload(self, self.reset)


def run_classify_bench(
    config: ClassifyBenchConfig, device: torch.device, on_length: OnLength | None = None
) -> list[dict[str, Any]]:
    """Every attention at every length, round-robin at each length; one record per attention:
    ``{"name", "growth_exponent", "results": [per length]}``."""
    if config.baseline not in config.attentions:
        raise ConfigurationError(
            f"The baseline {config.baseline!r} is not among the attentions measured; add it to --attentions "
            "or name one of them with --baseline."
        )
    builders = {
        name: (lambda length, name=name: TrainingStep.build(config, name, length, device).workload)
        for name in config.attentions
    }
    results = sweep_lengths(builders, config, device, on_length)
    records = []
    for name in config.attentions:
        records.append({"name": name, "growth_exponent": growth(results[name]), "results": results[name]})
    return records


def classify_tables(records: list[dict[str, Any]], config: ClassifyBenchConfig) -> str:
    """Two Markdown tables: steps per second, and peak memory, each with its ratio to the baseline."""
    by_length = {r["name"]: {x["length"]: x for x in r["results"]} for r in records}
    base = by_length[config.baseline]

    def speed(name: str, length: int) -> str:
        result, reference = by_length[name][length], base[length]
        if result["status"] != "ok":
            return result["status"].split(":")[0]
        rate = 1e3 / result["time_ms"]["median"]
        if reference["status"] != "ok":
            return f"{rate:.3g}"
        return f"{rate:.3g} ({reference['time_ms']['median'] / result['time_ms']['median']:.2f}x)"

    def memory(name: str, length: int) -> str:
        result, reference = by_length[name][length], base[length]
        if "peak_memory_mib" not in result:
            return result["status"].split(":")[0] if result["status"] != "ok" else "-"
        value = result["peak_memory_mib"]
        shown = f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
        if "peak_memory_mib" not in reference:
            return shown
        return f"{shown} ({value / reference['peak_memory_mib']:.2f}x)"

    headers = [f"L={n}" for n in config.lengths]
    speed_rows = [
        [
            r["name"],
            *(speed(r["name"], n) for n in config.lengths),
            "-" if r["growth_exponent"] is None else f"{r['growth_exponent']:.2f}",
        ]
        for r in records
    ]
    memory_rows = [[r["name"], *(memory(r["name"], n) for n in config.lengths)] for r in records]
    return "\n\n".join(
        [
            f"Training steps per second (speed-up over {config.baseline}):\n\n"
            + markdown_table(["attention", *headers, "time exponent"], speed_rows),
            f"Peak memory of a step, MiB (ratio to {config.baseline}):\n\n"
            + markdown_table(["attention", *headers], memory_rows),
        ]
    )
