"""The Long Range Arena's ``synthesizer`` and ``sinkhorn`` against naive float64 loops over their
definitions, the attention contract, and the refusals of what they declare they lack."""

from __future__ import annotations

import math

import pytest
import torch

import zoo
from zoo.attention import IncompatibleAttentionError, require_attention
from zoo.attention.variants.sinkhorn import log_sinkhorn
from zoo.errors import ConfigurationError
from zoo.testing import check_attention

ALL_CHECKS = ("shape", "padding", "causal", "fully_masked", "weights", "float16", "bfloat16", "gradients")
NOT_CAUSAL = tuple(check for check in ALL_CHECKS if check != "causal")


def _visible(batch: int, lq: int, lk: int, causal: bool, masking: str, g: torch.Generator) -> tuple[dict, torch.Tensor]:
    """Mask arguments as the forward takes them, and the ``(B, Lq, Lk)`` pairs they let attend."""
    keys = torch.arange(lk)
    if masking == "none":
        kwargs, visible = {}, torch.ones(batch, lq, lk, dtype=torch.bool)
    elif masking == "lengths":
        lengths = torch.tensor([lk, lk - 4])
        kwargs, visible = {"valid_lens": lengths}, (keys < lengths[:, None, None]).expand(batch, lq, lk)
    elif masking == "per_query":
        lengths = torch.randint(0, lk + 1, (batch, lq), generator=g)
        kwargs, visible = {"valid_lens": lengths}, keys < lengths[..., None]
    else:
        mask = torch.rand(batch, lq, lk, generator=g) > 0.4
        kwargs, visible = {"attn_mask": mask}, mask
    if causal:
        visible = visible & zoo.causal_mask(lq, lk)
    return kwargs, visible


def _check_against(attention: zoo.Attention, q, k, v, kwargs: dict, causal: bool, expected: torch.Tensor, visible):
    fast = attention(q, k, v, **kwargs, is_causal=causal).output
    output, weights = attention(q, k, v, **kwargs, is_causal=causal, need_weights=True)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights @ v, expected)
    hidden = ~visible if weights.dim() == visible.dim() else ~visible.unsqueeze(1)
    assert (weights >= 0).all() and (weights.masked_select(hidden.expand_as(weights)) == 0).all()


# -- synthesizer -------------------------------------------------------------------------------


def naive_synthesizer(attention, q: torch.Tensor, v: torch.Tensor, lk: int, visible: torch.Tensor) -> torch.Tensor:
    """``softmax(logits) V`` one query and head at a time, the logits read from the parameters
    by their definition: row ``Lk - Lq + i`` of the learned matrix, or the MLP of query ``i``."""
    batch, heads, lq = q.shape[0], q.shape[1], q.shape[2]
    out = torch.zeros(batch, heads, lq, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(lq):
                seen = [j for j in range(lk) if visible[b, i, j]]
                if not seen:
                    continue
                if attention.mode == "random":
                    logits = torch.stack([attention.logits[h, lk - lq + i, j] for j in seen])
                else:
                    hidden = torch.relu(q[b, h, i] @ attention.hidden_weight[h] + attention.hidden_bias[h, 0])
                    row = hidden @ attention.logit_weight[h] + attention.logit_bias[h, 0]
                    logits = torch.stack([row[j] for j in seen])
                out[b, h, i] = torch.softmax(logits, 0) @ v[b, h, seen]
    return out


@pytest.mark.parametrize("mode", ["random", "dense"])
@pytest.mark.parametrize(
    ("lq", "lk", "causal", "masking"),
    [
        (9, 9, False, "none"),
        (9, 9, False, "lengths"),
        (9, 9, False, "mask"),
        (9, 9, True, "lengths"),
        (4, 9, True, "none"),
    ],
)
def test_synthesizer_equals_its_naive_definition(mode: str, lq: int, lk: int, causal: bool, masking: str) -> None:
    g = torch.Generator().manual_seed(0)
    attention = zoo.create_attention("synthesizer", query_size=6, max_len=12, mode=mode, num_heads=3).double()
    q = torch.randn(2, 3, lq, 6, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, lk, 6, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, lk, 5, generator=g, dtype=torch.float64)
    kwargs, visible = _visible(2, lq, lk, causal, masking, g)
    if "attn_mask" in kwargs:  # one mask for every head
        kwargs["attn_mask"] = kwargs["attn_mask"].unsqueeze(1)
    if "valid_lens" in kwargs:  # one length per sequence and head
        kwargs["valid_lens"] = kwargs["valid_lens"].unsqueeze(1).expand(2, 3)
    with torch.no_grad():
        expected = naive_synthesizer(attention, q, v, lk, visible)
        _check_against(attention, q, k, v, kwargs, causal, expected, visible.unsqueeze(1))


@pytest.mark.parametrize("mode", ["random", "dense"])
def test_synthesizer_never_reads_the_keys(mode: str) -> None:
    """What it drops: content-based key matching. New keys leave the output as it was."""
    attention = zoo.create_attention("synthesizer", query_size=4, max_len=8, mode=mode)
    q, k, v = torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 3)
    torch.testing.assert_close(attention(q, k, v).output, attention(q, torch.randn(2, 6, 4), v).output)


@pytest.mark.parametrize(
    "kwargs", [{"mode": "random"}, {"mode": "dense"}, {"mode": "random", "fixed": True}, {"max_len": 7}]
)
def test_synthesizer_keeps_the_contract(kwargs: dict) -> None:
    report = check_attention("synthesizer", **kwargs)
    assert report.passed == ALL_CHECKS
    assert report.skipped == {"two_sequences": "declares supports_cross_attention=False (and refuses it)"}


def _random_synthesizer_case(g: torch.Generator) -> tuple:
    """A 3-head ``random`` synthesizer, inputs of 4 sequences with their own key padding."""
    attention = zoo.create_attention("synthesizer", query_size=4, max_len=12, num_heads=3).double()
    q, v = (
        torch.randn(4, 3, 10, 4, generator=g, dtype=torch.float64),
        torch.randn(4, 3, 10, 5, generator=g, dtype=torch.float64),
    )
    return attention, q, v, torch.tensor([10, 7, 3, 0]).unsqueeze(1).expand(4, 3)


def test_random_synthesizer_forms_its_weights_once_per_head_not_per_sequence(monkeypatch) -> None:
    """The logits are the same for every input, so a batch of key-padded sequences shares one
    ``(Lq, Lk)`` softmax per head; the answer and the gradients are those of the softmax per sequence."""
    import zoo.attention.variants.synthesizer as synthesizer

    attention, q, v, lengths = _random_synthesizer_case(torch.Generator().manual_seed(0))
    shapes = []
    spy = synthesizer.masked_softmax
    monkeypatch.setattr(
        synthesizer, "masked_softmax", lambda scores, **kw: shapes.append(scores.shape) or spy(scores, **kw)
    )
    for causal in (False, True):
        v.grad = attention.logits.grad = None
        v.requires_grad_(True)
        shared = attention(q, q, v, lengths, is_causal=causal).output
        (shared * torch.linspace(-1, 1, 5, dtype=torch.float64)).sum().backward()
        grads = v.grad, attention.logits.grad
        v.grad = attention.logits.grad = None
        per_sequence, _ = attention(q, q, v, lengths, is_causal=causal, need_weights=True)
        (per_sequence * torch.linspace(-1, 1, 5, dtype=torch.float64)).sum().backward()
        torch.testing.assert_close(shared, per_sequence)
        torch.testing.assert_close(grads, (v.grad, attention.logits.grad))
        assert (shared[3] == 0).all()  # no key to attend to: zero, as everywhere in the zoo
    assert shapes == [(3, 10, 10)] * 2


def test_random_synthesizer_shares_its_weights_with_a_position_bias_and_a_mask_for_every_sequence(
    monkeypatch,
) -> None:
    """A bias and a mask the same for every sequence fold into the shared softmax: the per-sequence
    one (the base class's) never runs, and the answer is its answer."""
    import zoo.attention.contract.base as base

    attention, q, v, _ = _random_synthesizer_case(torch.Generator().manual_seed(1))
    bias = zoo.create_position("t5", d_model=12, num_heads=3).double()
    mask = torch.rand(10, 10, generator=torch.Generator().manual_seed(2)) > 0.3
    with torch.no_grad():
        for kwargs in ({"position_bias": bias}, {"attn_mask": mask}, {"attn_mask": mask[0]}):
            expected = attention(q, q, v, **kwargs, need_weights=True).output
            with monkeypatch.context() as patch:
                patch.setattr(base, "masked_softmax", lambda *a, **kw: pytest.fail("formed per-sequence weights"))
                shared = attention(q, q, v, **kwargs).output
            torch.testing.assert_close(shared, expected)


def test_random_synthesizer_drops_weights_per_sequence_under_attention_dropout() -> None:
    """Dropout acts on each sequence's own weights, which the shared softmax never forms."""
    attention = zoo.create_attention("synthesizer", max_len=8, dropout=0.5)
    x = torch.randn(2, 8, 4)
    trained = attention.train()(x, x, x).output
    assert not torch.allclose(trained, attention.eval()(x, x, x).output)


def test_random_synthesizer_forms_weights_per_sequence_where_a_shared_softmax_would_underflow() -> None:
    """A kept key whose logit is far under a padded key's gets a share of the full softmax below
    float32's range; the synthesizer then takes the softmax per sequence, and stays exact."""
    attention = zoo.create_attention("synthesizer", max_len=6)
    with torch.no_grad():
        attention.logits[..., 0] = 200.0  # key 0 dominates every row, and is padding below
    x, mask = torch.randn(1, 6, 3), torch.tensor([False, True, True, True, True, True])
    expected = torch.softmax(attention.logits[0, :, 1:], -1) @ x[0, 1:]
    torch.testing.assert_close(attention(x, x, x, attn_mask=mask).output[0], expected)


def test_fixed_random_synthesizer_trains_nothing_and_is_saved() -> None:
    fixed = zoo.create_attention("synthesizer", max_len=8, fixed=True)
    assert not list(fixed.parameters()) and fixed.state_dict()["logits"].shape == (1, 8, 8)
    assert [name for name, _ in zoo.create_attention("synthesizer", max_len=8).named_parameters()] == ["logits"]


def test_synthesizer_refusals_name_the_fix() -> None:
    attention = zoo.create_attention("synthesizer", max_len=8)
    x = torch.randn(1, 9, 4)
    with pytest.raises(ConfigurationError, match=r"9 keys exceed max_len=8.*max_len >= 9"):  # a setting: one line
        attention(x, x, x)
    with pytest.raises(IncompatibleAttentionError, match="needs queries and keys of one sequence"):
        attention(torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4))
    with pytest.raises(ValueError, match="unknown mode 'dens'. Did you mean 'dense'"):
        zoo.create_attention("synthesizer", mode="dens")
    with pytest.raises(ValueError, match="fixed=True applies to mode='random' only"):
        zoo.create_attention("synthesizer", mode="dense", fixed=True)
    with pytest.raises(ValueError, match="learned for 2 heads"):
        zoo.create_attention("synthesizer", max_len=8, num_heads=2)(x[:, :4], x[:, :4], x[:, :4])
    with pytest.raises(IncompatibleAttentionError, match="supports_rotary=False"):
        check_attention("synthesizer", position="rope")


@pytest.mark.parametrize("mode", ["random", "dense"])
def test_a_layer_over_the_synthesizer_builds_only_the_projections_it_reads(mode: str) -> None:
    """No key projection (nor, for ``random``, a query projection): the layer keeps the whole
    contract, every parameter getting a gradient."""
    kwargs = {"mode": mode, "max_len": 8}
    layer = zoo.create_attention("self", embed_dim=16, num_heads=2, attention=zoo.AttentionSpec("synthesizer", kwargs))
    assert layer.k_proj is None and (layer.q_proj is None) == (mode == "random")
    assert check_attention("self", attention=zoo.AttentionSpec("synthesizer", {"mode": mode})).passed == ALL_CHECKS
    with pytest.raises(ValueError, match="'synthesizer' reads no queries or no keys"):
        zoo.create_attention("multi_head", embed_dim=16, num_heads=2, attention="synthesizer").load_from_torch(
            torch.nn.MultiheadAttention(16, 2, batch_first=True)
        )


# -- sinkhorn ----------------------------------------------------------------------------------


def test_log_sinkhorn_makes_rows_and_columns_sum_to_one() -> None:
    logits = 2 * torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    once, sorting = log_sinkhorn(logits, 1).exp(), log_sinkhorn(logits, 200).exp()
    ones = torch.ones(4, 6, dtype=torch.float64)
    assert not torch.allclose(once.sum(-1), ones, atol=1e-3)  # one round is not enough here
    torch.testing.assert_close(sorting.sum(-1), ones)
    torch.testing.assert_close(sorting.sum(-2), ones)


def test_sinkhorn_sorting_matrix_is_doubly_stochastic_over_its_blocks() -> None:
    attention = zoo.create_attention("sinkhorn", block_size=3, sinkhorn_iters=200, temperature=2.0).double()
    g = torch.Generator().manual_seed(1)
    q, k = (0.5 * torch.randn(2, 4, 3, 8, generator=g, dtype=torch.float64) for _ in range(2))  # 4 blocks of 3
    sorting = attention.log_sorting(q, k, torch.ones(1, 4, 3, dtype=torch.bool)).exp()  # (2, 1, 4, 4)
    torch.testing.assert_close(sorting.sum(-1), torch.ones(2, 1, 4, dtype=torch.float64))
    torch.testing.assert_close(sorting.sum(-2), torch.ones(2, 1, 4, dtype=torch.float64))


def naive_sinkhorn(q, k, v, visible, block: int, iters: int, temperature: float) -> torch.Tensor:
    """Sparse Sinkhorn attention one query at a time: block sums over the positions the query sees,
    Sinkhorn by plain row and column division of ``exp``, then one softmax over the visible keys of
    its own block and the visible-key mixes of its sorted block's slots."""
    batch, length, d = q.shape
    num_blocks, scale = math.ceil(length / block), 1 / math.sqrt(d)
    out = torch.zeros(batch, length, v.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for i in range(length):
            seen = visible[b, i]
            sums_q, sums_k = (
                torch.zeros(num_blocks, d, dtype=torch.float64),
                torch.zeros(num_blocks, d, dtype=torch.float64),
            )
            for j in range(length):
                if seen[j]:
                    sums_q[j // block] += q[b, j]
                    sums_k[j // block] += k[b, j]
            sorting = torch.exp(sums_q @ sums_k.T * scale / temperature)
            for _ in range(iters):
                sorting = sorting / sorting.sum(1, keepdim=True)
                sorting = sorting / sorting.sum(0, keepdim=True)
            own = i // block
            keys = [k[b, j] for j in range(own * block, min(own * block + block, length)) if seen[j]]
            vals = [v[b, j] for j in range(own * block, min(own * block + block, length)) if seen[j]]
            for s in range(block):
                members = [c for c in range(num_blocks) if c * block + s < length and seen[c * block + s]]
                if members:
                    total = sum(sorting[own, c] for c in members)
                    keys.append(sum(sorting[own, c] * k[b, c * block + s] for c in members) / total)
                    vals.append(sum(sorting[own, c] * v[b, c * block + s] for c in members) / total)
            if keys:
                weights = torch.softmax(torch.stack([q[b, i] @ key for key in keys]) * scale, 0)
                out[b, i] = sum(w * val for w, val in zip(weights, vals))
    return out


@pytest.mark.parametrize("length", [12, 10])  # a whole number of blocks, and a last block padded
@pytest.mark.parametrize("masking", ["none", "lengths", "per_query", "mask"])
def test_sinkhorn_equals_a_naive_loop(length: int, masking: str) -> None:
    g = torch.Generator().manual_seed(2)
    attention = zoo.create_attention("sinkhorn", block_size=3, sinkhorn_iters=4, temperature=0.6).double()
    q, k = (torch.randn(2, length, 8, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, length, 5, generator=g, dtype=torch.float64)
    kwargs, visible = _visible(2, length, length, False, masking, g)
    expected = naive_sinkhorn(q, k, v, visible, 3, 4, 0.6)
    _check_against(attention, q, k, v, kwargs, False, expected, visible)


@pytest.mark.parametrize("block_size", [2, 3, 64])
def test_sinkhorn_keeps_the_contract(block_size: int) -> None:
    report = check_attention("sinkhorn", block_size=block_size)
    assert report.passed == NOT_CAUSAL
    assert report.skipped == {
        "two_sequences": "declares supports_cross_attention=False (and refuses it)",
        "causal": "declares supports_causal=False (and refuses it)",
    }


def test_a_layer_over_sinkhorn_keeps_the_contract() -> None:
    """In self-attention a padded position is also a query: it adds nothing to the block sums."""
    report = check_attention("self", attention=zoo.AttentionSpec("sinkhorn", {"block_size": 3}), dtypes=())
    assert report.passed == ("shape", "padding", "fully_masked", "weights", "gradients")


def test_sinkhorn_refusals_name_the_fix() -> None:
    attention = zoo.create_attention("sinkhorn", block_size=2)
    x = torch.randn(1, 6, 4)
    with pytest.raises(IncompatibleAttentionError, match="does not support causal masking"):
        attention(x, x, x, is_causal=True)
    with pytest.raises(IncompatibleAttentionError, match="needs queries and keys of one sequence"):
        attention(x[:, :3], x, x)
    with pytest.raises(IncompatibleAttentionError, match=r"'sinkhorn' cannot be used by .* causal masking"):
        require_attention("sinkhorn", causal=True, role="a decoder")
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        zoo.create_attention("sinkhorn", block_size=0)
    with pytest.raises(ValueError, match="temperature must be positive"):
        zoo.create_attention("sinkhorn", temperature=0.0)
