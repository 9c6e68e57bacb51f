# `make train` and `make test` are the README's two commands: each sets up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`, one thread each (tests/conftest.py): auto is one a core
TEST_WORKERS ?= auto

.PHONY: setup train test lint bench board clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml requirements/constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: the local CPU wheel, never a multi-gigabyte CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# the extras the tests need: hf (transformers), ray and slurm (zoo compare's launchers), board (zoo board)
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e ".[dev,hf,ray,slurm,board]"
	touch $@

setup: $(VENV)/.installed

# The zoo's main job on data generated from a seed (configs/recall_parity.yaml): softmax attention
# (with a short convolution on its queries, keys and values), Gated DeltaNet, and Gated DeltaNet
# with negative eigenvalues on parity, trained at 3-40 tokens and tested to 256, compared in a few
# minutes; ends on the table of test accuracy by length and cost, written to runs/parity/report.md.
# Run again, it reprints the table (the records are kept).
FRONT_GRID := model.attention=[{name: softmax, conv_size: 4}],gated_deltanet,[{name: gated_deltanet, negative_eigenvalues: true}]
train: setup
	$(BIN)/python -m zoo compare --model recall --config configs/recall_parity.yaml --grid '$(FRONT_GRID)' \
		--evaluate test --parallel 1 --plot_against length --out runs/parity

test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The leaderboard of the committed results (docs/board.md) into build/board, screenshots of its top
# (docs/board.png) and of its matrix page (docs/matrix.png, the README's), taken by Debian's headless
# Chromium (apt-get install chromium chromium-driver), and the matrix table of docs/results/matrix.md
# from the same records.
board: setup
	$(BIN)/python -m zoo board --records benchmarks/results --out build/board --screenshot docs/board.png \
		--matrix_screenshot docs/matrix.png --markdown docs/results/matrix.md

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs lightning_logs
