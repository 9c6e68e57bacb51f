"""Mixed precision with gradient clipping (the recipes clip at 1.0): Lightning refuses to clip for
a fused optimizer under ``16-mixed``/``bf16-mixed``, so the tasks then take the unfused AdamW."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from zoo.tasks.optim import adamw_with_warmup, fused_allowed


class _Tiny(L.LightningModule):
    def __init__(self, decide: bool) -> None:
        super().__init__()
        self.layer, self.decide = nn.Linear(4, 1), decide

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def configure_optimizers(self):
        fused = fused_allowed(self.trainer) if self.decide else True
        return adamw_with_warmup(self, lr=1e-2, weight_decay=0.0, warmup_steps=1, total_steps=4, fused=fused)


def _fit(module: L.LightningModule, precision: str, clip: float | None) -> L.Trainer:
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16)), batch_size=4)
    trainer = L.Trainer(accelerator="cpu", precision=precision, gradient_clip_val=clip, max_steps=4, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module, data)
    return trainer


@pytest.mark.parametrize(
    ("precision", "clip", "fused"), [("bf16-mixed", 1.0, False), ("bf16-mixed", None, True), ("32-true", 1.0, True)]
)
def test_the_fused_kernel_runs_unless_clipping_meets_mixed_precision(
    precision: str, clip: float | None, fused: bool
) -> None:
    module = _Tiny(decide=True)
    trainer = _fit(module, precision, clip)
    assert trainer.global_step == 4
    assert bool(trainer.optimizers[0].defaults["fused"]) == fused


def test_without_the_rule_lightning_refuses_to_clip() -> None:
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        _fit(_Tiny(decide=False), "bf16-mixed", 1.0)
