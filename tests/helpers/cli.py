"""Running ``python -m zoo`` inside a test: quiet output, a small version of each model, and a
tiny fit that returns the run directory it wrote.

The small sizes are written here once, so that every CLI smoke test trains the same quick
model and a change of a model's flags is made in one place.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from zoo.commands import main

__all__ = ["QUIET", "SMALL", "flags", "hparams", "latest_run", "tiny_fit", "trainer_budget"]

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
"""No progress bar and no model summary: the test's output stays readable."""


def flags(group: str, **values: object) -> list[str]:
    """``--group.name value`` for each keyword, in order: dicts and lists as JSON, booleans as
    ``true``/``false``, anything else as ``str``."""
    out = []
    for name, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (dict, list)):
            text = json.dumps(value)
        else:
            text = str(value)
        out += [f"--{group}.{name}", text]
    return out


SMALL: dict[str, list[str]] = {
    "transformer": flags("model", d_model=32, num_heads=2, ffn_hidden=64, num_encoder_layers=1, num_decoder_layers=1),
    "seq2seq": flags("model", embed_dim=32, hidden_size=32, num_layers=1),
    "sentiment": flags("model", d_model=32, num_heads=2, ffn_hidden=64, num_layers=1),
    "gpt": [*flags("model", d_model=32, num_heads=2, num_layers=1), *flags("data", block_size=32, batch_size=8)],
    "recall": [
        *flags("model", d_model=32, num_heads=2, lr=1e-2),
        *flags("data", seq_len=32, num_kv_pairs=2, vocab_size=64, num_train=640, num_test=64, batch_size=16),
    ],
}
"""A small, quick version of each registered model, as command-line flags."""


def trainer_budget(train_batches: int, val_batches: int) -> list[str]:
    """One epoch of ``train_batches`` training batches and ``val_batches`` validation batches."""
    return flags("trainer", max_epochs=1, limit_train_batches=train_batches, limit_val_batches=val_batches)


def latest_run(model: str, root: Path | None = None) -> Path:
    """The newest ``runs/<model>/version_N`` under ``root`` (the working directory by default)."""
    runs = Path(root or Path.cwd(), "runs", model).glob("version_*")
    return max(runs, key=lambda run: int(run.name.removeprefix("version_")))


def hparams(run: Path) -> dict:
    """The hyperparameters a run recorded (its ``hparams.yaml``)."""
    return yaml.safe_load((run / "hparams.yaml").read_text())


def tiny_fit(model: str, *extra: str, small: bool = True) -> Path:
    """``python -m zoo fit --model MODEL`` in this process, quietly, with :data:`SMALL`'s flags
    for the model (unless ``small`` is false) followed by ``extra``; returns the run directory.

    ``extra`` carries the data and the trainer budget (see :func:`flags`, :func:`trainer_budget`).
    """
    main(["fit", "--model", model, *(SMALL[model] if small else []), *extra, *QUIET])
    return latest_run(model)
