"""The whole SWEET-RL stage chain on one device, measured: the embedded model (SmolLM2-135M-Instruct) through every
stage, with each stage's seconds and peak memory and the final evaluation figures in one JSON file.

    python benchmarks/gpu_e2e.py                     # CUDA when torch sees a GPU, else the CPU (CPU-sized settings)
    python benchmarks/gpu_e2e.py --device cuda       # refuses to start without a CUDA device
    python benchmarks/gpu_e2e.py --device cpu --out /tmp/e2e
    bash scripts/gpu_e2e.sh                          # the same, after setting up a bare GPU machine (wheels, model)

The chain, in one run folder (``sweet_trl.pipeline``'s stages, run one by one in this process):

    warm_start (the shipped adapter, merged) -> collect -> critic_pairs -> train_critic -> sample_candidates -> rank
      -> policy_pairs -> train_policy (turn-level DPO)
      -> train_policy_best (best-of-N fine-tuning on the critic's top answer)
      -> evaluate zero_shot, sweet, sweet_best

Precision: on CUDA, QLoRA (4-bit NF4 base, bf16 compute, LoRA rank 16) where bitsandbytes runs a 4-bit layer on the
GPU, bf16 LoRA otherwise, generation in bf16; on a CPU, LoRA in float32 (``--mode`` chooses otherwise). The settings
are sized per device (``SIZES``): on an H100/H200 the chain should take a few minutes, much of it CPU-side (the
simulated human and the grader); on 2 CPU cores the CPU sizes take 2-4 minutes (float32; more under load) and check
the code path, not the figures.

The JSON (``<out>/gpu_e2e_<device tag>.json``, rewritten after every stage, so a run stopped at a time limit still
leaves what it measured): the device, the library versions, the precision mode, the settings, per stage its wall
seconds (model loading included), the seconds its ``_COMPLETE.json`` marker records, the peak GPU memory
(``torch.cuda.max_memory_allocated``/``max_memory_reserved`` over the stage) where CUDA is used, and the peak
resident memory of this process during the stage (sampled every 0.1 s); then the final figures: success rate and
tests passed (%) of each evaluated policy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO_ROOT))

MIB = 1024**2
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "gpu"
TRAINED_POLICIES = {"sweet": "train_policy", "sweet_best": "train_policy_best"}
MODES = ("qlora", "lora-bf16", "lora-fp32")

# What each device runs. The GPU sizes are the demo's collection (20 train tasks, 4 episodes each) with fewer
# candidate states and one evaluation episode per test task, so that the chain fits in about 3 minutes of an H100 and
# leaves room in a 6-minute slot for setup and the unexpected. The CPU sizes run every trainer for one optimizer step
# and sample little: enough to run each stage's real code on real data, in 2-4 minutes on 2 cores (float32), where
# prefilling the 500-token prompts dominates.
SIZES: dict[str, dict[str, Any]] = {
    "cuda": {
        "max_train_tasks": 20, "episodes_per_task": 4, "max_eval_tasks": 80, "eval_episodes_per_task": 1,
        "num_candidates": 8, "max_states": 64, "generation_batch_size": 128, "batch_size": 4, "max_steps": -1,
        "critic_epochs": 2.0, "policy_epochs": 1.0, "best_epochs": 2.0, "report_trajectories": 6,
    },
    "cpu": {
        "max_train_tasks": 3, "episodes_per_task": 4, "max_eval_tasks": 4, "eval_episodes_per_task": 1,
        "num_candidates": 3, "max_states": 6, "generation_batch_size": 32, "batch_size": 1, "max_steps": 1,
        "critic_epochs": 1.0, "policy_epochs": 1.0, "best_epochs": 1.0, "report_trajectories": 2,
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="cuda: fail unless torch sees a CUDA device; cpu: CPU sizes, CUDA hidden (default: auto)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(DEFAULT_OUT),
                        help="folder of the results JSON (default: $OUT if set, else benchmarks/results/gpu)")
    parser.add_argument("--run-dir", default=None, help="the pipeline's run folder (default: runs/gpu_e2e_<tag>)")
    parser.add_argument("--mode", choices=("auto", *MODES), default="auto",
                        help="trainers' precision: auto is qlora on CUDA where bitsandbytes works there, else "
                             "lora-bf16; lora-fp32 on a CPU")
    parser.add_argument("--policies", nargs="+", choices=sorted(TRAINED_POLICIES), default=sorted(TRAINED_POLICIES),
                        help="trained policies: sweet (turn-level DPO), sweet_best (best-of-N fine-tuning)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the run folder: stages complete there are skipped (default: start afresh)")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------------------------
# The device, the libraries, the precision
# ------------------------------------------------------------------------------------------------------------------

class SetupError(RuntimeError):
    """The device or precision asked for is not available here (exit status 2, one line on stderr)."""


def choose_device(requested: str) -> str:
    """``cuda`` or ``cpu``; ``--device cuda`` without a usable CUDA device is an error that says why."""
    import torch

    if requested == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise SetupError(f"--device cuda, but torch {torch.__version__} ({build}) sees no CUDA "
                         f"device (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                         f"run with --device cpu for the CPU-sized chain")
    return "cuda" if available else "cpu"


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    model = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), platform.processor() or platform.machine())
    return f"CPU: {model} ({os.cpu_count()} cores)"


def device_tag(name: str) -> str:
    """A short file-name tag of a device: its model word (``NVIDIA H200`` -> ``h200``, ``NVIDIA A100-SXM4-80GB`` ->
    ``a100``, ``NVIDIA GeForce RTX 4090`` -> ``rtx4090``), or ``cpu``."""
    if name.startswith("CPU"):
        return "cpu"
    words = [w for w in re.split(r"[\s_-]+", name) if w.lower() not in ("nvidia", "geforce", "tesla", "quadro")]
    for index, word in enumerate(words):
        if any(c.isdigit() for c in word):
            if word.isdigit() and index and words[index - 1].isalpha():  # RTX 4090
                word = words[index - 1] + word
            return re.sub(r"[^a-z0-9]+", "", word.lower())
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40] or "gpu"


def versions() -> dict[str, str | None]:
    from importlib import metadata

    import torch

    out: dict[str, str | None] = {"python": platform.python_version(), "torch_cuda": torch.version.cuda}
    for name in ("torch", "transformers", "trl", "peft", "bitsandbytes", "accelerate", "datasets", "gymnasium"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def bitsandbytes_runs_on_cuda() -> tuple[bool, str]:
    """Whether a 4-bit bitsandbytes layer runs forward on the GPU here (an import alone does not tell: a build
    without this CUDA release's library imports and fails at the first 4-bit product)."""
    try:
        import bitsandbytes as bnb
        import torch

        layer = bnb.nn.Linear4bit(64, 64, compute_dtype=torch.bfloat16, quant_type="nf4").to("cuda")
        out = layer(torch.ones(2, 64, dtype=torch.bfloat16, device="cuda"))
        torch.cuda.synchronize()
        if not torch.isfinite(out).all():
            return False, "a 4-bit layer gave non-finite output"
        return True, f"bitsandbytes {bnb.__version__}: a 4-bit layer ran on the GPU"
    except Exception as err:  # noqa: BLE001 (any failure means: no QLoRA here, and the reason goes in the JSON)
        return False, f"{type(err).__name__}: {err}".splitlines()[0][:300]


def choose_mode(requested: str, device: str) -> tuple[str, str]:
    if device == "cuda":
        if requested == "lora-fp32":
            return requested, "asked for"
        works, why = bitsandbytes_runs_on_cuda()
        if requested == "qlora":
            if not works:
                raise SetupError(f"--mode qlora, but bitsandbytes cannot run 4-bit on this GPU: {why}")
            return "qlora", why
        if requested == "auto":
            return ("qlora", why) if works else ("lora-bf16", f"no QLoRA: {why}")
        return requested, "asked for"
    if requested == "auto":
        return "lora-fp32", "CPU: float32 (bf16 products are emulated on most CPUs)"
    return requested, "asked for"


# ------------------------------------------------------------------------------------------------------------------
# The run's configuration
# ------------------------------------------------------------------------------------------------------------------

def run_config(device: str, mode: str, run_dir: Path) -> dict[str, Any]:
    """demo_cpu (procedural tasks, the shipped warm start, two-turn episodes, forced answers) at this device's sizes
    and precision, with every stage of the chain in it."""
    import yaml

    from sweet_trl.configs import config_path

    size = SIZES[device]
    config = yaml.safe_load(config_path("demo_cpu").read_text(encoding="utf-8"))
    config.pop("study", None)
    half = mode in ("qlora", "lora-bf16")
    config.update({
        "run_dir": str(run_dir),
        "max_train_tasks": size["max_train_tasks"],
        "max_eval_tasks": size["max_eval_tasks"],
        "generation_batch_size": size["generation_batch_size"],
        # one precision for the trainers (bf16 autocast, 4-bit compute dtype) and for generation's weights
        "bf16": half,
        "dtype": "bfloat16" if half else "float32",
        "load_in_4bit": mode == "qlora",
        "bnb_4bit_quant_type": "nf4",
        "use_bnb_nested_quant": mode == "qlora",
        "per_device_train_batch_size": size["batch_size"],
        "gradient_accumulation_steps": 1,
        "max_steps": size["max_steps"],
        "logging_steps": 1,  # every step logged: the stages' final metrics exist after the fewest steps
        "save_strategy": "no",  # a chain measured afresh: no resume checkpoints to write
    })
    config["collect"] = {**config.get("collect", {}), "episodes_per_task": size["episodes_per_task"]}
    config["train_critic"] = {**config.get("train_critic", {}), "num_train_epochs": size["critic_epochs"]}
    # candidates at answer turns (where the tests are decided), the states best-of-N learns from: drawn from every
    # turn, a small draw could hold none of them, and DPO learns from the same states
    config["sample_candidates"] = {**config.get("sample_candidates", {}), "num_candidates": size["num_candidates"],
                                   "state_fraction": 1.0, "max_states": size["max_states"],
                                   "state_turns": config["train_policy_best"]["turns"]}
    # a short critic can score candidates close together; any gap makes a pair, so DPO always has data
    config["policy_pairs"] = {**config.get("policy_pairs", {}), "min_score_gap": 0.0}
    config["train_policy"] = {**config.get("train_policy", {}), "num_train_epochs": size["policy_epochs"]}
    config["train_policy_best"] = {**config.get("train_policy_best", {}), "num_train_epochs": size["best_epochs"]}
    config["rank"] = {**config.get("rank", {}), "report_trajectories": size["report_trajectories"]}
    config["evaluate"] = {**config.get("evaluate", {}), "eval_episodes_per_task": size["eval_episodes_per_task"]}
    return config


def chain(policies: list[str]) -> list[tuple[str, str, list[str]]]:
    """``(label, stage, extra options)`` in order: every stage, then the evaluation of each policy."""
    steps = [(name, name, []) for name in ("warm_start", "collect", "critic_pairs", "train_critic",
                                            "sample_candidates", "rank")]
    if "sweet" in policies:
        steps += [("policy_pairs", "policy_pairs", []), ("train_policy", "train_policy", [])]
    if "sweet_best" in policies:
        steps += [("train_policy_best", "train_policy_best", [])]
    for policy in ("zero_shot", *sorted(policies)):
        steps.append((f"evaluate/{policy}", "evaluate", ["--policy", policy]))
    return steps


# ------------------------------------------------------------------------------------------------------------------
# Measuring a stage
# ------------------------------------------------------------------------------------------------------------------

def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class PeakRSS:
    """The peak resident memory of this process over a stretch of time, sampled every ``interval`` seconds
    (``ru_maxrss`` only grows over the whole process, so it cannot tell one stage from the ones before it)."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.peak = interval, 0
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        fields = _read("/proc/self/statm").split()
        if len(fields) > 1:
            return int(fields[1]) * self._page
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no /proc: the process-wide peak

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self.peak = self._rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def run_one(label: str, stage: str, options: list[str], config_file: Path, device: str) -> dict[str, Any]:
    """Run one stage in this process (skipped when complete), measured."""
    import torch

    from sweet_trl.pipeline import run_stage_from_config

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    with PeakRSS() as rss:
        marker = run_stage_from_config(stage, str(config_file), options)
        if device == "cuda":
            torch.cuda.synchronize()
    record: dict[str, Any] = {
        "stage": label,
        "seconds": round(time.perf_counter() - began, 2),
        "marker_seconds": round(float(marker["seconds"]), 2),
        "rss_peak_mib": round(rss.peak / MIB, 1),
        "marker_peak_rss_mib": marker.get("info", {}).get("peak_rss_mb"),  # this process's peak so far
    }
    if device == "cuda":
        record["gpu_peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 1)
        record["gpu_peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / MIB, 1)
    record["counts"] = marker.get("counts", {})
    record["metrics"] = {k: v for k, v in marker.get("metrics", {}).items() if isinstance(v, (int, float))}
    record["dir"] = marker["dir"]
    return record


def final_figures(run_dir: Path, stages: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate (0-1) and tests passed (%) of each evaluated policy, with 95% intervals over tasks."""
    from sweet_trl.comparison import intervals, load_evaluation

    figures: dict[str, Any] = {}
    for record in stages:
        if not record["stage"].startswith("evaluate/"):
            continue
        policy = record["stage"].split("/", 1)[1]
        summary = intervals(load_evaluation(run_dir / record["dir"]))
        success, tests_passed = summary["success"], summary["tests_passed"]  # [mean, low, high], in percent
        figures[policy] = {
            "success_rate": success[0] / 100, "success_ci": [success[1] / 100, success[2] / 100],
            "tests_passed": tests_passed[0], "tests_passed_ci": tests_passed[1:],
            "episodes": summary["episodes"], "tasks": summary["tasks"],
            "answered_rate": record["metrics"].get("answered_rate"), "mean_turns": record["metrics"].get("mean_turns"),
        }
    return figures


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def write_json(path: Path, report: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # every stage then sees the CPU alone, as on a machine without GPU
    started = time.perf_counter()
    try:
        device = choose_device(args.device)
        mode, mode_reason = choose_mode(args.mode, device)
    except SetupError as err:
        print(f"gpu_e2e: error: {err}", file=sys.stderr)
        return 2
    name = device_name(device)
    tag = device_tag(name)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"gpu_e2e_{tag}.json"
    run_dir = Path(args.run_dir or REPO_ROOT / "runs" / f"gpu_e2e_{tag}")
    if run_dir.exists() and not args.resume:
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)

    from sweet_trl.generation import embedded_model_path
    from sweet_trl.generation.embedded import EmbeddedModelMissing

    converting = time.perf_counter()
    try:
        model_path = embedded_model_path()  # the first use converts the GGUF file: timed apart from the stages
    except EmbeddedModelMissing as err:
        print(f"gpu_e2e: error: {err} (on a machine without network: bash scripts/gpu_e2e.sh --pack)", file=sys.stderr)
        return 2
    conversion_seconds = time.perf_counter() - converting

    import yaml

    config = run_config(device, mode, run_dir)
    config_file = run_dir / "gpu_e2e.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    report: dict[str, Any] = {
        "status": "running",
        "device": name,
        "device_kind": device,
        "tag": tag,
        "versions": versions(),
        "mode": mode,
        "mode_reason": mode_reason,
        "command": shlex.join([sys.executable, *sys.argv]),
        "git": git_commit(),
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_dir": str(run_dir),
        "model": model_path,
        "model_conversion_seconds": round(conversion_seconds, 2),
        "settings": {**SIZES[device], "policies": args.policies},
        "config": config,
        "stages": [],
        "final": {},
    }
    if device == "cuda":
        import torch

        report["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 1024**3, 1)
    write_json(json_path, report)
    print(f"gpu_e2e: {name}, {mode} ({mode_reason}); results: {json_path}", flush=True)

    status, label = 0, None
    try:
        for label, stage, options in chain(args.policies):
            print(f"\n=== gpu_e2e: {label} ===", flush=True)
            record = run_one(label, stage, options, config_file, device)
            report["stages"].append(record)
            report["stage_seconds_total"] = round(sum(r["seconds"] for r in report["stages"]), 2)
            write_json(json_path, report)
        label = "final figures"
        report["final"] = final_figures(run_dir, report["stages"])
        report["status"] = "ok"
    except BaseException as err:  # noqa: BLE001 (a failed or stopped stage: the JSON says which and why)
        report["status"] = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        report["failed_stage"] = label
        report["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()[-2000:]
        status = 130 if isinstance(err, KeyboardInterrupt) else 1
        traceback.print_exc()
    report["total_seconds"] = round(time.perf_counter() - started, 2)
    write_json(json_path, report)

    print(f"\ngpu_e2e: {report['status']} in {report['total_seconds']:.0f} s on {name} ({mode})")
    for record in report["stages"]:
        memory = (f"GPU peak {record['gpu_peak_allocated_mib']:.0f} MiB" if "gpu_peak_allocated_mib" in record
                  else f"RSS peak {record['rss_peak_mib']:.0f} MiB")
        print(f"  {record['stage']:24s} {record['seconds']:8.1f} s   {memory}")
    for policy, figures in report["final"].items():
        print(f"  {policy:24s} success {figures['success_rate']:.3f}, tests passed {figures['tests_passed']:.1f}% "
              f"({figures['episodes']} episodes)")
    print(f"gpu_e2e: results in {json_path}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
