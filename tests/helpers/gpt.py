"""A small GPT trained and decoded the way the layer tests check that a variant learns and that its
cache decodes what the whole sequence gives."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.models.gpt import GPT

__all__ = ["assert_cached_generation_matches", "learn_repeating_sequence"]


def learn_repeating_sequence(model: GPT, steps: int, lr: float = 3e-3) -> list[float]:
    """``steps`` AdamW steps of ``model`` on eight copies of ``0 1 2 3 4 5 0 1 ...`` (25 tokens), a
    sequence any causal model that reads its context learns; the loss of each step."""
    tokens = torch.arange(25).remainder(6).repeat(8, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def assert_cached_generation_matches(model: GPT, new_tokens: int = 12) -> None:
    """In float64 and evaluation mode, greedy generation from the cache gives the tokens that
    generation re-reading the whole sequence gives (``model`` is converted in place)."""
    model = model.double().eval()
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(5))
    cached = torch.stack(list(model.generate(prompt, new_tokens, temperature=0)), 1)
    uncached = torch.stack(list(model.generate(prompt, new_tokens, temperature=0, use_cache=False)), 1)
    assert torch.equal(cached, uncached)
