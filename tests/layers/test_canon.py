"""Canon layers (``canon="ABCD"``): the causal block against a formulation written out here (each
Canon layer a loop over the taps), causality, cached decoding equal to the full forward, the
parameters each place adds, the option through the command line, and bad values as one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.cli import QUIET, SMALL, flags, latest_run
from zoo.commands import main
from zoo.errors import DataError
from zoo.layers import BlockConfig, CausalBlock, EncoderBlock, StackConfig, StackPlan, build_stacks
from zoo.models import GPT, RecallLM

D, H, HIDDEN, K = 8, 2, 16, 4


def conv_by_taps(x: Tensor, weight: Tensor) -> Tensor:
    """``x + sum_i w[c, i] x_{t - K + 1 + i}[c]`` by an explicit loop over positions and taps
    (``weight`` ``(C, 1, K)``; positions before the start count as zeros)."""
    out = x.clone()
    for t in range(x.shape[1]):
        for i in range(K):
            source = t - K + 1 + i
            if source >= 0:
                out[:, t] += weight[:, 0, i] * x[:, source]
    return out


def block_by_hand(block: CausalBlock, x: Tensor) -> Tensor:
    """A pre-LN block with Canon A, B, C and D over causal softmax attention, written out."""
    layer, (up, _, _, down) = block.attention, block.ffn.net
    h = conv_by_taps(block.add_norm1.norm(x), block.canon_a.weight)
    q, k, v = (
        conv_by_taps(proj(h), conv.weight)
        for proj, conv in ((layer.q_proj, layer.q_conv), (layer.k_proj, layer.k_conv), (layer.v_proj, layer.v_conv))
    )
    heads = [t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(-1, -2) / (D // H) ** 0.5
    future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
    attended = scores.masked_fill(future, float("-inf")).softmax(-1) @ heads[2]
    x = x + layer.out_proj(attended.transpose(1, 2).flatten(-2))
    hidden = conv_by_taps(up(conv_by_taps(block.add_norm2.norm(x), block.canon_c.weight)), block.ffn.canon_d.weight)
    return x + down(F.gelu(hidden))


def test_a_block_with_all_four_equals_the_formulation_written_out() -> None:
    torch.manual_seed(0)
    config = BlockConfig(D, H, HIDDEN, norm_first=True, activation="gelu", canon="ABCD")
    block = CausalBlock(config).double().eval()
    for conv in (block.canon_a, block.canon_c, block.ffn.canon_d):
        assert conv.weight.std() > 0.1  # nn.Conv1d's initialisation, as the paper keeps it
    x = torch.randn(2, 7, D, dtype=torch.float64)
    output, _ = block(x)
    torch.testing.assert_close(output, block_by_hand(block, x))


def tiny_gpt(canon: str, attention: str = "dot_product", **options: object) -> GPT:
    torch.manual_seed(0)
    model = GPT(
        23, block_size=16, d_model=D, num_heads=H, num_layers=2, ffn_hidden=HIDDEN, attention=attention,
        canon=canon, **options,
    )  # fmt: skip
    return model.double().eval()


@pytest.mark.parametrize("attention", ["dot_product", "gla", "softmax"])
def test_a_future_token_changes_no_earlier_output(attention: str) -> None:
    model = tiny_gpt("ABCD", attention)
    tokens = torch.randint(0, 23, (2, 12))
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 23
    before, after = model(tokens)[0], model(changed)[0]
    torch.testing.assert_close(before[:, :8], after[:, :8])
    assert not torch.allclose(before[:, 8:], after[:, 8:])


@pytest.mark.parametrize(
    ("canon", "attention"),
    [("ABCD", "dot_product"), ("ABCD", "gla"), ("ABCD", "forgetting"), ("AB", "mla"), ("BD", "rope")],
)
def test_decoding_token_by_token_from_the_caches_equals_the_full_forward(canon: str, attention: str) -> None:
    options = {"position": "rope"} if attention == "rope" else {}
    model = tiny_gpt(canon, "dot_product" if attention == "rope" else attention, **options)
    tokens = torch.randint(0, 23, (2, 11))
    full, _ = model(tokens)
    logits, caches = model(tokens[:, :5], use_cache=True)  # a prompt of 5, then one token a step
    steps = [logits]
    for t in range(5, 11):
        logits, caches = model(tokens[:, t : t + 1], caches, use_cache=True)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full)
    assert caches[0].length == 11
    picked = caches[0].select(torch.tensor([1]))  # beam search's reordering keeps the windows by row
    assert picked.length == 11


def test_greedy_generation_with_the_cache_equals_generation_without_it() -> None:
    model = tiny_gpt("ABCD")
    prompt = torch.randint(0, 23, (2, 3))
    cached = torch.stack(list(model.generate(prompt, 8, temperature=0)), 1)
    uncached = torch.stack(list(model.generate(prompt, 8, temperature=0, use_cache=False)), 1)
    assert torch.equal(cached, uncached)


def added(canon: str, attention: str = "dot_product", **options: object) -> dict[str, int]:
    """The parameters (name: count) a GPT with ``canon`` has and one without has not."""
    with_canon = dict(tiny_gpt(canon, attention, **options).named_parameters())
    without = dict(tiny_gpt("", attention, **options).named_parameters())
    assert set(without) <= set(with_canon)
    assert all(with_canon[name].shape == without[name].shape for name in without)
    return {name: p.numel() for name, p in with_canon.items() if name not in without}


def test_each_place_adds_its_filters_and_nothing_else() -> None:
    per_layer = {
        "A": {"canon_a.weight": D * K},
        "B": {f"attention.{x}_conv.weight": D * K for x in "qkv"},
        "C": {"canon_c.weight": D * K},
        "D": {"ffn.canon_d.weight": HIDDEN * K},
    }
    for place, expected in per_layer.items():
        assert added(place) == {f"blocks.{i}.{name}": n for i in range(2) for name, n in expected.items()}, place
    assert sum(added("ABCD").values()) == 2 * K * (D + 3 * D + D + HIDDEN)
    # grouped key/value heads: B's filters are as wide as each projection
    assert sum(added("B", num_kv_heads=1).values()) == 2 * K * (D + 2 * D // H)


def test_a_layers_own_convolution_is_its_canon_b() -> None:
    assert added("B", "gla") == {}
    assert added("B", {"name": "softmax", "conv_size": 3}) == {}  # Primer's, kept as it is
    model = tiny_gpt("B", "gla")
    assert not model.blocks[0].attention.conv_residual  # the family's SiLU convolution, unchanged
    for without in ({"name": "gla", "conv_size": 0}, "rwkv7"):
        with pytest.raises(zoo.IncompatibleAttentionError, match="layer 1: Canon-B sits on the attention's projected"):
            tiny_gpt("B", without)
    with pytest.raises(zoo.IncompatibleAttentionError, match="Canon-B runs the scoring attention 'local'"):
        tiny_gpt("B", {"name": "local", "window": 4})


def test_without_canon_a_model_is_what_it_was() -> None:
    torch.manual_seed(0)
    before = GPT(23, block_size=16, d_model=D, num_heads=H, num_layers=2)
    torch.manual_seed(0)
    now = GPT(23, block_size=16, d_model=D, num_heads=H, num_layers=2, canon="")
    assert list(before.state_dict()) == list(now.state_dict())
    _, caches = now(torch.randint(0, 23, (1, 4)), use_cache=True)
    assert type(caches[0]).__name__ == "KeyValueCache"


@pytest.mark.parametrize("bad", ["ABE", "abcd", "AA"])
def test_a_bad_value_is_one_line_naming_the_letters(bad: str) -> None:
    with pytest.raises(DataError, match="any of the letters A, B, C, D once each") as error:
        tiny_gpt(bad)
    assert "\n" not in str(error.value)


def test_c_and_d_without_an_mlp_are_refused_and_an_encoder_refuses_canon() -> None:
    with pytest.raises(DataError, match="canon 'CD' sits in the MLP, which ffn_hidden=0 leaves out"):
        RecallLM(23, canon="ABCD")
    with pytest.raises(DataError, match="Canon layers are causal convolutions"):
        build_stacks(
            StackConfig(block=BlockConfig(D, H, HIDDEN, canon="A")), StackPlan(1, EncoderBlock, role="an encoder")
        )


def test_the_option_reaches_recall_and_gpt_from_the_command_line(in_tmp, capsys) -> None:
    budget = [*flags("trainer", max_steps=2, limit_val_batches=1, val_check_interval=2), *QUIET]
    main(["fit", "--model", "recall", *SMALL["recall"], *flags("model", canon="AB"), *budget])
    recall = zoo.load_checkpoint(str(latest_run("recall") / "checkpoints" / "last.ckpt")).model
    assert all(block.canon_a is not None and block.attention.conv_residual for block in recall.blocks)
    corpus = in_tmp / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 200)
    gpt = flags("model", d_model=16, num_heads=2, num_layers=1, canon="ACD")
    main(["fit", "--model", "gpt", *flags("data", path=corpus, block_size=16, batch_size=8), *gpt, *budget])
    model = zoo.load_checkpoint(str(latest_run("gpt") / "checkpoints" / "last.ckpt")).model
    assert model.blocks[0].canon_c is not None and model.blocks[0].ffn.canon_d is not None
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--model", "recall", *SMALL["recall"], *flags("model", canon="ABE"), *budget])
    assert exit_.value.code == 2
    assert "any of the letters A, B, C, D" in capsys.readouterr().err
