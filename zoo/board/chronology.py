"""Which of two benchmark results is the newer: by the git commit each was measured at.

``zoo bench`` writes no date, but every result names the commit of the zoo that measured it
(``environment.git_commit``, ``-dirty`` when the tree had changes). Where a case was measured
twice under the same conditions, the board shows the measurement of the later commit (the code
as it is now, as a re-measurement replaces its table in ``docs/results/``), and the run page lists
the other. Commit times come from the git history of the records folders; a commit that history does
not hold (another clone, no git) counts as older than every known one, and ties fall to the file's
name, so the choice never depends on the order the disk lists files in.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["commit_times", "recency"]


def commit_times(folders: Sequence[Path]) -> dict[str, int]:
    """Commit hash -> commit time (Unix seconds) of every commit in the histories holding ``folders``."""
    times: dict[str, int] = {}
    for folder in folders:
        try:
            log = subprocess.run(
                ["git", "-C", str(folder), "log", "--all", "--format=%H %ct"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in log.splitlines():
            commit, _, seconds = line.partition(" ")
            if seconds.isdigit():
                times[commit] = int(seconds)
    return times


def recency(commit: str | None, name: str, times: dict[str, int]) -> tuple[int, str]:
    """A sort key that puts the result measured at the later commit last (unknown ones first)."""
    known = times.get((commit or "").removesuffix("-dirty"), -1)
    return known, name
