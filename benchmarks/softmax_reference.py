"""Check the zoo's differential, stick-breaking, softpick and sink attention against their authors'
PyTorch code, on CPU, on random inputs.

Usage: python benchmarks/softmax_reference.py [--diff DIR] [--stickbreaking DIR] [--softpick DIR]
       [--gpt-oss DIR] [--seed 0]

Each ``DIR`` is a checkout of the authors' repository (``git clone --depth 1 URL``):

* ``--diff``: microsoft/unilm's ``Diff-Transformer`` folder; ``multihead_diffattn.py``'s
  ``MultiheadDiffAttn`` against ``differential`` (the same weights copied in, causal, no rotary
  positions: the reference rotates with a Triton kernel, replaced here by the identity);
* ``--stickbreaking``: shawntan/stickbreaking-attention; ``sb_ref.py``'s ``stickbreaking``, with
  the remainder added to the query's own value as the repository's tests do, against
  ``stick_breaking``;
* ``--softpick``: zaydzuhri/softpick-attention; ``naive_softpick_attn.py``'s ``softpick`` on
  causal scores against ``softpick``'s weights;
* ``--gpt-oss``: openai/gpt-oss; ``gpt_oss/torch/model.py``'s ``sdpa`` (learned sinks, a sliding
  window, grouped key/value heads) against ``sink_attention`` with and without a window.

No reference code is kept in this project: each file is loaded from the checkout, with stand-ins
for the imports it does not use here (``flash_attn``, the Triton rotary kernel, ``einops``), and
``sdpa`` is read out of ``model.py`` on its own (the module imports gpt-oss's checkpoint code).
Inputs are float64; the references cast some steps to float32 (DIFF's softmax and norm,
stick-breaking's logits, softpick's scores), so differences near 1e-7 are agreement there. The
Forgetting Transformer's reference is a Triton kernel only, and sigmoid attention's a few lines
inside its authors' training code: neither is checked here (the tests hold both to their
equations).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from zoo.attention import AttentionContext

B, H, L, E = 2, 4, 12, 64


def load(path: Path, name: str, stand_ins: dict[str, dict[str, object]] | None = None) -> ModuleType:
    """``path`` loaded as module ``name``, with modules ``stand_ins`` names (attributes given) in place
    of imports it makes but does not use here."""
    for module_name, attributes in (stand_ins or {}).items():
        stand_in = ModuleType(module_name)
        stand_in.__dict__.update(attributes)
        sys.modules.setdefault(module_name, stand_in)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(what: str, ours: Tensor, theirs: Tensor) -> None:
    print(f"{what:<60} max |zoo - reference| = {float((ours - theirs).abs().max()):.2e}")


def check_differential(folder: Path) -> None:
    sys.path.insert(0, str(folder))  # for its rms_norm.py (apex is absent)
    reference = load(
        folder / "multihead_diffattn.py",
        "multihead_diffattn",
        {
            "flash_attn": {"flash_attn_func": None},
            "kernel": {},
            "kernel.rotary": {"apply_rotary_emb": lambda x, *_, **__: x},
        },
    )
    for depth in (0, 5):
        theirs = reference.MultiheadDiffAttn(E, depth, H // 2).double()
        ours = zoo.create_attention("differential", embed_dim=E, num_heads=H, layer_index=depth, bias=False).double()
        with torch.no_grad():
            theirs.subln.weight.uniform_(0.5, 1.5)
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                getattr(ours, name).weight.copy_(getattr(theirs, name).weight)
            for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                getattr(ours, name).copy_(getattr(theirs, name))
            ours.norm.weight.copy_(theirs.subln.weight)
            x = torch.randn(B, L, E, dtype=torch.float64)
            report(
                f"differential, depth {depth}",
                ours(x, AttentionContext(is_causal=True)).output,
                theirs(x, (None, None)),
            )


def check_stick_breaking(folder: Path) -> None:
    reference = load(folder / "stickbreaking_attention" / "sb_ref.py", "sb_ref")
    q, k, v = (torch.randn(B, H, L, 16, dtype=torch.float64) for _ in range(3))
    hidden = torch.ones(L, L, dtype=torch.bool).triu(0)  # keys at or after the query break nothing
    output, remainder = reference.stickbreaking(q, k, v, hidden, torch.ones(L, L, dtype=torch.float64).tril(-1))
    theirs = output + remainder[..., None] * v  # the rest of the stick to the query's own value
    report("stick_breaking", zoo.create_attention("stick_breaking")(q, k, v, is_causal=True).output, theirs)


def check_softpick(folder: Path) -> None:
    reference = load(folder / "naive_softpick_attn.py", "naive_softpick_attn", {"einops": {"rearrange": None}})
    q, k = (torch.randn(B, H, L, 16, dtype=torch.float64) for _ in range(2))
    scores = (q @ k.transpose(-2, -1) / 4).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    _, ours = zoo.create_attention("softpick")(q, k, k, is_causal=True, need_weights=True)
    report("softpick weights", ours, reference.softpick(scores))


def check_sinks(folder: Path) -> None:
    source = (folder / "gpt_oss" / "torch" / "model.py").read_text()
    function = next(
        node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == "sdpa"
    )
    namespace: dict[str, object] = {"torch": torch}
    exec(compile(ast.Module([function], []), "gpt_oss/torch/model.py", "exec"), namespace)  # noqa: S102
    kv_heads, d = 2, E // H
    for window in (0, 5):
        layer = zoo.create_attention(
            "sink_attention", embed_dim=E, num_heads=H, num_kv_heads=kv_heads, window=window or None, bias=False
        ).double()
        with torch.no_grad():  # queries and output as they come: the heads' computation alone is compared
            layer.q_proj.weight.copy_(torch.eye(E))
            layer.out_proj.weight.copy_(torch.eye(E))
            layer.sinks.normal_()
            x = torch.randn(1, L, E, dtype=torch.float64)
            ours = layer(x, AttentionContext(is_causal=True)).output[0]
            q = x[0].view(L, kv_heads, H // kv_heads, d)
            k, v = (F.linear(x[0], p.weight).view(L, kv_heads, d) for p in (layer.k_proj, layer.v_proj))
            theirs = namespace["sdpa"](q, k, v, layer.sinks, 1 / math.sqrt(d), window)
        report(f"sink_attention, window {window or 'none'} (gpt-oss sdpa)", ours, theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--diff", type=Path, help="microsoft/unilm's Diff-Transformer folder")
    parser.add_argument("--stickbreaking", type=Path, help="a checkout of shawntan/stickbreaking-attention")
    parser.add_argument("--softpick", type=Path, help="a checkout of zaydzuhri/softpick-attention")
    parser.add_argument("--gpt-oss", type=Path, help="a checkout of openai/gpt-oss")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    checks = [(args.diff, check_differential), (args.stickbreaking, check_stick_breaking),
              (args.softpick, check_softpick), (args.gpt_oss, check_sinks)]  # fmt: skip
    if not any(folder for folder, _ in checks):
        parser.error("give at least one checkout (--diff, --stickbreaking, --softpick, --gpt-oss)")
    for folder, check in checks:
        if folder is not None:
            check(folder)


if __name__ == "__main__":
    main()
