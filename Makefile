# `make train` and `make test` are the README's two commands: each sets up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

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

# Ends with the test metric, the run directory and the plots it wrote.
train: setup
	$(BIN)/python -m zoo fit --model nadaraya_watson --test_after_fit true

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The leaderboard of the committed results (docs/board.md) into build/board, and its screenshot
# docs/board.png (the README's), taken by Debian's headless Chromium (apt-get install chromium chromium-driver).
board: setup
	$(BIN)/python -m zoo board --records benchmarks/results --out build/board --screenshot docs/board.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs lightning_logs
