"""Kernel regression: the learned bandwidth beats average pooling, trained through Lightning."""

from __future__ import annotations

import torch

from tests.helpers.training import quiet_trainer
from zoo.datamodules import SyntheticRegressionDataModule
from zoo.models import KernelRegression
from zoo.tasks import NadarayaWatson


def _test_mse(task: NadarayaWatson, epochs: int, tmp_path) -> float:
    trainer = quiet_trainer(tmp_path, max_epochs=epochs)
    data = SyntheticRegressionDataModule(seed=0)
    trainer.fit(task, datamodule=data)
    return trainer.test(task, datamodule=data, verbose=False)[0]["test/mse"]


def test_learned_bandwidth_beats_fixed_kernel_and_average_pooling(tmp_path) -> None:
    average = _test_mse(NadarayaWatson(attention="average"), 1, tmp_path)
    fixed = _test_mse(NadarayaWatson(learnable=False), 1, tmp_path)
    learned_task = NadarayaWatson()
    learned = _test_mse(learned_task, 30, tmp_path)
    assert learned < fixed < average
    assert learned < 0.5 * average
    assert learned_task.model.attention.bandwidth < 1.0  # it learned a narrower kernel


def test_leave_one_out_never_attends_to_the_query_itself() -> None:
    model = KernelRegression()
    x = torch.sort(torch.rand(20) * 5).values
    model.remember(x, torch.sin(x))
    _, weights = model(x, exclude=torch.arange(20), need_weights=True)
    assert torch.all(weights.diagonal() == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(20))


def test_fixed_kernel_matches_the_nadaraya_watson_formula() -> None:
    model = KernelRegression(learnable=False)
    x_train = torch.sort(torch.rand(30) * 5).values
    y_train = 2 * torch.sin(x_train) + x_train.pow(0.8)
    model.remember(x_train, y_train)
    x_test = torch.arange(0, 5, 0.1)
    kernel = torch.exp(-0.5 * (x_test[:, None] - x_train[None, :]) ** 2)
    expected = (kernel / kernel.sum(1, keepdim=True)) @ y_train
    torch.testing.assert_close(model(x_test).output, expected)
    assert not any(p.requires_grad for p in model.parameters())


def test_memory_is_restored_from_a_state_dict_alone() -> None:
    trained = KernelRegression()
    trained.remember(torch.linspace(0, 5, 40), torch.linspace(0, 1, 40))
    fresh = KernelRegression()
    fresh.load_state_dict(trained.state_dict())
    query = torch.tensor([0.5, 2.5])
    torch.testing.assert_close(fresh(query).output, trained(query).output)


def test_synthetic_data_is_seeded_and_sorted() -> None:
    a, b = SyntheticRegressionDataModule(seed=3), SyntheticRegressionDataModule(seed=3)
    torch.testing.assert_close(a.train_tensors(), b.train_tensors())
    x, _ = a.train_tensors()
    assert torch.all(x[1:] >= x[:-1]) and x.min() >= 0 and x.max() < 5
    assert not torch.equal(SyntheticRegressionDataModule(seed=4).train_tensors()[0], x)
