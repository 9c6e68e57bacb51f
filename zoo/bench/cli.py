"""``python -m zoo bench {attention,classify,train,decode,state}``: arguments, and where the results go."""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import fields, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, NoReturn

import torch

from zoo.attention import get_attention
from zoo.bench.attention import AttentionBenchConfig, attention_cases, run_attention_bench
from zoo.bench.attention_report import attention_tables
from zoo.bench.classify import (
    LRA_ATTENTIONS,
    TEXT_CPU_CONFIGS,
    ClassifyBenchConfig,
    classify_tables,
    run_classify_bench,
)
from zoo.bench.decode import DecodeBenchConfig, decode_table, run_decode_bench
from zoo.bench.measure import resolve_device
from zoo.bench.report import environment, plot_growth, write_json
from zoo.bench.state import StateBenchConfig, recipe_stack, recurrent_names, run_state_bench, state_layer, state_table
from zoo.bench.sweep import SweepSettings
from zoo.bench.train import TrainBenchConfig, run_train_bench, train_table
from zoo.bench.translation import TranslationSetup
from zoo.errors import ZooError

__all__ = ["main", "parser"]

DEFAULT_DIR = Path("runs") / "bench"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line naming the problem, status 2 (argparse prints
    the whole usage first; ``--help`` still prints it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """An argument that counts or sizes something: a whole number above zero (argparse's ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _common(sub: argparse.ArgumentParser, name: str) -> None:
    sub.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA when available)")
    sub.add_argument(
        "--threads", type=positive_int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    sub.add_argument("--out", type=Path, default=DEFAULT_DIR / f"{name}.json", help="where the JSON results go")


def _translation(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--model", default="transformer", help="registered translation model (transformer, seq2seq)")
    sub.add_argument("--data-path", default=None, help="local fra-eng.zip or fra.txt (default: download and cache)")
    sub.add_argument(
        "--vocab-size", type=positive_int, default=None, help="joint BPE vocabulary size (default: the model's config)"
    )
    sub.add_argument("--limit-train", type=positive_int, default=None, help="use only N training pairs (quick runs)")
    sub.add_argument("--attention", default=None, help="registered scoring attention (default: the model's)")
    sub.add_argument(
        "--model-kwargs", type=json.loads, default={}, help="JSON of model arguments over the defaults of zoo fit"
    )
    sub.add_argument("--compile", action="store_true", help="torch.compile the model (--model.torch_compile)")


def _sweep(sub: argparse.ArgumentParser, config: type[SweepSettings]) -> None:
    """How often a sweep over lengths measures, with ``config``'s defaults (written there once)."""
    default = {f.name: f.default for f in fields(config)}
    sub.add_argument(
        "--warmup",
        type=int,
        default=default["warmup"],
        help="untimed calls before the timed ones (default: %(default)s)",
    )
    sub.add_argument(
        "--repeats",
        type=positive_int,
        default=default["repeats"],
        help="timed calls per case and length (default: %(default)s)",
    )
    sub.add_argument(
        "--time-limit", type=float, default=default["time_limit"],
        help="seconds per call before longer lengths are skipped (default: %(default)s)",
    )  # fmt: skip
    sub.add_argument(
        "--first-call-limit", type=float, default=default["first_call_limit"],
        help="seconds the first call of a case may take, where compilers and autotuners run (default: --time-limit)",
    )  # fmt: skip
    sub.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    sub.add_argument(
        "--interleave", action="store_true",
        help="time every length in one round-robin, not one length after another (steadier growth exponents)",
    )  # fmt: skip
    sub.add_argument("--seed", type=int, default=default["seed"], help="seeds the inputs and the weights")


def parser() -> argparse.ArgumentParser:
    """The ``bench`` argument parser and its five subcommands."""
    root = OneLineParser(prog="python -m zoo bench", description=__doc__)
    subs = root.add_subparsers(dest="benchmark", required=True)

    attention = subs.add_parser("attention", help="forward+backward time and peak memory of the attention variants")
    attention.add_argument("--lengths", type=positive_int, nargs="+", default=[256], help="sequence lengths")
    attention.add_argument("--batch", type=positive_int, default=32)
    attention.add_argument("--d-model", type=positive_int, default=256)
    attention.add_argument("--heads", type=positive_int, default=8)
    attention.add_argument("--causal", action="store_true", help="causal masking on top of the padding mask")
    attention.add_argument(
        "--no-padding",
        action="store_true",
        help="no padding mask (causal: the floor is 4 nn.Linear + SDPA(is_causal=True))",
    )
    attention.add_argument("--cases", nargs="+", default=["*"], help="case names or wildcards (default: all)")
    attention.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="the inputs' and modules' dtype"
    )
    _sweep(attention, AttentionBenchConfig)
    attention.add_argument(
        "--flops", action="store_true",
        help="count each case's matrix arithmetic (GFLOP, forward+backward) and its rate, in one more untimed call",
    )  # fmt: skip
    attention.add_argument(
        "--plot", type=Path, default=DEFAULT_DIR / "attention.png", help="log-log plot of time against length"
    )
    _common(attention, "attention")

    classify = subs.add_parser(
        "classify", help="the classifier's training steps per second and peak memory per attention over lengths"
    )
    classify.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[1000, 2000, 3000, 4000], help="--data.max_length values"
    )
    classify.add_argument("--attentions", nargs="+", default=list(LRA_ATTENTIONS), help="registered scoring attentions")
    classify.add_argument(
        "--config", dest="configs", action="append", default=None,
        help="a fit config file (repeatable; default: the LRA Text task at the CPU size)",
    )  # fmt: skip
    classify.add_argument(
        "--attention-kwargs", type=json.loads, default={},
        help='JSON of extra arguments per attention: {"linformer": {"k": 128}}',
    )  # fmt: skip
    classify.add_argument("--batch", type=positive_int, default=None, help="sequences per step (default: the config's)")
    classify.add_argument("--baseline", default="dot_product", help="the attention the ratios are taken against")
    _sweep(classify, ClassifyBenchConfig)
    _common(classify, "classify")

    train = subs.add_parser("train", help="training tokens per second through the Lightning trainer")
    _translation(train)
    train.add_argument(
        "--batch", type=positive_int, default=None, help="sentence pairs per batch (default: the model's config)"
    )
    train.add_argument("--steps", type=positive_int, default=50, help="measured steps")
    train.add_argument("--warmup", type=int, default=5, help="steps before the measured ones")
    train.add_argument("--precision", default="32-true", help="Lightning precision (bf16-mixed on a GPU, say)")
    _common(train, "train")

    decode = subs.add_parser("decode", help="decoded sentences per second, with and without the cache")
    _translation(decode)
    decode.add_argument("--batch", type=positive_int, default=64, help="sentences decoded together")
    decode.add_argument("--sentences", type=positive_int, default=256)
    decode.add_argument(
        "--tokens", type=positive_int, default=30, help="output tokens per sentence (<eos> is forbidden)"
    )
    decode.add_argument("--beam-size", type=positive_int, default=1)
    decode.add_argument("--warmup", type=int, default=1)
    decode.add_argument("--repeats", type=positive_int, default=3)
    decode.add_argument("--ckpt", default=None, help="decode with a checkpoint's weights (default: random ones)")
    decode.add_argument(
        "--num-kv-heads",
        type=int,
        nargs="+",
        default=None,
        help="key/value head counts to compare, one model each (grouped-query attention; default: the model's)",
    )
    _common(decode, "decode")

    state = subs.add_parser(
        "state", help="time and memory per new token decoded after contexts of several lengths (one layer)"
    )
    state.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 4096, 16384], help="context lengths")
    state.add_argument(
        "--attentions", nargs="+", default=None,
        help="registered causal attentions, or a name with arguments as in a config: '{name: mla, mode: naive}' "
        "(default: the recurrent ones and dot_product, unless --recipes are given)",
    )  # fmt: skip
    state.add_argument(
        "--recipes", nargs="+", default=[], metavar="LABEL=PATH",
        help="recipe overlays (configs/gpt_shakespeare_cpu_*.yaml), each decoded as its whole stack, every layer's "
        "cache counted; reported as 'recipe LABEL' (LABEL: the file's stem where not given)",
    )  # fmt: skip
    state.add_argument("--d-model", type=positive_int, default=256)
    state.add_argument("--heads", type=positive_int, default=8)
    state.add_argument("--batch", type=positive_int, default=1, help="sequences decoded together")
    state.add_argument("--warmup", type=int, default=3, help="untimed steps before the timed ones")
    state.add_argument("--repeats", type=positive_int, default=20, help="timed steps per attention and length")
    state.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    state.add_argument("--seed", type=int, default=0, help="seeds the inputs and the weights")
    _common(state, "state")
    return root


def _translation_setup(args: argparse.Namespace) -> TranslationSetup:
    return TranslationSetup(
        model=args.model, data_path=args.data_path, batch=args.batch, vocab_size=args.vocab_size, limit_train=args.limit_train,
        attention=args.attention, model_kwargs=args.model_kwargs, torch_compile=args.compile,
    )  # fmt: skip


def _state_attentions(args: argparse.Namespace) -> list[str]:
    """``bench state``'s layers: those named, else none beside recipes, else the recurrent ones and
    ``dot_product``."""
    if args.attentions is not None:
        return list(args.attentions)
    return [] if args.recipes else [*recurrent_names(), "dot_product"]


def main(argv: list[str]) -> dict[str, Any]:
    """Run one benchmark; print its tables, write its JSON (and plot); return the JSON payload."""
    argument_parser = parser()
    args = argument_parser.parse_args(argv)
    if args.benchmark == "attention":
        if args.d_model % args.heads:
            argument_parser.error(f"--d-model ({args.d_model}) must be divisible by --heads ({args.heads}).")
        names = [case.name for case in attention_cases()]
        for pattern in args.cases:
            if not any(fnmatchcase(name, pattern) for name in names):
                close = difflib.get_close_matches(pattern, names, n=3)
                hint = f"did you mean {', '.join(close)}?" if close else f"the cases are: {', '.join(names)}."
                argument_parser.error(f"no case matches --cases {pattern!r}; {hint}")
    if args.benchmark == "state" and args.d_model % args.heads:
        argument_parser.error(f"--d-model ({args.d_model}) must be divisible by --heads ({args.heads}).")
    try:
        if args.benchmark == "classify":
            for name in args.attentions or []:
                get_attention(name)  # an unknown name: one line naming the closest
        if args.benchmark == "state":
            for entry in args.attentions or []:
                state_layer(entry, args.d_model, args.heads)  # an unknown name or argument: one line
            for entry in args.recipes:
                recipe_stack(entry, args.d_model, args.heads, max(args.lengths) + 1)  # a bad file or setting: one line
        return _run(args, argv)
    except ZooError as error:  # a bad name or setting: one line, like argparse's errors
        argument_parser.error(str(error))


def _run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    payload: dict[str, Any] = {"benchmark": args.benchmark, "environment": environment(device, ["bench", *argv])}
    figure: Callable[[], Path] | None = None  # drawn after the results are written: a figure that fails loses none

    def save_partial(results: dict[str, list[dict[str, Any]]]) -> None:
        """The lengths measured so far, replaced by the whole payload at the end."""
        write_json(args.out, payload | {"partial": True, "results_so_far": results})

    if args.benchmark == "attention":
        config = AttentionBenchConfig(
            lengths=args.lengths, batch=args.batch, d_model=args.d_model, heads=args.heads, causal=args.causal,
            padding=not args.no_padding, dtype=args.dtype,
            warmup=args.warmup, repeats=args.repeats, time_limit=args.time_limit, memory=not args.no_memory, seed=args.seed,
            first_call_limit=args.first_call_limit, flops=args.flops, interleave=args.interleave,
        )  # fmt: skip
        records = run_attention_bench(config, device, args.cases, save_partial)
        payload |= {"config": {**vars(config), "cases": args.cases}, "cases": records}
        print(attention_tables(records, config.lengths))
        series = {}
        for record in records:
            ok = [r for r in record["results"] if r["status"] == "ok"]
            series[record["name"]] = (
                [r["length"] for r in ok],
                [r["time_ms"]["median"] for r in ok],
                record["growth_exponent"],
            )
        title = (
            f"batch {config.batch}, d_model {config.d_model}, {config.heads} heads, {device}"
            + (", causal" if config.causal else "")
            + ("" if config.padding else ", no padding")
        )
        figure = functools.partial(plot_growth, series, args.plot, title)
    elif args.benchmark == "classify":
        config = ClassifyBenchConfig(
            lengths=args.lengths, attentions=args.attentions, configs=args.configs or TEXT_CPU_CONFIGS,
            attention_kwargs=args.attention_kwargs, batch=args.batch, baseline=args.baseline, warmup=args.warmup,
            repeats=args.repeats, time_limit=args.time_limit, memory=not args.no_memory, seed=args.seed,
            first_call_limit=args.first_call_limit, interleave=args.interleave,
        )  # fmt: skip
        records = run_classify_bench(config, device, save_partial)
        payload |= {"config": vars(config), "cases": records}
        print(classify_tables(records, config))
    elif args.benchmark == "state":
        config = StateBenchConfig(
            lengths=args.lengths, attentions=_state_attentions(args), recipes=args.recipes, d_model=args.d_model,
            heads=args.heads, batch=args.batch, warmup=args.warmup, repeats=args.repeats, memory=not args.no_memory,
            seed=args.seed,
        )  # fmt: skip
        records = run_state_bench(config, device)
        payload |= {"config": vars(config), "cases": records}
        print(state_table(records, config.lengths))
    elif args.benchmark == "train":
        setup, config = (
            _translation_setup(args),
            TrainBenchConfig(steps=args.steps, warmup=args.warmup, precision=args.precision),
        )
        result = run_train_bench(setup, config, device)
        payload |= {"config": {**vars(setup), **vars(config)}, "result": result}
        print(train_table(setup, result))
    else:
        setup = _translation_setup(args)
        config = DecodeBenchConfig(
            sentences=args.sentences,
            tokens=args.tokens,
            beam_size=args.beam_size,
            warmup=args.warmup,
            repeats=args.repeats,
            checkpoint=args.ckpt,
        )
        results = []
        for kv_heads in args.num_kv_heads or [None]:
            kwargs = setup.model_kwargs if kv_heads is None else {**setup.model_kwargs, "num_kv_heads": kv_heads}
            results += run_decode_bench(replace(setup, model_kwargs=kwargs), config, device)
        payload |= {"config": {**vars(setup), **vars(config), "num_kv_heads": args.num_kv_heads}, "results": results}
        print(decode_table(setup, config, results))
    print(f"results: {write_json(args.out, payload)}", file=sys.stderr)
    if figure is not None:
        print(f"\nplot: {figure()}")
    return payload
