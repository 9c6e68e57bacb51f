"""The stand-in child the tests of ``zoo compare`` without real runs use."""

from __future__ import annotations

import pytest

import zoo.compare.run as runs
import zoo.compare.runner as runner
from tests.helpers.compare import RESOLVED, FakeChild


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch) -> FakeChild:
    fake = FakeChild()
    monkeypatch.setattr(runs, "run_child", fake)
    monkeypatch.setattr(runner, "resolve_base", lambda base: RESOLVED)
    return fake
