"""The production hybrids as recipes (configs/gpt_shakespeare_cpu_<recipe>.yaml): each builds the
layer pattern its model card gives, at the CPU recipe's size, and trains; the same overlays build
the recall model from the command line (docs/attention.md; docs/results/recall.md, the six
production recipes)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import yaml

from zoo.cli import CONFIG_DIR
from zoo.compare.runner import resolve_base
from zoo.models import GPT
from zoo.summary import attention_by_layer
from zoo.tasks import RecallModel

#: the rotation of Gemma 4's global layers beside the stack's (a quarter of the pairs at base 1,000,000)
GEMMA4_GLOBAL_ROTATION = {"fraction": 0.25, "partial": "proportional", "base": 1000000}
#: the options every layer of the DeepSeek-V4 recipe has (as summaries show them)
DEEPSEEKV4_LAYER = "head_dim=256, rope_head_dim=32, q_lora_rank=32, o_groups=2, o_lora_rank=32, window=16"
#: MiMo-V2-Flash's query/key and value head sizes and value scale, on every layer
MIMO_HEADS = "head_dim=96, v_head_dim=64, value_scale=0.707"

#: recipe -> the layers its stack holds, in order (as the run's summary names them)
PATTERNS = {
    "qwen3next": "gated_deltanet, gated_deltanet, gated_deltanet, gated_attention(qk_norm=True)",
    "kimilinear": "kda, kda, kda, mla(rope=False)",
    "gemma3": ", ".join(["qk_norm(window=16)"] * 5 + ["qk_norm"]),
    "gemma4": ", ".join(
        ["qk_norm(window=16, sink_tokens=0, scale=1.0, v_norm=True)"] * 5
        + [f"qk_norm(scale=1.0, v_norm=True, values='keys', head_dim=64, position={GEMMA4_GLOBAL_ROTATION})"]
        + ["qk_norm(window=16, sink_tokens=0, scale=1.0, v_norm=True)"]
        + ["qk_norm(window=16, sink_tokens=0, scale=1.0, kv_source=6)"] * 4
        + [f"qk_norm(scale=1.0, head_dim=64, kv_source=5, position={GEMMA4_GLOBAL_ROTATION})"]
    ),
    "gptoss": "sink_attention(window=16), sink_attention, sink_attention(window=16), sink_attention",
    "jamba": "mamba2, mamba2, mamba2, mamba2, dot_product, mamba2, mamba2, mamba2",
    "samba": "mamba2, local(window=32), mamba2, local(window=32)",
    "qwen35": ", ".join(["gated_deltanet(num_key_heads=2, expand_k=0.5, position='none')"] * 3)
    + ", gated_attention(qk_norm=True)",
    "olmohybrid": ", ".join(
        ["gated_deltanet(expand_k=0.75, expand_v=1.5, negative_eigenvalues=True, position='none')"] * 3
    )
    + ", qk_norm",
    "minimax01": ", ".join(["lightning_attention(num_layers=8, position='none')"] * 7) + ", softmax",
    "falconh1": "parallel_hybrid(branches=['softmax', 'mamba2'], positioned=[True, False]) (all 4)",
    "deepseekv32": "dsa(index_topk=16) (all 4)",
    "deepseekv4": ", ".join(
        [f"deepseek_v4({DEEPSEEKV4_LAYER})"] * 2
        + [
            f"deepseek_v4({DEEPSEEKV4_LAYER}, rope_base=160000, compression='csa', compress_rate=4, index_topk=4, "
            "index_head_dim=64)"
        ]
        + [f"deepseek_v4({DEEPSEEKV4_LAYER}, rope_base=160000, compression='hca', compress_rate=16)"]
    ),
    "mimov2flash": ", ".join(
        [f"softmax({MIMO_HEADS})"]
        + [f"softmax({MIMO_HEADS}, sinks=True, window=17, sink_tokens=0, position={{'base': 10000}})"] * 4
        + [f"softmax({MIMO_HEADS})"]
    ),
}


def _recipe_arguments(recipe: str) -> dict:
    """The GPT's arguments of the CPU recipe with the recipe's overlay on top."""
    arguments = {}
    for name in ("gpt_shakespeare_cpu", f"gpt_shakespeare_cpu_{recipe}"):
        arguments |= yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())["model"]["init_args"]
    return arguments


def _model(recipe: str) -> GPT:
    torch.manual_seed(0)
    return GPT(32, block_size=64, **_recipe_arguments(recipe))


@pytest.mark.parametrize("recipe", sorted(PATTERNS))
def test_a_recipe_builds_its_pattern_and_trains(recipe: str) -> None:
    model = _model(recipe)
    assert attention_by_layer(model)[0] == f"blocks.attention: {PATTERNS[recipe]}"
    tokens = (torch.arange(65) % 5).repeat(4, 1)  # a period of 5: learnable
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::5]


@pytest.mark.parametrize("recipe", sorted(PATTERNS))
def test_a_recipe_overlay_builds_the_recall_model_from_the_command_line(recipe: str) -> None:
    # The recipes' MQAR command (docs/results/recall.md): the recall config, the overlay, then the
    # recipe's depth (its overlay's, or the CPU recipe's 4 layers), resolved as fit and zoo compare
    # resolve it
    depth = _recipe_arguments(recipe)["num_layers"]
    resolved = resolve_base(
        ["--model", "recall", "--config", str(CONFIG_DIR / "recall.yaml")]
        + ["--config", str(CONFIG_DIR / f"gpt_shakespeare_cpu_{recipe}.yaml")]
        + ["--model.num_layers", str(depth), "--model.num_heads", "2"]
    )
    task = RecallModel(vocab_size=64, block_size=32, **resolved["model"]["init_args"])
    assert attention_by_layer(task.model)[0] == f"blocks.attention: {PATTERNS[recipe]}"
    logits = task(torch.randint(64, (2, 32)))
    assert logits.shape == (2, 32, 64) and logits.isfinite().all()
