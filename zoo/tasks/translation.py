"""Translation as LightningModules: teacher-forced training, sacreBLEU, greedy and beam decoding.

:class:`TranslationTask` holds what every translation model shares; the registered models
``transformer`` and ``seq2seq`` are thin subclasses that name their architecture (LightningCLI
reads the shared constructor's signature and follows ``**model_kwargs`` into the architecture's).
Validation decodes greedily; test reports beam search (``test/bleu``) and greedy
(``test/bleu_greedy``); predict translates with beam search. BLEU is corpus-level
sacreBLEU on detokenized, cased text against every reference of each source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torchmetrics
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn

from zoo.errors import ConfigurationError
from zoo.models.decoding import DecodeLimits, beam_search, greedy_decode
from zoo.models.seq2seq import Seq2SeqAttention
from zoo.models.transformer import Transformer
from zoo.positions import LearnedPositions
from zoo.tasks.base import ZooTask
from zoo.tasks.bleu import CorpusBLEU
from zoo.tasks.figures import attention_heatmaps, publish_figure
from zoo.tasks.optim import configure_adamw
from zoo.tasks.registry import register_model
from zoo.text.codecs import TranslationCodec

__all__ = ["Seq2SeqTranslator", "TransformerTranslator", "TranslationTask"]


def _sentences(batch: dict[str, Any]) -> int:
    return batch["src"].shape[0]


def _target_tokens(batch: dict[str, Any]) -> int:
    return int(batch["tgt_lens"].sum())  # after the step, once ThroughputMonitor has synchronised


class TranslationTask(ZooTask):
    """Shared training, evaluation and decoding of translation models.

    Text comes and goes through the codec (the data module's, or the checkpoint's):
    ``decode(ids) -> str`` for BLEU and predictions, ``id_to_token`` for heatmaps. Subclasses name
    their :attr:`architecture`, an :class:`~zoo.models.decoding.EncoderDecoder` whose
    ``forward(src, src_lens, tgt_in, need_weights=...)`` returns logits and cross-attention
    weights; the constructor's other arguments are shared (see the subclasses' ``Args``).
    """

    default_datamodule = "fra_eng"
    data_links = ("vocab_size", "padding_idx", "bos_idx", "eos_idx")
    monitor = ("val/bleu", "max")
    codecs = (TranslationCodec,)
    kind = "translation"
    #: Training steps over which ``ThroughputMonitor`` measures sentences and target tokens per second.
    throughput_window: int = 50
    #: Read by ``ThroughputMonitor``; unknown here, so it reports no FLOPs (and does not warn).
    flops_per_batch: int | None = None
    model: nn.Module

    #: The architecture, an :class:`~zoo.models.decoding.EncoderDecoder` class (a static
    #: method, so that jsonargparse follows ``**model_kwargs`` into its signature).
    architecture: ClassVar[Callable[..., nn.Module]]

    def __init__(
        self,
        vocab_size: int,
        padding_idx: int = 0,
        bos_idx: int = 2,
        eos_idx: int = 3,
        lr: float = 2e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 400,
        label_smoothing: float = 0.1,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        max_decode_len: int = 100,
        heatmap_examples: int = 2,
        torch_compile: bool = False,
        **model_kwargs: Any,
    ) -> None:
        super().__init__(torch_compile)
        self.save_hyperparameters()
        self.save_model_hyperparameters(self.architecture, model_kwargs)
        self.model = self.architecture(vocab_size=vocab_size, padding_idx=padding_idx, **model_kwargs)
        self.padding_idx, self.bos_idx, self.eos_idx = padding_idx, bos_idx, eos_idx
        self.label_smoothing, self.beam_size, self.alpha = label_smoothing, beam_size, length_penalty
        self.max_decode_len, self.heatmap_examples = max_decode_len, heatmap_examples
        self.bleu = nn.ModuleDict({name: CorpusBLEU() for name in ("val", "test", "test_greedy")})
        self.losses = nn.ModuleDict({name: torchmetrics.MeanMetric() for name in ("val", "test")})
        self._heatmap_batch: dict[str, Any] | None = None
        self._signature_logged = False

    # -- training -------------------------------------------------------------------------------

    def _loss(self, batch: dict[str, Any]) -> Tensor:
        logits, _ = self.model(batch["src"], batch["src_lens"], batch["tgt_in"])
        return nn.functional.cross_entropy(
            logits.flatten(0, 1),
            batch["tgt_out"].flatten(),
            ignore_index=self.padding_idx,
            label_smoothing=self.label_smoothing,
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        """Teacher-forced loss. Nothing here waits for the device: the padding share is logged as
        a tensor, and throughput is :class:`ThroughputMonitor`'s (:meth:`configure_callbacks`)."""
        loss = self._loss(batch)
        real_tokens = batch["src_lens"].sum() + batch["tgt_lens"].sum()
        padding = 1.0 - real_tokens / (batch["src"].numel() + batch["tgt_out"].numel())
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)  # averaged over the processes
        self.log("train/padding", padding, sync_dist=True)
        return loss

    def configure_callbacks(self) -> list[ThroughputMonitor]:
        """Sentences and target tokens per second of training (``train/device/samples_per_sec``,
        ``train/device/items_per_sec``, and without ``device/`` the whole run's under DDP), over
        the last :attr:`throughput_window` steps, validation excluded. Fitting only: predict
        batches have no targets to count."""
        if self.trainer.state.fn != TrainerFn.FITTING:
            return []
        return [ThroughputMonitor(_sentences, _target_tokens, window_size=self.throughput_window)]

    def configure_optimizers(self) -> dict[str, Any]:
        return configure_adamw(self)

    # -- decoding -------------------------------------------------------------------------------

    def _decode_limit(self, src_lens: Tensor) -> int:
        return min(self.max_decode_len, 2 * int(src_lens.max()) + 10)

    def translate_ids(self, src: Tensor, src_lens: Tensor, *, beam_size: int = 1) -> list[list[int]]:
        """Output token ids per source: greedy for ``beam_size=1``, else beam search."""
        limits = DecodeLimits(
            self.bos_idx, self.eos_idx, self._decode_limit(src_lens), forbid=(self.padding_idx, self.bos_idx)
        )
        with self.inference():
            if beam_size == 1:
                return greedy_decode(self.model, src, src_lens, limits)
            return beam_search(self.model, src, src_lens, limits, beam_size=beam_size, alpha=self.alpha)

    def _detokenize(self, ids: list[list[int]]) -> list[str]:
        codec = self.require_codec()
        return [codec.decode(row) for row in ids]

    # -- evaluation -----------------------------------------------------------------------------

    def _evaluate(self, batch: dict[str, Any], stage: str) -> None:
        loss = self._loss(batch)
        self.losses[stage].update(loss, weight=int(batch["tgt_lens"].sum()))
        self.log(f"{stage}/loss", self.losses[stage], prog_bar=stage == "val")
        greedy = self._detokenize(self.translate_ids(batch["src"], batch["src_lens"]))
        if stage == "val":
            self.bleu["val"].update(greedy, batch["references"])
            self.log("val/bleu", self.bleu["val"], prog_bar=True)
            return
        beam = self._detokenize(self.translate_ids(batch["src"], batch["src_lens"], beam_size=self.beam_size))
        self.bleu["test"].update(beam, batch["references"])
        self.bleu["test_greedy"].update(greedy, batch["references"])
        self.log("test/bleu", self.bleu["test"])
        self.log("test/bleu_greedy", self.bleu["test_greedy"])

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if batch_idx == 0 and self._heatmap_batch is None and self.heatmap_examples:
            count = self.heatmap_examples
            self._heatmap_batch = {"src": batch["src"][:count], "src_lens": batch["src_lens"][:count]}
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_start(self) -> None:
        self.log_signature()

    def on_validation_epoch_start(self) -> None:
        self.log_signature()

    def log_signature(self) -> None:
        """Record the sacreBLEU signature with the run (once, global zero only)."""
        if self.trainer.is_global_zero and not self._signature_logged:
            for logger in self.trainer.loggers:
                logger.log_hyperparams({"sacrebleu_signature": self.bleu["val"].signature()})
            self._signature_logged = True

    def on_validation_epoch_end(self) -> None:
        """Cross-attention of the last decoder block for a few fixed validation sentences (global
        zero only; nothing here communicates, so the other processes may skip it)."""
        if self.trainer.sanity_checking or self._heatmap_batch is None or not self.trainer.is_global_zero:
            return
        src, src_lens = self._heatmap_batch["src"], self._heatmap_batch["src_lens"]
        outputs = self.translate_ids(src, src_lens)
        codec = self.require_codec()
        for i, output in enumerate(outputs):
            tgt_in = torch.tensor([[self.bos_idx, *output]], device=src.device)
            with self.inference():
                _, weights = self.model(src[i : i + 1, : src_lens[i]], src_lens[i : i + 1], tgt_in, need_weights=True)
            figure = attention_heatmaps(
                weights[0, :, 1:, :] if weights.shape[2] > 1 else weights[0],
                x_labels=codec.id_to_token(src[i, : src_lens[i]].tolist()),
                y_labels=codec.id_to_token(output) if output else None,
                x_title="Source tokens",
                y_title="Output tokens",
            )
            publish_figure(self, figure, f"cross_attention_example{i}")

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[dict[str, str]]:
        translations = self._detokenize(self.translate_ids(batch["src"], batch["src_lens"], beam_size=self.beam_size))
        return [{"source": source, "translation": text} for source, text in zip(batch["sources"], translations)]

    def predict(self, inputs: Sequence[str]) -> list[dict[str, str]]:
        """Translate raw English sentences with beam search and the codec (from the data module
        or the checkpoint): ``[{"source", "translation"}, ...]``."""
        codec = self.require_codec()
        batch = codec.batch(inputs)
        with self.inference():
            ids = self.translate_ids(
                batch["src"].to(self.device), batch["src_lens"].to(self.device), beam_size=self.beam_size
            )
        return [{"source": source, "translation": codec.decode(row)} for source, row in zip(batch["sources"], ids)]


_TASK_ARGS = """
    Args:
        vocab_size: Joint vocabulary size (from the data module).
        padding_idx: Padding id (from the data module).
        bos_idx: Beginning-of-sentence id (from the data module).
        eos_idx: End-of-sentence id (from the data module).
        lr: Peak learning rate (AdamW, linear warm-up, cosine decay).
        weight_decay: AdamW weight decay.
        warmup_steps: Warm-up steps.
        label_smoothing: Label smoothing of the cross-entropy.
        beam_size: Beam size for test and predict.
        length_penalty: GNMT length-penalty exponent alpha.
        max_decode_len: Most tokens decoded per sentence.
        heatmap_examples: Validation sentences whose cross-attention is drawn.
        torch_compile: Compile the model's teacher-forced forward pass with ``torch.compile``
            (decoding runs eagerly; checkpoints unchanged).
        model_kwargs: The architecture's hyperparameters (``--model.d_model`` and so on), each
            documented, with its default, in the architecture's signature.
"""


@register_model("transformer")
class TransformerTranslator(TranslationTask):
    """Encoder-decoder Transformer for translation (architecture: :class:`zoo.models.Transformer`).

    The defaults are the README's 30-minute CPU recipe (with ``configs/transformer.yaml``'s
    data and trainer settings).
    """

    __doc__ = (__doc__ or "") + _TASK_ARGS
    architecture = staticmethod(Transformer)
    model: Transformer

    def setup(self, stage: str) -> None:
        """Adopt the codec; refuse ``learned`` positions when evaluation reads sources longer than
        the training pairs, since those positions' vectors were never trained (length extrapolation)."""
        super().setup(stage)
        data = self.trainer.datamodule
        trained = getattr(data, "max_train_length", None)
        learned = isinstance(self.model.encoder_position, LearnedPositions)
        if learned and trained is not None and trained < data.max_length:
            raise ConfigurationError(
                f"Position 'learned' cannot extrapolate: it trains vectors only for positions up to "
                f"max_train_length={trained}, but evaluation reads sources of up to max_length={data.max_length} "
                f"tokens. Use --model.position sinusoidal, rope, alibi or t5, or drop --data.max_train_length."
            )


@register_model("seq2seq", aliases=("gru_seq2seq",))
class Seq2SeqTranslator(TranslationTask):
    """GRU encoder-decoder with Bahdanau attention (architecture: :class:`zoo.models.Seq2SeqAttention`)."""

    __doc__ = (__doc__ or "") + _TASK_ARGS
    architecture = staticmethod(Seq2SeqAttention)
    model: Seq2SeqAttention
