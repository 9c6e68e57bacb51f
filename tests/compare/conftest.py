"""The stand-in child the tests of ``zoo compare`` without real runs use; a quiet Ray."""

from __future__ import annotations

import os

import pytest

import zoo.compare.run as runs
import zoo.compare.runner as runner
from tests.helpers.compare import RESOLVED, FakeChild

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # the tests' Ray reports nothing anywhere
os.environ.setdefault("RAY_worker_niceness", "0")  # and runs its tasks at full priority, as zoo compare's own Ray


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch) -> FakeChild:
    fake = FakeChild()
    monkeypatch.setattr(runs, "run_child", fake)
    monkeypatch.setattr(runner, "resolve_base", lambda base: RESOLVED)
    return fake
