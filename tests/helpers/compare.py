"""A stand-in for the child processes of ``zoo compare``: what a fit and an evaluation would
write, without running them, so that tests of the runner and the launchers take no time."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zoo.compare.process import ChildResult

__all__ = ["RESOLVED", "FakeChild"]

#: What fit resolves for the stand-in runs: the flags a grid may vary.
RESOLVED = {
    "data": {"class_path": "x.Data", "init_args": {"seed": 0}},
    "model": {"class_path": "x.Model", "init_args": {"attention": "a", "lr": 1.0, "d_model": 32}},
}


class FakeChild:
    """Stands in for ``run_child``: writes what a fit (timing) or a test (metrics) would, counts calls."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.envs: list[dict] = []
        self.spans: list[tuple[float, float, str | None]] = []  # start, end, CUDA_VISIBLE_DEVICES
        self.fail_on: str | None = None
        self.fail_times: dict[str, int] = {}  # fails this many more calls whose command holds the key
        self.seconds = 0.0
        #: the test metric a run reports from its flags (default: its seed + 0.5)
        self.score: Callable[[dict[str, str]], float] = lambda flags: int(flags["--seed_everything"]) + 0.5
        self._lock = threading.Lock()

    def __call__(
        self,
        command: list[str],
        log: Path,
        threads: int,
        env: dict | None = None,
        cwd: Path | None = None,
        poll: Callable[[], None] | None = None,
    ) -> ChildResult:
        start = time.perf_counter()
        with self._lock:
            self.commands.append(command)
            self.envs.append(dict(env or {}))
        time.sleep(self.seconds)
        with self._lock:
            self.spans.append((start, time.perf_counter(), (env or {}).get("CUDA_VISIBLE_DEVICES")))
        failing = [key for key, times in self.fail_times.items() if times > 0 and key in command]
        for key in failing:
            self.fail_times[key] -= 1
        if failing or (self.fail_on is not None and self.fail_on in command):
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("Traceback ...\nerror: no attention named 'nope'\n")
            return ChildResult(2, 1.0, 100.0)
        flags = dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)
        if "--trainer.logger" in flags:  # a list of loggers (CSV first), as with W&B
            csv = json.loads(flags["--trainer.logger"])[0]["init_args"]
        else:
            csv = {key: flags[f"--trainer.logger.init_args.{key}"] for key in ("save_dir", "name", "version")}
        directory, stage = Path(csv["save_dir"], csv["name"]), csv["version"]
        (directory / stage).mkdir(parents=True, exist_ok=True)
        log.write_text("done\n")
        if stage == "fit":
            timing = {"steps": 3, "seconds_per_step": 0.2, "wall_seconds_per_step": 0.25, "samples_per_second": 4.0}
            if "--ckpt_path=last" in command:  # a continued fit: the attempt before it trained 30 s
                timing["earlier_train_seconds"] = 30.0
            (directory / "fit" / "timing.json").write_text(json.dumps(timing))
        else:
            (directory / stage / "metrics.csv").write_text(f"epoch,step,test/mse\n0,0,{self.score(flags)}\n")
        return ChildResult(0, 1.0, 100.0)
