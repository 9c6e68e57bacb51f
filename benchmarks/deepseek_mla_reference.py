"""Compare the zoo's ``mla`` layer with DeepSeek-V3's own MLA (``inference/model.py``) on CPU, and
time the zoo's naive and absorbed forms.

Usage: python benchmarks/deepseek_mla_reference.py DEEPSEEK_ROOT [--seed 0] [--time CACHED ...]

``DEEPSEEK_ROOT`` is a fetched copy of ``deepseek-ai/DeepSeek-V3`` holding ``inference/model.py``::

    git -C DeepSeek-V3 archive HEAD inference | tar -x -C /tmp/dsv3
    python benchmarks/deepseek_mla_reference.py /tmp/dsv3

No DeepSeek code is kept in this project: ``model.py`` is loaded on its own
(``importlib.util.spec_from_file_location``). It imports ``act_quant``, ``weight_dequant`` and
``fp8_gemm`` from its Triton ``kernel.py``, which only its FP8 weights reach; a stand-in module
whose functions refuse to run takes its place, and its ``Linear`` layers are built in float32.

The comparison: one ``MLA`` module per ``attn_impl`` (``naive`` and ``absorb``, DeepSeek's two
forms; it sizes its caches by the form), its weights copied from a zoo layer with query
compression, the same float32 inputs, a causal pass over a prompt and then single decoded tokens
through each one's cache; the largest differences are printed. DeepSeek's RoPE rotates adjacent
feature pairs where the zoo's rotates halves, so the rotary rows of the query and key projections
are interleaved on the way in (a permutation of the rotary features, which leaves every score as
it is); its YaRN scaling stays off (``max_seq_len`` within ``original_seq_len``). DeepSeek computes
the rotation in float32, so differences near 1e-6 are agreement.

``--time CACHED ...`` then times one decoded token after ``CACHED`` cached positions (batch 1,
median of ``--repeats``) with the zoo's naive form (every cached latent up-projected to each
head's keys and values) and its absorbed form, at DeepSeek-V2-Lite's head shapes over 16 heads
(latent 512, 128 + 64 query and key features, values of 128, width 2048) and at the Shakespeare
CPU recipe's width (128, 4 heads, the layer's defaults), and a training pass over ``CACHED``
tokens in each form.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

import zoo
from zoo.attention import AttentionContext

DIM, HEADS, LENGTH, PROMPT = 64, 4, 24, 16
SIZES = {"q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def load_model(root: Path, attn_impl: str) -> ModuleType:
    """``inference/model.py`` under ``root`` as a standalone module with ``attn_impl`` set, its
    Triton kernels replaced by stand-ins that refuse to run."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("DeepSeek's FP8 kernels are not run here: the weights are float32")

    sys.modules["kernel"] = ModuleType("kernel")
    for name in ("act_quant", "weight_dequant", "fp8_gemm"):
        setattr(sys.modules["kernel"], name, refuse)
    spec = importlib.util.spec_from_file_location(f"deepseek_v3_model_{attn_impl}", root / "inference" / "model.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(root / "inference" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.attn_impl = attn_impl
    module.Linear.dtype = torch.float32
    return module


def interleaved(rows: Tensor, rope: int) -> Tensor:
    """The last ``rope`` rows of ``rows`` (the rotary features, halves paired as the zoo rotates
    them) in DeepSeek's order, adjacent pairs: ``0, rope/2, 1, rope/2 + 1, ...``."""
    order = torch.arange(rope).view(2, -1).T.flatten()
    return torch.cat([rows[:-rope], rows[-rope:][order]])


@torch.no_grad()
def deepseek_mla(model: ModuleType, layer: zoo.AttentionLayer) -> torch.nn.Module:
    """DeepSeek's ``MLA`` with the zoo layer's weights (rotary rows interleaved)."""
    args = model.ModelArgs(max_batch_size=2, max_seq_len=LENGTH, dim=DIM, n_heads=HEADS, **SIZES)
    mla = model.MLA(args)
    rope, per_head = SIZES["qk_rope_head_dim"], SIZES["qk_nope_head_dim"] + SIZES["qk_rope_head_dim"]
    query_rows = torch.cat([interleaved(h, rope) for h in layer.q_up.weight.split(per_head)])
    for target, source in (
        (mla.wq_a.weight, layer.q_down.weight), (mla.q_norm.weight, layer.q_norm.weight), (mla.wq_b.weight, query_rows),
        (mla.wkv_a.weight, interleaved(layer.kv_down.weight, rope)), (mla.kv_norm.weight, layer.kv_norm.weight),
        (mla.wkv_b.weight, layer.kv_up.weight), (mla.wo.weight, layer.out_proj.weight),
    ):  # fmt: skip
        target.copy_(source)
    return mla


@torch.no_grad()
def compare(root: Path, gen: torch.Generator) -> None:
    layer = zoo.create_attention("mla", embed_dim=DIM, num_heads=HEADS, **SIZES).eval()
    for parameter in layer.parameters():
        parameter.add_(0.1 * torch.randn(parameter.shape, generator=gen))
    x = torch.randn(2, LENGTH, DIM, generator=gen)
    prompt, causal = x[:, :PROMPT], torch.full((PROMPT, PROMPT), float("-inf")).triu(1)
    output, cache = layer.attend_cached(prompt, None)
    outputs = [output]
    for t in range(PROMPT, LENGTH):
        output, cache = layer.attend_cached(x[:, t : t + 1], cache, AttentionContext(is_causal=True, offset=t))
        outputs.append(output)
    zoo_decoded = torch.cat(outputs, dim=1)
    zoo_pass = layer(x, AttentionContext(is_causal=True)).output
    print(f"float32, batch 2, width {DIM}, {HEADS} heads, {SIZES}: largest |DeepSeek - zoo| (of largest |zoo|)")
    print(f"zoo: one causal pass vs its cache (prompt {PROMPT}, then one token at a time): "
          f"{(zoo_pass - zoo_decoded).abs().max():.1e}")  # fmt: skip
    for attn_impl in ("naive", "absorb"):
        model = load_model(root, attn_impl)
        mla = deepseek_mla(model, layer)
        freqs = model.precompute_freqs_cis(
            model.ModelArgs(max_seq_len=LENGTH, qk_rope_head_dim=SIZES["qk_rope_head_dim"])
        )
        steps = [mla(prompt, 0, freqs[:PROMPT], causal)]
        steps += [mla(x[:, t : t + 1], t, freqs[t : t + 1], None) for t in range(PROMPT, LENGTH)]
        theirs = torch.cat(steps, dim=1)
        print(f"DeepSeek-V3 MLA, attn_impl={attn_impl:7s}: {(theirs - zoo_decoded).abs().max():.1e} "
              f"(of {zoo_decoded.abs().max():.1e})")  # fmt: skip


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


@torch.no_grad()
def time_forms(lengths: list[int], repeats: int, gen: torch.Generator) -> None:
    shapes = {
        "DeepSeek-V2-Lite heads": (2048, 16, {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}),
        "Shakespeare CPU width": (128, 4, {}),
    }  # fmt: skip
    print(f"\nthreads {torch.get_num_threads()}, float32, batch 1: median of {repeats} (ms)")
    print(f"{'shape':24s} {'cached':>7}  {'decode naive':>12} {'absorbed':>9}  {'pass naive':>10} {'absorbed':>9}")
    for label, (width, heads, sizes) in shapes.items():
        forms = {mode: zoo.create_attention("mla", embed_dim=width, num_heads=heads, mode=mode, **sizes).eval()
                 for mode in ("naive", "absorbed")}  # fmt: skip
        forms["absorbed"].load_state_dict(forms["naive"].state_dict())
        for length in lengths:
            x = torch.randn(1, length + 1, width, generator=gen)
            _, cache = forms["naive"].attend_cached(x[:, :length], None)
            step = AttentionContext(is_causal=True, offset=length)
            decode = {
                m: median_ms(partial(f.attend_cached, x[:, length:], cache, step), repeats) for m, f in forms.items()
            }
            causal = AttentionContext(is_causal=True)
            whole = {m: median_ms(partial(f, x[:, :length], causal), repeats) for m, f in forms.items()}
            print(f"{label:24s} {length:>7}  {decode['naive']:12.2f} {decode['absorbed']:9.2f}  "
                  f"{whole['naive']:10.1f} {whole['absorbed']:9.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deepseek_root", type=Path, help="a fetched DeepSeek-V3 tree: the folder holding inference/")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time", type=int, nargs="*", default=[], metavar="CACHED", help="also time the two forms")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each form and length")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    compare(args.deepseek_root, gen)
    if args.time:
        time_forms(args.time, args.repeats, gen)


if __name__ == "__main__":
    main()
