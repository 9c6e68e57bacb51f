"""How the benchmarks time and measure: warm-up, repeats, median and spread, peak memory.

Time is wall-clock around one call, after ``warmup`` untimed calls, with CUDA synchronized
before and after (asynchronous kernels are counted in the call that launched them) and an
untimed ``reset`` before it. (:class:`torch.utils.benchmark.Timer` is not used: its ``timeit``
runs two untimed calls before every sample, which triples the time of a long benchmark.)
Each call is one sample, so the spread and a time limit per call stay visible. Several
calls compared with each other are timed round-robin (:func:`time_round_robin`): one sample of
each in turn, so a change in the machine's state (another process, the allocator's fresh pages)
falls on all of them alike instead of on whichever ran at the time.

Peak memory is the most memory PyTorch's allocator held *above its level before the call*,
during one call:

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.
* CPU: PyTorch keeps no such counter, and the process's resident size mixes in Python, the
  allocator's caching and pages the C library does not return. The call runs once under
  :mod:`torch.profiler` with ``profile_memory=True``, which records every allocation and
  release of tensor memory with its size; the peak of their running sum is the answer. It
  counts exactly the tensors a call creates (activations, saved tensors, gradients) and
  nothing else, and it is measured in a separate, untimed call, since profiling slows it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["Summary", "TooSlow", "peak_memory", "resolve_device", "synchronize", "time_call", "time_round_robin"]


class TooSlow(RuntimeError):
    """A call took longer than the benchmark's time limit; longer inputs are skipped."""


@dataclass(frozen=True)
class Summary:
    """Median, quartiles and extremes of repeated measurements (seconds, rates, ...)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    repeats: int

    @classmethod
    def of(cls, samples: list[float]) -> Summary:
        """Summarize ``samples`` (at least one)."""
        if not samples:
            raise ValueError("Summary.of needs at least one sample.")
        ordered = sorted(samples)
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else (ordered[0],) * 3
        return cls(statistics.median(ordered), q1, q3, ordered[0], ordered[-1], len(ordered))

    def scaled(self, factor: float) -> dict[str, float | int]:
        """The summary with every value multiplied by ``factor`` (1e3: seconds to milliseconds)."""
        return {key: value * factor if key != "repeats" else value for key, value in asdict(self).items()}


def resolve_device(name: str) -> torch.device:
    """``"auto"``: CUDA when available, else CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA device is available.")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], object],
    *,
    warmup: int,
    repeats: int,
    reset: Callable[[], None] | None = None,
    time_limit: float | None = None,
) -> Summary:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls; ``reset`` runs untimed
    before each call (to clear gradients, say).

    Raises:
        TooSlow: a call (warm-up or timed) took longer than ``time_limit`` seconds.
    """
    result = time_round_robin({"fn": (fn, reset)}, warmup=warmup, repeats=repeats, time_limit=time_limit)["fn"]
    if isinstance(result, BaseException):
        raise result
    return result


def time_round_robin(
    calls: dict[str, tuple[Callable[[], object], Callable[[], None] | None]],
    *,
    warmup: int,
    repeats: int,
    time_limit: float | None = None,
    first_call_limit: float | None = None,
) -> dict[str, Summary | Exception]:
    """Time each of ``calls`` (``name: (fn, reset)``) ``repeats`` times after ``warmup`` untimed
    rounds, one call of each in turn per round; ``reset`` runs untimed before each call.

    A call that raises, or takes longer than ``time_limit`` seconds (:class:`TooSlow`), drops out
    of the later rounds; its entry is that exception, and the others go on. The first call of
    each, where compilers and autotuners run (``torch.compile``, Triton), is held to
    ``first_call_limit`` instead (None: ``time_limit``).
    """
    samples: dict[str, list[float]] = {name: [] for name in calls}
    failed: dict[str, Exception] = {}
    for index in range(warmup + repeats):
        for name, (fn, reset) in calls.items():
            if name in failed:
                continue
            try:
                elapsed = _one_call(fn, reset)
            except Exception as error:  # reported as this call's result; the others still run
                failed[name] = error
                continue
            limit = first_call_limit if index == 0 and first_call_limit is not None else time_limit
            if limit is not None and elapsed > limit:
                failed[name] = TooSlow(f"one call took {elapsed:.1f} s, over the limit of {limit:g} s")
            elif index >= warmup:
                samples[name].append(elapsed)
    return {name: failed.get(name) or Summary.of(samples[name]) for name in calls}


def _one_call(fn: Callable[[], object], reset: Callable[[], None] | None) -> float:
    """Seconds ``fn()`` takes, CUDA synchronized around it, after an untimed ``reset()``."""
    if reset is not None:
        reset()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_memory(fn: Callable[[], object], *, device: torch.device, reset: Callable[[], None] | None = None) -> int:
    """Bytes of tensor memory ``fn`` held at its peak, above the level before the call."""
    if reset is not None:
        reset()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    held = peak = 0
    for event in events:
        held += event.nbytes()  # positive: allocated, negative: released
        peak = max(peak, held)
    return peak
