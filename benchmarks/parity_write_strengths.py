"""Why a delta-rule model that solves parity at its training lengths loses it further out: the
write strength each head learned per symbol, and the accuracy by length and by count of flips.

Usage: python benchmarks/parity_write_strengths.py CHECKPOINT [--lengths 64 96 128 256]
    [--examples 512] [--seed 0]

``CHECKPOINT`` is a recall model's ``.ckpt`` trained on ``--data parity`` (a ``zoo compare`` run
keeps it under ``OUT/runs/COMBINATION/seed0/fit/checkpoints/``). With negative eigenvalues a head
flips the sign of what it stored along its key when ``beta = 2``: ``S k <- (1 - beta) S k + beta v``
leaves the fixed point ``v`` and multiplies the distance to it by ``1 - beta``, so a head whose
flipping symbol has ``beta = 2 - eps`` keeps ``(1 - eps)^n`` of the sign after ``n`` flips. The
script prints each layer's ``beta`` per head for each symbol (the write strength is computed from
the layer's input, so it is one value per symbol in the first layer), that decay after the flips
of the longest length, and the accuracy by length and by the number of 2s, the flips.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from zoo.attention.modules.gating import WriteStrength
from zoo.datamodules.recall.state_tracking_tasks import parity
from zoo.tasks.recall import RecallModel


def _strengths(model: RecallModel, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every write-strength module's ``beta`` ``(B, T, heads)`` on ``tokens``."""
    inputs: dict[str, torch.Tensor] = {}
    modules = {name: module for name, module in model.named_modules() if isinstance(module, WriteStrength)}
    handles = [
        module.register_forward_pre_hook(lambda _, args, name=name: inputs.__setitem__(name, args[0]))
        for name, module in modules.items()
    ]
    with torch.no_grad():
        model.model(tokens)
        for handle in handles:
            handle.remove()
        return {name: modules[name].strengths(layer_input, torch.float32) for name, layer_input in inputs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 96, 128, 256])
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = RecallModel.load_from_checkpoint(args.checkpoint, map_location="cpu", weights_only=False).eval()
    rng = np.random.default_rng(args.seed)
    for length in args.lengths:
        examples = parity(rng, args.examples, length)
        tokens = torch.as_tensor(examples.inputs).long()
        answers = torch.as_tensor(examples.targets).long()[:, -1]
        with torch.no_grad():
            right = model.model(tokens)[0][:, -1].argmax(-1) == answers
        flips = (tokens == 2).sum(1)
        by_flips = {
            f"{low}-{low + 19}": f"{right[(flips >= low) & (flips < low + 20)].float().mean().item():.3f}"
            for low in range(0, int(flips.max()) + 1, 20)
            if ((flips >= low) & (flips < low + 20)).any()
        }
        print(f"length {length}: accuracy {right.float().mean().item():.3f}; by 2s {by_flips}")
    mean_flips = int(flips.float().mean())
    for name, beta in _strengths(model, tokens).items():
        for symbol in (1, 2):
            mean = beta[tokens == symbol].mean(0)
            kept = (mean - 1).abs() ** mean_flips
            print(
                f"{name} symbol {symbol}: beta per head {[round(b, 4) for b in mean.tolist()]}"
                + (f"; |1 - beta|^{mean_flips} {[f'{k:.2g}' for k in kept.tolist()]}" if symbol == 2 else "")
            )


if __name__ == "__main__":
    main()
