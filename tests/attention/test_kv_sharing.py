"""Layers that read an earlier layer's keys and values (an entry's ``kv_source``, Gemma 4's KV sharing).

A GPT whose later layers read: the reading layer's output against softmax over its own queries and
the source's keys and values, written out here; the full forward against token-by-token decoding;
the caches and parameters the readers do without, measured; training; and the specs refused in one
line, on the command line too (exit status 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.gpt import learn_repeating_sequence
from zoo.attention import layer_specs
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.kv_sharing import SharedCache
from zoo.attention.variants.softmax_recipes import QKNormAttention
from zoo.commands import main
from zoo.errors import ConfigurationError, DataError
from zoo.models import GPT

WIDTH, HEADS, KV_HEADS, VOCAB = 32, 4, 2, 24


def gpt(attention: list, *, position: str = "rope", seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(
        VOCAB, block_size=40, d_model=WIDTH, num_heads=HEADS, num_layers=len(attention), num_kv_heads=KV_HEADS,
        attention=attention, position=position,
    ).eval()  # fmt: skip


def gemma_like(window: int | None) -> list:
    """A sliding and a global layer computing their keys and values, then one reader of each type."""
    local = {"name": "qk_norm", "window": window, "sink_tokens": 0}
    return [
        {**local, "v_norm": True},
        {"name": "qk_norm"},
        {**local, "kv_source": "previous"},
        {"name": "qk_norm", "kv_source": 1},
    ]


def rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    normed = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return normed if weight is None else normed * weight


def heads(x: torch.Tensor, size: int) -> torch.Tensor:
    return x.unflatten(-1, (-1, size)).transpose(1, 2)


@pytest.mark.parametrize("window", [None, 4])
@torch.no_grad()
def test_a_reader_attends_with_its_own_queries_over_its_sources_keys_and_values(window: int | None) -> None:
    """Layer 3 reads layer 1's keys and values: its output is ``W_o softmax(q_i K_1^T + mask) V_1``
    with ``q_i = norm_q(W_q^3 x_i)``, ``K_1 = norm_k(W_k^1 x^1)``, ``V_1 = rms(W_v^1 x^1)`` from
    layer 1's input ``x^1``, its mask causal (and windowed). Absolute positions: no rotation to write."""
    local = {"name": "qk_norm", "window": window, "sink_tokens": 0}
    model = gpt([{**local, "v_norm": True}, {"name": "qk_norm"}, {**local, "kv_source": 0}], position="learned")
    inputs = {}
    for index in (0, 2):
        model.blocks[index].attention.register_forward_hook(
            lambda module, args, output, index=index: inputs.setdefault(index, (args[0], output.output))
        )
    model(torch.randint(VOCAB, (2, 12)))
    source, reader = model.blocks[0].attention, model.blocks[2].attention
    (x_source, _), (x_reader, actual) = inputs[0], inputs[2]
    d = reader.head_dim
    k = rms(heads(source.k_proj(x_source), d), source.k_norm.weight, source.k_norm.eps)
    v = rms(heads(source.v_proj(x_source), d), None, source.v_norm.eps)
    q = rms(heads(reader.q_proj(x_reader), d), reader.q_norm.weight, reader.q_norm.eps)
    k, v = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1)
    offsets = torch.arange(12)[:, None] - torch.arange(12)
    seen = (offsets >= 0) & (offsets < (window or 12))
    weights = (q @ k.transpose(-1, -2) / d**0.5).masked_fill(~seen, float("-inf")).softmax(-1)
    expected = reader.out_proj((weights @ v).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(actual, expected)


@torch.no_grad()
def test_decoding_token_by_token_is_the_full_forward_and_readers_hold_no_cache() -> None:
    """Rotary positions, a window of 4 past which decoding runs, grouped heads: a prompt of 5, then one
    token at a time, gives the full forward's logits; each reader's cache counts positions and holds
    no bytes, so the model's caches hold what the same stack without readers holds in its first two."""
    model = gpt(gemma_like(window=4))
    tokens = torch.randint(VOCAB, (2, 20))
    full, _ = model(tokens)
    logits, caches = model(tokens[:, :5], use_cache=True)
    steps = [logits]
    for t in range(5, 20):
        logits, caches = model(tokens[:, t : t + 1], caches, use_cache=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert [type(cache) for cache in caches[2:]] == [SharedCache, SharedCache]
    assert [(cache.nbytes, cache.length, cache.source) for cache in caches[2:]] == [(0, 20, 0), (0, 20, 1)]
    unshared = gpt([{k: v for k, v in entry.items() if k != "kv_source"} for entry in gemma_like(window=4)])
    _, own = unshared(tokens, use_cache=True)
    assert sum(cache.nbytes for cache in caches) == own[0].nbytes + own[1].nbytes
    assert own[2].nbytes == own[0].nbytes and own[3].nbytes == own[1].nbytes > 0  # what the readers save


def test_readers_have_no_key_or_value_parameters_and_the_default_keeps_its_keys() -> None:
    model, unshared = gpt(gemma_like(window=4)), gpt([{"name": "qk_norm", "window": 4}, "qk_norm"] * 2)
    reader = {key.split(".", 3)[3] for key in model.state_dict() if key.startswith("blocks.3.attention.")}
    assert reader == {"q_proj.weight", "q_proj.bias", "q_norm.weight", "out_proj.weight", "out_proj.bias"}
    own = {key.split(".", 3)[3] for key in unshared.state_dict() if key.startswith("blocks.3.attention.")}
    assert own - reader == {"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias", "k_norm.weight"}
    kv_width = KV_HEADS * (WIDTH // HEADS)
    saved = sum(p.numel() for p in unshared.parameters()) - sum(p.numel() for p in model.parameters())
    assert saved == 2 * (2 * (WIDTH * kv_width + kv_width) + WIDTH // HEADS)  # two readers: k, v and k_norm
    assert model.kv_sources == {0, 1} and unshared.kv_sources == frozenset()


def test_a_gpt_that_shares_keys_and_values_trains() -> None:
    losses = learn_repeating_sequence(gpt(gemma_like(window=8)).train(), steps=30)
    assert losses[-1] < 0.5 * losses[0], losses[::5]


@pytest.mark.parametrize(
    ("attention", "named"),
    [
        (["qk_norm", {"name": "qk_norm", "kv_source": 1}], "kv_source must be an earlier layer's index, 0 to 0"),
        ([{"name": "qk_norm", "kv_source": "previous"}, "qk_norm"], "previous finds no earlier layer"),
        (["qk_norm", {"name": "qk_norm", "window": 4, "kv_source": "previous"}], "previous finds no earlier layer"),
        (["qk_norm", {"name": "qk_norm", "kv_source": 0}, {"name": "qk_norm", "kv_source": 1}], "point kv_source at"),
        (["qk_norm", {"name": "qk_norm", "head_dim": 4, "kv_source": 0}], "head_dim 4 here, None there"),
        (["qk_norm", {"name": "qk_norm", "window": 4, "kv_source": 0}], "window 4 here, None there"),
        (["forgetting", {"name": "qk_norm", "kv_source": 0}], "'forgetting' cannot hand on its keys and values"),
        (["qk_norm", {"name": "gla", "kv_source": 0}], "'gla' cannot read another layer's keys and values"),
        (["qk_norm", {"name": "qk_norm", "conv_size": 4, "kv_source": 0}], "takes no conv_size"),
    ],
)
def test_a_bad_kv_source_is_refused_in_one_line(attention: list, named: str) -> None:
    with pytest.raises(ValueError, match=named) as caught:
        gpt(attention)
    assert "\n" not in str(caught.value)


def test_a_stack_that_passes_no_keys_and_values_and_a_lone_reader_are_refused_in_one_line() -> None:
    with pytest.raises(DataError, match="does not pass keys and values between layers") as caught:
        layer_specs(["qk_norm", {"name": "qk_norm", "kv_source": 0}], None, 2, role="the encoder")
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="carries no KeyValueStore") as caught:
        QKNormAttention(WIDTH, HEADS, kv_source=0)(torch.randn(1, 3, WIDTH), AttentionContext(is_causal=True))
    assert "\n" not in str(caught.value)


def test_zoo_fit_exits_with_status_2_on_a_bad_kv_source(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("to be or not to be, that is the question. " * 40)
    attention = "[qk_norm, {name: qk_norm, kv_source: 3}]"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--model",
                "gpt",
                "--data.path",
                "text.txt",
                "--model.num_layers",
                "2",
                "--model.attention",
                attention,
            ]
        )
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[0]
    assert "layer 2: kv_source must be an earlier layer's index" in error
