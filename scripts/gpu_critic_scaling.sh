#!/usr/bin/env bash
# The credit study's data scaling on a lent GPU: the critic trained on 5x and 10x the study's
# trajectories (1,600 and 3,200 against runs/credit's 320), study_cpu's critic settings in bf16 LoRA, from the shipped
# warm start. The 3x critic (runs/credit_3x_gpu) was trained this way on an H200 in 249 s (benchmarks/RESULTS.md).
#
#   5x:  400 train tasks x 4 episodes (collect seed 0), all_pairs within each task's 4 episodes   -> runs/credit_5x
#   10x: that collection and one more of the same tasks (collect seed 1, runs/credit_10x_seed1): the pairs of each
#        group of 4 episodes, joined. all_pairs over 8 episodes would make 4.7x the pairs per trajectory of 1x-5x.
#
# A critic step took 0.84 s on an H200 (far above its arithmetic; `gpu_bench.sh profile` traces one), so 10x (~1,000
# steps) does not fit one 10-minute call: at DEADLINE seconds the training stops and its newest checkpoint (LoRA
# weights, Adam state, every 10 steps) comes back; `train-critic` with the same options goes on from it here (CPU).
#
#   bash scripts/gpu_e2e.sh --pack                         # here: the model and wheels, in parts (see gpu_e2e.sh)
#   bash scripts/gpu_e2e.sh --receive                      # there, one call per part but the last
#   bash scripts/gpu_critic_scaling.sh --collect-only      # anywhere: the collections and pairs, no training
#   bash scripts/gpu_critic_scaling.sh [10x] [5x]          # there, carrying the last part (default: 10x);
#                                                          # again at once (still warm): training goes on
#   bash scripts/gpu_critic_scaling.sh --unpack DIR        # here: DIR = the call's files_at; runs/credit_{5x,10x,...}
#                                                          # and the warm start they read, with the GPU's file times
#   bash scripts/gpu_critic_scaling.sh --finish 10x        # here: train-critic goes on from the checkpoint (CPU)
#   then: sweet-rl credit ... --credit.scaling 3x=runs/credit_3x_gpu 10x=runs/credit_10x   (RESULTS.md, credit)
#
# Tried on the CPU with TASKS=4 SAVE_STEPS=2 (collect, join, a deadline in mid-training, pack, unpack elsewhere,
# --finish going on from checkpoint-8); the unpacking is tests/test_gpu_critic_scaling_script.py.
#
# What comes back (at most 8 files of 16 MiB, 64 MiB in all): scaling.tgz.NN (the run folders without the model and
# the trajectories: markers, pairs, logs, the critic's adapter or newest checkpoint) and timeline.txt. DEADLINE
# (default 450 s from the start) leaves time to pack inside a 540-s call. One critic at a time fits what comes back
# (5x and 10x unfinished together would not).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE=${DEADLINE:-450}
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
RUN="--config study_cpu --bf16 true --dtype bfloat16 --max_train_tasks ${TASKS:-400}"  # TASKS: a smaller trial
# 4 pairs a step as on the CPU (2 x 2), in one micro-batch: the same mean, half the launches
TRAIN="--per_device_train_batch_size 4 --gradient_accumulation_steps 1 --save_steps ${SAVE_STEPS:-10}"
WARM=runs/credit_scaling_warm_start
RUNS="runs/credit_5x runs/credit_10x runs/credit_10x_seed1"   # 5x (collect seed 0), 10x (joined), seed 1's half

# A stage's fingerprint covers the files of the model it reads by name, size and modification time: the runs read
# their warm start as runs/credit_scaling_warm_start/warm_start/merged, so here that folder is a copy of the local
# warm start's model (checked byte for byte against the GPU's, by SHA-256) with the GPU files' times, and an
# unfinished critic goes on from its checkpoint instead of starting again.
manifest() {  # $1: write | restore
    "$PYTHON" - "$1" <<'PY'
import hashlib, json, os, shutil, sys
from pathlib import Path

merged = Path("runs/credit_scaling_warm_start/warm_start/merged")
listing = Path("runs/credit_scaling_logs/warm_start_files.json")

def sha256(path):
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

if sys.argv[1] == "write":
    files = {str(p.relative_to(merged)): [p.stat().st_size, p.stat().st_mtime_ns, sha256(p)]
             for p in sorted(merged.rglob("*")) if p.is_file()}
    listing.write_text(json.dumps(files, indent=1))
    sys.exit(0)
files = json.loads(listing.read_text())
local = Path("runs/credit/warm_start/merged")
for name, (size, _, digest) in files.items():
    if not (local / name).is_file() or sha256(local / name) != digest:
        sys.exit(f"error: {local / name} is not the file the GPU's warm start had ({name}, {size} bytes): "
                 "make runs/credit's warm start from the shipped adapter first (sweet-rl warm-start --config study_cpu)")
for name, (_, mtime_ns, _) in files.items():
    target = merged / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(local / name, target)
    os.utime(target, ns=(mtime_ns, mtime_ns))
print(f"{merged}: {len(files)} files, the same bytes as the GPU's, with its times")
PY
}

if [ "${1:-}" = "--unpack" ]; then
    [ -d "${2:-}" ] || { echo "usage: $0 --unpack DIR (the folder the GPU call's files came back to)" >&2; exit 2; }
    for here in $RUNS $WARM; do
        # runs made here (--collect-only on the CPU, say) would be mixed with the GPU's, and their warm start's times
        # changed under them: nothing is unpacked over them
        [ -e "$here" ] && { echo "error: $here exists here; move it aside (or remove it) before unpacking" >&2; exit 1; }
    done
    cat "$2"/scaling.tgz.* | tar -xzf - || { echo "error: the parts in $2 do not make a whole archive" >&2; exit 1; }
    manifest restore || exit 1
    for run in $RUNS; do
        [ -d "$run" ] && echo "$run: $(ls "$run" | tr '\n' ' ')"
    done
    exit 0
fi
if [ "${1:-}" = "--finish" ]; then
    run=runs/credit_${2:?usage: $0 --finish 5x|10x}
    exec env HF_HUB_OFFLINE=1 "$PYTHON" -P -m sweet_trl.cli train-critic $RUN $TRAIN --run_dir "$run"
fi

SCALES=("$@"); [ ${#SCALES[@]} -gt 0 ] || SCALES=(10x)
[ "${SCALES[0]}" = "--collect-only" ] && SCALES=()   # the data alone (e.g. on a CPU, for a GPU to train on later)
OUT=${OUT:-runs/gpu_critic_scaling_out}; LOGS=runs/credit_scaling_logs; mkdir -p "$OUT" $LOGS
bash scripts/gpu_e2e.sh --setup-only || exit 1
export PYTHONPATH="$(pwd):${GPU_E2E_SITE:-/tmp/gpu_e2e_site}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
S="$PYTHON -P -m sweet_trl.cli"
stage() {  # name, then the command's arguments: its log in $LOGS, one line in timeline.txt
    local name=$1 s=$(date +%s); shift
    $S "$@" >"$LOGS/$name.log" 2>&1
    echo "$name: rc $? in $(( $(date +%s) - s )) s, at $(( $(date +%s) - START )) s" | tee -a $LOGS/timeline.txt
}
stage warm_start warm-start $RUN --run_dir $WARM
for run in $RUNS; do
    mkdir -p $run; ln -sfn ../credit_scaling_warm_start/warm_start $run/warm_start
done
( stage collect_seed0 collect $RUN --run_dir runs/credit_5x &&
  stage pairs_seed0 critic-pairs $RUN --run_dir runs/credit_5x ) &
( stage collect_seed1 collect $RUN --run_dir runs/credit_10x_seed1 --collect_seed 1 &&
  stage pairs_seed1 critic-pairs $RUN --run_dir runs/credit_10x_seed1 ) &
wait
# 10x: both runs' episodes and pairs (the critic reads critic_pairs/pairs.jsonl; `show` and the credit study's
# value function read collect/trajectories.jsonl), under one marker per stage
mkdir -p runs/credit_10x/collect runs/credit_10x/critic_pairs
cat runs/credit_5x/critic_pairs/pairs.jsonl runs/credit_10x_seed1/critic_pairs/pairs.jsonl \
    >runs/credit_10x/critic_pairs/pairs.jsonl
cat runs/credit_5x/collect/trajectories.jsonl runs/credit_10x_seed1/collect/trajectories.jsonl \
    >runs/credit_10x/collect/trajectories.jsonl
"$PYTHON" - <<'PY' || exit 1
import json
from pathlib import Path

def marker(run, stage):
    return json.loads(Path(f"runs/{run}/{stage}/_COMPLETE.json").read_text())

for stage, counted in (("collect", "episodes"), ("critic_pairs", "pairs")):
    halves = [marker("credit_5x", stage), marker("credit_10x_seed1", stage)]
    joined = dict(halves[0])
    # the same tasks twice: their counts are the first half's; episodes, pairs and the like add up
    joined["counts"] = {key: value if key.startswith("tasks") else sum(h["counts"].get(key, 0) for h in halves)
                        for key, value in halves[0]["counts"].items()}
    joined.setdefault("info", {})["joined"] = {"runs": ["runs/credit_5x (collect seed 0)",
                                                        "runs/credit_10x_seed1 (collect seed 1)"],
                                               counted: [h["counts"].get(counted) for h in halves]}
    Path(f"runs/credit_10x/{stage}/_COMPLETE.json").write_text(json.dumps(joined, indent=2))
PY
trainers=()
for scale in "${SCALES[@]}"; do
    stage train_$scale train-critic $RUN $TRAIN --run_dir runs/credit_$scale &
    trainers+=($!)
done
running() { local pid; for pid in "${trainers[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
while [ $(( $(date +%s) - START )) -lt "$DEADLINE" ] && running; do sleep 5; done
# only this script's trainers (the children of its stage subshells), never another job's
for pid in "${trainers[@]}"; do pkill -INT -P "$pid"; done
for _ in 1 2 3 4 5; do running || break; sleep 2; done
for pid in "${trainers[@]}"; do pkill -KILL -P "$pid"; done
wait
# The run folders (their warm_start links too) but the model and the trajectories (their markers stay): a 10x
# checkpoint is ~60 MB, and what comes back is at most 64 MiB. The trainer keeps only its newest checkpoint.
manifest write
tar --exclude='*/merged' --exclude='*/warm_start/model' --exclude='*/trajectories.jsonl' -czf - $RUNS \
    $WARM $LOGS | split -b 15M -d - "$OUT/scaling.tgz."
echo "packed at $(( $(date +%s) - START )) s: $(ls "$OUT" | tr '\n' ' ')" | tee -a $LOGS/timeline.txt
cp $LOGS/timeline.txt "$OUT/"
