"""Corpus-level sacreBLEU as a torchmetrics metric, so that it is exact across processes.

sacreBLEU's corpus score is a function of summed per-sentence statistics (hypothesis and
reference lengths, matching and total n-gram counts). This metric accumulates exactly those
statistics, computed by sacreBLEU itself, in a tensor state that torchmetrics sums across
processes; ``compute`` hands the sums back to sacreBLEU. The result therefore equals
``sacrebleu.corpus_bleu`` on the whole split whatever the number of processes, including its
``exp`` smoothing (which torchmetrics' own ``SacreBLEUScore`` does not implement).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from sacrebleu.metrics import BLEU
from torch import Tensor
from torchmetrics import Metric

__all__ = ["CorpusBLEU", "reference_streams"]


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-hypothesis reference lists -> sacreBLEU's reference streams (None where missing)."""
    width = max((len(refs) for refs in references), default=0)
    return [[refs[i] if i < len(refs) else None for refs in references] for i in range(width)]


class CorpusBLEU(Metric):
    """sacreBLEU (13a tokenization, cased, ``exp`` smoothing by default) over a whole corpus.

    ``update(hypotheses, references)`` takes detokenized hypothesis strings and, for each, a
    list of its references (any number). ``compute()`` returns BLEU on a 0-100 scale.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, tokenize: str = "13a", lowercase: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.bleu = BLEU(tokenize=tokenize, lowercase=lowercase)
        self.add_state(
            "stats", default=torch.zeros(2 + 2 * self.bleu.max_ngram_order, dtype=torch.float64), dist_reduce_fx="sum"
        )

    def update(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference lists; they must pair up.")
        if not hypotheses:
            return
        if any(len(refs) == 0 for refs in references):
            raise ValueError("Every hypothesis needs at least one reference.")
        per_sentence = self.bleu._extract_corpus_statistics(list(hypotheses), reference_streams(references))
        self.stats += torch.tensor(per_sentence, dtype=torch.float64, device=self.stats.device).sum(0)

    def compute(self) -> Tensor:
        stats = [int(round(x)) for x in self.stats.tolist()]
        return torch.tensor(self.bleu._compute_score_from_stats(stats).score, dtype=torch.float64)

    def signature(self) -> str:
        """sacreBLEU's signature of this configuration (``nrefs:var`` as sources differ)."""
        self.bleu.num_refs = "var"
        return str(self.bleu.get_signature())
