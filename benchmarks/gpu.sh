#!/usr/bin/env bash
# Everything the zoo measures on one GPU, in calls of at most ten minutes each, offline.
#
#   benchmarks/gpu.sh [--dry-run] [--list] [--only STAGE,...] [--share STAGE:SECONDS ...] [--total SECONDS]
#                     [--wheels DIR] [--data DIR] [--nanogpt DIR] [--out DIR] [--python PY]
#
# From the project checkout plus folders beside it (defaults in the checkout root, all ignored by
# git): --wheels (.whl: benchmarks/fetch_gpu_wheels.sh fills it, fla-core and
# flash-linear-attention among them), --data (.data: fra-eng.zip, sst2/ for the sentiment test,
# tinyshakespeare/input.txt for the language model) and --nanogpt (.nanogpt: a checkout of
# karpathy/nanoGPT, for its own train.py beside the zoo's; without one that stage is skipped).
# Results and logs go to --out (default $OUT if set, else gpu-results/): one log per stage, the
# benchmarks' JSON and plots, the CUDA tests' JUnit XML, the runs' directories and metrics,
# environment.log, and stages.tsv (stage, status, exit code, seconds). Each stage runs under
# `timeout` with its share of the ten minutes; a stage that fails or runs out of time is recorded
# and the next one runs.
#
# A call runs the first part by default: the CUDA group in two stages, eight processes on the one
# GPU: cuda_backends first (fla's kernels and FlexAttention: the failures earlier leases named, and
# every family routed since), then cuda_tests, the rest (on an H200 the whole group ran past 220 s
# from cold caches and reached 97% in 230 s warm); each failure's report goes to
# cuda_failures.txt the moment it is known. The backends need a call of their own
# (--only install,environment,bench_backends_recurrent,bench_backends_flex,shakespeare_parity): the
# recurrent families on fla's kernels and fla's own layers, causal, at 16k, and the mask-defined
# variants on FlexAttention, at 16k, bfloat16, forward and backward, against SDPA's flash kernel
# (the first call of a case, where Triton compiles and autotunes, may take --first-call-limit);
# nanoGPT's Shakespeare GPU recipe beside nanoGPT's own train.py, both compiled. The older
# measurements (every variant's speed in float32, decoding from a state, the Transformer's
# training and decoding), the Transformer's budget run, and the matrix's columns a few steps each
# (--only install,environment,matrix_steps: its time on one GPU and on a cluster, matrix_estimate.md)
# are calls of their own too.
# --share gives a stage another share and --total the call another budget (both in seconds), to fit
# a lease shorter than ten minutes. --dry-run runs the stages on the CPU at tiny sizes, to test the script without a GPU
# (tests/bench/test_gpu_script.py does); --list prints the selected stages and their shares, and
# runs nothing.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
LIST=0
WHEELS=$ROOT/.whl
DATA=$ROOT/.data
RESULTS=${OUT:-$ROOT/gpu-results}
PYTHON=python3
ONLY=
OVERRIDES=()
TOTAL_OVERRIDE=
NANOGPT=$ROOT/.nanogpt
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) DRY=1 ;;
        --list) LIST=1 ;;
        --wheels) WHEELS=$2; shift ;;
        --data) DATA=$2; shift ;;
        --nanogpt) NANOGPT=$2; shift ;;
        --out) RESULTS=$2; shift ;;
        --python) PYTHON=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --share) OVERRIDES+=("$2"); shift ;;
        --total) TOTAL_OVERRIDE=$2; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "gpu.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ $LIST -eq 1 ] || mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" 2>/dev/null && pwd || echo "$RESULTS")
WHEELS=$(cd "$WHEELS" 2>/dev/null && pwd || echo "$WHEELS")
DATA=$(cd "$DATA" 2>/dev/null && pwd || echo "$DATA")
NANOGPT=$(cd "$NANOGPT" 2>/dev/null && pwd || echo "$NANOGPT")
FRA_ENG=$DATA/fra-eng.zip
# Scratch outside the results (they are copied back): the missing packages (never installed into
# the system's site-packages) and the zoo's caches (tokenizers, encoded corpora).
SCRATCH=${TMPDIR:-/tmp}/zoo-gpu.$$
SITE=$SCRATCH/site
TOTAL=570             # seconds for all stages: ten minutes less a margin for start-up and copying
START=$SECONDS

export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}
export ZOO_DATA_DIR=$DATA ZOO_CACHE_DIR=$SCRATCH/cache
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
export ZOO_FAILURE_LOG=$RESULTS/cuda_failures.txt  # tests/cuda/conftest.py appends each failure as it happens
export ROOT PYTHON WHEELS SITE NANOGPT DATA  # for the stages that are functions of this script (run by `bash -c`)

# stage NAME SHARE COMMAND...: run COMMAND (in $RESULTS) for at most SHARE seconds, or what is
# left of TOTAL; log to NAME.log; record the outcome in stages.tsv.
stage() {
    local name=$1 share=$2 started=$SECONDS rc status
    shift 2
    selected "$name" || return 0
    local left=$((TOTAL - (SECONDS - START)))
    if [ "$share" -gt "$left" ]; then share=$left; fi
    if [ "$share" -le 0 ]; then
        printf '%s\tskipped: no time left\t-\t0\n' "$name" >>"$RESULTS/stages.tsv"
        return
    fi
    echo "== $name (at most ${share}s)"
    (cd "$RESULTS" && timeout --signal=TERM --kill-after=15 "$share" "$@") >"$RESULTS/$name.log" 2>&1 </dev/null
    rc=$?
    case $rc in
        0) status=ok ;;
        3) status="skipped: $(tail -n 1 "$RESULTS/$name.log")" ;;
        124|137) status="timed out after ${share}s" ;;
        *) status=failed ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$((SECONDS - started))" >>"$RESULTS/stages.tsv"
    echo "   $status ($((SECONDS - started))s)"
}

# -- install: the wheels of the distributions this Python lacks --------------------------------
install_missing() {
    local wheel dist missing=()
    if [ ! -d "$WHEELS" ]; then echo "no wheels at $WHEELS: installing nothing"; fi
    for wheel in "$WHEELS"/*.whl; do
        [ -e "$wheel" ] || continue
        dist=$(basename "$wheel" | cut -d- -f1)
        if "$PYTHON" -c "import sys; from importlib.metadata import version; version(sys.argv[1])" "$dist" 2>/dev/null; then
            echo "present: $dist"
        else
            missing+=("$wheel")
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing into $SITE: ${missing[*]##*/}"
        if "$PYTHON" -m pip --version >/dev/null 2>&1; then
            "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${missing[@]}" || return 1
        else  # no pip: a wheel is a zip of what --target would hold (scripts aside, which the zoo needs none of)
            "$PYTHON" -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" "$SITE" "${missing[@]}" || return 1
        fi
        "$PYTHON" -c "import sys; from importlib.metadata import distributions as d; print('installed:', *sorted(x.metadata['Name'] for x in d(path=[sys.argv[1]])))" "$SITE"
    fi
    "$PYTHON" -c "import jsonargparse, datasets, zoo; print('zoo imports: ok')"
}

environment() {
    nvidia-smi || echo "nvidia-smi: not available"
    "$PYTHON" - <<'PY'
import platform, torch, lightning, zoo
from importlib.metadata import PackageNotFoundError, version
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), lightning {lightning.__version__}")
print(f"cuda available: {torch.cuda.is_available()}" + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
for name in ("triton", "fla-core", "flash-linear-attention", "transformers", "pytest-xdist"):
    try:
        print(f"{name} {version(name)}")
    except PackageNotFoundError:
        print(f"{name}: not installed")
print("attention:", ", ".join(zoo.list_attention()))
PY
}

# nanoGPT's Shakespeare recipe beside the zoo's (benchmarks/nanogpt_parity.py); exit 3: skipped.
shakespeare_parity() {
    if [ ! -f "$NANOGPT/train.py" ]; then echo "no nanoGPT checkout at $NANOGPT (--nanogpt)"; exit 3; fi
    "$PYTHON" "$ROOT/benchmarks/nanogpt_parity.py" --nanogpt "$NANOGPT" --data "$DATA/tinyshakespeare/input.txt" "$@"
}
# The matrix's training columns, a few steps each at SIZE (benchmarks/matrix_gpu_estimate.py), then
# the whole matrix priced from them into matrix_estimate.md: its time on one device and on a cluster.
matrix_steps() {
    local size=$1 results=$PWD
    shift
    cd "$ROOT" || return 1  # the protocols name their config files from the checkout's root
    "$PYTHON" benchmarks/matrix_gpu_estimate.py measure --out "$results/matrix_steps" --size "$size" \
        --text "$DATA/tinyshakespeare/input.txt" "$@" || return 1
    "$PYTHON" benchmarks/matrix_gpu_estimate.py estimate --measured "$results/matrix_steps" --size "$size" \
        | tee "$results/matrix_estimate.md"
}
export -f install_missing environment shakespeare_parity matrix_steps

# max_steps for the budget run: the training seconds it has over the step time `bench train`
# measured at the same batch (the CPU recipe's calibration); FALLBACK when that failed.
calibrated_steps() {
    "$PYTHON" - "$RESULTS/bench_train.json" "$1" "$2" <<'PY'
import json, sys
path, seconds, fallback = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
try:
    step_ms = json.load(open(path))["result"]["step_time_ms"]["median"]
    print(max(1, int(seconds * 1000 / step_ms)))
except (OSError, KeyError, ValueError):
    print(fallback)
PY
}

if [ $DRY -eq 1 ]; then
    DEVICE=cpu ACCELERATOR=cpu
    LENGTHS=(64 128) ALL_LENGTHS=(64) ATTENTION_SIZE=(--batch 1 --d-model 32 --heads 2 --warmup 1 --repeats 1)
    TRANSLATION=(--limit-train 400 --vocab-size 200 --model-kwargs '{"d_model": 32, "num_heads": 2, "ffn_hidden": 64}')
    TRAIN_SIZE=(--batch 16 --steps 2 --warmup 1) DECODE_SIZE=(--batch 8 --sentences 8 --tokens 4 --repeats 1)
    FIT_SIZE=(--data.limit_train 400 --data.vocab_size 200 --data.batch_size 16 --model.d_model 32 --model.num_heads 2
              --model.ffn_hidden 64 --data.num_workers 0 --trainer.limit_test_batches 0.005)  # 1 batch
    RECURRENT_LENGTHS=(64 128) FLEX_LENGTHS=(64 128) STATE_SIZE=(--lengths 64 128 --d-model 32 --heads 2 --warmup 1 --repeats 2)
    SHAKESPEARE_SIZE=(--model.d_model 32 --model.num_heads 2 --model.num_layers 1 --data.block_size 32
                      --data.batch_size 8 --trainer.max_steps 4 --trainer.val_check_interval 2 --trainer.limit_val_batches 2)
    TEST_OPTIONS=(-m cuda)
    BACKEND_SIZE=(--lengths 64 128 --batch 1 --d-model 32 --heads 2 --warmup 1 --repeats 1 --dtype float32)
    PARITY=(--recipe cpu --iterations 4 --rounds 1 --target 9 -- --trainer.val_check_interval 2
            --trainer.limit_val_batches 2)
    SHARES=(install:60 environment:60 cuda_backends:120 cuda_tests:120 bench_backends_recurrent:120 bench_backends_flex:120
            shakespeare_parity:240 bench_attention:90 bench_recurrent:90 bench_state:60
            shakespeare_fit:120 bench_attention_all:90 bench_train:90 bench_decode:90 bench_train_compiled:90
            budget_fit:120 budget_test:90 matrix_steps:240)
    MATRIX_SIZE=quick MATRIX_STEPS=(--steps 6 --names gated_deltanet --yardsticks parity)
    TOTAL=1200  # a loaded 2-core machine; on a quiet one the dry run takes a few minutes
    export TORCHDYNAMO_DISABLE=1  # the compiled stage runs its code path without compiling on the CPU
else
    DEVICE=cuda ACCELERATOR=gpu
    LENGTHS=(1024 2048 4096 8192 16384 32768) ALL_LENGTHS=(1024 2048 4096)
    ATTENTION_SIZE=(--batch 2 --d-model 256 --heads 8 --warmup 2 --repeats 5 --time-limit 2)
    TRANSLATION=()
    TRAIN_SIZE=(--batch 512 --steps 40 --warmup 10) DECODE_SIZE=(--batch 256 --sentences 1024 --tokens 30 --repeats 3)
    FIT_SIZE=()
    # the backends at 16k, the length of the issue's targets (4k and 32k cost leases their first calls)
    RECURRENT_LENGTHS=(16384) FLEX_LENGTHS=(16384) STATE_SIZE=(--lengths 1024 4096 16384)
    SHAKESPEARE_SIZE=(--trainer.max_time 00:00:02:15)  # ends the run cleanly inside its share
    # --dist load: a file's tests spread over the workers (loadfile ran fla's eight families one after
    # another on one worker, docs/results/gpu.md); pytest-xdist and pytest-timeout are there
    TEST_OPTIONS=(-m cuda -n 8 --dist load --tb=short -rf --timeout 150)
    BACKEND_SIZE=(--batch 1 --d-model 1024 --heads 16 --warmup 2 --repeats 5 --time-limit 3 --first-call-limit 100
                  --dtype bfloat16)
    PARITY=(--recipe gpu --iterations 2000 --rounds 1 --target 1.4697)  # nanoGPT's README loss
    SHARES=(install:25 environment:20 cuda_backends:200 cuda_tests:300 bench_backends_recurrent:150 bench_backends_flex:130
            shakespeare_parity:240 bench_attention:40 bench_recurrent:30 bench_state:20
            shakespeare_fit:150 bench_attention_all:40 bench_train:60 bench_decode:20 bench_train_compiled:30
            budget_fit:155 budget_test:40 matrix_steps:500)  # on an H200: the Shakespeare recipe trains in about 100 s
    # the matrix's six training columns at their full size, softmax, Gated DeltaNet and Mamba-2 a few steps each
    MATRIX_SIZE=full MATRIX_STEPS=(--steps 30 --trainer.accelerator gpu)
fi
# --share and --total: a stage's share, the call's budget, replaced.
for override in "${OVERRIDES[@]}"; do
    [[ $override =~ ^([a-z_]+):([0-9]+)$ ]] || { echo "gpu.sh: --share takes STAGE:SECONDS, not $override" >&2; exit 2; }
    printf '%s\n' "${SHARES[@]%%:*}" | grep -qx "${BASH_REMATCH[1]}" || { echo "gpu.sh: unknown stage ${BASH_REMATCH[1]} (see --list)" >&2; exit 2; }
    for i in "${!SHARES[@]}"; do [ "${SHARES[$i]%%:*}" = "${BASH_REMATCH[1]}" ] && SHARES[$i]=$override; done
done
if [ -n "$TOTAL_OVERRIDE" ]; then
    [[ $TOTAL_OVERRIDE =~ ^[0-9]+$ ]] || { echo "gpu.sh: --total takes seconds, not $TOTAL_OVERRIDE" >&2; exit 2; }
    TOTAL=$TOTAL_OVERRIDE
fi
# The stages a call runs: --only's, else the first part.
FIRST_PART=(install environment cuda_backends cuda_tests)
if [ -n "$ONLY" ]; then
    IFS=, read -ra SELECTED <<<"$ONLY"
    for name in "${SELECTED[@]}"; do
        printf '%s\n' "${SHARES[@]%%:*}" | grep -qx "$name" || { echo "gpu.sh: unknown stage $name (see --list)" >&2; exit 2; }
    done
else
    SELECTED=("${FIRST_PART[@]}")
fi
selected() { printf '%s\n' "${SELECTED[@]}" | grep -qx "$1"; }
share() { local entry; for entry in "${SHARES[@]}"; do [ "${entry%%:*}" = "$1" ] && echo "${entry#*:}"; done; }
if [ $LIST -eq 1 ]; then
    for name in "${SELECTED[@]}"; do echo "$name $(share "$name")"; done
    echo "total $TOTAL"
    exit 0
fi
printf 'stage\tstatus\texit_code\tseconds\n' >"$RESULTS/stages.tsv"
[ -f "$FRA_ENG" ] || echo "warning: no $FRA_ENG: the translation stages will fail" >&2

stage install "$(share install)" bash -c install_missing
stage environment "$(share environment)" bash -c environment
# The CUDA group: the backends' tests first, then the rest.
BACKEND_TESTS=(tests/cuda/test_fla_cuda.py tests/cuda/test_flex_cuda.py tests/cuda/test_backends_cuda.py)
stage cuda_backends "$(share cuda_backends)" bash -c 'cd "$1" && shift && "$@"' _ "$ROOT" \
    "$PYTHON" -m pytest "${BACKEND_TESTS[@]}" "${TEST_OPTIONS[@]}" -v -rs -p no:cacheprovider \
    --junitxml "$RESULTS/cuda_backends.xml"
stage cuda_tests "$(share cuda_tests)" bash -c 'cd "$1" && shift && "$@"' _ "$ROOT" \
    "$PYTHON" -m pytest tests/cuda "${BACKEND_TESTS[@]/#/--ignore=}" "${TEST_OPTIONS[@]}" -v -rs -p no:cacheprovider \
    --junitxml "$RESULTS/cuda_tests.xml"
# The backends against the zoo's forms, bfloat16, forward and backward, beside SDPA's kernels: the
# recurrent families causal (NAME@zoo, NAME@fla, fla:NAME), the mask-defined variants padded.
# One process a family, each beside the floor and causal multi_head, so that a family's result is
# written before the next family's kernels compile and autotune (one sweep of every case timed
# nothing in a lease: its cases' first calls ate the share); first the families whose backward
# fla runs on Hopper under Triton < 3.7.1 (zoo.attention.kernels.fla.fla_refusal), then
# bench_backends_recurrent.json, every family's records together.
RECURRENT_FAMILIES=(kda gla rwkv7 gated_deltanet mamba2 deltanet retention gated_deltaproduct)
# backends_recurrent LENGTHS SIZE FAMILY...: LENGTHS and SIZE the sweep's words, each one argument
backends_recurrent() {
    local lengths=$1 size=$2 family failed=0
    shift 2
    for family in "$@"; do
        echo "== $family"
        # shellcheck disable=SC2086  # the lengths and the size are lists of words
        "$PYTHON" -m zoo bench attention --device "$DEVICE" --causal --no-padding --cases floor multi_head \
            "$family@*" "fla:$family" --lengths $lengths $size --out "bench_backends_$family.json" || failed=1
    done
    "$PYTHON" - "$@" <<'PY'
import json, pathlib, sys
parts = [pathlib.Path(f"bench_backends_{family}.json") for family in sys.argv[1:]]
merged = {p.stem.removeprefix("bench_backends_"): json.loads(p.read_text()) for p in parts if p.is_file()}
pathlib.Path("bench_backends_recurrent.json").write_text(json.dumps(merged, indent=1))
PY
    return $failed
}
export DEVICE
export -f backends_recurrent
stage bench_backends_recurrent "$(share bench_backends_recurrent)" bash -c 'backends_recurrent "$@"' _ \
    "${RECURRENT_LENGTHS[*]}" "${BACKEND_SIZE[*]}" "${RECURRENT_FAMILIES[@]}"
stage bench_backends_flex "$(share bench_backends_flex)" "$PYTHON" -m zoo bench attention --device "$DEVICE" \
    --cases floor multi_head 'local@*' 'longformer@*' 'sparse@*' 'bigbird@*' 'multi_head_alibi@*' \
    --lengths "${FLEX_LENGTHS[@]}" "${BACKEND_SIZE[@]}" --out bench_backends_flex.json --plot bench_backends_flex.png
# nanoGPT's GPU recipe, the zoo's and nanoGPT's own train.py side by side, both compiled, to 2,000
# iterations (benchmarks/nanogpt_parity.py --recipe gpu): time per iteration, to the target loss.
stage shakespeare_parity "$(share shakespeare_parity)" bash -c 'shakespeare_parity "$@"' _ \
    --out "$RESULTS/shakespeare_parity.json" "${PARITY[@]}"
stage bench_attention "$(share bench_attention)" "$PYTHON" -m zoo bench attention --device "$DEVICE" \
    --cases floor multi_head dot_product local linear --lengths "${LENGTHS[@]}" "${ATTENTION_SIZE[@]}" \
    --out bench_attention.json --plot bench_attention.png
stage bench_recurrent "$(share bench_recurrent)" "$PYTHON" -m zoo bench attention --device "$DEVICE" --causal \
    --no-padding --cases multi_head retention gla deltanet gated_deltanet mamba2 --lengths "${RECURRENT_LENGTHS[@]}" \
    "${ATTENTION_SIZE[@]}" --out bench_recurrent.json --plot bench_recurrent.png
stage bench_state "$(share bench_state)" "$PYTHON" -m zoo bench state --device "$DEVICE" "${STATE_SIZE[@]}" \
    --out bench_state.json
# nanoGPT's GPU recipe for shakespeare_char (configs/gpt_shakespeare.yaml) in bf16-mixed: its
# validation loss beside nanoGPT's 1.4697 in about 3 minutes on one A100; the wall time is the stage's.
stage shakespeare_fit "$(share shakespeare_fit)" "$PYTHON" -m zoo fit --model gpt --config "$ROOT/zoo/configs/gpt_shakespeare.yaml" \
    --data.path "$DATA/tinyshakespeare/input.txt" --trainer.accelerator "$ACCELERATOR" --trainer.precision bf16-mixed \
    "${SHAKESPEARE_SIZE[@]}" --trainer.logger CSVLogger --trainer.logger.save_dir runs \
    --trainer.logger.name gpt_shakespeare --trainer.enable_progress_bar false
stage bench_attention_all "$(share bench_attention_all)" "$PYTHON" -m zoo bench attention --device "$DEVICE" \
    --lengths "${ALL_LENGTHS[@]}" "${ATTENTION_SIZE[@]}" --out bench_attention_all.json --plot bench_attention_all.png
stage bench_train "$(share bench_train)" "$PYTHON" -m zoo bench train --device "$DEVICE" --precision bf16-mixed \
    --data-path "$FRA_ENG" "${TRANSLATION[@]}" "${TRAIN_SIZE[@]}" --out bench_train.json
stage bench_decode "$(share bench_decode)" "$PYTHON" -m zoo bench decode --device "$DEVICE" \
    --data-path "$FRA_ENG" "${TRANSLATION[@]}" "${DECODE_SIZE[@]}" --out bench_decode.json
stage bench_train_compiled "$(share bench_train_compiled)" "$PYTHON" -m zoo bench train --device "$DEVICE" \
    --precision bf16-mixed --compile --data-path "$FRA_ENG" "${TRANSLATION[@]}" "${TRAIN_SIZE[@]}" --out bench_train_compiled.json

# The Transformer's budget run: the default recipe at a GPU-sized batch in bf16-mixed, for what
# is left of its share after start-up; its schedule ends at the calibrated max_steps.
FIT_SHARE=$(share budget_fit)
TRAIN_SECONDS=$((FIT_SHARE - 45))
STEPS=$(calibrated_steps "$TRAIN_SECONDS" 2000)
[ $DRY -eq 1 ] && STEPS=3
selected budget_fit && echo "budget run: $STEPS steps, at most ${TRAIN_SECONDS}s of training" | tee "$RESULTS/budget.txt"
stage budget_fit "$FIT_SHARE" "$PYTHON" -m zoo fit --model transformer --config "$ROOT/benchmarks/configs/transformer_gpu.yaml" \
    --data.path "$FRA_ENG" --trainer.accelerator "$ACCELERATOR" --trainer.max_steps "$STEPS" \
    --trainer.max_time "$(printf '00:00:%02d:%02d' $((TRAIN_SECONDS / 60)) $((TRAIN_SECONDS % 60)))" "${FIT_SIZE[@]}" \
    --trainer.logger CSVLogger --trainer.logger.save_dir runs --trainer.logger.name transformer_gpu \
    --trainer.enable_progress_bar false
CHECKPOINT=$(ls -t "$RESULTS"/runs/transformer_gpu/version_*/checkpoints/last.ckpt 2>/dev/null | head -n 1)
stage budget_test "$(share budget_test)" "$PYTHON" -m zoo test --model transformer \
    --config "$ROOT/benchmarks/configs/transformer_gpu.yaml" --data.path "$FRA_ENG" --trainer.accelerator "$ACCELERATOR" \
    "${FIT_SIZE[@]}" --ckpt_path "${CHECKPOINT:-no checkpoint: the budget run saved none}" \
    --trainer.logger CSVLogger --trainer.logger.save_dir runs --trainer.logger.name transformer_gpu_test \
    --trainer.enable_progress_bar false

stage matrix_steps "$(share matrix_steps)" bash -c 'matrix_steps "$@"' _ "$MATRIX_SIZE" "${MATRIX_STEPS[@]}"

# The Shakespeare run's validation losses (step, loss), for docs/results/gpu.md beside nanoGPT's line.
for metrics in "$RESULTS"/runs/gpt_shakespeare/version_*/metrics.csv; do
    [ -f "$metrics" ] && "$PYTHON" -c "import csv, sys; rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get('val/loss')]; print('shakespeare val/loss by step:', *(f\"{r['step']}:{float(r['val/loss']):.4f}\" for r in rows))" "$metrics" | tee "$RESULTS/shakespeare.txt"
done
echo
column -t -s $'\t' "$RESULTS/stages.tsv" 2>/dev/null || cat "$RESULTS/stages.tsv"
echo "results: $RESULTS ($((SECONDS - START))s)"
rm -rf "$SCRATCH"
! grep -qv -e $'\tok\t' -e '^stage' "$RESULTS/stages.tsv"
