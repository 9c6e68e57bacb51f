#!/usr/bin/env bash
# Download, on a machine with network, the wheels that benchmarks/gpu.sh installs on a GPU machine
# without one: the packages the zoo imports that the measuring machines lack (Python 3.12,
# manylinux x86_64), at the versions of requirements/constraints.txt, or, for the dependencies
# it does not pin, at the versions installed in the project's environment.
#
#   benchmarks/fetch_gpu_wheels.sh [DEST]        # DEST defaults to .whl (ignored by git)
#
# gpu.sh installs only the wheels whose distribution the GPU machine lacks, so a few extra ones
# (the fallbacks below) shadow nothing there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.whl}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
# jsonargparse[signatures] and datasets, with the dependencies the measuring machines lack, and
# the fla extra's fla-core and flash-linear-attention's layers (py3-none-any wheels; the torch, triton,
# einops and transformers they need are there);
# the fallbacks are dependencies of datasets a machine with tokenizers and lightning usually has.
PACKAGES=(jsonargparse docstring-parser typeshed-client datasets dill multiprocess xxhash fla-core flash-linear-attention)
FALLBACKS=(huggingface-hub requests httpx filelock fsspec pyyaml tqdm packaging typing-extensions aiohttp)

version_of() {  # the pinned version, else the one installed in $PYTHON's environment
    local pinned
    pinned=$(grep -i "^$1==" "$ROOT/requirements/constraints.txt" | cut -d= -f3 || true)
    if [ -n "$pinned" ]; then echo "$pinned"; return; fi
    "$PYTHON" -c "import sys; from importlib.metadata import version; print(version(sys.argv[1]))" "$1" 2>/dev/null || true
}

mkdir -p "$DEST"
for name in "${PACKAGES[@]}" "${FALLBACKS[@]}"; do
    version=$(version_of "$name")
    spec=$name${version:+==$version}
    echo "== $spec"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$DEST" "$spec"
done
echo "wheels in $DEST:"
ls "$DEST"
