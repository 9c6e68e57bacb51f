"""The backends behind the names on a GPU: where ``auto`` hands a layer to FlexAttention or to
flash-linear-attention's kernels, the layer's output and gradients equal its own form's (forced
with ``attention_backend("zoo")``), and a GPT trains on them. The CPU twins are
``tests/attention/test_backends.py`` (eager flex, fla's ops as stand-ins)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.attention import AttentionContext
from zoo.attention.build.backends import attention_backend, backend_of
from zoo.attention.kernels import fla as fla_module
from zoo.attention.kernels import flex
from zoo.attention.kernels.fla import fla_available
from zoo.attention.modules import recurrent as recurrent_module
from zoo.models import GPT

pytestmark = pytest.mark.cuda

EMBED, HEADS, LENGTH = 256, 4, 1000

FLEX_CASES = [
    ("local", {"window": 128}, True),
    ("longformer", {"window": 64, "global_tokens": 2}, False),
    ("sparse", {"block_size": 64, "summary": 8}, True),
    ("bigbird", {"block_size": 64, "num_random_blocks": 2}, False),
]


def _ratio(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Root-mean-square error relative to the reference's (fla's ``get_err_ratio``)."""
    actual, expected = actual.detach().float(), expected.detach().float()
    return float((actual - expected).square().mean().sqrt() / (expected.square().mean().sqrt() + 1e-8))


def _both(layer: torch.nn.Module, causal: bool, fused: str = "auto") -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Output and input gradient under ``fused`` (``auto``, or a backend forced) and with the
    zoo's form forced."""
    x = torch.randn(2, LENGTH, EMBED, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    context = lambda: AttentionContext.build(2, LENGTH, valid_lens=torch.tensor([LENGTH, 700], device="cuda"),  # noqa: E731
                                             is_causal=causal)  # fmt: skip
    results = []
    for backend in (fused, "zoo"):
        leaf = x.clone().requires_grad_()
        with attention_backend(backend):
            output = layer(leaf, context()).output
        (gradient,) = torch.autograd.grad(output.square().sum(), leaf)
        results.append([output, gradient])
    return results[0], results[1]


@pytest.mark.parametrize(("name", "options", "causal"), FLEX_CASES, ids=[c[0] for c in FLEX_CASES])
def test_flex_runs_mask_defined_variants_as_their_own_forms(name, options, causal, monkeypatch) -> None:
    torch.manual_seed(0)
    layer = zoo.SelfAttention(EMBED, HEADS, zoo.AttentionSpec(name, options)).cuda()
    runs = []
    monkeypatch.setattr(flex, "flex_attend", lambda *a, _f=flex.flex_attend, **k: runs.append(1) or _f(*a, **k))
    assert backend_of(layer, "cuda") == "zoo"  # auto takes no flex yet (zoo.attention.build.backends)
    fused, own = _both(layer, causal, fused="flex")
    assert runs == [1], "forced flex did not run"
    for label, a, b in zip(("output", "gradient"), fused, own):
        assert _ratio(a, b) < 5e-3, f"{name} {label}: {_ratio(a, b):.2e}"


@pytest.mark.skipif(not fla_available("cuda"), reason="fla-core (and Triton) not installed")
@pytest.mark.parametrize(
    "family", ["retention", "gla", "deltanet", "gated_deltanet", "mamba2", "kda", "rwkv7", "gated_deltaproduct"]
)
def test_auto_runs_the_recurrent_families_on_fla_as_their_own_forms(family: str, monkeypatch) -> None:
    torch.manual_seed(0)
    layer = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS).cuda()
    runs = []
    chunk = recurrent_module.fla_chunk
    monkeypatch.setattr(recurrent_module, "fla_chunk", lambda *a, **k: runs.append(1) or chunk(*a, **k))
    assert backend_of(layer, "cuda") == "fla"
    fused, own = _both(layer, True)
    # padded rows: every family but GLA, KDA and RWKV-7 reaches fla's gated backward, which fla
    # refuses on Hopper under Triton < 3.7.1 (zoo.attention.kernels.fla.fla_refusal): auto runs the zoo's form
    refused = family not in {"gla", "kda", "rwkv7"} and fla_module._gated_backward_broken(torch.device("cuda"))
    assert runs == ([] if refused else [1]), "auto did not take fla on CUDA where fla runs the call"
    for label, a, b in zip(("output", "gradient"), fused, own):
        assert _ratio(a, b) < 1e-2, f"{family} {label}: {_ratio(a, b):.2e}"


@pytest.mark.parametrize(
    ("attention", "backend"),
    [(["local", "longformer"], "flex"), pytest.param(["gla", "dot_product"], "auto", marks=pytest.mark.skipif(
        not fla_available("cuda"), reason="fla-core (and Triton) not installed"))],
    ids=["flex", "fla"],
)  # fmt: skip
def test_a_gpt_trains_on_the_fused_backends_in_bfloat16(attention: list[str], backend: str) -> None:
    torch.manual_seed(0)
    model = GPT(32, block_size=512, d_model=EMBED, num_heads=HEADS, num_layers=2, attention=attention).cuda()
    tokens = (torch.arange(513, device="cuda") % 7).repeat(4, 1)  # a period of 7: learnable
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        with torch.autocast("cuda", torch.bfloat16), attention_backend(backend):
            logits, _ = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.3 * losses[0], losses[::5]
