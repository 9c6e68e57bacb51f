"""The Long Range Arena's Text task: IMDB reviews read as UTF-8 bytes, padded or cut to one length.

The benchmark's released configuration uses 1,000 bytes, its paper 4,000: ``max_length`` says
which, and every result should state it (it is in each run's ``config.yaml``). Reviews are the
same as :class:`~zoo.datamodules.text_classification.IMDBDataModule`'s (the same corpus reader,
hub or ``--data.path``, and the same seeded validation split), kept raw, ``<br />`` tags included,
as the benchmark reads them; no vocabulary is built, so none of its arguments exist here. The
bytes' codec and collator are :mod:`zoo.text.bytes`.
"""

from __future__ import annotations

from typing import Any

from zoo.datamodules.labelled_texts import IMDB, LabelledTextDataModule
from zoo.datamodules.registry import register_datamodule
from zoo.text.bytes import PAD_ID, VOCAB_SIZE, ByteCodec, FixedLengthCollator

__all__ = ["LRATextDataModule"]


@register_datamodule("lra_text")
class LRATextDataModule(LabelledTextDataModule):
    """IMDB as the Long Range Arena's byte-level Text task: 257 token ids (256 bytes and padding).

    Train with the ``classifier`` model (``configs/classifier_lra_text.yaml``; ``vocab_size``,
    ``padding_idx`` and ``num_classes`` are linked from here).

    Args:
        path: A local directory in the hub layout of stanfordnlp/imdb; ``None`` loads the hub's.
        batch_size: Reviews per batch.
        max_length: Bytes per review: longer reviews are cut, shorter ones padded. 1,000 is the
            benchmark's released configuration, 4,000 its paper's.
        kwargs: The other shared arguments of :class:`~zoo.datamodules.base.CorpusDataModule`.
    """

    name = "lra_text"
    corpus = IMDB
    vocab_size = VOCAB_SIZE
    """Rows the model's embedding table needs: 256 bytes and padding."""

    def __init__(self, path: str | None = None, batch_size: int = 32, max_length: int = 1000, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)
        self.save_hyperparameters()
        self.collator = FixedLengthCollator(PAD_ID, max_length)
        self._codec = ByteCodec(max_length, self.class_names)

    @property
    def codec(self) -> ByteCodec:
        """Reviews to byte ids, ids to characters, labels to class names."""
        return self._codec
