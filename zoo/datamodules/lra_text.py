"""The Long Range Arena's Text task: IMDB reviews read as UTF-8 bytes, padded or cut to one length.

The benchmark's released configuration uses 1,000 bytes, its paper 4,000: ``max_length`` says
which, and every result should state it (it is in each run's ``config.yaml``). Reviews are the
same as :class:`~zoo.datamodules.text_classification.IMDBDataModule`'s (hub or ``--data.path``,
the same seeded validation split), kept raw, ``<br />`` tags included, as the benchmark reads them.
The bytes' codec and collator are :mod:`zoo.text.bytes`.
"""

from __future__ import annotations

from typing import Any

from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.text_classification import IMDBDataModule
from zoo.text.bytes import PAD_ID, VOCAB_SIZE, ByteCodec, FixedLengthCollator

__all__ = ["LRATextDataModule"]


@register_datamodule("lra_text")
class LRATextDataModule(IMDBDataModule):
    """IMDB as the Long Range Arena's byte-level Text task: 257 token ids (256 bytes and padding).

    Train with the ``classifier`` model (``configs/classifier_lra_text.yaml``; ``vocab_size``,
    ``padding_idx`` and ``num_classes`` are linked from here). No vocabulary is built, so
    ``max_vocab_size`` and ``min_freq`` are unused.

    Args:
        max_length: Bytes per review: longer reviews are cut, shorter ones padded. 1,000 is the
            benchmark's released configuration, 4,000 its paper's.
        Others: as :class:`~zoo.datamodules.text_classification.IMDBDataModule`.
    """

    name = "lra_text"

    def __init__(self, path: str | None = None, batch_size: int = 32, max_length: int = 1000, **kwargs: Any) -> None:
        super().__init__(path=path, batch_size=batch_size, max_length=max_length, **kwargs)
        self.collator = FixedLengthCollator(PAD_ID, max_length)
        self._byte_codec = ByteCodec(max_length, self.class_names)

    @property
    def vocab_size(self) -> int:
        """Rows the model's embedding table needs: 256 bytes and padding."""
        return VOCAB_SIZE

    @property
    def codec(self) -> ByteCodec:  # type: ignore[override]
        """Reviews to byte ids, ids to characters, labels to class names."""
        return self._byte_codec

    def prepare_data(self) -> None:
        """Download (hub) or check (local path) the reviews; bytes need no vocabulary.

        Splits are encoded as IMDB's are, through :attr:`codec` (a ``datasets`` map cached per codec).
        """
        for split in self.source_splits:
            self._read_split(split)
