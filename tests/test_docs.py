"""Every Python example in README.md and docs/ runs, and every ``python -m zoo`` command of their
shell examples is checked (parsed, dry-run or run), so the docs cannot drift from the code.

Each file's ```` ```python ```` blocks run in order in one namespace, as a reader would paste
them, in a scratch folder where what the file presumes has been made first at a tiny size: the
runs its shell commands train (``runs/sentiment/version_0``, ``runs/transformer/version_0``) and
the folder it exports (``exports/transformer-fra-eng``). The Hugging Face Hub stands in as a local
folder (``push_to_hub`` writes a repository there, ``from_pretrained`` of a Hub id reads it), since
no test reaches the network. A signature that is not code is fenced as ```` ```text ````.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import huggingface_hub
import pytest

import zoo.tasks.hub
from tests.helpers import PROJECT_ROOT, SHARED_DATA
from tests.helpers.cli import flags, tiny_fit, trainer_budget
from zoo.attention import ATTENTION_REGISTRY
from zoo.commands import main
from zoo.positions import POSITION_REGISTRY

DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)

#: the registries an example may add to
REGISTRIES = (ATTENTION_REGISTRY, POSITION_REGISTRY)

#: what a file's examples presume, made by the fixture below: the runs and exports they load
NEEDS_RUNS = {"checkpoints.md", "sharing.md"}


def _examples(path: Path) -> list[tuple[int, str]]:
    """The file's Python blocks, each with the line it starts on."""
    text = path.read_text()
    return [(text[: match.start()].count("\n") + 2, match.group(1)) for match in _BLOCK.finditer(text)]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the runs and the export the docs' shell commands would have made, tiny."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("docs")
    steps = trainer_budget(2, 1)
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.chdir(root)
        patch.setenv("ZOO_CACHE_DIR", str(root / "cache"))
        tiny_fit("sentiment", *flags("data", path=SHARED_DATA / "sst2", limit_train=192), *steps)
        fra = flags("data", path=SHARED_DATA / "fra-eng.zip", limit_train=300, vocab_size=300)
        run = tiny_fit("transformer", *fra, *flags("model", heatmap_examples=0, max_decode_len=12), *steps)
        main(["export", "--ckpt_path", str(run), "--out", "exports/transformer-fra-eng"])
    return root


def _local_hub(patch: pytest.MonkeyPatch, hub: Path) -> None:
    """The Hub as the folder ``hub``: a pushed repository is copied there, and a Hub id is read
    from there (the two downloads ``from_pretrained`` makes: config.json, then the snapshot)."""

    def create_repo(self: Any, repo_id: str, **options: Any) -> SimpleNamespace:
        (hub / repo_id).mkdir(parents=True, exist_ok=True)
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self: Any, *, repo_id: str, folder_path: str | Path, **options: Any) -> str:
        shutil.copytree(folder_path, hub / repo_id, dirs_exist_ok=True)
        return f"{hub / repo_id}"

    def hf_hub_download(*, repo_id: str, filename: str, **options: Any) -> str:
        return str(hub / repo_id / filename)

    def snapshot_download(*, repo_id: str, **options: Any) -> str:
        return str(hub / repo_id)

    patch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    patch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    patch.setattr(huggingface_hub.hub_mixin, "hf_hub_download", hf_hub_download)
    patch.setattr(zoo.tasks.hub, "snapshot_download", snapshot_download)


#: the pages with a Python example
EXAMPLED = [path for path in DOCS if _examples(path)]


def test_the_docs_have_python_examples() -> None:
    assert sum(len(_examples(path)) for path in EXAMPLED) >= 10


@pytest.fixture
def registries() -> Iterator[None]:
    """What a file's examples register (``cosine``, ``forgetting_sum``) is unregistered after it,
    so that the next file may register the same name, as a reader's fresh session would."""
    before = {registry: set(registry.list()) for registry in REGISTRIES}
    yield
    for registry, names in before.items():
        for name in set(registry.list()) - names:
            registry.unregister(name)


@pytest.mark.usefixtures("registries")
@pytest.mark.parametrize("path", EXAMPLED, ids=[path.name for path in EXAMPLED])
def test_every_python_example_runs(path: Path, request: pytest.FixtureRequest, monkeypatch, tmp_path) -> None:
    examples = _examples(path)
    if path.name in NEEDS_RUNS:
        root = request.getfixturevalue("workspace")
        _local_hub(monkeypatch, tmp_path / "hub")
        # the docs push to the Hub id they then load: the push comes later in the file, so it is made first
        shutil.copytree(root / "exports" / "transformer-fra-eng", tmp_path / "hub" / "user" / "transformer-fra-eng")
    else:
        root = tmp_path
    monkeypatch.chdir(root)
    monkeypatch.setenv("ZOO_CACHE_DIR", str(root / "cache"))
    namespace: dict[str, Any] = {"__name__": f"docs_{path.stem}"}
    for line, code in examples:
        try:
            exec(compile(code, f"{path.relative_to(PROJECT_ROOT)}:{line}", "exec"), namespace)  # noqa: S102
        except Exception as error:
            pytest.fail(
                f"{path.relative_to(PROJECT_ROOT)}, the example at line {line}: {type(error).__name__}: {error}"
            )
    for name, test in namespace.items():  # a test the docs show a plugin author writing runs too
        if name.startswith("test_") and callable(test):
            test()


_SHELL_BLOCK = re.compile(r"^```bash\n(.*?)^```", flags=re.S | re.M)
#: the commands whose arguments ``--print_config`` checks (every flag, class and value, nothing run)
PRINTED = ("fit", "validate", "test", "predict")
#: the commands that run with ``--dry_run`` (every argument checked, each run printed, nothing run)
DRY_RUN = ("compare", "matrix")
#: the commands an argparse parser checks, and the command that runs as written
PARSERS = {"bench": "zoo.bench.cli", "board": "zoo.board.cli", "generate": "zoo.generate"}
RUN = ("list",)
CHECKED = (*PRINTED, *DRY_RUN, *PARSERS, *RUN)


def _real_data(word: str) -> str:
    """``PATH/TO/sst2`` (a corpus of ``../shared/data``) as that corpus's real path, where it is here."""
    match = re.search(r"PATH/TO/([\w.-]+)", word)
    if match and SHARED_DATA.is_dir() and (SHARED_DATA / match.group(1)).exists():
        return word.replace(match.group(0), str(SHARED_DATA / match.group(1)))
    return word


def _shell_commands(path: Path) -> list[tuple[str, list[str]]]:
    """The ``python -m zoo`` commands of the file's shell blocks, continuation lines joined, each
    with its arguments, ``PATH/TO/CORPUS`` read as the corpus here; a command with another
    placeholder (``$VAR``, ``<run>``, ``PATH/TO`` of the reader's file, ``...``, a
    capitalised ``NAME``) or that reads a file the reader makes first (a run's checkpoint, an
    exported folder, an ``--import`` file) is left out: its values are the reader's."""
    commands = []
    for block in _SHELL_BLOCK.findall(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] != ["python", "-m", "zoo"] or len(words) < 4 or words[3] not in CHECKED:
                continue
            words = [_real_data(word) for word in words]
            placeholder = any(re.search(r"\$|<|PATH/|\.\.\.|\bNAME\b", word) for word in words)
            made = ("--ckpt_path", "--import", "--pretrained")
            reads_a_made_file = any(flag in words for flag in made) and "last" not in words
            if not placeholder and not reads_a_made_file:
                commands.append((line.strip(), words[3:]))
    return commands


SHELL_EXAMPLED = [path for path in DOCS if _shell_commands(path)]


def test_the_docs_have_shell_examples() -> None:
    assert {"README.md", "attention.md", "cli.md", "recall.md", "matrix.md"} <= {path.name for path in SHELL_EXAMPLED}
    checked = {args[0] for path in SHELL_EXAMPLED for _, args in _shell_commands(path)}
    assert {"fit", "compare", "matrix", "bench", "list"} <= checked


def _check_shell(args: list[str], tmp_path: Path) -> None:
    """Run the command's check: ``--print_config``, ``--dry_run`` (its output in ``tmp_path``), its
    parser, or the command itself; SystemExit with a non-zero status where it fails."""
    command = args[0]
    if command in PRINTED:
        main([*args, "--print_config"])
    elif command in DRY_RUN:
        main([*args, "--dry_run", "--out", str(tmp_path / command)])
    elif command in PARSERS:
        importlib.import_module(PARSERS[command]).parser().parse_args(args[1:])
    else:
        main(args)


@pytest.mark.parametrize("path", SHELL_EXAMPLED, ids=[path.name for path in SHELL_EXAMPLED])
def test_every_shell_example_is_checked(path: Path, monkeypatch, tmp_path) -> None:
    """Each ``python -m zoo`` command of the docs is checked as written (:func:`_check_shell`), so a
    renamed option or command cannot linger in an example."""
    monkeypatch.chdir(PROJECT_ROOT)  # the examples name configs/ from the repository's root
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    for line, args in _shell_commands(path):
        complaint = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(complaint):
                _check_shell(args, tmp_path)
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                pytest.fail(f"{path.name}: `{line}` fails its check: {complaint.getvalue().strip()[-400:]}")
