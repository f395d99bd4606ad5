#!/usr/bin/env bash
# The GPU measurements in one command, for a CUDA machine without network access (the figures in
# benchmarks/RESULTS.md marked "GPU" come from it):
#
#   bash scripts/prepare_gpu_wheels.sh        # on a machine with PyPI access: the missing wheels into .whl/
#   bash scripts/gpu_bench.sh                 # on the GPU machine, with .whl/ copied next to the checkout
#
#   bash scripts/gpu_bench.sh train                       # only the trainers (gpu_train.py)
#   bash scripts/gpu_bench.sh train --mode lora-bf16      # extra arguments go to benchmarks/gpu_train.py
#   bash scripts/gpu_bench.sh rollout                     # only the rollout benchmark (needs vllm installed)
#   bash scripts/gpu_bench.sh check                       # the gpu-marked tests: tiny model on the GPU, ~1 min
#   bash scripts/gpu_bench.sh profile                     # the credit critic's step (SmolLM2-135M shape, 4 pairs of
#                                                         # 512 tokens) traced: device-busy time, launches, top ops
#
# Results go to $OUT (default runs/gpu_bench/): env.txt (GPU, driver, versions), gpu_train.json and
# gpu_train.log, rollout.log (and rollout.json). Every stage writes as it goes, so a command stopped at a time limit still leaves
# what it measured. GPU_BENCH_SECONDS (default 570) bounds the whole command: gpu_train.py skips the runs that
# cannot start in time and says so.
#
# What runs: the critic and the turn-level trainer on a Llama-3.1-8B-shaped model with random weights, 4-bit QLoRA
# then bf16 LoRA (rank 16), 4096-token sequences, micro-batch 1, gradient checkpointing; then, where vllm is
# importable, benchmarks/rollout.py --vllm. vllm is not part of the wheel bundle (hundreds of MB, tied to its own
# torch build), so on a machine without it the rollout stage records why it was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
STAGE=${1:-all}
if [ $# -gt 0 ]; then shift; fi
case "$STAGE" in train|rollout|all|check|profile) ;;
    *) echo "usage: $0 [train|rollout|all|check|profile] [gpu_train.py arguments...]" >&2; exit 2;; esac

START=$(date +%s)
BUDGET=${GPU_BENCH_SECONDS:-570}
OUT=${OUT:-$REPO/runs/gpu_bench}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Fewer, growable segments: the reserved peak then reflects what training needs rather than fragmentation.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
remaining() { echo $(( BUDGET - ($(date +%s) - START) )); }

# 1. Packages the machine lacks, from the bundle (no network needed). GPU_BENCH_WHEELS=none skips it.
WHEELS=${GPU_BENCH_WHEELS:-.whl}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    SITE=${GPU_BENCH_SITE:-/tmp/gpu_bench_site}
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$WHEELS"/*.whl || { echo "error: installing $WHEELS/*.whl failed" >&2; exit 1; }
    # the checkout first: it is the code being measured (the project's wheel in the bundle is for installs)
    export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
    echo "no .whl/ bundle: using the packages installed here (run scripts/prepare_gpu_wheels.sh to make one)"
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

# 2. What this machine is.
{
    echo "date: $(date -u +%FT%TZ)"
    echo "command: bash scripts/gpu_bench.sh $STAGE $*"
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
    "$PYTHON" - <<'PY'
import platform
from importlib import metadata
print("python", platform.python_version())
for name in ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "datasets", "pyarrow", "vllm"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "not installed")
import torch
print("torch.cuda", torch.version.cuda, "available:", torch.cuda.is_available())
import sweet_trl
print("sweet_trl from", sweet_trl.__file__)
PY
} 2>&1 | tee "$OUT/env.txt"

status=0

# 3. The trainers.
if [ "$STAGE" = train ] || [ "$STAGE" = all ]; then
    check="import trl, peft, bitsandbytes, datasets, sweet_trl.critic_trainer, sweet_trl.policy_trainer"
    if ! "$PYTHON" -c "$check" 2>"$OUT/import_error.txt"; then
        # e.g. the bundled transformers wanting a newer regex than the image has: use the image's transformers
        if [ -n "${SITE:-}" ] && ls -d "$SITE"/transformers-*.dist-info >/dev/null 2>&1; then
            echo "the bundled transformers does not import here; retrying with the installed one:"
            tail -3 "$OUT/import_error.txt"
            rm -rf "$SITE"/transformers "$SITE"/transformers-*.dist-info
        fi
        if ! "$PYTHON" -c "$check" 2>"$OUT/import_error.txt"; then
            echo "error: the trainers cannot be imported here:" >&2; cat "$OUT/import_error.txt" >&2
            exit 1
        fi
    fi
    rm -f "$OUT/import_error.txt"
    # vllm needs its own share of the budget when it will run
    reserve=0
    if [ "$STAGE" = all ] && "$PYTHON" -c "import vllm" 2>/dev/null; then reserve=180; fi
    "$PYTHON" benchmarks/gpu_train.py --size 8b --trainer both --mode both --seq-len 4096 \
        --steps 2 --warmup-steps 1 --grad-accum 2 --deadline $(( $(remaining) - reserve - 10 )) \
        --cache-dir "${GPU_TRAIN_CACHE:-$REPO/runs/gpu_train_cache}" --json "$OUT/gpu_train.json" "$@" \
        2>&1 | tee "$OUT/gpu_train.log" | grep -v -e "^GPU_TRAIN_JSON" -e "it/s]" -e "Warning" -e "warnings.warn"
    status=$(( status | ${PIPESTATUS[0]} ))
fi

# 3b. A quick GPU check of the benchmark itself (tiny model, about a minute): the gpu-marked tests.
if [ "$STAGE" = check ]; then
    "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_train_script.py 2>&1 | tee "$OUT/check.log"
    status=$(( status | ${PIPESTATUS[0]} ))
fi

# 3c. Where a small critic's step goes (0.84 s on an H200 for 4 pairs of the 135M model, whose arithmetic takes
# milliseconds there): one step traced with torch.profiler, in gpu_profile.json.
if [ "$STAGE" = profile ]; then
    "$PYTHON" benchmarks/gpu_train.py --size smollm2 --trainer critic --mode lora-bf16 --seq-len 512 --micro-batch 4 \
        --grad-accum 1 --no-gradient-checkpointing --steps 5 --warmup-steps 2 --profile --in-process \
        --cache-dir "${GPU_TRAIN_CACHE:-$REPO/runs/gpu_train_cache}" --json "$OUT/gpu_profile.json" "$@" \
        2>&1 | tee "$OUT/gpu_profile.log" | grep -v -e "^GPU_TRAIN_JSON" -e "it/s]" -e "Warning" -e "warnings.warn"
    status=$(( status | ${PIPESTATUS[0]} ))
fi

# 4. Rollouts with vLLM (benchmarks/rollout.py --vllm), where vllm is installed.
if [ "$STAGE" = rollout ] || [ "$STAGE" = all ]; then
    if ! "$PYTHON" -c "import vllm" 2>/dev/null; then
        echo "rollout --vllm skipped: vllm is not installed on this machine and its wheel is too large to carry" \
            | tee "$OUT/rollout.log"
    elif [ ! -f benchmarks/rollout.py ]; then
        echo "rollout --vllm skipped: benchmarks/rollout.py is not in this checkout" | tee "$OUT/rollout.log"
    elif [ "$(remaining)" -lt 60 ]; then
        echo "rollout --vllm skipped: under 60 s of the ${BUDGET} s budget left" | tee "$OUT/rollout.log"
    else
        timeout "$(remaining)" "$PYTHON" benchmarks/rollout.py --vllm --json "$OUT/rollout.json" 2>&1 | tee "$OUT/rollout.log"
        status=$(( status | ${PIPESTATUS[0]} ))
    fi
fi

echo "gpu_bench: $STAGE finished in $(( $(date +%s) - START )) s (exit $status); results in $OUT"
exit $status
