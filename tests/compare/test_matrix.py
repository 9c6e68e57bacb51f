"""``python -m zoo matrix``: its protocols, its rows and groups, a real resumable run, and SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import PROJECT_ROOT
from tests.helpers.compare import FakeChild
from tests.helpers.processes import processes_mentioning, sigterm_once_training
from zoo.attention import ATTENTION_REGISTRY
from zoo.commands import main
from zoo.compare.records import load_records
from zoo.errors import ConfigurationError
from zoo.matrix.cli import flags, groups
from zoo.matrix.protocol import SIZES, load_yardsticks
from zoo.matrix.rows import causal_names

PROTOCOLS = PROJECT_ROOT / "configs" / "matrix"


def _matrix_file() -> dict:
    return yaml.safe_load((PROTOCOLS / "matrix.yaml").read_text())


def test_every_checked_in_protocol_loads_at_both_sizes_and_names_its_metric() -> None:
    names = _matrix_file()["yardsticks"]
    sticks = load_yardsticks(PROTOCOLS / "yardsticks", names)
    assert sorted(path.stem for path in (PROTOCOLS / "yardsticks").glob("*.yaml")) == sorted(names)
    for stick in sticks.values():
        assert stick.metric and set(stick.sizes) == set(SIZES)
        assert all(size.minutes for size in stick.sizes.values()), f"{stick.name} states no CPU minutes"
        assert stick.kind == "bench" or stick.sweep, f"{stick.name}: a training yardstick sweeps the rate"


@pytest.mark.parametrize("stick", [n for n in yaml.safe_load((PROTOCOLS / "matrix.yaml").read_text())["yardsticks"]])
def test_each_training_protocols_fit_arguments_parse(stick: str) -> None:
    """A protocol's words, at the quick size and with a row's attention, are a valid ``fit``."""
    (group, *_), _, _ = groups(["--yardsticks", stick, "--names", "gated_deltanet"])
    command = group.command()
    if command[0] == "bench":
        pytest.skip("a bench protocol runs no fit")
    compare_own = {"--evaluate", "--plot_against", "--budget"}
    words = command[1 : command.index("--grid")]
    fit = [w for i, w in enumerate(words) if w not in compare_own and (i == 0 or words[i - 1] not in compare_own)]
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "fit", *fit, "--model.attention", "gated_deltanet", "--print_config"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


def test_column_args_reach_their_column_alone_and_an_unknown_column_is_refused() -> None:
    args = ["--yardsticks", "mqar,language_model", "--names", "gated_deltanet"]
    args += ["--column_args", "language_model=--data.path 'my corpus.txt'", "--parallel", "2"]
    plan_groups, passthrough, options = groups(args)
    commands = {group.yardstick.name: group.command(flags(group, passthrough, options)) for group in plan_groups}
    assert commands["language_model"][-4:] == ["--parallel", "2", "--data.path", "my corpus.txt"]
    assert "--data.path" not in commands["mqar"] and commands["mqar"][-2:] == ["--parallel", "2"]
    with pytest.raises(ConfigurationError, match="'language' is not a yardstick of matrix.yaml .did you mean"):
        groups(["--column_args", "language=--data.path x"])


def test_the_default_rows_are_every_causal_name_and_recipe_with_the_priorities_of_the_issue() -> None:
    plan_groups, _, _ = groups(["--yardsticks", "mqar,decoding"])
    mqar = {g.label: g for g in plan_groups if g.yardstick.name == "mqar"}
    first = {row.label for row in mqar["first"].rows}
    rest = {row.label for row in mqar["rest"].rows}
    variants = {"{name: softmax, conv_size: 4}"}
    variants |= {
        f"{{name: {name}, negative_eigenvalues: true}}" for name in ("deltanet", "gated_deltanet", "kda", "mamba2")
    }
    assert first | rest == set(causal_names()) | variants
    recurrent = {n for n in causal_names() if ATTENTION_REGISTRY.get(n).family == "recurrent"}
    assert recurrent | {"softmax", "dot_product"} | variants == first
    assert {f"recipe-{label}" for label in _matrix_file()["recipes"]} <= set(mqar)
    assert mqar["first"].seeds == 3 and mqar["rest"].seeds == 1
    cpu_depth = yaml.safe_load((PROJECT_ROOT / "configs" / "gpt_shakespeare_cpu.yaml").read_text())
    for label, path in _matrix_file()["recipes"].items():  # each recipe as deep as its language model
        overlay = yaml.safe_load((PROTOCOLS / path).read_text())["model"]["init_args"]
        command = mqar[f"recipe-{label}"].command()
        depth = overlay.get("num_layers", cpu_depth["model"]["init_args"]["num_layers"])
        assert command[command.index("--model.num_layers") + 1] == str(depth), label
    decoding = {g.label: g for g in plan_groups if g.yardstick.name == "decoding"}
    assert list(decoding) == ["first", "rest", "recipes"]  # the state bench decodes a recipe's whole stack
    assert all(row.attention in ATTENTION_REGISTRY for label in ("first", "rest") for row in decoding[label].rows)
    recipes = decoding["recipes"].command()
    named = recipes[recipes.index("--recipes") + 1 : recipes.index("--out")]
    overlays = {label: (PROTOCOLS / path).resolve() for label, path in _matrix_file()["recipes"].items()}
    assert {word.partition("=")[0]: Path(word.partition("=")[2]).resolve() for word in named} == overlays
    speed, _, _ = groups(["--yardsticks", "speed"])
    assert [g.label for g in speed] == ["first", "rest"]  # a layer's time against SDPA: no recipe


def test_a_name_it_does_not_know_is_refused_with_the_closest_one() -> None:
    with pytest.raises(ConfigurationError, match="Did you mean gated_deltanet"):
        groups(["--names", "gated_deltanett"])
    with pytest.raises(ConfigurationError, match="not in matrix.yaml's list"):
        groups(["--yardsticks", "mqar,prity"])


def _fixture_protocols(root: Path, budget: str) -> Path:
    """A two-column matrix on the kernel-regression model (seconds a fit) and the state bench."""
    folder = root / "protocols"
    (folder / "yardsticks").mkdir(parents=True)
    matrix = {"yardsticks": ["kernel", "state"], "first": ["gaussian_kernel"]}
    (folder / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    kernel = {
        "title": "Kernel regression",
        "metric": "test/mse",
        "select": "test/mse:min",
        "args": ["--model", "nadaraya_watson", "--parallel", "1", "--cpus_per_run", "1"],
        "sweep": {"model.lr": ["1e-3", "1e-2"]},
        "sizes": {name: {"args": ["--budget", budget], "seeds": 2, "rest_seeds": 1, "minutes": 0.1} for name in SIZES},
    }
    state = {
        "kind": "bench",
        "metric": "state_bytes_32",
        "args": ["state", "--d-model", "16", "--heads", "2", "--warmup", "0"],
        "sizes": {name: {"args": ["--lengths", "32", "--repeats", "1"], "minutes": 0.1} for name in SIZES},
    }
    (folder / "yardsticks" / "kernel.yaml").write_text(yaml.safe_dump(kernel))
    (folder / "yardsticks" / "state.yaml").write_text(yaml.safe_dump(state))
    return folder


def test_the_matrix_runs_each_group_once_and_the_same_command_starts_nothing_again(
    tmp_path: Path, fake_child: FakeChild
) -> None:
    protocols, out = _fixture_protocols(tmp_path, "3steps"), tmp_path / "matrix"
    args = ["matrix", "--protocols", str(protocols), "--out", str(out), "--names", "gaussian_kernel,dot_product"]
    main(args)
    first = load_records(out / "quick" / "kernel" / "first" / "records.jsonl")
    rest = load_records(out / "quick" / "kernel" / "rest" / "records.jsonl")
    assert len(first) == 3 and len(rest) == 2  # each swept value once, then the first group's second seed
    assert {r["seed"] for r in first} == {0, 1} and {r["seed"] for r in rest} == {0}
    bench = out / "quick" / "state" / "first.json"
    written, started = bench.stat().st_mtime_ns, len(fake_child.commands)
    assert json.loads(bench.read_text())  # the state bench ran for real
    main(args)  # the same command: every run recorded, every bench written
    assert len(fake_child.commands) == started and bench.stat().st_mtime_ns == written
    assert load_records(out / "quick" / "kernel" / "first" / "records.jsonl") == first


def test_a_recipes_decoding_cell_is_its_whole_stack_measured_beside_its_layers(tmp_path: Path) -> None:
    """The state bench's column with a recipe: the recipes' group writes its own file, and the
    board's cell for the recipe is the stack's bytes, the two layers' cells summed (the overlay's
    own depth kept)."""
    from zoo.board.inputs import read_inputs
    from zoo.board.matrix_cells import matrix_cells

    protocols, out = _fixture_protocols(tmp_path, "3steps"), tmp_path / "matrix"
    state = yaml.safe_load((protocols / "yardsticks" / "state.yaml").read_text())
    (protocols / "yardsticks" / "state.yaml").write_text(yaml.safe_dump({**state, "recipes_flag": "--recipes"}))
    overlay = {"model": {"init_args": {"num_layers": 2, "position": "rope", "attention": ["gla", "dot_product"]}}}
    (tmp_path / "pair.yaml").write_text(yaml.safe_dump(overlay))
    matrix = yaml.safe_load((protocols / "matrix.yaml").read_text())
    (protocols / "matrix.yaml").write_text(yaml.safe_dump({**matrix, "recipes": {"pair": "../pair.yaml"}}))
    names = "gla,dot_product,pair"
    main(["matrix", "--protocols", str(protocols), "--out", str(out), "--yardsticks", "state", "--names", names])
    assert sorted(p.name for p in (out / "quick" / "state").glob("*.json")) == [
        "first.json",
        "recipes.json",
        "rest.json",
    ]
    cells = {row.row.label: row.cells["state"].value for row in matrix_cells(read_inputs([out]), protocols).rows}
    assert cells["pair"] == cells["gla"] + cells["dot_product"] > 0


def test_sigterm_stops_the_matrix_and_its_fits_and_the_same_command_continues(tmp_path: Path) -> None:
    protocols, out = _fixture_protocols(tmp_path, "100000steps"), tmp_path / "matrix"
    args = ["matrix", "--protocols", str(protocols), "--out", str(out), "--names", "gaussian_kernel"]
    status, stderr = sigterm_once_training(args, out, timeout=120)
    assert status == 143, stderr[-2000:]
    assert processes_mentioning(str(out)) == []
    assert not (out / "quick" / "state").exists()  # no later column started
    assert list(out.rglob("last.ckpt"))  # the fit saved, for the same command to continue from


def test_the_dry_run_names_records_the_run_would_refuse_to_resume_from(
    tmp_path: Path, fake_child: FakeChild, capsys: pytest.CaptureFixture[str]
) -> None:
    """A protocol edited after its runs were recorded: the dry run says, under the group, the line
    ``zoo compare`` would stop on, where it used to count the stale records as done."""
    protocols, out = _fixture_protocols(tmp_path, "3steps"), tmp_path / "matrix"
    args = ["matrix", "--protocols", str(protocols), "--out", str(out), "--names", "gaussian_kernel"]
    main([*args, "--yardsticks", "kernel"])
    capsys.readouterr()
    main([*args, "--yardsticks", "kernel", "--dry_run"])
    assert "refused" not in capsys.readouterr().out
    kernel = protocols / "yardsticks" / "kernel.yaml"
    kernel.write_text(kernel.read_text().replace("3steps", "4steps"))
    main([*args, "--yardsticks", "kernel", "--dry_run"])
    lines = capsys.readouterr().out.splitlines()
    refused = lines[lines.index(next(line for line in lines if line.startswith("# kernel / first"))) + 2]
    assert refused.startswith("# refused (2 recorded run(s)): ") and "of another command" in refused
    with pytest.raises(SystemExit) as stopped:  # the run stops on the same line, status 2
        main([*args, "--yardsticks", "kernel"])
    assert stopped.value.code == 2 and refused.split(": ", 1)[1] in capsys.readouterr().err


def test_the_dry_run_costs_recorded_runs_as_measured_and_each_rows_rest_at_its_own_median(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocols, out = _fixture_protocols(tmp_path, "3steps"), tmp_path / "matrix"
    records = out / "quick" / "kernel" / "first" / "records.jsonl"
    records.parent.mkdir(parents=True)
    written = [  # gaussian_kernel (first priority: 2 rates, then a second seed = 3 runs): two recorded
        {"run": "a/seed0", "overrides": {"model.attention": "gaussian_kernel"}, "fit_seconds": 6.0,
         "train_seconds": 90.0, "resumed": True, "threads": 1},  # resumed: its last attempt took 6 s of 90
        {"run": "b/seed0", "overrides": {"model.attention": "gaussian_kernel"}, "fit_seconds": 100.0,
         "eval_seconds": 20.0, "threads": 2},
        {"run": "b/seed0", "overrides": {"model.attention": "gaussian_kernel"}, "fit_seconds": 100.0,
         "eval_seconds": 20.0, "threads": 2},  # the same run recorded twice counts once
    ]  # fmt: skip
    records.write_text("".join(json.dumps(record) + "\n" for record in written))
    main(["matrix", "--protocols", str(protocols), "--out", str(out), "--names", "gaussian_kernel", "--dry_run"])
    lines = capsys.readouterr().out.splitlines()
    kernel = next(line for line in lines if line.startswith("# kernel / first"))
    # recorded: 1.5 (every attempt's training) + 4 core-minutes; the third run at their median (2.75 min)
    assert kernel == "# kernel / first: 3 run(s), 2 recorded (6 CPU minutes), 1 to run (about 3 CPU minutes)"
    state = next(line for line in lines if line.startswith("# state / first"))
    assert state == "# state / first: 1 run(s), 0 recorded (0 CPU minutes), 1 to run (about 0 CPU minutes)"
    hours = (1.5 + 4.0 + 2.75 + 0.1) / 60
    assert lines[-1].endswith(f"in all {hours:.1f} (0.1 recorded; one fit per core)")
    assert "kernel 0.1 (0.1 recorded)" in lines[-1]
