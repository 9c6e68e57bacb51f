"""Named workloads measured over sequence lengths, side by side.

``bench attention`` (one attention module, forward and backward) and ``bench classify`` (a whole
classifier's training step) measure the same way: at each length every case is built, timed
round-robin with the others (:func:`~zoo.bench.measure.time_round_robin`, so their ratios are
measured under the same machine state) and, if asked, its peak memory is taken in one more,
untimed call. A case that fails, runs out of memory or takes longer than the time limit at one
length is reported so and skipped at the longer ones; the others go on.

Timed one length after another, a drift of the machine's speed during a run (its clock, the
allocator's pages, another process) lands between two lengths and in the growth exponent: the same
layers read 0.79-1.51 from 8k to 16k tokens in two runs on one machine (``docs/results/speed.md``,
``--flops`` and ``--interleave``). ``interleave`` times every length of every case in one
round-robin instead.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from zoo.bench.flops import count_flops
from zoo.bench.measure import TooSlow, peak_memory, time_round_robin
from zoo.bench.report import growth_exponent
from zoo.errors import ConfigurationError

__all__ = ["OnLength", "SweepSettings", "Workload", "failure_status", "growth", "sweep_lengths", "time_cell"]

MIB = 2**20
#: Receives the results so far after each length (``{name: [result per length]}``).
OnLength = Callable[[dict[str, list[dict[str, Any]]]], None]


@dataclass
class Workload:
    """One case at one length: the call that is timed, and what runs untimed before each call
    (clearing gradients, say)."""

    step: Callable[[], object]
    reset: Callable[[], None] | None = None


@dataclass(frozen=True)
class SweepSettings:
    """How each case is measured at each length (each benchmark's config extends it)."""

    lengths: list[int]
    warmup: int = 2
    repeats: int = 10
    time_limit: float = 60.0
    #: seconds the first call of a case may take, where compilers and autotuners run (None: ``time_limit``)
    first_call_limit: float | None = None
    memory: bool = True
    #: count each case's matrix arithmetic in one more, untimed call (:mod:`zoo.bench.flops`)
    flops: bool = False
    #: time every length of every case in one round-robin instead of one length after another (for
    #: growth exponents: a drift of the machine's speed then falls on all lengths alike); no case is
    #: skipped at longer lengths after a failure at a shorter one
    interleave: bool = False


def _is_out_of_memory(error: BaseException) -> bool:
    """CUDA's error, Python's, or the CPU allocator's refusal (under ``ulimit -v``, which turns the
    kernel's out-of-memory kill of the whole run into this exception)."""
    message = str(error).lower()
    return (
        isinstance(error, (torch.OutOfMemoryError, MemoryError))
        or "out of memory" in message
        or "can't allocate memory" in message
    )


def failure_status(error: BaseException) -> str:
    """The status of a case that failed or was too slow at one length (``bench state``'s too);
    ``refused`` where the layer declined the length by design with its one line (a log-linear
    layer past its levels' reach), which is no fault of the layer's."""
    if isinstance(error, TooSlow):
        return f"too slow: {error}"
    if isinstance(error, ConfigurationError):
        return f"refused: {error}"
    return "out of memory" if _is_out_of_memory(error) else f"failed: {type(error).__name__}: {error}"


def _measure(
    builds: dict[str, Callable[[], Workload]], lengths: dict[str, int], settings: SweepSettings, device: torch.device
) -> dict[str, dict[str, Any]]:
    """Every workload, timed round-robin with the others: ``{key: {"length", "status", "time_ms",
    "peak_memory_mib", "gflop"}}`` (the last two where ``settings`` asks for them), ``lengths[key]``
    the length each is built at. A workload that was timed but failed the memory pass (its one
    call under the profiler, which holds more) keeps its time, with ``memory_status`` saying why
    it has no ``peak_memory_mib``."""
    results: dict[str, dict[str, Any]] = {}
    workloads: dict[str, Workload] = {}
    for key, build in builds.items():
        try:
            workloads[key] = build()
        except Exception as error:
            results[key] = {"length": lengths[key], "status": failure_status(error)}
    timings = time_round_robin(
        {key: (w.step, w.reset) for key, w in workloads.items()},
        warmup=settings.warmup,
        repeats=settings.repeats,
        time_limit=settings.time_limit,
        first_call_limit=settings.first_call_limit,
    )
    for key, timing in timings.items():
        length = lengths[key]
        if isinstance(timing, Exception):
            results[key] = {"length": length, "status": failure_status(timing)}
            continue
        results[key] = {"length": length, "status": "ok", "time_ms": timing.scaled(1e3)}
        if settings.memory:
            workload = workloads[key]
            try:
                results[key]["peak_memory_mib"] = peak_memory(workload.step, device=device, reset=workload.reset) / MIB
            except Exception as error:  # the profiled call's own failure: the time stands, its memory does not
                results[key]["memory_status"] = failure_status(error)
        if settings.flops and results[key]["status"] == "ok":
            results[key]["gflop"] = count_flops(workloads[key].step, workloads[key].reset) / 1e9
    del workloads
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


def _measure_length(
    builders: dict[str, Callable[[int], Workload]], settings: SweepSettings, length: int, device: torch.device
) -> dict[str, dict[str, Any]]:
    """Every case at one length, as :func:`_measure` gives it."""
    builds = {name: functools.partial(build, length) for name, build in builders.items()}
    return _measure(builds, dict.fromkeys(builders, length), settings, device)


def _interleaved(
    builders: dict[str, Callable[[int], Workload]], settings: SweepSettings, device: torch.device
) -> dict[str, list[dict[str, Any]]]:
    """Every case at every length in one round-robin: a drift of the machine's speed falls on every
    length alike instead of on the later ones."""
    keys = {(name, length): f"{name} L={length}" for name in builders for length in settings.lengths}
    builds = {key: functools.partial(builders[name], length) for (name, length), key in keys.items()}
    results = _measure(builds, {key: length for (_, length), key in keys.items()}, settings, device)
    for key, result in results.items():
        print(f"  {key}: {time_cell(result)}", file=sys.stderr, flush=True)
    return {name: [results[keys[name, length]] for length in settings.lengths] for name in builders}


def sweep_lengths(
    builders: dict[str, Callable[[int], Workload]],
    settings: SweepSettings,
    device: torch.device,
    on_length: OnLength | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Measure every case (``name: build(length) -> Workload``) at every length, in order (with
    ``settings.interleave``, all at once: :func:`_interleaved`): ``{name: [result per length]}``,
    each result as :func:`_measure` gives it, or ``{"length", "status": "skipped: ..."}`` after the
    case failed at a shorter length. Progress
    goes to standard error, a line per case and length, and ``on_length`` receives the results so
    far after each length (to save them: the operating system's out-of-memory killer ends a
    process without an exception to catch); interleaved, once, at the end, since no length ends
    before the others."""
    if settings.interleave:
        results = _interleaved(builders, settings, device)
        if on_length is not None:
            on_length(results)
        return results
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in builders}
    stopped: dict[str, str] = {}
    for length in settings.lengths:
        for name, reason in stopped.items():
            results[name].append({"length": length, "status": f"skipped: {reason}"})
        running = {name: build for name, build in builders.items() if name not in stopped}
        for name, result in _measure_length(running, settings, length, device).items():
            results[name].append(result)
            if result["status"] != "ok":
                stopped[name] = f"{result['status'].split(':')[0]} at length {length}"
            print(f"  {name} L={length}: {time_cell(result)}", file=sys.stderr, flush=True)
        if on_length is not None:
            on_length(results)
    return results


def growth(results: list[dict[str, Any]]) -> float | None:
    """One case's growth exponent over the lengths it ran at (see :func:`growth_exponent`)."""
    ok = [r for r in results if r["status"] == "ok"]
    return growth_exponent([r["length"] for r in ok], [r["time_ms"]["median"] for r in ok])


def time_cell(result: dict[str, Any]) -> str:
    """``median ms [quartiles]``, or the status of a case that did not run."""
    if result["status"] != "ok":
        return result["status"].split(":")[0]
    t = result["time_ms"]
    return f"{t['median']:.3g} ms [{t['q1']:.3g}-{t['q3']:.3g}]"
