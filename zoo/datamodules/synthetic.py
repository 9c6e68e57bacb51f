"""Synthetic regression data of the reference notes: ``y = 2 sin(x) + x^0.8 + eps``."""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.datamodules.loaders import ResumableDataLoader, evaluation_loader, loader_options
from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.sampling import EpochShuffleSampler

__all__ = ["SyntheticRegressionDataModule", "target_function"]


def target_function(x: Tensor) -> Tensor:
    """The noise-free function ``2 sin(x) + x^0.8``."""
    return 2 * torch.sin(x) + x.pow(0.8)


class _Points(Dataset):
    """1-D regression points as dicts: ``inputs``, ``targets``, noise-free ``truth``, ``index``."""

    def __init__(self, inputs: Tensor, targets: Tensor) -> None:
        self.inputs, self.targets, self.truth = inputs, targets, target_function(inputs)

    def __len__(self) -> int:
        return self.inputs.numel()

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {"inputs": self.inputs[i], "targets": self.targets[i], "truth": self.truth[i], "index": torch.tensor(i)}


@register_datamodule("synthetic_regression", aliases=("synthetic",))
class SyntheticRegressionDataModule(L.LightningDataModule):
    """Noisy samples of ``2 sin(x) + x^0.8`` on ``[0, 5)``; nothing to download.

    Training and validation inputs are sorted uniform draws; test inputs are an even grid over
    ``[0, 5)``, as in the reference notes. Every split's targets carry ``N(0, noise^2)`` noise;
    the noise-free ``truth`` travels along for plots and a second error measure.

    Args:
        num_train: Training points (the kernel's memory).
        num_val: Validation points.
        num_test: Test points (an even grid).
        noise: Standard deviation of the noise.
        seed: Seed of the generator and of the order of training batches; the same seed gives the
            same data.
        batch_size: Points per batch; None means the whole split in one batch (under several
            processes, each process's share of it).
    """

    def __init__(
        self,
        num_train: int = 50,
        num_val: int = 50,
        num_test: int = 50,
        noise: float = 0.5,
        seed: int = 0,
        batch_size: int | None = None,
    ) -> None:
        super().__init__()
        for label, size in (("num_train", num_train), ("num_val", num_val), ("num_test", num_test)):
            if size < 2:
                raise ValueError(f"{label} must be at least 2, got {size}.")
        if noise < 0:
            raise ValueError(f"noise must be non-negative, got {noise}.")
        self.save_hyperparameters()
        self.num_train, self.num_val, self.num_test = num_train, num_val, num_test
        self.noise, self.seed, self.batch_size = noise, seed, batch_size
        generator = torch.Generator().manual_seed(seed)
        train_x = torch.sort(torch.rand(num_train, generator=generator) * 5).values
        val_x = torch.sort(torch.rand(num_val, generator=generator) * 5).values
        test_x = torch.arange(num_test) * (5.0 / num_test)
        self.splits = {
            name: _Points(x, target_function(x) + noise * torch.randn(x.shape, generator=generator))
            for name, x in (("train", train_x), ("val", val_x), ("test", test_x))
        }

    def train_tensors(self) -> tuple[Tensor, Tensor]:
        """The training inputs and targets, which kernel regression keeps as its memory."""
        train = self.splits["train"]
        return train.inputs, train.targets

    def _batch_size(self, split: str) -> int:
        return self.batch_size or len(self.splits[split])

    def train_dataloader(self) -> DataLoader:
        """Mini-batches shuffled by ``seed`` and the epoch (resumable), or the whole split as one batch."""
        dataset = self.splits["train"]
        sampler = EpochShuffleSampler(len(dataset), self.seed, shuffle=self.batch_size is not None)
        return ResumableDataLoader(
            dataset, batch_size=self._batch_size("train"), sampler=sampler, **self._loader_kwargs()
        )

    def val_dataloader(self) -> DataLoader:
        return evaluation_loader(self.splits["val"], self._batch_size("val"), self.trainer, **self._loader_kwargs())

    def test_dataloader(self) -> DataLoader:
        return evaluation_loader(self.splits["test"], self._batch_size("test"), self.trainer, **self._loader_kwargs())

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self._batch_size("test"), **self._loader_kwargs())

    def _loader_kwargs(self) -> dict[str, bool | int]:
        """Pinned on a GPU; never worker processes, the points are already tensors in memory."""
        return loader_options(self.trainer, num_workers=0)
