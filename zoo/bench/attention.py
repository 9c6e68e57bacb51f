"""``python -m zoo bench attention``: forward+backward time and peak memory over sequence lengths.

Cases, each run on random inputs with a padding mask (every sequence keeps a random length
between half and all of ``L``; ``padding=False`` drops it), optionally causal. Causal and
without padding, ``floor`` is "4 ``nn.Linear`` + SDPA(``is_causal=True``)", the target of the
causal ``multi_head``:

* layers, self-attention over ``x`` of shape ``(batch, L, d_model)`` with ``heads`` heads:
  ``floor`` (:class:`~zoo.bench.baselines.SDPAFloor`), ``explicit`` (the reference notes'
  formulation), ``torch_mha`` (``torch.nn.MultiheadAttention``) and the zoo's ``multi_head``;
* every registered scoring attention (plugins included) on per-head inputs
  ``(batch, heads, L, d_model / heads)``, as ``multi_head`` runs it, and ``additive_broadcast``,
  the straightforward formulation of ``additive``;
* every registered attention layer a stack builds by name (the recurrent families, plugins'
  layers) as a layer case over ``x``, under its name;
* a case whose variant has a fused backend (:mod:`zoo.attention.build.backends`) runs as ``auto``
  chooses under its name, and twice more with the backend forced: ``NAME@zoo`` (the zoo's own
  form) and ``NAME@flex`` or ``NAME@fla`` (each against ``NAME@zoo``), where the device runs that
  backend; and ``fla:NAME``, flash-linear-attention's own layer for a recurrent family
  (:class:`~zoo.bench.baselines.FlaLayer`, against ``NAME@fla``), where ``fla.layers`` imports.

Each case names a baseline (``multi_head`` against ``floor``, ``additive`` against
``additive_broadcast``, other scoring attentions against ``dot_product``, a layer over a variant
against ``multi_head``, the multi-head layer over ``dot_product``); the report gives the ratios of time
and memory to it, and each case's growth exponent, the slope of log time against log length over
the lengths measured. A case that runs past ``time_limit`` or out of memory at one length is
skipped at the longer ones. A case whose variant cannot run the sweep is left out, with a line
saying why: one that is not causal from a ``--causal`` sweep, a causal recurrence from one that
is not (``supports_bidirectional = False``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention import AttentionSpec, MultiHeadAttention, create_attention, create_scoring_attention, get_attention
from zoo.attention.build.backends import attention_backend
from zoo.attention.build.factory import layer_names, scoring_names
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels import flex
from zoo.attention.kernels.fla import fla_available
from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.bench.baselines import FLA_LAYERS, BroadcastAdditive, ExplicitMultiHead, FlaLayer, SDPAFloor, TorchMultiHead
from zoo.bench.sweep import OnLength, SweepSettings, Workload, growth, sweep_lengths
from zoo.positions import ALiBi

__all__ = ["AttentionBenchConfig", "Case", "attention_cases", "run_attention_bench"]


@dataclass(frozen=True)
class AttentionBenchConfig(SweepSettings):
    """What ``bench attention`` measures (and, from :class:`SweepSettings`, how often)."""

    batch: int = 32
    d_model: int = 256
    heads: int = 8
    causal: bool = False
    padding: bool = True
    seed: int = 0
    #: the inputs' and modules' dtype: float32, bfloat16 or float16
    dtype: str = "float32"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def _differentiated(forward: Callable[[], Tensor], leaves: list[Tensor]) -> Workload:
    """Forward and backward of ``forward``; the gradients of ``leaves`` (inputs and parameters)
    are cleared between calls."""

    def reset() -> None:
        for tensor in leaves:
            tensor.grad = None

    return Workload(lambda: forward().sum().backward(), reset)


@dataclass(frozen=True)
class Case:
    """A benchmarked module: its name, kind, what it is, its baseline, how to build it, and the
    registered scoring attention it runs (whose capabilities decide which sweeps run it)."""

    name: str
    kind: str  # "layer" or "scoring"
    description: str
    baseline: str | None
    build: Callable[[AttentionBenchConfig, int, torch.device], Workload] = field(repr=False)
    variant: str | None = None
    #: the backend forced while it runs (None: what ``auto`` chooses)
    backend: str | None = None
    #: the fused backend its variant has (``flex``, ``fla``), for the ``@zoo`` case beside it
    fused: str | None = None


# -- inputs ---------------------------------------------------------------------------------------


def _generator(config: AttentionBenchConfig, length: int) -> torch.Generator:
    return torch.Generator().manual_seed(config.seed * 100_003 + length)


def _valid_lens(config: AttentionBenchConfig, length: int, generator: torch.Generator) -> Tensor | None:
    """Random lengths between half and all of ``length``, or None without padding."""
    if not config.padding:
        return None
    return torch.randint(max(length // 2, 1), length + 1, (config.batch,), generator=generator)


def _layer_workload(
    module_factory: Callable[[AttentionBenchConfig], nn.Module],
    call: Callable[[nn.Module, Tensor, Tensor, bool], Tensor],
):
    """A layer case: self-attention over ``x`` with a padding mask given as valid lengths (or none)."""

    def build(config: AttentionBenchConfig, length: int, device: torch.device) -> Workload:
        generator = _generator(config, length)
        torch.manual_seed(config.seed)
        module = module_factory(config).to(device, _dtype(config))
        x = torch.randn(config.batch, length, config.d_model, generator=generator).to(device, _dtype(config))
        x.requires_grad_()
        valid_lens = _valid_lens(config, length, generator)
        valid_lens = None if valid_lens is None else valid_lens.to(device)
        return _differentiated(lambda: call(module, x, valid_lens, config.causal), [x, *module.parameters()])

    return build


def _scoring_workload(module_factory: Callable[[AttentionBenchConfig], nn.Module]):
    """A scoring case: per-head queries, keys and values with a ``(B, 1, 1, L)`` padding mask (or none)."""

    def build(config: AttentionBenchConfig, length: int, device: torch.device) -> Workload:
        generator = _generator(config, length)
        torch.manual_seed(config.seed)
        module = module_factory(config).to(device, _dtype(config))
        shape = (config.batch, config.heads, length, config.head_dim)
        q, k, v = (
            torch.randn(shape, generator=generator).to(device, _dtype(config)).requires_grad_() for _ in range(3)
        )
        lens = _valid_lens(config, length, generator)
        mask = (
            None
            if lens is None
            else (torch.arange(length, device=device) < lens.to(device).unsqueeze(-1))[:, None, None, :]
        )
        if isinstance(module, BroadcastAdditive):
            mask = torch.ones(1, 1, 1, length, dtype=torch.bool, device=device) if mask is None else mask
            forward = lambda: module(q, k, v, mask, config.causal)  # noqa: E731
        else:
            forward = lambda: module(q, k, v, attn_mask=mask, is_causal=config.causal).output  # noqa: E731
        return _differentiated(forward, [q, k, v, *module.parameters()])

    return build


def _dtype(config: AttentionBenchConfig) -> torch.dtype:
    return getattr(torch, config.dtype)


def _forced(build: Callable[[AttentionBenchConfig, int, torch.device], Workload], backend: str):
    """``build``'s workload, each call run with ``backend`` forced (:func:`attention_backend`)."""

    def forced(config: AttentionBenchConfig, length: int, device: torch.device) -> Workload:
        workload = build(config, length, device)

        def step() -> object:
            with attention_backend(backend):  # type: ignore[arg-type]
                return workload.step()

        return Workload(step, workload.reset)

    return forced


def _with_backends(cases: list[Case]) -> list[Case]:
    """``cases``, and for each whose variant has a fused backend ``NAME@zoo`` and ``NAME@flex`` or
    ``NAME@fla``; for each recurrent family fla's own layer ``fla:NAME``, where it imports."""
    extra = []
    for case in cases:
        variant = get_attention(case.variant) if case.variant else None
        if case.name == "multi_head_alibi":
            fused = "flex"
        elif (
            variant is not None
            and hasattr(variant, "fused_backend")
            and not getattr(variant, "flex_needs_bias", False)
            and getattr(variant, "fla_refusal", None) is None  # a family fla's kernels do not run (kda, rwkv7, ...)
        ):
            fused = "fla" if issubclass(variant, RecurrentLayer) else "flex"
        else:
            continue
        for backend, baseline in (("zoo", case.baseline), (fused, f"{case.name}@zoo")):
            description = f"{case.description}, backend {backend} forced"
            extra.append(replace(case, name=f"{case.name}@{backend}", description=description, baseline=baseline,
                                 build=_forced(case.build, backend), backend=backend, fused=fused))  # fmt: skip
        if fused == "fla" and case.name in FLA_LAYERS and importlib.util.find_spec("fla") is not None:
            extra.append(
                Case(
                    f"fla:{case.name}",
                    "layer",
                    f"flash-linear-attention's own {FLA_LAYERS[case.name][0]} layer",
                    f"{case.name}@fla",
                    _layer_workload(
                        lambda c, name=case.name: FlaLayer(name, c.d_model, c.heads),
                        lambda m, x, lens, causal: m(x, lens, causal),
                    ),
                    variant=case.name,
                    backend="fla",
                )  # fmt: skip
            )
    return cases + extra


def _runs_here(case: Case, config: AttentionBenchConfig, device: torch.device) -> str | None:
    """Why ``case`` cannot run on ``device`` (a fused backend that does not run there, or the
    zoo's form forced where it is what ``auto`` runs anyway), or None."""
    why = None
    if case.fused == "flex" and not flex.flex_supported(device, _dtype(config), requires_grad=True):
        why = f"FlexAttention does not train in {config.dtype} on {device.type}"
    if case.fused == "fla" and not fla_available(device):
        why = "flash-linear-attention's kernels need the fla extra and a CUDA device"
    if why is not None and case.backend == "zoo":
        return f"the same as {case.name.rsplit('@', 1)[0]} here: {why}"
    return why


def _self_attend(layer: nn.Module, x: Tensor, valid_lens: Tensor | None, causal: bool) -> Tensor:
    """A zoo layer's self-attention output."""
    return layer(x, x, x, valid_lens, is_causal=causal).output


def _self_attend_x(layer: nn.Module, x: Tensor, valid_lens: Tensor | None, causal: bool) -> Tensor:
    """A zoo layer's output over ``x`` alone, under the context a model builds once a forward."""
    context = AttentionContext.build(x.shape[0], x.shape[1], valid_lens=valid_lens, is_causal=causal)
    return layer(x, context).output


def attention_cases() -> list[Case]:
    """Every case, references first, then the registered scoring attentions by name."""
    cases = [
        Case(
            "floor",
            "layer",
            "4 nn.Linear + F.scaled_dot_product_attention",
            None,
            _layer_workload(lambda c: SDPAFloor(c.d_model, c.heads), lambda m, x, lens, causal: m(x, lens, causal)),
        ),
        Case(
            "explicit",
            "layer",
            "4 nn.Linear + explicit masked softmax (the notes' formulation)",
            "floor",
            _layer_workload(
                lambda c: ExplicitMultiHead(c.d_model, c.heads), lambda m, x, lens, causal: m(x, lens, causal)
            ),
        ),
        Case(
            "torch_mha",
            "layer",
            "torch.nn.MultiheadAttention with a key padding mask",
            "floor",
            _layer_workload(
                lambda c: TorchMultiHead(c.d_model, c.heads), lambda m, x, lens, causal: m(x, lens, causal)
            ),
        ),
        Case(
            "multi_head",
            "layer",
            "zoo multi_head (dot_product per head)",
            "floor",
            _layer_workload(lambda c: MultiHeadAttention(c.d_model, c.heads), _self_attend),
        ),
        Case(
            "multi_head_alibi",
            "layer",
            "zoo multi_head with an ALiBi bias (a float mask in the fused kernel)",
            "multi_head",
            _layer_workload(
                lambda c: MultiHeadAttention(
                    c.d_model, c.heads, AttentionSpec(position=ALiBi(c.heads, causal=c.causal))
                ),
                _self_attend,
            ),
        ),
    ]
    for name in layer_names():
        if get_attention(name).stack_layer:
            cases.append(
                Case(
                    name,
                    "layer",
                    f"zoo attention layer {name!r}",
                    "multi_head",
                    _layer_workload(
                        lambda c, name=name: create_attention(name, embed_dim=c.d_model, num_heads=c.heads),
                        _self_attend_x,
                    ),
                    variant=name,
                )
            )
    for name in scoring_names():
        baseline = {"additive": "additive_broadcast", "dot_product": None}.get(name, "dot_product")
        cases.append(
            Case(
                name,
                "scoring",
                f"zoo scoring attention {name!r} per head",
                baseline,
                _scoring_workload(lambda c, name=name: create_scoring_attention(name, head_dim=c.head_dim)),
                variant=name,
            )
        )
    cases.append(
        Case(
            "additive_broadcast",
            "scoring",
            "additive scores with the whole (B, H, L, L, hidden) tensor",
            None,
            _scoring_workload(lambda c: BroadcastAdditive(c.head_dim, c.head_dim, c.head_dim)),
        )
    )
    return _with_backends(cases)


# -- running ----------------------------------------------------------------------------------------


def run_attention_bench(
    config: AttentionBenchConfig, device: torch.device, patterns: list[str], on_length: OnLength | None = None
) -> list[dict[str, Any]]:
    """Measure every case whose name matches one of ``patterns``; one record per case.

    At each length the cases are timed round-robin (one call of each in turn), so their ratios
    are measured side by side. A case that fails or is too slow at one length is skipped at the
    longer ones.
    """
    cases = [c for c in attention_cases() if any(fnmatchcase(c.name, p) for p in patterns)]
    if not cases:
        names = ", ".join(c.name for c in attention_cases())
        raise ValueError(f"No benchmark case matches {patterns}; the cases are: {names}.")
    # a variant that cannot run this sweep is left out, not failed: one that is not causal (linformer,
    # bigbird) from a causal sweep, a causal recurrence (retention, gla, ...) from one that is not
    flag = "supports_causal" if config.causal else "supports_bidirectional"
    runs = [c for c in cases if c.variant is None or getattr(get_attention(c.variant), flag)]
    for case in (c for c in cases if c not in runs):
        why = "" if config.causal else ": a causal recurrence, measured with --causal"
        print(f"  {case.name}: left out (declares {flag}=False{why})", file=sys.stderr, flush=True)
    for case in list(runs):
        if (why := _runs_here(case, config, device)) is not None:
            runs.remove(case)
            print(f"  {case.name}: left out ({why})", file=sys.stderr, flush=True)
    cases = runs
    builders = {case.name: (lambda length, case=case: case.build(config, length, device)) for case in cases}
    results = sweep_lengths(builders, config, device, on_length)
    records = []
    for case in cases:
        records.append(
            {
                **{k: v for k, v in asdict(case).items() if k != "build"},
                "growth_exponent": growth(results[case.name]),
                "results": results[case.name],
            }
        )
    return records
