"""The zoo's kernels inside transformers' models (``zoo.integrations.hf_kernels``).

For each routed family a tiny causal LM from its shrunk config, random weights: logits, greedy
generation (the recurrent forms from transformers' cache) and gradients equal with and without
the zoo's kernels; undo restores transformers' functions. The functions alone, in float64, equal
the papers' recurrences written here one step at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("transformers")

from transformers import KimiLinearConfig, Mamba2Config, Qwen3NextConfig  # noqa: E402
from transformers.models.kimi_linear import modeling_kimi_linear  # noqa: E402
from transformers.models.mamba2 import modeling_mamba2  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations import hf_kernels  # noqa: E402
from zoo.integrations.hf_kernels import use_zoo_kernels  # noqa: E402

LOGITS = {"rtol": 1e-4, "atol": 1e-5}
FLOAT64 = {"rtol": 1e-9, "atol": 1e-10}


def qwen3_next() -> torch.nn.Module:
    """Gated DeltaNet then full attention; 2 key heads of 16 for 4 value heads of 8; dense MLPs."""
    config = Qwen3NextConfig(
        hidden_size=32, linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4,
        linear_value_head_dim=8, num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=48,
        num_experts=0, mlp_only_layers=[0, 1], num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], vocab_size=64,
    )  # fmt: skip
    return modeling_qwen3_next.Qwen3NextForCausalLM(config)


def kimi_linear() -> torch.nn.Module:
    """Kimi Delta Attention then MLA; 2 heads of 16; dense MLPs."""
    config = KimiLinearConfig(
        hidden_size=32, linear_num_heads=2, linear_head_dim=16, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "dense"], vocab_size=64,
        pad_token_id=None, bos_token_id=None, eos_token_id=None, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=48, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
    )  # fmt: skip
    return modeling_kimi_linear.KimiLinearForCausalLM(config)


def mamba2() -> torch.nn.Module:
    """Two Mamba-2 layers: 4 heads of 16, state 8, 2 groups, chunks of 16 (64 tokens: four)."""
    config = Mamba2Config(
        hidden_size=32, num_heads=4, head_dim=16, state_size=8, n_groups=2, num_hidden_layers=2, vocab_size=64,
        chunk_size=16, pad_token_id=0, bos_token_id=0, eos_token_id=None,
    )  # fmt: skip
    return modeling_mamba2.Mamba2ForCausalLM(config)


FAMILIES: dict[str, tuple[Callable[[], torch.nn.Module], str]] = {
    "qwen3_next": (qwen3_next, "linear_attn.A_log"),
    "kimi_linear": (kimi_linear, "self_attn.b_proj.weight"),
    "mamba2": (mamba2, "mixer.A_log"),
}
ROUTED = {
    "qwen3_next": ["torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"],
    "kimi_linear": ["chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"],
    "mamba2": ["mamba2_chunk_scan", "mamba2_selective_state_update"],
}


def built(family: str) -> torch.nn.Module:
    """The family's tiny model, seeded, every parameter perturbed (norm weights away from one)."""
    torch.manual_seed(0)
    model = FAMILIES[family][0]().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def tokens(length: int = 64) -> torch.Tensor:
    return torch.randint(1, 64, (2, length), generator=torch.Generator().manual_seed(1))


def greedy(model: torch.nn.Module, prompt: torch.Tensor) -> object:
    """Five greedy steps from transformers' cache, with each step's logits."""
    return model.generate(prompt, max_new_tokens=5, do_sample=False, output_scores=True, return_dict_in_generate=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_greedy_generation_are_the_same_through_the_zoos_kernels(family: str) -> None:
    model, ids = built(family), tokens()
    with torch.no_grad():
        expected = model(ids).logits
        generated = greedy(model, ids[:, :16])
        with use_zoo_kernels(model) as routed:
            assert sorted(name.split(".")[-1] for name in routed.names) == sorted(ROUTED[family])
            logits = model(ids).logits
            again = greedy(model, ids[:, :16])
    torch.testing.assert_close(logits, expected, **LOGITS)
    assert torch.equal(again.sequences, generated.sequences)
    torch.testing.assert_close(torch.stack(again.scores), torch.stack(generated.scores), **LOGITS)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradients_through_the_zoos_kernels_are_the_same(family: str) -> None:
    model, ids = built(family), tokens()
    name = next(key for key, _ in model.named_parameters() if key.endswith(FAMILIES[family][1]))
    parameter = dict(model.named_parameters())[name]

    def gradient() -> torch.Tensor:
        model.zero_grad()
        model(ids, labels=ids).loss.backward()
        return parameter.grad.clone()

    expected = gradient()
    with use_zoo_kernels(model):
        found = gradient()
    assert expected.abs().sum() > 0
    torch.testing.assert_close(found, expected, rtol=1e-3, atol=1e-6)


def test_undo_restores_transformers_functions_and_nested_routing_undoes_only_its_own() -> None:
    model = built("qwen3_next")
    originals = {name: getattr(modeling_qwen3_next, name) for name in ROUTED["qwen3_next"]}
    outer = use_zoo_kernels(model)
    assert modeling_qwen3_next.torch_chunk_gated_delta_rule is hf_kernels.chunk_gated_delta_rule
    inner = use_zoo_kernels(model)
    assert inner.names == []
    inner.undo()
    assert modeling_qwen3_next.torch_chunk_gated_delta_rule is hf_kernels.chunk_gated_delta_rule
    outer.undo()
    assert {name: getattr(modeling_qwen3_next, name) for name in originals} == originals
    assert use_zoo_kernels(torch.nn.Linear(2, 2)).names == []


# -- the functions alone, float64, against transformers' loops ----------------------------------------------


def gated_delta_inputs(grouped: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    b, t, key_heads, heads, dk, dv = 2, 37, 2 if grouped else 4, 4, 8, 6

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    return {
        "query": draw(b, t, key_heads, dk), "key": draw(b, t, key_heads, dk), "value": draw(b, t, heads, dv),
        "g": -draw(b, t, heads).abs(), "beta": draw(b, t, heads).sigmoid(), "initial_state": draw(b, heads, dk, dv),
    }  # fmt: skip


def kda_inputs() -> dict[str, torch.Tensor]:
    inputs = gated_delta_inputs(grouped=False)
    generator = torch.Generator().manual_seed(4)
    inputs["g"] = -0.3 * torch.rand(*inputs["key"].shape, generator=generator, dtype=torch.float64)
    return inputs


def delta_steps(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    **_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The papers' step, one token at a time: ``S = Diag(exp(g)) S; S += k^T beta (v - k S); o = q S / sqrt(dk)``
    on L2-normalized queries and keys (``g`` one value per head, or one per key dimension)."""
    groups = value.shape[2] // key.shape[2]
    query, key = (x.repeat_interleave(groups, dim=2) for x in (query, key))
    query, key = (x / (x.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() for x in (query, key))
    decay = g.exp() if g.dim() == 4 else g.exp().unsqueeze(-1).expand_as(query)
    state, outputs = initial_state.clone(), []
    for t in range(query.shape[1]):
        q, k, v, a, b = query[:, t], key[:, t], value[:, t], decay[:, t], beta[:, t, :, None]
        state = a.unsqueeze(-1) * state
        read = torch.einsum("bhk,bhkv->bhv", k, state)
        state = state + torch.einsum("bhk,bhv->bhkv", k, b * (v - read))
        outputs.append(torch.einsum("bhk,bhkv->bhv", q, state) * q.shape[-1] ** -0.5)
    return torch.stack(outputs, dim=1), state


@pytest.mark.parametrize(
    ("zoo", "inputs"),
    [
        (hf_kernels.chunk_gated_delta_rule, lambda: gated_delta_inputs(True)),
        (hf_kernels.recurrent_gated_delta_rule, lambda: gated_delta_inputs(True)),
        (hf_kernels.chunk_kimi_delta_attention, kda_inputs),
        (hf_kernels.recurrent_kimi_delta_attention, kda_inputs),
    ],
)
def test_each_delta_function_equals_the_per_step_rule_in_float64(
    zoo: Callable[..., tuple], inputs: Callable[[], dict[str, torch.Tensor]]
) -> None:
    arguments = inputs()
    found = zoo(**arguments, output_final_state=True, use_qk_l2norm_in_kernel=True, chunk_size=16)
    assert found[0].dtype == torch.float64
    for got, want in zip(found, delta_steps(**arguments), strict=True):
        torch.testing.assert_close(got, want, **FLOAT64)


def test_mamba2_scan_and_step_equal_the_per_step_ssd_in_float64() -> None:
    """``h = exp(dt A) h + dt x^T B``, ``y = C h + D x`` (``h`` ``(P, N)``), with ``dt = softplus(dt + bias)``."""
    generator = torch.Generator().manual_seed(5)
    b, t, heads, p, groups, n = 2, 21, 4, 3, 2, 5

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    x, dt, a = draw(b, t, heads, p), draw(b, t, heads), -draw(heads).abs()
    big_b, c = draw(b, t, groups, n), draw(b, t, groups, n)
    d, bias, start = draw(heads), draw(heads), draw(b, heads, p, n)
    output, final = hf_kernels.mamba2_chunk_scan(
        x, dt, a, big_b, c, chunk_size=8, D=d, dt_bias=bias, initial_states=start, dt_softplus=True,
        return_final_states=True,
    )  # fmt: skip
    steps, state, expected, stepped = torch.nn.functional.softplus(dt + bias), start.clone(), [], start.clone()
    per_head = heads // groups
    for i in range(t):
        b_i, c_i = (y[:, i].repeat_interleave(per_head, dim=1) for y in (big_b, c))
        h_step = steps[:, i, :, None, None]
        state = (h_step * a[:, None, None]).exp() * state + h_step * x[:, i, :, :, None] * b_i[:, :, None, :]
        expected.append(torch.einsum("bhpn,bhn->bhp", state, c_i) + d[:, None] * x[:, i])
        one = hf_kernels.mamba2_selective_state_update(
            stepped, x[:, i], dt[:, i, :, None].expand(-1, -1, p), a[:, None, None].expand(-1, p, n), big_b[:, i],
            c[:, i], d[:, None].expand(-1, p), dt_bias=bias[:, None].expand(-1, p), dt_softplus=True,
        )  # fmt: skip
        torch.testing.assert_close(one, expected[-1], **FLOAT64)
    torch.testing.assert_close(output, torch.stack(expected, dim=1), **FLOAT64)
    torch.testing.assert_close(final, state, **FLOAT64)
    torch.testing.assert_close(stepped, state, **FLOAT64)


def test_packed_sequences_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="cu_seqlens") as caught:
        hf_kernels.chunk_gated_delta_rule(**gated_delta_inputs(False), cu_seqlens=torch.tensor([0, 20, 37]))
    assert "\n" not in str(caught.value)
