"""The bench's arithmetic count: torch's counter with the CPU attention kernel, causal pairs only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.bench.attention import AttentionBenchConfig, run_attention_bench
from zoo.bench.attention_report import attention_tables
from zoo.bench.flops import count_flops


@pytest.mark.parametrize(("queries", "keys"), [(7, 7), (5, 9)])
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_sdpa_counts_two_products_forward_and_five_backward_over_the_pairs_it_computes(
    queries: int, keys: int, causal: bool
) -> None:
    batch, heads, width = 2, 3, 4
    q = torch.randn(batch, heads, queries, width, requires_grad=True)
    k, v = (torch.randn(batch, heads, keys, width, requires_grad=True) for _ in range(2))
    # the pairs a top-left causal kernel computes, counted one query at a time
    pairs = sum(min(i + 1, keys) for i in range(queries)) if causal else queries * keys
    per_product = 2 * batch * heads * width * pairs  # a multiply and an add per pair and channel

    def attend() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with torch.no_grad():
        assert count_flops(attend) == 2 * per_product  # scores, then weights times values
    # backward: the scores again, then the gradients of the weights, values, queries and keys
    assert count_flops(lambda: attend().sum().backward()) == 7 * per_product


def test_count_flops_resets_first_and_counts_linear_layers() -> None:
    layer = torch.nn.Linear(6, 5)
    x = torch.randn(3, 6, requires_grad=True)
    calls: list[str] = []
    flops = count_flops(lambda: layer(x).sum().backward(), reset=lambda: calls.append("reset"))
    assert calls == ["reset"]
    assert flops == 3 * (2 * 3 * 6 * 5)  # forward, the input's gradient, the weight's gradient


def test_bench_attention_reports_the_arithmetic_beside_the_time() -> None:
    config = AttentionBenchConfig(
        lengths=[32],
        batch=1,
        d_model=16,
        heads=2,
        causal=True,
        padding=False,
        warmup=0,
        repeats=1,
        memory=False,
        flops=True,
    )
    records = run_attention_bench(config, torch.device("cpu"), ["floor", "multi_head", "mamba2"])
    gflop = {r["name"]: r["results"][0]["gflop"] for r in records}
    linears = 3 * 4 * 2 * 32 * 16 * 16  # four 16-wide projections: forward, the input's and the weight's gradients
    attention = 7 * 2 * 2 * 8 * (32 * 33 // 2)  # the causal kernel over two heads of width 8
    assert gflop["floor"] * 1e9 == pytest.approx(linears + attention)
    assert gflop["multi_head"] == pytest.approx(gflop["floor"])
    assert gflop["mamba2"] > gflop["floor"]  # expand 2 and d_state 128 at width 16
    table = attention_tables(records, config.lengths)
    assert "Matrix arithmetic, forward+backward" in table
    assert "Peak memory" not in table  # not measured: no table of dashes
    assert f"| mamba2     | {gflop['mamba2']:.3g} ({gflop['mamba2'] / gflop['multi_head']:.2f}x), " in table
