"""Every zoo model as a Hugging Face Hub folder: ``save_pretrained``, ``push_to_hub`` and
``from_pretrained``, from huggingface_hub's :class:`~huggingface_hub.ModelHubMixin`.

:class:`~zoo.tasks.ZooTask` inherits :class:`HubMixin`, so every registered model, a plugin's
too, saves and loads the folder :mod:`zoo.sharing` describes. The mixin gives the flow: its
``save_pretrained`` calls :meth:`HubMixin._save_pretrained` and writes the card
:meth:`HubMixin.generate_model_card` returns; its ``push_to_hub`` saves into a temporary folder
and uploads it in one commit; its ``from_pretrained`` reads ``config.json`` from a folder or the
Hub and calls :meth:`HubMixin._from_pretrained`. Where the zoo departs from the mixin's defaults:

* ``config.json`` is written here, not from the constructor arguments the mixin captures when a
  model is built: those lack the architecture's defaults and the registered name.
* A model is rebuilt by the registered name ``config.json`` holds, through the model registry,
  by :func:`~zoo.tasks.rebuild.rebuild_task` as :func:`zoo.load_checkpoint` rebuilds it,
  whatever class ``from_pretrained`` is called on:
  ``ZooTask.from_pretrained`` (which is ``zoo.from_pretrained``) loads any zoo model,
  ``Classifier.from_pretrained`` a classifier or a model derived from it, and refuses others.
* Loading is strict (:func:`~zoo.tasks.rebuild.rebuild_task`) and reads only JSON and
  safetensors (:mod:`zoo.sharing.weights`).
  ``PyTorchModelHubMixin`` is not used: it builds ``cls(**config)``, loads weights leniently by
  default and falls back to unpickling a ``pytorch_model.bin``.
* ``save_pretrained`` writes into a temporary sibling folder renamed into place at the end, and
  refuses a folder that holds anything unless ``overwrite=True`` (the mixin would write into it,
  keeping an older card and tokenizer).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from huggingface_hub import ModelCard, ModelHubMixin, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError, OfflineModeIsEnabled
from torch import nn

from zoo.errors import CheckpointError, ConfigurationError
from zoo.sharing.card import ModelFacts, model_card
from zoo.sharing.codec_files import codec_file_names, read_codec, write_codec
from zoo.sharing.config import CONFIG_NAME, ZOO_KEY, ModelConfig
from zoo.sharing.staging import staged_folder
from zoo.sharing.weights import WEIGHTS_NAME, read_weights, save_weights
from zoo.summary import attention_by_layer
from zoo.tasks.rebuild import rebuild_task
from zoo.tasks.registry import MODEL_REGISTRY
from zoo.text.codecs import Codec

if TYPE_CHECKING:
    from zoo.sharing.runs import TrainingRun

__all__ = ["HubMixin"]

Task = TypeVar("Task", bound="HubMixin")

#: The methods that use a model on raw inputs, as a card lists them.
_USES = ("predict", "generate")


class HubMixin(ModelHubMixin):
    """``save_pretrained``, ``push_to_hub`` and ``from_pretrained`` for :class:`~zoo.tasks.ZooTask`
    (see the module docstring for what each writes and reads)."""

    # Provided by ZooTask.
    kind: ClassVar[str | None]
    codecs: ClassVar[tuple[type[Codec], ...]]
    codec: Codec | None
    model: nn.Module
    hparams: Any

    def save_pretrained(self, save_directory: str | Path, *, overwrite: bool = False, **kwargs: Any) -> str | None:
        """Write the model's folder: ``config.json``, ``model.safetensors``, its codec's files and
        ``README.md``, the card (``model_card_kwargs={"run": TrainingRun}`` says how it was trained).

        The folder is written beside ``save_directory`` and renamed into place when complete.
        The other keyword arguments are :meth:`huggingface_hub.ModelHubMixin.save_pretrained`'s
        (``push_to_hub=True`` pushes to ``repo_id``, by default the folder's name).

        Raises:
            DataError: ``save_directory`` holds something and ``overwrite`` is false.
            ConfigurationError: the model is not registered, or is a text model without a codec.
        """
        target = Path(save_directory)
        if kwargs.get("push_to_hub"):
            kwargs.setdefault("repo_id", target.name)  # not the temporary folder's name
        with staged_folder(target, overwrite=overwrite) as staging:
            return super().save_pretrained(staging, **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:
        config = self.pretrained_config()
        save_weights(self, save_directory)
        if self.codec is not None:
            write_codec(save_directory, self.codec)
        config.write(save_directory)

    def pretrained_config(self) -> ModelConfig:
        """What the model's ``config.json`` holds.

        Raises:
            ConfigurationError: the model is not registered, or is a text model without a codec.
        """
        name = MODEL_REGISTRY.name_of(type(self))
        if name is None:
            raise ConfigurationError(
                f"{type(self).__name__} is not a registered zoo model, so nothing could rebuild it from a folder: "
                f"register it with @zoo.tasks.register_model."
            )
        if self.codecs and self.codec is None:
            raise ConfigurationError(
                f"This {name!r} model has no codec (vocabulary or tokenizer), so its folder could not read text: "
                f"load it from a checkpoint that holds one, or train it with its data module."
            )
        architecture = type(self.model)
        return ModelConfig(
            model=name,
            task=self.kind,
            architecture=f"{architecture.__module__}.{architecture.__qualname__}",
            codec=None if self.codec is None else self.codec.codec_kind,
            hyperparameters={key: value for key, value in self.hparams.items() if not key.startswith("_")},
        )

    def generate_model_card(self, run: TrainingRun | None = None) -> ModelCard:
        """The model card (``README.md``); ``run`` is how the model was trained, where known."""
        config = self.pretrained_config()
        facts = ModelFacts(
            name=config.model,
            task=config.task,
            description=inspect.getdoc(type(self)) or "",
            architecture=config.architecture,
            parameters=sum(parameter.numel() for parameter in self.parameters()),
            attention=attention_by_layer(self),
            hyperparameters=config.hyperparameters,
            codec=config.codec,
            tokenizer_files=list(codec_file_names(self.codec).values()) if self.codec is not None else [],
            methods={
                name: inspect.getdoc(getattr(self, name)) or "" for name in _USES if _implements(type(self), name)
            },
        )
        return model_card(facts, run)

    @classmethod
    def from_pretrained(
        cls: type[Task],
        pretrained_model_name_or_path: str | Path,
        *,
        device: str = "cpu",
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        **hyperparameters: Any,
    ) -> Task:
        """The model of an exported folder, or of a Hub model id, in evaluation mode, ready to use::

            model = zoo.from_pretrained("exports/sentiment-sst2")    # or "user/sentiment-sst2"
            model.predict(["a gripping, beautiful film"])

        The model is rebuilt by the registered name in its ``config.json`` through the model
        registry, its weights are loaded strictly from ``model.safetensors`` and its codec from
        ``codec.json`` and the tokenizer files; nothing is unpickled. A plugin model or
        attention must be installed (or imported), as for training.

        Args:
            pretrained_model_name_or_path: A folder written by ``zoo export`` or
                ``save_pretrained``, or a Hugging Face Hub model id.
            device: Where the returned model lives.
            revision: A branch, tag or commit of a Hub model.
            cache_dir: Where Hub downloads are cached.
            force_download: Download again, even what is cached.
            local_files_only: Use only what is cached.
            token: A Hub token, for private models.
            hyperparameters: Hyperparameters to use instead of the folder's (``beam_size=8``);
                the architecture's must stay as trained, or the weights do not fit.

        Returns:
            The task (a LightningModule) in evaluation mode.

        Raises:
            CheckpointError: no such folder or Hub model, or one that is not a zoo model, is of
                another model than this class, lacks a field or file the model needs, or whose
                weights do not fit (one line naming the tensor).
            UnknownNameError: the model (or its attention) is not registered in this process.
        """
        source = str(pretrained_model_name_or_path)
        if os.path.isdir(source) and not os.path.isfile(os.path.join(source, CONFIG_NAME)):
            raise _not_exported(source)
        try:
            return super().from_pretrained(
                source,
                revision=revision,
                cache_dir=cache_dir,
                force_download=force_download,
                local_files_only=local_files_only,
                token=token,
                device=device,
                **hyperparameters,
            )
        except (HFValidationError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
            raise CheckpointError(
                f"Cannot load {source!r}: there is no such folder here, and the Hugging Face Hub did not give a "
                f"model of that id ({type(exc).__name__}: {detail})."
            ) from exc

    @classmethod
    def _from_pretrained(
        cls: type[Task],
        *,
        model_id: str,
        revision: str | None,
        cache_dir: str | Path | None,
        force_download: bool,
        local_files_only: bool,
        token: str | bool | None,
        config: dict[str, Any] | None = None,
        device: str = "cpu",
        **model_kwargs: Any,
    ) -> Task:
        if os.path.isdir(model_id):
            folder = Path(model_id)
        else:
            folder = Path(
                snapshot_download(
                    repo_id=model_id,
                    revision=revision,
                    cache_dir=cache_dir,
                    force_download=force_download,
                    local_files_only=local_files_only,
                    token=token,
                    allow_patterns=["*.json", WEIGHTS_NAME],  # never a pickle, whatever else the repository holds
                )
            )
        if config is None:
            raise _not_exported(model_id)
        saved = ModelConfig.from_json(config, f"{model_id}/{CONFIG_NAME}")
        # The mixin passes config.json's keys on as keyword arguments to classes that take **kwargs;
        # beside them, model_kwargs holds the caller's hyperparameters, which win.
        hyperparameters = saved.hyperparameters | {k: v for k, v in model_kwargs.items() if k != ZOO_KEY}
        task = rebuild_task(
            saved.model,
            hyperparameters,
            read_weights(folder),
            saved_format=saved.format,
            task_class=cls,
            hyperparameters_from=f"{model_id}/{CONFIG_NAME}",
            weights_from=str(folder / WEIGHTS_NAME),
        )
        if saved.codec is not None and not task.codecs:
            raise CheckpointError(f"{model_id}/{CONFIG_NAME} names a codec, but the {saved.model!r} model reads none.")
        if saved.codec is None and task.codecs:
            raise CheckpointError(
                f"{model_id}/{CONFIG_NAME} names no codec, but the {saved.model!r} model reads its inputs with one."
            )
        if saved.codec is not None:
            task.codec = read_codec(folder, saved.codec, task.codecs)
        return task.to(device).eval()


def _not_exported(source: str) -> CheckpointError:
    return CheckpointError(
        f"{source!r} has no {CONFIG_NAME}: it is not a folder that zoo export or save_pretrained wrote."
    )


def _implements(task_class: type, name: str) -> bool:
    """Whether ``task_class`` has method ``name`` of its own making (ZooTask's ``predict`` only
    raises NotImplementedError)."""
    method = getattr(task_class, name, None)
    return callable(method) and method.__qualname__ != f"ZooTask.{name}"
