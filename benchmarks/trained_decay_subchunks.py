"""What trained Kimi Delta Attention gates do to the decay kernel: for each recall checkpoint, each
``kda`` layer's sub-chunk length (in the layer's CPU chunks) and its per-step log decays, on one
batch of 64 fresh MQAR (256, 16) examples::

    python benchmarks/trained_decay_subchunks.py runs/<compare>/runs/<run>/seed0/fit/checkpoints/last.ckpt ...

A sub-chunk shorter than :data:`~zoo.attention.kernels.decay.SUB_CHUNK_SIZE` is the slow path that a
trained ``kda`` met (``docs/results/copying.md``, KDA cut short; ``docs/results/recall.md``, MQAR
(256, 16) at width 128); ``decay_lower_bound`` (``docs/results/speed.md``, Kimi Delta Attention's
bounded gate) keeps it at 8 steps or more.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from torch import Tensor, nn

from zoo.attention.kernels.chunking import to_chunks
from zoo.attention.kernels.decay import SUB_CHUNK_SIZE, sub_chunk_length
from zoo.attention.variants.kda import KimiDeltaAttention
from zoo.checkpoint import load_checkpoint
from zoo.datamodules.recall.mqar import MQARDataModule


def _keep(store: list[Tensor], module: nn.Module, arguments: tuple, output: Tensor) -> None:
    """A forward hook's body: keep the decay module's output (``log alpha``)."""
    store.append(output.detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="recall checkpoints of models with kda layers")
    args = parser.parse_args()
    data = MQARDataModule(
        vocab_size=8192, num_train=64, num_test=64, batch_size=64, random_non_queries=False, generator_seed=1
    )
    data.setup("fit")
    inputs = next(iter(data.train_dataloader()))["inputs"]
    for path in args.checkpoints:
        task = load_checkpoint(path).eval()
        layers = [module for module in task.modules() if isinstance(module, KimiDeltaAttention)]
        decays: list[Tensor] = []
        for layer in layers:
            layer.decay.register_forward_hook(partial(_keep, decays))
        with torch.no_grad():
            task(inputs)
        print(path)
        for index, (layer, log_decay) in enumerate(zip(layers, decays)):
            cumulative = to_chunks(log_decay, layer.cpu_chunk_size).cumsum(-2)
            print(
                f"  layer {index}: sub-chunk {sub_chunk_length(cumulative, SUB_CHUNK_SIZE)}; log decay a step: "
                f"min {log_decay.min():.2f}, 1st percentile {log_decay.quantile(0.01):.2f}, "
                f"median {log_decay.median():.4f}"
            )


if __name__ == "__main__":
    main()
