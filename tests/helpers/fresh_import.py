"""What a new interpreter sees when it imports the zoo as a user does, read once per test session.

Starting an interpreter that imports Lightning costs about ten seconds here, so the facts several
tests check about a cold import (which modules it pulls in, what it registers, whether it touches
the plotting backend) come from one such interpreter: :func:`fresh_import_facts`.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from typing import Any

from tests.helpers import PROJECT_ROOT

__all__ = ["fresh_import_facts"]

_SCRIPT = """
import json, sys
import matplotlib
matplotlib.use("svg")  # a notebook's backend, chosen before the zoo is imported
from zoo.tasks import list_models  # the first zoo import: the registry is seen from here
import zoo.text
facts = {"models": list_models(), "datasets_imported": "datasets" in sys.modules}
import zoo
zoo.load_checkpoint  # imports the tasks and their figures
import zoo.bench.report, zoo.tasks.figures
facts["backend"] = matplotlib.get_backend()
print(json.dumps(facts))
"""


@functools.cache
def fresh_import_facts() -> dict[str, Any]:
    """In a new interpreter on this checkout, in this order: the backend set to ``svg``; the names of
    ``zoo.tasks.list_models()`` (``models``) and whether importing ``zoo.tasks`` and ``zoo.text``
    imported ``datasets`` (``datasets_imported``); then, after ``zoo.load_checkpoint``,
    ``zoo.tasks.figures`` and ``zoo.bench.report``, matplotlib's backend (``backend``)."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
