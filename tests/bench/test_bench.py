"""``python -m zoo bench`` on tiny grids: the tool runs and reports sane numbers.

Smoke tests of the benchmark tool, not timed assertions: they check that every case runs, that
times and memory are positive and consistent, that growth exponents are computed and that the
JSON, the tables and the plot are written.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

from zoo.attention import get_attention
from zoo.attention.build.factory import scoring_names
from zoo.bench.measure import Summary, TooSlow, peak_memory, time_round_robin
from zoo.bench.report import environment, growth_exponent, markdown_table
from zoo.commands import main

SMALL_TRANSLATOR = json.dumps({"d_model": 32, "ffn_hidden": 32, "num_heads": 2})
#: one unwarmed repeat of a tiny case, memory not measured: the runs that check which cases ran
ONE_QUICK_REPEAT = ["--batch", "1", "--d-model", "8", "--heads", "2", "--warmup", "0", "--repeats", "1", "--no-memory"]


def _bench(*args: str) -> dict:
    """``python -m zoo bench ARGS`` in this process; the JSON it wrote to ``--out``."""
    main(["bench", *args])
    return json.loads(Path(args[args.index("--out") + 1]).read_text())


@pytest.fixture
def fra_eng_slice(shared_data) -> list[str]:
    """The data flags of ``bench train`` and ``bench decode``: 1,000 fra-eng pairs, 600 words."""
    return ["--data-path", str(shared_data / "fra-eng.zip"), "--limit-train", "1000", "--vocab-size", "600"]


def test_growth_exponent_recovers_power_laws() -> None:
    lengths = [256, 512, 1024, 2048]
    assert growth_exponent(lengths, [3e-6 * n**2 for n in lengths]) == pytest.approx(2.0)
    assert growth_exponent(lengths, [0.5 * n for n in lengths]) == pytest.approx(1.0)
    assert growth_exponent([256, 256], [1.0, 2.0]) is None


def test_summary_gives_median_quartiles_and_extremes() -> None:
    summary = Summary.of([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (summary.median, summary.q1, summary.q3, summary.min, summary.max, summary.repeats) == (
        3.0,
        2.0,
        4.0,
        1.0,
        5.0,
        5,
    )
    assert Summary.of([2.0]).scaled(1e3)["median"] == 2000.0


def test_round_robin_interleaves_calls_and_drops_only_the_one_that_fails() -> None:
    calls: list[str] = []

    def call(name: str, fail_at: int | None = None):
        def fn() -> None:
            calls.append(name)
            if fail_at is not None and calls.count(name) == fail_at:
                raise MemoryError("out of memory")

        return fn, None

    results = time_round_robin({"a": call("a"), "b": call("b", fail_at=2), "c": call("c")}, warmup=1, repeats=3)
    assert calls == ["a", "b", "c", "a", "b", "c", "a", "c", "a", "c"]
    assert isinstance(results["b"], MemoryError)
    assert results["a"].repeats == results["c"].repeats == 3


def test_a_case_that_fails_only_under_the_memory_profiler_keeps_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiled call holds more than a timed one (the profiler's records): where it alone runs
    out of memory, the time stands and ``memory_status`` says why there is no peak."""
    from zoo.bench import sweep

    def profiled(fn, *, device, reset=None) -> int:
        if fn is heavy:
            raise MemoryError("out of memory")
        return 1024

    def heavy() -> None:
        sum(range(100))

    monkeypatch.setattr(sweep, "peak_memory", profiled)
    builds = {"light": lambda: sweep.Workload(lambda: None), "heavy": lambda: sweep.Workload(heavy)}
    settings = sweep.SweepSettings(lengths=[8], warmup=0, repeats=2)
    results = sweep._measure(builds, {"light": 8, "heavy": 8}, settings, torch.device("cpu"))
    assert results["heavy"]["status"] == "ok" and results["heavy"]["time_ms"]["repeats"] == 2
    assert results["heavy"]["memory_status"] == "out of memory" and "peak_memory_mib" not in results["heavy"]
    assert results["light"]["peak_memory_mib"] == 1024 / 2**20 and "memory_status" not in results["light"]


def test_round_robin_stops_a_call_over_the_time_limit() -> None:
    results = time_round_robin({"slow": (lambda: sum(range(10**6)), None)}, warmup=0, repeats=2, time_limit=1e-9)
    assert isinstance(results["slow"], TooSlow)


def test_the_first_call_compiles_under_its_own_limit() -> None:
    """A first call that compiles (here: sleeps) past ``time_limit`` stays in under ``first_call_limit``."""
    calls = []

    def compiles_once() -> None:
        time.sleep(0.2 if not calls else 0.0)
        calls.append(1)

    results = time_round_robin({"jit": (compiles_once, None)}, warmup=1, repeats=2, time_limit=0.1, first_call_limit=5)
    assert not isinstance(results["jit"], Exception) and len(calls) == 3
    calls.clear()
    results = time_round_robin({"jit": (compiles_once, None)}, warmup=1, repeats=2, time_limit=0.1)
    assert isinstance(results["jit"], TooSlow)


def test_cpu_peak_memory_counts_the_tensors_a_call_holds() -> None:
    def two_at_once() -> None:
        x = torch.ones(2**20)  # 4 MiB
        y = x * 2  # 4 MiB more, while x lives
        del x, y

    peak = peak_memory(two_at_once, device=torch.device("cpu"))
    assert 8 * 2**20 <= peak < 9 * 2**20


def test_markdown_table_lines_up() -> None:
    table = markdown_table(["a", "long header"], [[1, 2], ["wide cell", 3]])
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1 and lines[1].startswith("|---")


def test_environment_names_the_program_that_ran_the_arguments() -> None:
    cpu = torch.device("cpu")
    assert environment(cpu, ["bench", "attention", "--lengths", "16 32"])["command"] == (
        "python -m zoo bench attention --lengths '16 32'"
    )
    script = environment(cpu, ["--split", "test"], program="python benchmarks/evaluation_order.py")
    assert script["command"] == "python benchmarks/evaluation_order.py --split test"


def test_bench_attention_on_a_tiny_grid(in_tmp, capsys) -> None:
    payload = _bench(
        "attention",
        *["--lengths", "16", "32", "--batch", "2", "--d-model", "16", "--heads", "2"],
        *["--warmup", "1", "--repeats", "3", "--out", "attention.json", "--plot", "attention.png"],
    )
    out = capsys.readouterr().out
    names = [case["name"] for case in payload["cases"]]
    assert names[:5] == ["floor", "explicit", "torch_mha", "multi_head", "multi_head_alibi"]
    # a causal recurrence (retention, gla, ...) is left out of a sweep that is not causal
    recurrent = {name for name in scoring_names() if not get_attention(name).supports_bidirectional}
    assert (set(scoring_names()) - recurrent) | {"additive_broadcast"} <= set(names) and not recurrent & set(names)
    for case in payload["cases"]:
        assert [r["length"] for r in case["results"]] == [16, 32]
        for result in case["results"]:
            assert result["status"] == "ok", (case["name"], result)
            t = result["time_ms"]
            assert 0 < t["min"] <= t["q1"] <= t["median"] <= t["q3"] <= t["max"] and t["repeats"] == 3
            assert result["peak_memory_mib"] > 0
        assert math.isfinite(case["growth_exponent"])
    environment = payload["environment"]
    assert environment["command"].startswith("python -m zoo bench attention --lengths 16 32")
    assert environment["torch"] == torch.__version__ and environment["device"] == "cpu"
    assert (in_tmp / "attention.png").read_bytes()[:4] == b"\x89PNG"
    assert "Forward+backward time" in out and "| multi_head" in out and "| floor" in out


def test_bench_attention_causal_subset_and_bad_cases(in_tmp, capsys) -> None:
    payload = _bench(
        "attention",
        *["--causal", "--cases", "multi_head", "linea*", "loc*", "--lengths", "24", *ONE_QUICK_REPEAT],
        *["--out", "c.json", "--plot", "c.png"],
    )
    assert [c["name"] for c in payload["cases"]] == ["multi_head", "linear", "local"]
    assert payload["config"]["causal"] is True
    assert all(c["growth_exponent"] is None and "peak_memory_mib" not in c["results"][0] for c in payload["cases"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--cases", "floor", "no_such_layer"], "no case matches --cases 'no_such_layer'; the cases are: "),
        (["--cases", "floor", "locl"], "no case matches --cases 'locl'; did you mean local"),
        (["--lengths", "-5"], "argument --lengths: must be a positive integer, got '-5'"),
        (["--batch", "zero"], "argument --batch: must be a positive integer, got 'zero'"),
    ],
)
def test_bench_attention_refuses_what_it_cannot_measure_in_one_line(arguments, message, capsys) -> None:
    """An unknown case among known ones, or a length that is no length, is refused, not dropped."""
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "attention", *arguments])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and err.count("\n") == 1, err


def test_a_figure_that_fails_to_draw_loses_no_measurement(in_tmp, monkeypatch: pytest.MonkeyPatch) -> None:
    """The results are written before the figure is drawn (under ``ulimit -v`` after a long
    case's failure, drawing can run out of memory where measuring did not)."""
    from zoo.bench import cli

    def refuse(*args: object) -> None:
        raise MemoryError("out of memory")

    monkeypatch.setattr(cli, "plot_growth", refuse)
    with pytest.raises(MemoryError):
        main(["bench", "attention", "--cases", "floor", "--lengths", "16", *ONE_QUICK_REPEAT, "--out", "m.json"])
    payload = json.loads(Path("m.json").read_text())
    assert "partial" not in payload and payload["cases"][0]["results"][0]["status"] == "ok"


def test_bench_attention_causal_leaves_out_variants_that_are_not_causal(in_tmp, capsys) -> None:
    payload = _bench(
        "attention",
        *["--causal", "--cases", "lin*", "bigbird", "--lengths", "24", *ONE_QUICK_REPEAT],
        *["--out", "c.json", "--plot", "c.png"],
    )
    assert [c["name"] for c in payload["cases"]] == ["linear"]  # linformer and bigbird declare supports_causal=False
    err = capsys.readouterr().err
    assert "linformer: left out (declares supports_causal=False)" in err and "bigbird: left out" in err


def test_bench_train_on_a_few_steps(fra_eng_slice, in_tmp, capsys) -> None:
    payload = _bench(
        "train",
        *fra_eng_slice,
        *["--batch", "16", "--steps", "3", "--warmup", "2", "--model-kwargs", SMALL_TRANSLATOR, "--out", "train.json"],
    )
    result = payload["result"]
    assert result["steps"] == 3 and result["tokens_per_second"] > 0 and result["step_time_ms"]["median"] > 0
    assert 0 <= result["padding_fraction"] < 1 and result["target_tokens_per_batch"] > 16
    assert payload["config"]["model_kwargs"]["d_model"] == 32 and payload["config"]["steps"] == 3
    assert "target tokens/s" in capsys.readouterr().out


@pytest.mark.parametrize(("model", "modes"), [("transformer", ["cached", "uncached"]), ("seq2seq", ["default"])])
def test_bench_decode_forces_the_length(fra_eng_slice, in_tmp, capsys, model: str, modes: list[str]) -> None:
    kwargs = (
        SMALL_TRANSLATOR
        if model == "transformer"
        else json.dumps({"embed_dim": 16, "hidden_size": 16, "num_layers": 1})
    )
    results = _bench(
        "decode",
        *["--model", model, *fra_eng_slice, "--sentences", "6", "--batch", "4", "--tokens", "5"],
        *["--warmup", "0", "--repeats", "2", "--model-kwargs", kwargs, "--out", "decode.json"],
    )["results"]
    assert [r["mode"] for r in results] == modes
    for r in results:
        low, high = r["sentences_per_second_quartiles"]
        assert 0 < low <= r["sentences_per_second"] <= high
        assert r["tokens_per_second"] == pytest.approx(5 * r["sentences_per_second"])
    assert "sentences/s" in capsys.readouterr().out


def test_bench_attention_causal_without_padding_measures_the_is_causal_floor(in_tmp, monkeypatch) -> None:
    """Causal and unpadded, the floor and multi_head both reach the kernel as is_causal=True with no mask."""
    import torch.nn.functional as F

    calls, kernel = [], F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal", False)))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    payload = _bench(
        "attention",
        *["--causal", "--no-padding", "--cases", "floor", "multi_head", "--lengths", "16", *ONE_QUICK_REPEAT],
        *["--out", "f.json", "--plot", "f.png"],
    )
    assert payload["config"]["padding"] is False and [c["name"] for c in payload["cases"]] == ["floor", "multi_head"]
    assert calls and set(calls) == {(True, True)}


@pytest.mark.parametrize("padding", [[], ["--no-padding"]], ids=["padded", "unpadded"])
def test_bench_attention_alibi_case_passes_its_bias_to_the_fused_kernel(in_tmp, monkeypatch, padding) -> None:
    """``multi_head_alibi`` hands SDPA a float mask of the inputs' rank (the bias), and runs under
    the flash backend alone: the case times the fused kernel with a bias, not the math fallback."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    masks, kernel = [], F.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        mask = kwargs.get("attn_mask")
        masks.append(None if mask is None else (mask.dtype, mask.dim() == query.dim()))
        return kernel(query, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        payload = _bench(
            "attention",
            *[*padding, "--cases", "multi_head_alibi", "--lengths", "16", *ONE_QUICK_REPEAT],
            *["--out", "a.json", "--plot", "a.png"],
        )
    assert payload["cases"][0]["results"][0]["status"] == "ok"
    assert masks and set(masks) == {(torch.float32, True)}


def test_bench_decode_compares_key_value_head_counts(fra_eng_slice, in_tmp, capsys) -> None:
    kwargs = json.dumps({"d_model": 32, "ffn_hidden": 32, "num_heads": 4})
    results = _bench(
        "decode",
        *[*fra_eng_slice, "--sentences", "4", "--batch", "4", "--tokens", "5", "--warmup", "0", "--repeats", "1"],
        *["--num-kv-heads", "1", "2", "4", "--model-kwargs", kwargs, "--out", "decode.json"],
    )["results"]
    cached = {r["num_kv_heads"]: r["kv_cache_bytes_per_sentence"] for r in results if r["mode"] == "cached"}
    assert set(cached) == {1, 2, 4}
    assert cached[4] == 2 * cached[2] == 4 * cached[1] > 0  # the cache shrinks by num_heads / num_kv_heads
    assert "cache KiB/sentence" in capsys.readouterr().out


def test_bench_keeps_the_lengths_measured_before_it_is_killed(in_tmp, monkeypatch) -> None:
    """The out-of-memory killer gives no exception to catch: each length is saved as it ends."""
    from zoo.bench import sweep

    measure = sweep._measure_length

    def killed_at_32(builders, settings, length, device):
        if length == 32:
            raise KeyboardInterrupt  # stands in for the process ending here
        return measure(builders, settings, length, device)

    monkeypatch.setattr(sweep, "_measure_length", killed_at_32)
    with pytest.raises(KeyboardInterrupt):
        main(["bench", "attention", "--cases", "dot_product", "local", "--lengths", "16", "32", *ONE_QUICK_REPEAT,
              "--out", "partial.json", "--plot", "p.png"])  # fmt: skip
    saved = json.loads(Path("partial.json").read_text())
    assert saved["partial"] is True and saved["benchmark"] == "attention"
    for name in ("dot_product", "local"):
        assert [r["length"] for r in saved["results_so_far"][name]] == [16]
        assert saved["results_so_far"][name][0]["status"] == "ok"


def test_bench_attention_measures_each_fused_backend_beside_the_zoos_form(in_tmp, monkeypatch, capsys) -> None:
    """``NAME@zoo`` and ``NAME@flex`` / ``NAME@fla`` run with the backend forced, against each
    other; where the device runs no fused backend both are left out, with the reason."""
    from zoo.attention.build import backends
    from zoo.bench import attention as bench_attention

    cases = {case.name: case for case in bench_attention.attention_cases()}
    assert cases["local@flex"].baseline == "local@zoo" and cases["local@zoo"].baseline == "dot_product"
    assert cases["gla@fla"].baseline == "gla@zoo" and cases["multi_head_alibi@flex"].fused == "flex"
    assert "dot_product@flex" not in cases  # without a bias, SDPA's kernel is dot_product's own form
    main(["bench", "attention", "--cases", "local*", "--lengths", "32", "--batch", "1", "--d-model", "16",
          "--heads", "2", "--warmup", "0", "--repeats", "1", "--out", "a.json", "--plot", "a.png"])  # fmt: skip
    err = capsys.readouterr().err
    assert "local@flex: left out (FlexAttention does not train in float32 on cpu)" in err
    assert "local@zoo: left out (the same as local here" in err
    seen = []
    monkeypatch.setattr(bench_attention, "_runs_here", lambda case, config, device: None)
    monkeypatch.setattr(backends, "choose", lambda fused, runs, **_: seen.append(backends.requested_backend()) or False)
    monkeypatch.setattr("zoo.attention.modules.flex_variant.choose", backends.choose)
    main(["bench", "attention", "--cases", "local@*", "--lengths", "32", "--batch", "1", "--d-model", "16",
                    "--heads", "2", "--warmup", "0", "--repeats", "1", "--no-memory", "--out", "b.json",
                    "--plot", "b.png"])  # fmt: skip
    assert {"zoo", "flex"} <= set(seen), "each case runs with its backend forced"
    assert [case["backend"] for case in json.loads(Path("b.json").read_text())["cases"]] == ["zoo", "flex"]


@pytest.mark.parametrize("interleave", [False, True])
def test_a_sweep_interleaves_the_lengths_when_asked(interleave: bool) -> None:
    """Interleaved, every length of every case is timed in one round-robin; otherwise each length
    is done before the next starts. The results are grouped per case in the lengths' order."""
    from zoo.bench.sweep import SweepSettings, Workload, sweep_lengths

    calls: list[tuple[str, int]] = []

    def builder(name: str):
        return lambda length: Workload(lambda: calls.append((name, length)))

    settings = SweepSettings(lengths=[8, 16], warmup=0, repeats=2, memory=False, interleave=interleave)
    results = sweep_lengths({"a": builder("a"), "b": builder("b")}, settings, torch.device("cpu"))
    assert {name: [r["length"] for r in rs] for name, rs in results.items()} == {"a": [8, 16], "b": [8, 16]}
    assert all(r["status"] == "ok" for rs in results.values() for r in rs)
    every = {(name, length) for name in "ab" for length in (8, 16)}
    if interleave:  # each repeat visits every case at every length before the next repeat starts
        assert len(calls) == 8 and set(calls[:4]) == set(calls[4:]) == every
    else:
        assert [length for _, length in calls] == [8] * 4 + [16] * 4
