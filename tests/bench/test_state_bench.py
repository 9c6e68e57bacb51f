"""``python -m zoo bench state`` and the recurrent cases of ``bench attention`` on tiny sizes: they
run and report what they should (no timing is asserted)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

import zoo
from zoo.bench.attention import AttentionBenchConfig, run_attention_bench
from zoo.bench.cli import main
from zoo.bench.state import StateBenchConfig, recurrent_names, run_state_bench, state_layer, state_table

TINY = {"d_model": 16, "heads": 2, "warmup": 0, "repeats": 1}
RECURRENT = [
    "based", "comba", "deltanet", "gated_deltanet", "gated_deltanet2", "gated_deltaproduct", "gla", "gsa", "hgrn2",
    "kda", "lightning_attention", "mamba1", "mamba2", "mamba3", "mesanet", "retention", "rwkv6", "rwkv7",
]  # fmt: skip


def test_the_recurrent_names_are_the_causal_recurrences() -> None:
    assert recurrent_names() == RECURRENT
    assert StateBenchConfig(lengths=[8]).attentions == [*RECURRENT, "dot_product"]


def test_a_state_does_not_grow_with_the_context_and_a_key_value_cache_does() -> None:
    config = StateBenchConfig(lengths=[8, 24], attentions=["gla", "mamba2", "dot_product"], **TINY)
    records = run_state_bench(config, torch.device("cpu"))
    sizes = {r["attention"]: [result["cache_bytes"] for result in r["results"]] for r in records}
    for name in ("gla", "mamba2"):  # (B, H, dk, dv) float32, and the three convolutions' last 3 inputs
        layer = zoo.create_attention(name, embed_dim=16, num_heads=2)
        windows = 3 * (2 * layer.q_proj.out_features + layer.v_proj.out_features)
        assert sizes[name] == [(2 * layer.key_head_dim * layer.head_dim + windows) * 4] * 2
    assert sizes["dot_product"] == [2 * 2 * 8 * n * 4 for n in (9, 25)]  # keys and values of every position
    assert all(r["results"][0]["step_peak_bytes"] > 0 and r["results"][1]["time_ms"]["median"] > 0 for r in records)
    table = state_table(records, config.lengths)
    assert "| gla " in table and "ms/token L=24" in table and "cache KiB L=8" in table


def test_bench_state_runs_from_the_command_line(tmp_path, capsys) -> None:
    out = tmp_path / "state.json"
    tiny = ["--d-model", "16", "--heads", "2", "--warmup", "0", "--repeats", "1", "--no-memory"]
    main(["state", "--lengths", "8", "16", "--attentions", "retention", "dot_product", *tiny, "--out", str(out)])
    payload = json.loads(out.read_text())
    assert [c["attention"] for c in payload["cases"]] == ["retention", "dot_product"]
    assert payload["config"]["lengths"] == [8, 16] and "| retention" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["state", "--attentions", "retnt", "--out", str(out)])
    assert "Unknown attention 'retnt'. Did you mean 'retnet', 'retention'" in capsys.readouterr().err


def test_a_length_a_layer_refuses_is_recorded_and_the_others_go_on(tmp_path, capsys) -> None:
    """A log-linear layer with 4 levels reaches 8 positions: after a context of 8 it cannot decode
    a ninth, and that length is recorded with the layer's reason while its shorter length and the
    other layers are measured (a matrix column of 49 rows once died with its 14th)."""
    out = tmp_path / "state.json"
    tiny = ["--d-model", "16", "--heads", "2", "--warmup", "0", "--repeats", "1", "--no-memory"]
    rows = ["{name: log_linear_mamba2, num_levels: 4}", "dot_product"]
    main(["state", "--lengths", "4", "8", "--attentions", *rows, *tiny, "--out", str(out)])
    cases = {c["attention"]: c["results"] for c in json.loads(out.read_text())["cases"]}
    log_linear = cases["{name: log_linear_mamba2, num_levels: 4}"]
    assert log_linear[0]["status"] == "ok" and log_linear[0]["cache_bytes"] > 0
    # the layer's own one line (no fault of the layer's: its reach by design), not a failure
    assert log_linear[1]["status"].startswith("refused: ") and "Fenwick levels" in log_linear[1]["status"]
    assert [r["status"] for r in cases["dot_product"]] == ["ok", "ok"]
    printed = capsys.readouterr()
    assert "| refused " in printed.out and "L=8: refused: " in printed.err  # the table's cell; the reason once


def test_an_entry_with_arguments_builds_that_layer_and_a_bad_one_is_one_line(capsys) -> None:
    """MLA decoding in its naive and absorbed forms: the same weights (same seed) give the same
    next output; the cache is the latent either way."""
    outputs = []
    for mode in ("naive", "absorbed"):
        torch.manual_seed(0)
        layer = state_layer(f"{{name: mla, mode: {mode}}}", 16, 2).eval()
        assert layer.mode == mode
        context = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            _, cache = layer.attend_cached(context[:, :8], None)
            outputs.append(layer.attend_cached(context[:, 8:], cache)[0])
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=1e-5)
    with pytest.raises(SystemExit):
        main(["state", "--attentions", "{name: mla, mode: fused}"])
    assert (
        "error: --attentions {name: mla, mode: fused}: MultiHeadLatentAttention: mode must be one of"
        in capsys.readouterr().err
    )


def _recipe(folder, name: str, attention: list) -> str:
    """A recipe overlay as ``configs/gpt_shakespeare_cpu_*.yaml`` writes one; ``LABEL=PATH``."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"model": {"init_args": {"position": "rope", "attention": attention}}}))
    return f"{name}={path}"


def test_a_recipe_is_decoded_as_its_whole_stack_every_layers_cache_counted(tmp_path) -> None:
    """A stack of ``gla`` and ``dot_product`` holds what its layers hold when each is decoded
    alone: the state, and the keys and values of every position; a layer that reads the previous
    layer's keys and values (Gemma 4's sharing) holds none of its own. An overlay that sets no
    depth is as deep as the CPU recipe it is written against (four layers)."""
    recipes = [
        _recipe(tmp_path, "pair", ["gla", "dot_product"]),
        _recipe(tmp_path, "shared", [{"name": "softmax"}, {"name": "softmax", "kv_source": "previous"}]),
    ]
    config = StateBenchConfig(lengths=[8, 24], attentions=["gla", "dot_product", "softmax"], recipes=recipes, **TINY)
    records = run_state_bench(config, torch.device("cpu"))
    sizes = {r["attention"]: [result["cache_bytes"] for result in r["results"]] for r in records}
    assert list(sizes) == ["gla", "dot_product", "softmax", "recipe pair", "recipe shared"]
    # no depth in the overlays: the CPU recipe's four layers, each pattern twice
    assert sizes["recipe pair"] == [2 * (a + b) for a, b in zip(sizes["gla"], sizes["dot_product"], strict=True)]
    assert sizes["softmax"] == [2 * 2 * 8 * n * 4 for n in (9, 25)]
    assert sizes["recipe shared"] == [2 * size for size in sizes["softmax"]]
    assert all(r["results"][1]["time_ms"]["median"] > 0 for r in records)


def test_bench_state_takes_recipes_alone_and_a_bad_recipe_is_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "state.json"
    tiny = ["--d-model", "16", "--heads", "2", "--warmup", "0", "--repeats", "1", "--no-memory"]
    pair = _recipe(tmp_path, "pair", ["gla", "dot_product"])
    main(["state", "--lengths", "8", "--recipes", pair, *tiny, "--out", str(out)])
    assert [c["attention"] for c in json.loads(out.read_text())["cases"]] == ["recipe pair"]  # no default layers
    (tmp_path / "bare.yaml").write_text("model: {init_args: {num_layers: 2}}\n")
    for entry, line in [
        (str(tmp_path / "missing.yaml"), "missing.yaml: No such file or directory; give a recipe overlay file."),
        (str(tmp_path / "bare.yaml"), "bare.yaml sets no model.init_args.attention; point it at a recipe overlay."),
        (_recipe(tmp_path, "typo", ["glaa"]), "Unknown attention 'glaa'"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            main(["state", "--recipes", entry, *tiny, "--out", str(out)])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and line in err and "Traceback" not in err


def test_bench_attention_runs_the_recurrent_families_in_a_layer_when_causal(capsys) -> None:
    config = AttentionBenchConfig(lengths=[16], batch=2, causal=True, memory=False, **TINY)
    records = run_attention_bench(config, torch.device("cpu"), ["multi_head", *RECURRENT])
    assert [r["name"] for r in records] == ["multi_head", *RECURRENT]
    for record in records[1:]:
        assert record["kind"] == "layer" and record["baseline"] == "multi_head" and record["variant"] == record["name"]
        assert record["results"][0]["status"] == "ok", record
    left_out = run_attention_bench(config.__class__(lengths=[16], **TINY), torch.device("cpu"), ["gla", "linear"])
    assert [r["name"] for r in left_out] == ["linear"]
    assert "gla: left out (declares supports_bidirectional=False: a causal recurrence" in capsys.readouterr().err


def test_the_cpu_allocators_refusal_is_out_of_memory() -> None:
    """Under ``ulimit -v`` the CPU allocator refuses with this message where the kernel would kill
    the whole run: recorded as out of memory, as CUDA's error is."""
    from zoo.bench.sweep import failure_status

    refusal = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert failure_status(RuntimeError(refusal)) == "out of memory"
    assert failure_status(ValueError("num_levels is 15")).startswith("failed: ValueError")


def test_a_step_that_fails_only_under_the_memory_profiler_keeps_its_time_and_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zoo.bench import state

    def refuse(fn, *, device) -> int:
        raise MemoryError("out of memory")

    monkeypatch.setattr(state, "peak_memory", refuse)
    config = StateBenchConfig(lengths=[8], attentions=["gla"], d_model=16, heads=2, warmup=0, repeats=2)
    (record,) = run_state_bench(config, torch.device("cpu"))
    (result,) = record["results"]
    assert result["status"] == "ok" and result["time_ms"]["repeats"] == 2 and result["cache_bytes"] > 0
    assert result["memory_status"] == "out of memory" and "step_peak_bytes" not in result
