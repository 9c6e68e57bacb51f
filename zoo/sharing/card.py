"""``README.md`` of an exported folder: the model card, as the Hugging Face Hub shows it.

The card is a :class:`huggingface_hub.ModelCard`: YAML metadata (:class:`~huggingface_hub.ModelCardData`:
library, tags, pipeline, datasets, languages) above Markdown that says what the model is, how to
load and use it, its data, split and licence, its metrics with the command that measured them,
the command and recipe that trained it, its seed and versions, and what each file holds. It is
written from plain data, a :class:`ModelFacts` and a :class:`~zoo.sharing.runs.TrainingRun`, so
that what the card claims is what the checkpoint and its run directory record; what they do not
record is marked as absent rather than left out.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from huggingface_hub import ModelCard, ModelCardData

from zoo.sharing.codec_files import CODEC_NAME
from zoo.sharing.config import CONFIG_NAME
from zoo.sharing.data_sources import DATA_SOURCES
from zoo.sharing.metrics import EVALUATION_PREFIXES
from zoo.sharing.weights import WEIGHTS_NAME
from zoo.version import __version__

if TYPE_CHECKING:
    from zoo.sharing.runs import TrainingRun

__all__ = ["LIBRARY_NAME", "PIPELINE_TAGS", "ModelFacts", "model_card"]

LIBRARY_NAME = "attention-zoo"
#: The Hub's pipeline tag of each kind of task (a task not listed gets none).
PIPELINE_TAGS: Mapping[str, str] = {
    "classification": "text-classification",
    "translation": "translation",
    "language_model": "text-generation",
}
_STAGE_NAMES = {"val/": "validation", "test/": "test"}


@dataclass(frozen=True)
class ModelFacts:
    """What a card says about the model itself.

    Attributes:
        name: The registered model name.
        task: What it does (``translation``), or None.
        description: The task class's docstring.
        architecture: The architecture's class path.
        parameters: Its number of parameters (shared ones once).
        attention: Which attention each stack of layers holds (:func:`zoo.summary.attention_by_layer`).
        hyperparameters: Every constructor argument, as ``config.json`` holds them.
        codec: The codec's kind, or None for a model that reads no text.
        tokenizer_files: The codec's tokenizer files (``tokenizer.json``).
        methods: The methods that use the model on raw inputs, each with its docstring.
    """

    name: str
    task: str | None
    description: str
    architecture: str
    parameters: int
    attention: list[str]
    hyperparameters: dict[str, Any]
    codec: str | None = None
    tokenizer_files: list[str] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)


def model_card(model: ModelFacts, run: TrainingRun | None = None) -> ModelCard:
    """The card of ``model``; ``run`` is how it was trained (None: a model saved from Python,
    whose card says what is not known)."""
    source = DATA_SOURCES.get(run.data.name or "") if run and run.data else None
    metadata = ModelCardData(
        library_name=LIBRARY_NAME,
        tags=sorted({LIBRARY_NAME, model.name, *([model.task] if model.task else []), *_attention_names(model)}),
        pipeline_tag=PIPELINE_TAGS.get(model.task or ""),
        datasets=[source.hub_dataset] if source and source.hub_dataset else None,
        language=list(source.languages) if source and source.languages else None,
    )
    sections = [
        _title(model, run),
        _model_section(model),
        _use_section(model),
        _data_section(run),
        _metrics_section(run),
        _training_section(run),
        _files_section(model),
    ]
    return ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


# -- sections ----------------------------------------------------------------------------------------


def _title(model: ModelFacts, run: TrainingRun | None) -> str:
    lines = [f"# {model.name}", "", _first_paragraph(model.description)]
    task = f"a {model.task.replace('_', ' ')} model" if model.task else "a model"
    lines += [
        "",
        f"The `{model.name}` model of the {LIBRARY_NAME} model zoo, {task}, exported to a Hugging Face folder.",
    ]
    if run is not None:
        lines[-1] += f" It was exported from `{run.checkpoint}` ({_checkpoint_description(run)})."
    return "\n".join(lines)


def _model_section(model: ModelFacts) -> str:
    rows = [
        ("registered name", f"`{model.name}`"),
        ("task", model.task or "not declared"),
        ("architecture", f"`{model.architecture}`"),
        ("parameters", f"{model.parameters:,}"),
        ("attention by layer", "<br>".join(f"`{line}`" for line in model.attention) or "none in layers"),
        ("codec", f"`{model.codec}`" if model.codec else "none: it reads no text"),
    ]
    hyperparameters = [(f"`{name}`", f"`{json.dumps(value)}`") for name, value in model.hyperparameters.items()]
    return "\n".join(
        [
            "## Model",
            "",
            _table(("", ""), rows),
            "",
            f"Its hyperparameters, every constructor argument (`{CONFIG_NAME}` holds them, as JSON):",
            "",
            _table(("hyperparameter", "value"), hyperparameters),
        ]
    )


def _use_section(model: ModelFacts) -> str:
    lines = [
        "## Use",
        "",
        "```python",
        "import zoo",
        "",
        'model = zoo.from_pretrained("THIS_FOLDER_OR_HUB_ID")  # the task\'s LightningModule, in evaluation mode',
    ]
    lines += [f"model.{method}(...)  # {_first_sentence(doc)}" for method, doc in model.methods.items()]
    lines.append("```")
    if "predict" in model.methods:
        lines += [
            "",
            "From the command line, one prediction per line:",
            "",
            "```bash",
            "python -m zoo predict --pretrained THIS_FOLDER --data.predict_texts '[...]'",
            "```",
        ]
    lines += [
        "",
        f"Loading needs `pip install {LIBRARY_NAME}` (version {__version__} wrote this folder) and reads only JSON "
        "and safetensors: nothing is unpickled.",
    ]
    return "\n".join(lines)


def _data_section(run: TrainingRun | None) -> str:
    if run is None or run.data is None:
        return "## Data\n\nNot recorded: the checkpoint does not name its data module."
    data = run.data
    source = DATA_SOURCES.get(data.name or "")
    rows = [("data module", f"`{data.name or data.class_path}`")]
    if source is None:
        rows.append(("source", "not recorded for this data module"))
    else:
        rows += [("corpus", source.corpus), ("split", source.split), ("licence", source.licence)]
    arguments = "\n".join(f"{name}: {json.dumps(value)}" for name, value in data.arguments.items())
    return "\n".join(["## Data", "", _table(("", ""), rows), "", "Its arguments:", "", "```yaml", arguments, "```"])


def _metrics_section(run: TrainingRun | None) -> str:
    if run is None or run.directory is None:
        return "## Metrics\n\nNot recorded: the model was exported without the run directory its metrics are logged in."
    measured_by = f"`{run.commands[-1]}`" if run.commands else "a command that is not recorded"
    lines = [
        "## Metrics",
        "",
        f"The last values logged in the run directory `{run.directory}`, measured by {measured_by}"
        + (" (the last of the commands under Training)." if len(run.commands) > 1 else "."),
        "",
    ]
    rows = []
    for prefix in EVALUATION_PREFIXES:
        logged = {name: metric for name, metric in sorted(run.metrics.items()) if name.startswith(prefix)}
        rows += [(f"`{name}`", f"{metric.value:.4g}", str(metric.step)) for name, metric in logged.items()]
        if not logged:
            rows.append((f"{_STAGE_NAMES[prefix]}: not measured in this run", "", ""))
    lines.append(_table(("metric", "value", "step"), rows))
    if not any(name.startswith("test/") for name in run.metrics):
        command = shlex.join(
            [
                "python",
                "-m",
                "zoo",
                "test",
                "--config",
                str(run.directory / "config.yaml"),
                "--ckpt_path",
                str(run.checkpoint),
            ]
        )
        lines += ["", f"To measure the test metrics of this checkpoint: `{command}`."]
    if run.monitor is not None and run.monitor[1] is not None:
        lines += ["", f"The run's checkpoints track `{run.monitor[0]}`; its best value was {run.monitor[1]:.4g}."]
    return "\n".join(lines)


def _training_section(run: TrainingRun | None) -> str:
    if run is None:
        return "## Training\n\nNot recorded: the model was saved from Python, not exported from a checkpoint."
    lines = ["## Training", ""]
    if run.commands:
        lines += [
            "Trained by "
            + ("this command" if len(run.commands) == 1 else "these commands, oldest first (resumed)")
            + ":",
            "",
            "```bash",
            *run.commands,
            "```",
        ]
    else:
        lines.append(
            "The command that trained it is not recorded (a run from before commands were recorded, or one "
            "trained outside the command line)."
        )
    lines += [
        "",
        _table(
            ("", ""),
            [
                ("seed", f"`seed_everything: {run.seed}`" if run.seed is not None else "not seeded"),
                ("checkpoint", f"`{run.checkpoint.name}`, {_checkpoint_description(run)}"),
            ],
        ),
    ]
    if run.config is not None:
        lines += [
            "",
            "<details><summary>The recipe: the run's resolved configuration (<code>config.yaml</code>)</summary>",
            "",
            "```yaml",
            run.config.rstrip("\n"),
            "```",
            "",
            "</details>",
        ]
    if run.versions:
        versions = [(package, f"`{version}`" if version else "none") for package, version in run.versions.items()]
        lines += ["", "Trained with:", "", _table(("package", "version"), versions)]
    return "\n".join(lines)


def _files_section(model: ModelFacts) -> str:
    rows = [
        (CONFIG_NAME, "the registered model name, task, architecture and every hyperparameter"),
        (WEIGHTS_NAME, "the weights, and nothing else (safetensors)"),
    ]
    if model.codec:
        rows.append((CODEC_NAME, f"the `{model.codec}` codec: how raw inputs become token ids and ids text"))
        rows += [(file, "its tokenizer, in the `tokenizers` library's JSON") for file in model.tokenizer_files]
    rows.append(("README.md", "this card"))
    return "## Files\n\n" + _table(("file", "holds"), [(f"`{name}`", holds) for name, holds in rows])


# -- helpers -----------------------------------------------------------------------------------------


def _checkpoint_description(run: TrainingRun) -> str:
    """``the best by `val/acc`, epoch 0, step 3``."""
    metric = f"`{run.monitor[0]}`" if run.monitor else None
    if run.checkpoint.name == "last.ckpt":
        which = "the run's last checkpoint"
    elif metric:
        which = f"the best by {metric}" if run.is_best else f"not the best by {metric}"
    else:
        which = "a checkpoint of the run"
    return f"{which}, epoch {run.epoch}, step {run.step}"


def _attention_names(model: ModelFacts) -> list[str]:
    """The attention variants the hyperparameters name (a name, or a per-layer list of names and specs)."""
    names = []
    for key in ("attention", "cross_attention"):
        value = model.hyperparameters.get(key)
        for entry in value if isinstance(value, list) else [value]:
            name = entry.get("name") if isinstance(entry, dict) else entry
            if isinstance(name, str):
                names.append(name)
    return names


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (``|`` in cells escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _first_paragraph(docstring: str) -> str:
    """A docstring's first paragraph on one line, reStructuredText roles and literals as Markdown code."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    return re.sub(r"(?::\w+:)?``?~?([^`]+)``?", r"`\1`", paragraph)


def _first_sentence(docstring: str) -> str:
    """The first sentence (or clause before a colon) of a docstring's first paragraph."""
    sentence = re.split(r"(?<=[.:])\s", _first_paragraph(docstring), maxsplit=1)[0]
    return sentence.removesuffix(":").removesuffix(".") + "."
