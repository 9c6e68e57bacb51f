"""``python -m zoo bench decode``: sentences decoded per second, with and without the cache.

Decoding runs on the first ``sentences`` validation sources of fra-eng, in batches of
``batch``, for exactly ``tokens`` output tokens each: ``<eos>`` is forbidden (with padding and
``<bos>``), so every mode does the same work whatever the weights (random ones by default, or
a checkpoint's). A model with a ``use_cache`` switch (the Transformer) is measured both ways;
others (the GRU seq2seq) once. Times cover encoding and decoding of all batches, repeated
after a warm-up; sentences per second are reported at the median time and the quartiles.

For a model with a key/value cache the report also gives its size per sentence after the last
token: the self-attention keys and values of every position and the cross-attention ones of the
source, over all decoder blocks. Grouped-query attention shrinks it by ``num_heads /
num_kv_heads``; ``zoo bench decode --num-kv-heads 1 2 4`` measures each count in one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.bench.measure import time_call
from zoo.bench.report import markdown_table
from zoo.bench.translation import TranslationSetup, build
from zoo.models.decoding import DecodeLimits, beam_search, greedy_decode

__all__ = ["DecodeBenchConfig", "decode_table", "run_decode_bench"]


@dataclass(frozen=True)
class DecodeBenchConfig:
    """What ``bench decode`` decodes, and how often."""

    sentences: int = 256
    tokens: int = 30
    beam_size: int = 1
    warmup: int = 1
    repeats: int = 3
    checkpoint: str | None = None


@torch.inference_mode()
def kv_cache_bytes(model: Any, src: Tensor, src_lens: Tensor, *, bos: int, steps: int) -> int | None:
    """Bytes per sentence of the decoder's key/value cache after ``steps`` cached greedy steps,
    or None for a model without one (no ``use_cache`` switch)."""
    if not hasattr(model, "use_cache"):
        return None
    use_cache, model.use_cache = model.use_cache, True
    state, tokens = model.encode(src, src_lens), torch.full((src.shape[0],), bos, device=src.device)
    for _ in range(steps):
        logits, state = model.decode_step(tokens, state)
        tokens = logits.argmax(-1)
    model.use_cache = use_cache
    memory = sum(t.nbytes for kv in state.memory_kv for t in kv)
    return (memory + sum(cache.nbytes for cache in state.caches)) // src.shape[0]


def _sources(data: Any, count: int, device: torch.device) -> list[tuple[Tensor, Tensor]]:
    """The first ``count`` validation sources as ``(src, src_lens)`` batches on ``device``."""
    data.setup("validate")
    batches, remaining = [], count
    for batch in data.val_dataloader():
        take = min(remaining, batch["src"].shape[0])
        lens = batch["src_lens"][:take]
        batches.append((batch["src"][:take, : int(lens.max())].to(device), lens.to(device)))
        remaining -= take
        if remaining == 0:
            break
    if remaining:
        raise ValueError(f"bench decode asked for {count} sentences; the validation split has {count - remaining}.")
    return batches


def run_decode_bench(setup: TranslationSetup, config: DecodeBenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """Decoding throughput per mode (``cached`` / ``uncached``, or ``default``)."""
    task, data = build(setup, checkpoint=config.checkpoint)
    model = task.model.to(device).eval()
    batches = _sources(data, config.sentences, device)
    limits = DecodeLimits(
        data.bos_idx, data.eos_idx, config.tokens, forbid=(data.padding_idx, data.bos_idx, data.eos_idx)
    )

    def decode_all() -> None:
        for src, src_lens in batches:
            if config.beam_size == 1:
                outputs = greedy_decode(model, src, src_lens, limits)
            else:
                outputs = beam_search(model, src, src_lens, limits, beam_size=config.beam_size, alpha=0.0)
            if any(len(row) != config.tokens for row in outputs):
                raise RuntimeError(
                    f"bench decode expected {config.tokens} tokens per sentence; the model stopped early."
                )

    modes = [("cached", True), ("uncached", False)] if hasattr(model, "use_cache") else [("default", None)]
    cache = kv_cache_bytes(model, *batches[0], bos=data.bos_idx, steps=config.tokens)
    kv_heads = task.hparams.get("num_kv_heads") or task.hparams.get("num_heads")  # None for a model without heads
    results = []
    for mode, use_cache in modes:
        if use_cache is not None:
            model.use_cache = use_cache
        timing = time_call(decode_all, warmup=config.warmup, repeats=config.repeats)
        results.append({
            "mode": mode,
            "num_kv_heads": kv_heads,
            "kv_cache_bytes_per_sentence": cache if use_cache else None,
            "time_s": timing.scaled(1.0),
            "sentences_per_second": config.sentences / timing.median,
            "sentences_per_second_quartiles": [config.sentences / timing.q3, config.sentences / timing.q1],
            "tokens_per_second": config.sentences * config.tokens / timing.median,
        })  # fmt: skip
    return results


def decode_table(setup: TranslationSetup, config: DecodeBenchConfig, results: list[dict[str, Any]]) -> str:
    """One row per mode (and key/value head count): throughput, its ratio to the uncached run
    of the same model, and the cache size."""
    rows = []
    for r in results:
        base = next(
            (b for b in results if b["mode"] == "uncached" and b.get("num_kv_heads") == r.get("num_kv_heads")), None
        )
        low, high = r["sentences_per_second_quartiles"]
        speedup = f"{r['sentences_per_second'] / base['sentences_per_second']:.2f}x" if base else "-"
        cache = r.get("kv_cache_bytes_per_sentence")
        rows.append(
            [
                setup.model,
                r["mode"],
                r.get("num_kv_heads") or "-",
                config.sentences,
                config.tokens,
                config.beam_size,
                f"{r['sentences_per_second']:.1f} [{low:.1f}-{high:.1f}]",
                f"{r['tokens_per_second']:.0f}",
                speedup,
                "-" if cache is None else f"{cache / 1024:.1f}",
            ]
        )
    headers = [
        "model",
        "mode",
        "kv heads",
        "sentences",
        "tokens",
        "beam",
        "sentences/s [quartiles]",
        "tokens/s",
        "vs uncached",
        "cache KiB/sentence",
    ]
    return markdown_table(headers, rows)
