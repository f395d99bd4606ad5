"""The SWEET-RL pipeline as resumable stages; each reads and writes files under ``<run_dir>/<stage>/``.

    collect ─> critic_pairs ─> train_critic ─┐
       └──────> sample_candidates ─────────> rank ─> policy_pairs ─> train_policy ─> evaluate ─> report

A stage is complete when its folder holds ``_COMPLETE.json`` (written atomically, after the outputs): the
counts, metrics, timings, output files and a fingerprint of what it computes from: the run options it reads
(``Stage.run_fields``), its own options (a file or folder named there by its files' sizes and times), and which
run of each upstream stage it read. Running a complete stage again prints ``skipped``; a change to any of these
(a re-run upstream stage included) runs it again, and a change to anything else leaves it and its files alone.
An interrupted stage resumes where it can (the rollout collector appends to its JSONL).

    sweet-rl pipeline --config examples/configs/demo_cpu.yaml        # every stage
    sweet-rl collect  --config examples/configs/demo_cpu.yaml        # one stage

From Python::

    from sweet_trl.pipeline import run_stage_from_config, run_pipeline
    run_pipeline("examples/configs/demo_cpu.yaml")
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweet_trl.pipeline_config import (
    PIPELINE_SECTION,
    CandidateArguments,
    CollectArguments,
    ConfigError,
    CriticPairsArguments,
    EvaluateArguments,
    GenerationArguments,
    PipelineArguments,
    PolicyPairsArguments,
    RankArguments,
    ReportArguments,
    RunArguments,
    asdict_public,
    check_config_keys,
    cli_keys,
    filter_cli_args,
    known_options,
    load_yaml,
    make_parser,
    parse_stage_args,
    split_overrides,
)

MARKER = "_COMPLETE.json"
RUNNING = "_RUNNING.json"
# Options that change where or how loudly a stage runs, not what it computes.
NOT_FINGERPRINTED = {
    "run_dir", "force", "push_to_hub", "hub_prefix", "hub_model_id", "hub_token", "hub_strategy", "hub_private_repo",
    "hub_always_push", "hub_revision", "output_dir", "logging_dir", "report_to", "disable_tqdm", "logging_steps",
    "logging_first_step", "log_level", "log_level_replica", "local_rank", "num_workers", "generation_batch_size",
    "scoring_batch_size", "report_examples", "report_path", "dataloader_num_workers", "save_steps", "save_strategy",
    "save_total_limit", "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
}


class StageError(RuntimeError):
    """A stage cannot run (missing input, bad data); the message says what to do."""


@dataclass
class StageResult:
    """What a stage reports: counts of what it made, metrics, and its output files (relative to its folder)."""

    counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class RunView:
    """The run's shared arguments as one stage sees them: only the fields it declared (``Stage.run_fields``), which
    are the ones its fingerprint covers; reading another one is a bug in the stage's declaration, so it raises."""

    # Where and how loudly a stage runs, not what it computes: readable by every stage, never fingerprinted.
    ALWAYS = frozenset({"run_dir", "hub_prefix", "force"})
    DERIVED = {"kind": ("env_id",), "critic_base": ("critic_model", "policy_model")}

    def __init__(self, run: RunArguments, fields: Sequence[str]):
        self._run, self._fields = run, frozenset(fields)

    def __getattr__(self, name: str) -> Any:
        needed = set(self.DERIVED.get(name, (name,))) - self.ALWAYS
        if not needed <= self._fields:
            raise AttributeError(f"run field(s) {sorted(needed - self._fields)} not in this stage's run_fields "
                                 "(add them there, so that its fingerprint covers them)")
        return getattr(self._run, name)


@dataclass
class StageContext:
    """Handed to a stage: its folder, the run's shared arguments it declared, its inputs, and a progress logger."""

    stage: str
    dir: Path
    run: RunView
    inputs: dict[str, dict[str, Any]]
    started: float = field(default_factory=time.perf_counter)
    stream: Any = None

    @property
    def run_dir(self) -> Path:
        return Path(self.run.run_dir)

    def log(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{self.stage}] {message} ({elapsed:.0f}s)", file=self.stream or sys.stdout, flush=True)

    def input_path(self, stage: str, output: str) -> Path:
        """A file written by an upstream stage (as named in its marker's ``outputs``)."""
        marker = self.inputs.get(stage)
        if marker is None:
            raise StageError(f"stage {self.stage} did not declare {stage} as an input")
        if output not in marker["outputs"]:
            raise StageError(f"stage {stage} has no output {output!r} (it has {sorted(marker['outputs'])})")
        return self.run_dir / marker["dir"] / marker["outputs"][output]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its name, the dataclasses it parses, its inputs and what it does."""

    name: str
    help: str
    arg_types: Callable[[], tuple[type, ...]]  # besides RunArguments; a function so that trl loads lazily
    run: Callable[..., StageResult]
    run_fields: tuple[str, ...] = ()  # the RunArguments it reads (env_id for all): what its fingerprint covers
    inputs: Callable[..., list[str]] = lambda *args: []
    folder: Callable[..., str] | None = None
    push: Callable[..., dict[str, str]] | None = None

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    def dataclass_types(self) -> tuple[type, ...]:
        return (RunArguments, *self.arg_types())

    def dir_name(self, args: Sequence[Any]) -> str:
        return self.folder(*args) if self.folder else self.name


# --------------------------------------------------------------------------------------------------------------
# Markers and fingerprints
# --------------------------------------------------------------------------------------------------------------

def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)  # key order kept: a stage lists its main product first
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_marker(stage_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((stage_dir / MARKER).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


MAX_FINGERPRINTED_FILES = 10_000


def _path_identity(value: str) -> Any:
    """An option naming a local file or folder (trajectories, tasks, a model) stands for its contents: the name
    with each file's size and modification time, so that a rewritten file makes the stage run again."""
    if value in ("", ".", os.sep):
        return value
    path = Path(value).expanduser()
    try:
        if path.is_file():
            stat = path.stat()
            return [value, stat.st_size, stat.st_mtime_ns]
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())[:MAX_FINGERPRINTED_FILES]
            return [value, [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]]
    except OSError:
        pass
    return value


def _fingerprint_view(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _fingerprint_view(v) for k, v in sorted(value.items()) if k not in NOT_FINGERPRINTED}
    if isinstance(value, (list, tuple)):
        return [_fingerprint_view(v) for v in value]
    if isinstance(value, str):
        return _path_identity(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return str(value)


def fingerprint(stage: Stage, args: Sequence[Any], inputs: dict[str, dict[str, Any]]) -> str:
    """A hash of what determines a stage's outputs: the run fields it reads, its own options (files named there
    by their contents' sizes and times), and which run of each upstream stage it reads (re-running one, even
    with ``--force`` and the same options, makes the stages after it run again)."""
    run = asdict_public(args[0])
    view = {
        "stage": stage.name,
        "run": _fingerprint_view({k: run[k] for k in ("env_id", *stage.run_fields)}),
        "args": [_fingerprint_view(asdict_public(a)) for a in args[1:]],
        "inputs": {name: [marker["fingerprint"], marker.get("run_id")] for name, marker in sorted(inputs.items())},
    }
    return hashlib.sha256(json.dumps(view, sort_keys=True, default=str).encode()).hexdigest()[:16]


def clear_folder(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("colbench-gym", "torch", "transformers", "trl", "peft", "datasets"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


# --------------------------------------------------------------------------------------------------------------
# Running one stage
# --------------------------------------------------------------------------------------------------------------

def world_size() -> int:
    """Processes of an ``accelerate launch`` / ``torchrun`` run (1 otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def run_stage(stage: Stage, args: Sequence[Any], stream: Any = None) -> dict[str, Any]:
    """Run ``stage`` with its parsed dataclasses (``RunArguments`` first) unless it is complete; return its marker.

    Under ``accelerate launch`` (training stages only) every process decides alike from the same files and
    trains; the main process alone clears, marks and pushes.
    """
    run = args[0]
    out = stream or sys.stdout
    run_dir = Path(run.run_dir)
    folder = stage.dir_name(args[1:])
    stage_dir = run_dir / folder
    label = folder.replace(os.sep, "/")
    main = is_main_process()
    if world_size() > 1 and stage.name not in TRAINING_STAGES:
        raise ConfigError(f"stage {stage.name} runs in one process; launch only the training stages "
                          f"{list(TRAINING_STAGES)} with accelerate")

    check_push_target(stage, args)
    inputs: dict[str, dict[str, Any]] = {}
    for name in stage.inputs(*args[1:]):
        marker = read_marker(run_dir / name)
        if marker is None:
            command = name.split("/")[0].replace("_", "-")
            raise StageError(
                f"stage {label} needs the output of {name}, which is not complete in {run_dir}: "
                f"run `sweet-rl {command}` with the same --config first"
            )
        inputs[name] = marker

    def print_(message: str) -> None:
        if main:
            print(f"[{label}] {message}", file=out, flush=True)

    digest = fingerprint(stage, args, inputs)
    marker = read_marker(stage_dir)
    if marker is not None and marker.get("fingerprint") == digest and not run.force:
        print_(f"skipped: complete since {marker['finished_at']} ({marker['seconds']:.1f}s), "
               f"{_summary(marker)}")
        if main:
            _push_if_asked(stage, args, stage_dir, marker, print_)
        return marker
    if main:
        if marker is not None:
            print_("running again: " + ("--force" if run.force else "its configuration or inputs changed"))
            clear_folder(stage_dir)
        else:
            running = _read_json(stage_dir / RUNNING)
            if running is not None and running.get("fingerprint") == digest:
                print_("resuming an interrupted run")
            elif stage_dir.exists() and any(stage_dir.iterdir()):
                print_("clearing an interrupted run with another configuration")
                clear_folder(stage_dir)
        stage_dir.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if main:
        write_json_atomic(stage_dir / RUNNING, {"fingerprint": digest, "started_at": started_at})
    _barrier()

    context = StageContext(stage=label, dir=stage_dir, run=RunView(run, ("env_id", *stage.run_fields)),
                           inputs=inputs, stream=out if main else io.StringIO())
    print_("running")
    began = time.perf_counter()
    result = stage.run(context, *args[1:])
    seconds = time.perf_counter() - began
    _barrier()
    missing = [name for name, rel in result.outputs.items() if not (stage_dir / rel).exists()]
    if missing:
        raise StageError(f"stage {label} reported outputs it did not write: {missing}")

    marker = {
        "stage": stage.name,
        "dir": folder,
        "fingerprint": digest,
        "run_id": uuid.uuid4().hex,  # which run of the stage this is: the stages after it read it
        "started_at": started_at,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": seconds,
        "counts": result.counts,
        "metrics": result.metrics,
        "outputs": result.outputs,
        "info": {**result.info, "peak_rss_mb": _peak_rss_mb()},
        "inputs": {name: m["fingerprint"] for name, m in inputs.items()},
        "config": [asdict_public(a) for a in args],
        "versions": _versions(),
    }
    if main:
        write_json_atomic(stage_dir / MARKER, marker)
        (stage_dir / RUNNING).unlink(missing_ok=True)
        print_(f"done in {seconds:.1f}s: {_summary(marker)}")
        _push_if_asked(stage, args, stage_dir, marker, print_)
    _barrier()
    return marker


def _peak_rss_mb() -> float | None:
    """Peak resident memory of this process so far (the stages of one pipeline share a process)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _summary(marker: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in marker.get("counts", {}).items()]
    parts += [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in marker.get("metrics", {}).items()]
    return ", ".join(parts) or "no counts"


def check_push_target(stage: Stage, args: Sequence[Any]) -> None:
    """Before any work: a push that is asked for needs somewhere to go. Datasets go to ``<hub_prefix>-<kind>``; a
    trained model to its trainer configuration's ``hub_model_id`` if set, else ``<hub_prefix>-<role>``."""
    if stage.push is None or not any(getattr(a, "push_to_hub", False) for a in args[1:]):
        return
    if stage.name in MODEL_EXPORTS and any(getattr(a, "hub_model_id", None) for a in args[1:]):
        return
    prefix = args[0].hub_prefix
    if not prefix or "/" not in prefix:
        raise ConfigError(f"{stage.name}: --push_to_hub needs --hub_prefix as '<user or org>/<name>' (got {prefix!r}):"
                          " the repositories are named '<hub_prefix>-<kind>'"
                          + (", or set --hub_model_id" if stage.name in MODEL_EXPORTS else ""))


def _push_if_asked(stage: Stage, args: Sequence[Any], stage_dir: Path, marker: dict[str, Any], print_) -> None:
    """Push a complete stage's artefacts when asked and not yet pushed (a failed push keeps the stage complete)."""
    if stage.push is None or not any(getattr(a, "push_to_hub", False) for a in args[1:]):
        return
    pushed = _read_json(stage_dir / "_PUSHED.json") or {}
    if pushed.get("fingerprint") == marker["fingerprint"]:
        print_(f"already pushed: {', '.join(pushed['repos'].values())}")
        return
    repos = stage.push(stage_dir, marker, *args)
    write_json_atomic(stage_dir / "_PUSHED.json", {"fingerprint": marker["fingerprint"], "repos": repos})
    print_(f"pushed to the Hub: {', '.join(repos.values())}")


# --------------------------------------------------------------------------------------------------------------
# Shared helpers of the stages
# --------------------------------------------------------------------------------------------------------------

def resolve_model(name: str) -> str:
    """A model path or Hub id; ``"embedded"`` becomes the cached safetensors folder of SmolLM2-135M-Instruct."""
    from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES

    if name.lower() in EMBEDDED_ALIASES:
        from sweet_trl.generation import embedded_model_path

        return str(embedded_model_path())
    looks_local = name.startswith(("/", ".", "~")) or name.count("/") > 1  # a Hub id is "org/name"
    if looks_local and not Path(name).expanduser().exists():
        raise StageError(f"no model at {name}: a local path that does not exist (a Hub id looks like 'org/name')")
    return name


def load_tasks(run: RunArguments, split: str) -> list[Any]:
    """The training (``"train"``) or evaluation (``"eval"``) tasks of the run, cut to ``max_*_tasks``."""
    from colbench_gym.tasks import resolve_tasks

    source, limit = (run.train_tasks, run.max_train_tasks) if split == "train" else (run.eval_tasks, run.max_eval_tasks)
    tasks = resolve_tasks(source, run.kind)
    return tasks[:limit] if limit else tasks


def make_simulator(run: RunArguments) -> Any:
    """``None`` for the environment's offline simulator, else an OpenAI-compatible simulated human."""
    if run.simulator == "offline":
        return None
    from colbench_gym.simulators.openai_compat import OpenAISimulator

    base_url = run.simulator_base_url or os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        raise StageError(f"simulator {run.simulator!r} needs simulator_base_url or OPENAI_BASE_URL")
    return OpenAISimulator(base_url, model=run.simulator.removeprefix("openai:"))


def load_causal_lm(path: str, dtype: str = "auto") -> tuple[Any, Any]:
    """A model and its tokenizer from a folder or Hub id; a LoRA adapter folder is merged into its base."""
    import torch
    import transformers

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    if not torch.cuda.is_available() and torch_dtype == "auto":
        torch_dtype = torch.float32  # half precision is slow on CPU
    if (Path(path) / "adapter_config.json").exists():
        import peft

        model = peft.AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch_dtype).merge_and_unload()
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    return model, transformers.AutoTokenizer.from_pretrained(path)


def make_backend(gen: GenerationArguments, model: str, name: str, workdir: Path | None = None,
                 run: RunArguments | None = None) -> Any:
    """The generation backend of a policy: a local model (merged if it is an adapter), vLLM, or a server."""
    if gen.backend == "openai":
        from sweet_trl.generation import OpenAIBackend

        if gen.force_answer_on_last_turn:
            raise ConfigError("force_answer_on_last_turn needs a local backend (transformers or vllm)")
        base_url = gen.policy_base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise StageError("backend 'openai' needs policy_base_url or OPENAI_BASE_URL")
        return OpenAIBackend(base_url, model=model, concurrency=gen.generation_batch_size, name=name)
    path = resolve_model(model)
    if gen.backend == "vllm":
        from sweet_trl.generation import VLLMBackend

        if (Path(path) / "adapter_config.json").exists():
            merged = (workdir or Path(path)) / "merged_for_vllm"
            if not (merged / "config.json").exists():
                model_obj, tokenizer = load_causal_lm(path)
                model_obj.save_pretrained(merged)
                tokenizer.save_pretrained(merged)
            path = str(merged)
        backend = VLLMBackend(path, name=name, dtype=gen.dtype, gpu_memory_utilization=gen.gpu_memory_utilization,
                              max_prompt_tokens=gen.max_prompt_tokens)
    else:
        from sweet_trl.generation import TransformersBackend

        model_obj, tokenizer = load_causal_lm(path, gen.dtype)
        backend = TransformersBackend(model_obj, tokenizer, max_batch_size=max(gen.generation_batch_size, 1),
                                      name=name, max_prompt_tokens=gen.max_prompt_tokens)
    if gen.force_answer_on_last_turn:
        run = run or RunArguments()
        return AnswerForcing(backend, run.max_turns, "python" if run.kind == "backend" else "html")
    return backend


class AnswerForcing:
    """At the last allowed turn of an episode, the policy's reply starts with the answer marker.

    The marker and an opened code block are appended to the prompt after the assistant header (through the
    backend's chat template, so the model continues from them) and put back in front of the generated text.
    """

    def __init__(self, backend: Any, max_turns: int, language: str):
        from colbench_gym.envs.dialogue import ANSWER_MARKER

        self.backend, self.max_turns = backend, max_turns
        self.name = backend.name
        self.prefix = f"{ANSWER_MARKER}\n```{language}\n"
        template = backend.chat_template or backend.tokenizer.chat_template
        turns = "(messages | selectattr('role', 'equalto', 'assistant') | list | length)"
        backend.chat_template = (template + "{% if add_generation_prompt and " + turns + f" >= {max_turns - 1} %}}"
                                 + self.prefix + "{% endif %}")

    def is_last_turn(self, history: Sequence[dict[str, Any]]) -> bool:
        return sum(m["role"] == "assistant" for m in history) >= self.max_turns - 1

    def generate(self, histories, n=1, sampling=None, seeds=None):
        outputs = self.backend.generate(histories, n=n, sampling=sampling, seeds=seeds)
        for history, samples in zip(histories, outputs):
            if self.is_last_turn(history):
                for generation in samples:
                    if generation.ok:
                        generation.text = self.prefix + generation.text
        return outputs


def release() -> None:
    """Free the memory of models the caller has just dropped, before the next one is loaded."""
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def sampling_params(gen: GenerationArguments, temperature: float | None = None) -> Any:
    from sweet_trl.generation import SamplingParams

    return SamplingParams(temperature=gen.temperature if temperature is None else temperature, top_p=gen.top_p,
                          max_new_tokens=gen.max_new_tokens)


class ProgressBackend:
    """Wraps a backend to log progress of long generation loops (candidates per turn state)."""

    def __init__(self, backend: Any, ctx: StageContext, total: int, unit: str):
        self.backend, self.ctx, self.total, self.unit = backend, ctx, total, unit
        self.name = getattr(backend, "name", type(backend).__name__)
        self.done = 0

    def generate(self, histories, n=1, sampling=None, seeds=None):
        out = self.backend.generate(histories, n=n, sampling=sampling, seeds=seeds)
        self.done += len(histories)
        self.ctx.log(f"{self.done}/{self.total} {self.unit} x {n} samples")
        return out


def trajectories_source(ctx: StageContext, override: str | None) -> str:
    """Trajectories of this run's collect stage, or the file/folder given instead."""
    if override:
        if override.startswith("hub:"):
            return _download_dataset(override.removeprefix("hub:"), ctx.dir / "imported")
        if not Path(override).exists():
            raise StageError(f"no trajectories at {override}")
        return override
    return str(ctx.input_path("collect", "trajectories"))


def _download_dataset(repo_id: str, folder: Path) -> str:
    """A Hub dataset of trajectory records, saved as JSONL (original ColBench rollouts load as well)."""
    from colbench_gym._optional import require

    datasets = require("datasets", "hub")
    from sweet_trl.trajectories import write_trajectories

    rows = datasets.load_dataset(repo_id, split="train").to_list()
    folder.mkdir(parents=True, exist_ok=True)
    return str(write_trajectories(rows, folder / "trajectories.jsonl"))


def _mean(values: Sequence[float]) -> float:
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else float("nan")


# --------------------------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------------------------

def stage_collect(ctx: StageContext, gen: GenerationArguments, args: CollectArguments) -> StageResult:
    """Roll out the base policy on the training tasks (or import trajectories)."""
    from sweet_trl.trajectories import read_trajectories, write_trajectories

    out = ctx.dir / "trajectories.jsonl"
    if args.trajectories:
        records = read_trajectories(trajectories_source(ctx, args.trajectories))
        write_trajectories(records, out)
        stats: dict[str, Any] = {"imported": len(records)}
    else:
        from sweet_trl.rollouts import collect

        tasks = load_tasks(ctx.run, "train")
        ctx.log(f"{len(tasks)} tasks x {args.episodes_per_task} episodes with {ctx.run.policy_model} "
                f"({gen.backend}, {gen.max_new_tokens} new tokens per turn)")
        backend = make_backend(gen, ctx.run.policy_model, name=ctx.run.policy_model, run=ctx.run)
        result = collect(
            backend, env_id=ctx.run.env_id, tasks=tasks, episodes_per_task=args.episodes_per_task,
            seed=args.collect_seed, output=out, resume=out.exists(), num_envs=gen.generation_batch_size,
            sampling=sampling_params(gen), simulator=make_simulator(ctx.run),
            env_kwargs={"max_turns": ctx.run.max_turns}, max_workers=gen.num_workers,
            policy_name=ctx.run.policy_model,
        )
        del backend
        release()
        records, stats = result.records, result.stats.to_dict()
    rewards = [r["reward"] for r in records if r.get("reward") is not None]
    return StageResult(
        counts={"episodes": len(records), "tasks": len({r.get("task_id") for r in records}),
                "successes": sum(bool(r.get("success")) for r in records),
                "infra_failures": sum(r.get("reward") is None for r in records)},
        metrics={"mean_reward": _mean(rewards), "success_rate": _mean([float(bool(r.get("success"))) for r in records]),
                 "mean_turns": _mean([r.get("turns", 0) for r in records])},
        outputs={"trajectories": out.name},
        info={"collector": stats},
    )


def stage_critic_pairs(ctx: StageContext, args: CriticPairsArguments) -> StageResult:
    """Pairs of trajectories of one task with different rewards, for the critic."""
    from sweet_trl.pairs import PAIR_RULE_PRESETS, build_critic_pairs, load_trajectories

    preset = PAIR_RULE_PRESETS[ctx.run.kind]
    rule = {
        "rule": args.pair_rule or preset["rule"],
        "require_success": preset["require_success"] if args.require_success is None else args.require_success,
        "min_reward_gap": preset["min_reward_gap"] if args.min_reward_gap is None else args.min_reward_gap,
    }
    records = load_trajectories(trajectories_source(ctx, args.trajectories))
    pairs, stats = build_critic_pairs(records, **rule, max_pairs_per_task=args.max_pairs_per_task,
                                      seed=args.pairs_seed)
    ctx.log(stats.summary())
    if not pairs:
        raise StageError(
            f"no critic pair: {stats.summary()}. Pairs need tasks with trajectories of different rewards "
            "(and, for best_vs_rest, a successful one): collect more episodes per task, or set require_success: false"
        )
    out = ctx.dir / "pairs.jsonl"
    _write_jsonl(out, pairs)
    return StageResult(
        counts={"pairs": stats.pairs, "tasks_with_pairs": stats.tasks_with_pairs, "tasks": stats.tasks,
                "trajectories": stats.trajectories},
        metrics={"mean_reward_gap": _mean([p["chosen_reward"] - p["rejected_reward"] for p in pairs])},
        outputs={"pairs": out.name},
        info={"rule": rule, "dropped": dict(stats.dropped)},
    )


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, path)


def _fit(ctx: StageContext, trainer: Any, output_dir: Path) -> dict[str, Any]:
    """Train (resuming from the last checkpoint of an interrupted run), save the model, the tokenizer and the
    trainer's ``log_history``; returns the last logged value of every metric."""
    from transformers.trainer_utils import get_last_checkpoint

    checkpoint = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
    if checkpoint:
        ctx.log(f"resuming training from {checkpoint}")
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(output_dir))
    history = trainer.state.log_history
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(output_dir))
        (ctx.dir / "log_history.json").write_text(json.dumps(history, indent=1, default=str), encoding="utf-8")
    return final_metrics(history) | {"global_step": trainer.state.global_step}


def final_metrics(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each logged metric averaged over the last quarter of the logged steps (one step alone is noisy with
    small batches); the summary row's values (``train_loss``: the mean over all steps, runtimes) as they are."""
    steps = [row for row in history if "train_runtime" not in row]
    summary = {k: v for row in history if "train_runtime" in row for k, v in row.items()}
    keys = {k for row in steps for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("epoch", "step")}
    out: dict[str, float] = {}
    for key in keys:
        values = [row[key] for row in steps if isinstance(row.get(key), (int, float))]
        tail = values[-max(1, len(values) // 4):]
        out[key] = sum(tail) / len(tail)
    out.update({k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and k not in ("epoch", "step")})
    return out


def _prepare_training(ctx: StageContext, model_config: Any, config: Any, base: str) -> Any:
    """Fill the model path and output folder of a training stage; returns its ``TrainerInputs``."""
    from sweet_trl.policy_trainer import trainer_inputs

    if not model_config.model_name_or_path:
        model_config.model_name_or_path = resolve_model(base)
    config.output_dir = str(ctx.dir / "model")
    # The stage pushes its own export (with the card); a Trainer pushing by itself would need the network early.
    config.push_to_hub = False
    if config.report_to in ("all", ["all"]):
        config.report_to = []
    inputs = trainer_inputs(config, model_config)
    if inputs.tokenizer.pad_token is None:
        inputs.tokenizer.pad_token = inputs.tokenizer.eos_token
    return inputs


def _train(ctx: StageContext, trainer_class: Any, inputs: Any, config: Any, dataset: Any
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build the stage's trainer on ``_prepare_training``'s inputs, fit it and free its memory; returns the last
    metrics and the trainer's report on its training rows (empty when it keeps none)."""
    model, tokenizer, peft_config, quantization_config = inputs
    ctx.log(f"base {model}, {'LoRA' if peft_config else 'full fine-tuning'}")
    trainer = trainer_class(model, args=config, train_dataset=dataset, processing_class=tokenizer,
                            peft_config=peft_config, quantization_config=quantization_config)
    last = _fit(ctx, trainer, ctx.dir / "model")
    report = getattr(trainer, "data_report", {}).get("train", {})
    del trainer
    release()
    return last, report


def _training_result(ctx: StageContext, last: dict[str, Any], counts: dict[str, int], keys: Sequence[str],
                     model_config: Any, config: Any) -> StageResult:
    return StageResult(
        counts=counts,
        metrics={k: float(last[k]) for k in keys if k in last},
        outputs={"model": "model", "log_history": "log_history.json"},
        info={"base_model": model_config.model_name_or_path, "adapter": bool(model_config.use_peft),
              "train_runtime": last.get("train_runtime")},
    )


def stage_train_critic(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Train the asymmetric critic on the trajectory pairs (Bradley-Terry on turn-advantage scores)."""
    from sweet_trl.critic_trainer import SweetCriticTrainer
    from sweet_trl.policy_trainer import load_rows

    pairs = load_rows(ctx.input_path("critic_pairs", "pairs"))
    inputs = _prepare_training(ctx, model_config, config, ctx.run.critic_base)
    ctx.log(f"{len(pairs)} trajectory pairs")
    last, report = _train(ctx, SweetCriticTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs),
                                        "pairs_used": report.get("kept", len(pairs))},
                            ("train_loss", "pair_accuracy", "margin"), model_config, config)


def _turn_pairs_config(run: RunArguments, **kwargs: Any) -> Any:
    from sweet_trl.turn_pairs import TurnPairsConfig

    return TurnPairsConfig(env_id=run.env_id, max_turns=run.max_turns, **kwargs)


def stage_sample_candidates(ctx: StageContext, gen: GenerationArguments, args: CandidateArguments) -> StageResult:
    """Turn states from the collected trajectories and N candidate next turns per state from the policy."""
    from sweet_trl.turn_pairs import sample_candidates, select_turn_states

    config = _turn_pairs_config(
        ctx.run, state_fraction=args.state_fraction, max_states=args.max_states, num_candidates=args.num_candidates,
        temperature=gen.temperature, top_p=gen.top_p, max_new_tokens=gen.max_new_tokens,
        generation_batch_size=gen.generation_batch_size, seed=args.candidates_seed,
    )
    states = select_turn_states(ctx.input_path("collect", "trajectories"), config, output_dir=ctx.dir / "states")
    ctx.log(f"{len(states)} turn states; sampling {args.num_candidates} candidates each")
    backend = make_backend(gen, ctx.run.policy_model, name=ctx.run.policy_model, run=ctx.run)
    rows = sample_candidates(ctx.dir / "states", ProgressBackend(backend, ctx, len(states), "turn states"), config,
                             output_dir=ctx.dir / "candidates")
    del backend
    release()
    candidates = [len(c) for c in rows["candidates"]]
    return StageResult(
        counts={"turn_states": len(states), "candidates": sum(candidates),
                "failed_candidates": sum(len(e) for e in rows["generation_errors"])},
        metrics={"candidates_per_state": _mean(candidates)},
        outputs={"states": "states", "candidates": "candidates"},
    )


def _critic_scorer(critic: Any, ctx: StageContext, total: int) -> Callable:
    """The critic as ``turn_pairs.rank_candidates``'s scorer, logging progress every tenth of the states."""
    from sweet_trl.turn_pairs import as_candidate_scorer

    scorer = as_candidate_scorer(critic)
    done = 0

    def score(dialogue: list[dict[str, str]], candidates: list[str], privileged: str):
        nonlocal done
        scores = scorer(dialogue, candidates, privileged)
        done += 1
        if done % max(1, total // 10) == 0 or done == total:
            ctx.log(f"scored {done}/{total} turn states")
        return scores

    score.name = getattr(scorer, "name", None)  # which critic: a resumed ranking must be the same one's
    return score


def stage_rank(ctx: StageContext, args: RankArguments) -> StageResult:
    """Score every candidate with the trained critic; also score the turns of a few collected trajectories."""
    from sweet_trl.critic import SweetCritic
    from sweet_trl.turn_pairs import rank_candidates

    critic = SweetCritic.from_pretrained(ctx.input_path("train_critic", "model"), batch_size=args.scoring_batch_size)
    config = _turn_pairs_config(ctx.run, ranking=args.ranking, scoring_batch_size=args.scoring_batch_size)
    candidates = ctx.input_path("sample_candidates", "candidates")
    total = ctx.inputs["sample_candidates"]["counts"]["turn_states"]
    ranked = rank_candidates(candidates, _critic_scorer(critic, ctx, total), config, output_dir=ctx.dir / "ranked")
    errors = sum(1 for e in ranked["ranking_error"] if e)
    advantages = [a for row in ranked["advantages"] for a in row if a is not None]
    ctx.log(f"ranked {len(ranked)} turn states ({errors} failed)")
    examples = _score_trajectories(ctx, critic, args.report_trajectories)
    del critic
    release()
    return StageResult(
        counts={"turn_states": len(ranked), "ranking_errors": errors, "scored_trajectories": len(examples)},
        metrics={"mean_candidate_advantage": _mean(advantages),
                 "candidate_advantage_std": _std(advantages)},
        outputs={"ranked": "ranked", "trajectory_advantages": "trajectory_advantages.jsonl"},
    )


def _std(values: Sequence[float]) -> float:
    mean = _mean(values)
    return _mean([(v - mean) ** 2 for v in values]) ** 0.5 if values else float("nan")


def _score_trajectories(ctx: StageContext, critic: Any, limit: int) -> list[dict[str, Any]]:
    """Per-turn critic advantages of some collected trajectories (tasks with both a success and a failure
    first: there the critic's credit assignment is visible), for the report."""
    from sweet_trl.trajectories import read_trajectories

    records = [r for r in read_trajectories(ctx.input_path("collect", "trajectories")) if r.get("reward") is not None]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["task_id"], []).append(record)
    contrasted = [t for t, rs in by_task.items() if len({r["reward"] for r in rs}) > 1]
    chosen: list[dict[str, Any]] = []
    for task_id in contrasted + [t for t in by_task if t not in contrasted]:
        group = sorted(by_task[task_id], key=lambda r: -r["reward"])
        for record in (group[0], group[-1]) if len(group) > 1 else group[:1]:
            if len(chosen) < limit:
                chosen.append(record)
    rows = []
    if chosen:
        advantages = critic.turn_advantages(chosen)
        for record, values in zip(chosen, advantages):
            rows.append({
                "episode_id": record.get("episode_id"), "task_id": record.get("task_id"),
                "reward": record.get("reward"), "success": record.get("success"),
                "dialogue_history": [{"role": m["role"], "content": m["content"]} for m in record["dialogue_history"]],
                "advantages": [None if v != v else float(v) for v in values],
            })
    _write_jsonl(ctx.dir / "trajectory_advantages.jsonl", rows)
    return rows


def stage_policy_pairs(ctx: StageContext, args: PolicyPairsArguments) -> StageResult:
    """Turn-level pairs: a candidate of the critic's upper half over one of its lower half, per turn state."""
    from sweet_trl.turn_pairs import build_turn_pairs

    config = _turn_pairs_config(ctx.run, pairs_per_turn=args.pairs_per_turn, min_score_gap=args.min_score_gap,
                                seed=args.pairs_seed)
    pairs = build_turn_pairs(ctx.input_path("rank", "ranked"), config, output_dir=ctx.dir / "pairs")
    gaps = [c - r for c, r in zip(pairs["chosen_score"], pairs["rejected_score"])]
    return StageResult(
        counts={"pairs": len(pairs), "turn_states": len(set(pairs["state_id"]))},
        metrics={"mean_score_gap": _mean(gaps)},
        outputs={"pairs": "pairs"},
    )


def stage_train_policy(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Train the policy with turn-level DPO on the critic-ranked pairs (no privileged information)."""
    from sweet_trl.policy_trainer import TurnPreferenceTrainer, load_rows

    pairs = load_rows(ctx.input_path("policy_pairs", "pairs"))
    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    ctx.log(f"{len(pairs)} turn pairs")
    last, report = _train(ctx, TurnPreferenceTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs),
                                        "pairs_used": report.get("kept", len(pairs))},
                            ("train_loss", "rewards/accuracies", "rewards/margins"), model_config, config)


def stage_baseline_rft(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Baseline: supervised fine-tuning on the successful collected trajectories."""
    from trl import SFTTrainer

    from sweet_trl.baselines.rejection_finetuning import rft_dataset

    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    try:
        dataset = rft_dataset(ctx.input_path("collect", "trajectories"), inputs.tokenizer, config)
    except ValueError as err:
        raise StageError(str(err)) from err
    ctx.log(f"{len(dataset)} successful trajectories to imitate")
    last, _ = _train(ctx, SFTTrainer, inputs, config, dataset)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "trajectories": len(dataset)},
                            ("train_loss",), model_config, config)


def stage_baseline_mtdpo(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Baseline: DPO on whole trajectories (the pairs the critic is trained on, without privileged information)."""
    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOTrainer, multiturn_dpo_pairs

    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    if config.pair_preset is None:  # the released recipe of this environment, as for the critic's pairs
        config.apply_pair_preset(ctx.run.kind)
    try:
        pairs = multiturn_dpo_pairs(ctx.input_path("collect", "trajectories"), config)
    except ValueError as err:
        raise StageError(str(err)) from err
    ctx.log(f"{len(pairs)} trajectory pairs")
    last, _ = _train(ctx, MultiTurnDPOTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs)},
                            ("train_loss", "rewards/accuracies", "rewards/margins"), model_config, config)


POLICY_STAGES = {"sweet": "train_policy", "rft": "baseline_rft", "mtdpo": "baseline_mtdpo"}
# The paper's metrics (% tests passed and success rate for backend; similarity and win rate for frontend) and
# what explains them.
EVALUATION_METRICS = ("tests_passed", "success_rate", "mean_similarity", "win_rate", "mean_reward", "answered_rate",
                      "mean_turns")


def _evaluate_inputs(args: EvaluateArguments) -> list[str]:
    return [POLICY_STAGES[args.policy]] if args.policy in POLICY_STAGES else []


def _evaluate_folder(args: EvaluateArguments) -> str:
    """``evaluate/<policy>`` for the run's own policies; a model given by path or id also gets a short hash,
    so that two checkpoints with the same folder name do not share results."""
    if args.policy in POLICY_STAGES or args.policy == "zero_shot":
        return f"evaluate/{args.policy}"
    digest = hashlib.sha256(args.policy.encode()).hexdigest()[:6]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(args.policy.rstrip("/")).name)
    return f"evaluate/{name}-{digest}"


def stage_evaluate(ctx: StageContext, gen: GenerationArguments, args: EvaluateArguments) -> StageResult:
    """Roll out one policy on the evaluation tasks without privileged information, and score it."""
    from sweet_trl.evaluation import evaluate

    if args.policy == "zero_shot":
        model, name = ctx.run.policy_model, "zero_shot"
    elif args.policy in POLICY_STAGES:
        model, name = str(ctx.input_path(POLICY_STAGES[args.policy], "model")), args.policy
    else:
        model, name = args.policy, args.policy
    tasks = load_tasks(ctx.run, "eval")
    ctx.log(f"policy {name} ({model}): {len(tasks)} tasks x {args.eval_episodes_per_task} episodes")
    backend = make_backend(gen, model, name=name, workdir=ctx.dir, run=ctx.run)
    result = evaluate(
        backend, tasks=tasks, env_id=ctx.run.env_id, episodes_per_task=args.eval_episodes_per_task,
        seed=args.eval_seed, output_dir=ctx.dir, sampling=sampling_params(gen, args.eval_temperature),
        num_envs=gen.generation_batch_size, simulator=make_simulator(ctx.run),
        env_kwargs={"max_turns": ctx.run.max_turns}, max_workers=gen.num_workers, verbose=False,
    )
    del backend
    release()
    metrics = {k: float(result.metrics[k]) for k in EVALUATION_METRICS
               if isinstance(result.metrics.get(k), (int, float))}
    outputs = {"trajectories": "trajectories.jsonl"}
    if ctx.run.kind == "frontend":
        renders = _render_pages(ctx, result.records, limit=6)
        if renders:
            outputs["renders"] = renders
    counts = {k: int(result.metrics.get(k) or 0)
              for k in ("episodes", "tasks", "infra_errors", "simulator_errors", "generated_tokens")}
    return StageResult(counts=counts, metrics=metrics, outputs=outputs, info={"policy": args.policy, "model": model})


def _render_pages(ctx: StageContext, records: Sequence[dict[str, Any]], limit: int) -> str | None:
    """Frontend: the agent's final page and the target page as PNGs, shown side by side in the report."""
    from colbench_gym.envs.frontend import extract_html
    from colbench_gym.rendering import RendererUnavailable, shared_renderer

    try:
        renderer = shared_renderer()
    except (RendererUnavailable, ImportError) as err:
        ctx.log(f"no renders for the report: {err}")
        return None
    folder = ctx.dir / "renders"
    folder.mkdir(exist_ok=True)
    rows = []
    for index, record in enumerate([r for r in records if r.get("answer")][:limit]):
        row = {"episode_id": record["episode_id"], "task_id": record["task_id"], "reward": record.get("reward")}
        for key, html in (("agent", extract_html(record["answer"])), ("target", record["task"]["ground_truth"])):
            if not html:
                row[f"{key}_error"] = "no HTML page in the answer"
                continue
            try:
                result = renderer.render(html)
            except (RendererUnavailable, ImportError) as err:
                ctx.log(f"no renders for the report: {err}")
                return None
            if result.ok:
                name = f"{index:02d}-{key}.png"
                (folder / name).write_bytes(result.png)
                row[key] = name
            else:  # shown as a failed render in the report
                row[f"{key}_error"] = f"{result.status}: {result.error}"
        rows.append(row)
    _write_jsonl(folder / "index.jsonl", rows)
    return "renders/index.jsonl"


# --------------------------------------------------------------------------------------------------------------
# Hub export of a stage's artefacts
# --------------------------------------------------------------------------------------------------------------

def _export_rows(stage_dir: Path, marker: dict[str, Any], output: str) -> list[dict[str, Any]]:
    path = stage_dir / marker["outputs"][output]
    if path.is_dir():
        from sweet_trl.policy_trainer import load_rows

        return load_rows(path).to_list()
    from sweet_trl.report.data import iter_jsonl

    return list(iter_jsonl(path))


DATASET_EXPORTS = {  # stage -> (output, dataset kind, repo suffix)
    "collect": ("trajectories", "rollouts", "rollouts"),
    "critic_pairs": ("pairs", "critic-pairs", "critic-pairs"),
    "policy_pairs": ("pairs", "turn-pairs", "turn-pairs"),
}
MODEL_EXPORTS = {  # stage -> (card role, repo suffix, method)
    "train_critic": ("critic", "critic", None),
    "train_policy": ("policy", "policy", None),
    "baseline_rft": ("baseline", "rft", "Rejection fine-tuning (SFT on the successful trajectories)"),
    "baseline_mtdpo": ("baseline", "mtdpo", "Multi-turn DPO on whole trajectories"),
}


def export_stage(stage_dir: Path, marker: dict[str, Any], *args: Any) -> tuple[Path, str, str]:
    """Write what ``--push_to_hub`` uploads for a stage to ``<stage_dir>/hub``: (folder, repo id, repo type)."""
    from sweet_trl import hub

    run, stage = args[0], marker["stage"]
    folder = stage_dir / "hub"
    if stage in DATASET_EXPORTS:
        output, kind, suffix = DATASET_EXPORTS[stage]
        repo_id = hub.hub_repo_id(run.hub_prefix, suffix)
        rows = _export_rows(stage_dir, marker, output)
        stats = {**marker["counts"], **marker["metrics"]}
        card = hub.dataset_card(kind, repo_id, num_rows=len(rows), env_id=run.env_id, policy=run.policy_model,
                                source=f"Stage `{stage}` of a `sweet-rl` run (configuration fingerprint "
                                       f"`{marker['fingerprint']}`).",
                                stats=stats, columns=sorted(rows[0]) if rows else ())
        return hub.export_dataset(rows, folder, card), repo_id, "dataset"
    role, suffix, method = MODEL_EXPORTS[stage]
    training = args[-2]
    export = args[-1]
    repo_id = training.hub_model_id or hub.hub_repo_id(run.hub_prefix, suffix)
    model_dir = stage_dir / marker["outputs"]["model"]
    adapter = (model_dir / "adapter_config.json").exists() and not export.push_merged
    data_stage = {"train_critic": "critic_pairs", "train_policy": "policy_pairs"}.get(stage, "collect")
    data_suffix = {"critic_pairs": "critic-pairs", "policy_pairs": "turn-pairs", "collect": "rollouts"}[data_stage]
    datasets = [f"{run.hub_prefix}-{data_suffix}" if run.hub_prefix else f"{data_stage} stage of the run"]
    metrics = dict(marker["metrics"])
    base = marker["info"].get("base_model") or run.policy_model
    base_name = run.critic_base if role == "critic" else run.policy_model
    hyper = {k: v for k, v in asdict_public(training).items() if k in HYPERPARAMETERS_SHOWN}
    if role in ("critic", "policy"):
        from sweet_trl.model_cards import sweet_model_card

        notes = (f"Trained on {', '.join(f'{k}: {v}' for k, v in marker['counts'].items())} from "
                 f"`{datasets[0]}`, base model `{base_name}`"
                 + (" (resolved to a local copy)" if base != base_name else "") + ".")
        if adapter:
            notes += (" This repository holds a LoRA adapter: load it with "
                      "`peft.AutoPeftModelForCausalLM.from_pretrained`.")
        card = str(sweet_model_card(
            role=role, model_name=repo_id.split("/")[-1], base_model=_hub_name(base_name), hub_model_id=repo_id,
            dataset_name=datasets[0] if run.hub_prefix else None,
            tags=["lora"] if adapter else None, hyperparameters=hyper, metrics=metrics, notes=notes))
    else:
        card = hub.model_card(repo_id, role, base_model=base_name, datasets=datasets, metrics=metrics, training=hyper,
                              adapter=adapter, method=method, env_id=run.env_id)
    hub_base = _hub_name(base_name)
    if hub_base is None:
        print(f"[{stage}] note: the base model {base_name} is a local folder, so the export names that path "
              "(point base_model_name_or_path at a copy of it to load the upload elsewhere)", file=sys.stderr)
    return hub.export_model(model_dir, folder, card, merge=export.push_merged, base_model=hub_base), repo_id, "model"


HYPERPARAMETERS_SHOWN = {
    "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
    "beta", "nll_coef", "max_length", "score_normalization", "use_privileged", "lr_scheduler_type", "warmup_steps",
    "seed", "bf16",
}


def _hub_name(model: str) -> str | None:
    """A base model name fit for a card's metadata (a Hub id, not a local path)."""
    from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES

    if model.lower() in EMBEDDED_ALIASES:
        return "HuggingFaceTB/SmolLM2-135M-Instruct"
    return None if os.path.exists(model) else model


def push_stage(stage_dir: Path, marker: dict[str, Any], *args: Any) -> dict[str, str]:
    from sweet_trl import hub

    folder, repo_id, repo_type = export_stage(stage_dir, marker, *args)
    try:
        hub.push_folder(folder, repo_id, repo_type=repo_type)
    except Exception as err:
        raise StageError(f"could not push {repo_id}: {err}. The export is complete in {folder}; run the same "
                         "command again to retry the upload (the stage itself is kept)") from err
    return {repo_type: repo_id}


# --------------------------------------------------------------------------------------------------------------
# The stage table, and running stages from a configuration
# --------------------------------------------------------------------------------------------------------------

def _model_config():
    from trl import ModelConfig

    return ModelConfig


def _critic_types():
    from sweet_trl.critic_config import SweetCriticConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), SweetCriticConfig, ExportArguments)


def _policy_types():
    from sweet_trl.pipeline_config import ExportArguments
    from sweet_trl.policy_config import TurnPreferenceConfig

    return (_model_config(), TurnPreferenceConfig, ExportArguments)


def _rft_types():
    from sweet_trl.baselines.rejection_finetuning import RejectionFinetuneConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), RejectionFinetuneConfig, ExportArguments)


def _mtdpo_types():
    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), MultiTurnDPOConfig, ExportArguments)


STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("collect", "roll out the base policy on the training tasks",
          lambda: (GenerationArguments, CollectArguments), stage_collect, push=push_stage,
          run_fields=("train_tasks", "max_train_tasks", "simulator", "simulator_base_url", "max_turns", "policy_model")),
    Stage("critic_pairs", "pairs of trajectories of one task with different rewards",
          lambda: (CriticPairsArguments,), stage_critic_pairs,
          inputs=lambda args: [] if args.trajectories else ["collect"], push=push_stage),
    Stage("train_critic", "train the asymmetric turn-level critic", _critic_types, stage_train_critic,
          inputs=lambda *args: ["critic_pairs"], push=push_stage, run_fields=("critic_model", "policy_model")),
    Stage("sample_candidates", "sample N candidate turns per turn state from the policy",
          lambda: (GenerationArguments, CandidateArguments), stage_sample_candidates,
          inputs=lambda *args: ["collect"], run_fields=("max_turns", "policy_model")),
    Stage("rank", "score the candidates with the critic", lambda: (RankArguments,), stage_rank,
          inputs=lambda *args: ["collect", "train_critic", "sample_candidates"], run_fields=("max_turns",)),
    Stage("policy_pairs", "turn-level pairs: upper half over lower half", lambda: (PolicyPairsArguments,),
          stage_policy_pairs, inputs=lambda *args: ["rank"], push=push_stage, run_fields=("max_turns",)),
    Stage("train_policy", "train the policy with turn-level DPO", _policy_types, stage_train_policy,
          inputs=lambda *args: ["policy_pairs"], push=push_stage, run_fields=("policy_model",)),
    Stage("baseline_rft", "baseline: rejection fine-tuning", _rft_types, stage_baseline_rft,
          inputs=lambda *args: ["collect"], push=push_stage, run_fields=("policy_model",)),
    Stage("baseline_mtdpo", "baseline: multi-turn DPO", _mtdpo_types, stage_baseline_mtdpo,
          inputs=lambda *args: ["collect"], push=push_stage, run_fields=("policy_model",)),
    Stage("evaluate", "evaluate a policy on the test tasks", lambda: (GenerationArguments, EvaluateArguments),
          stage_evaluate, inputs=lambda gen, args: _evaluate_inputs(args), folder=lambda gen, args: _evaluate_folder(args),
          run_fields=("eval_tasks", "max_eval_tasks", "simulator", "simulator_base_url", "max_turns", "policy_model")),
)}
COMMAND_ALIASES = {"train-rft": "baseline_rft", "train-mtdpo": "baseline_mtdpo"}
SECTIONS = (*STAGES, "report", PIPELINE_SECTION)


def _parse(stage: Stage, config: dict[str, Any], cli_args: Sequence[str], prog: str | None = None) -> tuple:
    try:
        return parse_stage_args(stage.dataclass_types(), stage.name, config, cli_args, SECTIONS, prog=prog)
    except ValueError as err:
        raise ConfigError(f"{stage.name}: {err}") from err


TRAINING_STAGES = ("train_critic", "train_policy", "baseline_rft", "baseline_mtdpo")


@functools.cache
def _stage_options(name: str) -> frozenset[str]:
    if name == "report":
        return frozenset(known_options(make_parser([RunArguments, ReportArguments])))
    if name == PIPELINE_SECTION:
        return frozenset(known_options(make_parser([PipelineArguments])))
    return frozenset(known_options(make_parser(STAGES[name].dataclass_types())))


def _check_keys(config: dict[str, Any], shared_cli: Sequence[str] = (), everything: bool = False
                ) -> dict[str, frozenset[str]]:
    """Fail on top-level keys and command-line options that no stage takes (typos), before anything runs.

    The trainer configurations (which import TRL's trainers) are consulted only for keys the other stages do
    not take, unless ``everything``.
    """
    light = [name for name in SECTIONS if name not in TRAINING_STAGES]
    known = {name: _stage_options(name) for name in light}
    asked = {k for k in config if k not in SECTIONS} | cli_keys(shared_cli)
    if everything or asked - set().union(*known.values()):
        known.update({name: _stage_options(name) for name in TRAINING_STAGES})
    try:
        check_config_keys({k: v for k, v in config.items() if k not in SECTIONS}, known)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    unknown = sorted(cli_keys(shared_cli) - set().union(*known.values()))
    if unknown:
        raise ConfigError(f"unknown options (no stage takes them): {['--' + k for k in unknown]}")
    return known


def setup_logging() -> None:
    """Progress of the library modules (pair counts, resumes, dropped rows) on stderr."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("sweet_trl").setLevel(logging.INFO)


def run_stage_from_config(name: str, config_path: str | os.PathLike | None = None, cli_args: Sequence[str] = (),
                          prog: str | None = None, stream: Any = None) -> dict[str, Any]:
    """``sweet-rl <stage> --config run.yaml [overrides]``: parse, then run the stage unless it is complete."""
    setup_logging()
    config = load_yaml(config_path) if config_path else {}
    _check_keys(config)
    stage = STAGES[name]
    args = _parse(stage, config, cli_args, prog=prog)
    return run_stage(stage, args, stream=stream)


def report_command(config_path: str | os.PathLike | None, cli_args: Sequence[str] = (), stream: Any = None) -> Path:
    """``sweet-rl report``: write the HTML report of the run."""
    config = load_yaml(config_path) if config_path else {}
    try:
        run, report = parse_stage_args([RunArguments, ReportArguments], "report", config, cli_args, SECTIONS,
                                       prog="sweet-rl report")
    except ValueError as err:
        raise ConfigError(f"report: {err}") from err
    return write_report(run, report, stream)


def write_report(run: RunArguments, report: ReportArguments, stream: Any = None) -> Path:
    from sweet_trl.report import build_report

    path = build_report(run.run_dir, report.report_path, examples=report.report_examples)
    print(f"[report] {path}", file=stream or sys.stdout, flush=True)
    return path


def run_pipeline(config_path: str | os.PathLike | None, cli_args: Sequence[str] = (), stream: Any = None
                 ) -> dict[str, dict[str, Any]]:
    """sweet-rl pipeline --config run.yaml [--key value ...] [--<stage>.key value ...]

    Runs every stage in order (a complete stage prints "skipped"), prints the evaluation table of the
    policies, and writes <run_dir>/report.html.

      --key value              goes to every stage that takes `key`   (--max_new_tokens 64)
      --<stage>.key value      goes to one stage                     (--train_critic.max_steps 20)
      --pipeline.<option> ...  the options below                     (--pipeline.baselines rft mtdpo)

    Each stage's own options: sweet-rl <stage> --help (for example sweet-rl train-critic --help).
    """
    setup_logging()
    out = stream or sys.stdout
    config = load_yaml(config_path) if config_path else {}
    shared, per_section = split_overrides(cli_args)
    unknown_sections = sorted(set(per_section) - set(SECTIONS))
    if unknown_sections:
        raise ConfigError(f"unknown stages in overrides: {unknown_sections} (stages: {list(SECTIONS)})")
    known = _check_keys(config, shared, everything=True)
    try:
        parser = make_parser([PipelineArguments], prog="sweet-rl pipeline")
        parser.set_defaults_with_config(**(config.get(PIPELINE_SECTION) or {}))
        (pipeline_args,) = parser.parse_args_into_dataclasses(args=per_section.get(PIPELINE_SECTION, []))
    except ValueError as err:
        raise ConfigError(f"pipeline: {err}") from err
    order = list(pipeline_args.stages)
    unknown = [s for s in order if s not in STAGES and s != "report"]
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; choose from {[*STAGES, 'report']}")
    for baseline in pipeline_args.baselines:
        if baseline not in ("rft", "mtdpo"):
            raise ConfigError(f"unknown baseline {baseline!r}; choose from rft, mtdpo")
        stage_name = f"baseline_{baseline}"
        if stage_name not in order:
            order.insert(order.index("evaluate") if "evaluate" in order else len(order), stage_name)
    policies = list(dict.fromkeys([*pipeline_args.evaluate_policies, *pipeline_args.baselines]))

    def stage_cli(name: str) -> list[str]:
        return filter_cli_args(shared, known[name]) + per_section.get(name, [])

    started = time.perf_counter()
    markers: dict[str, dict[str, Any]] = {}
    run = None
    for index, name in enumerate(order, 1):
        print(f"\n=== stage {index}/{len(order)}: {name} ===", file=out, flush=True)
        if name == "report":
            continue
        stage = STAGES[name]
        if name == "evaluate":
            for policy in policies:
                args = _parse(stage, config, [*stage_cli(name), "--policy", policy], prog="sweet-rl evaluate")
                markers[f"evaluate/{policy}"] = run_stage(stage, args, stream=out)
                run = args[0]
        else:
            args = _parse(stage, config, stage_cli(name), prog=f"sweet-rl {stage.command}")
            markers[name] = run_stage(stage, args, stream=out)
            run = args[0]
    if run is None:
        run = _parse(STAGES["collect"], config, stage_cli("collect"))[0]
    evaluations = {k.split("/", 1)[1]: m for k, m in markers.items() if k.startswith("evaluate/")}
    if evaluations:
        print_metrics(evaluations, out)
    if "report" in order:
        try:
            run_args, report_args = parse_stage_args([RunArguments, ReportArguments], "report", config,
                                                     stage_cli("report"), SECTIONS)
        except ValueError as err:
            raise ConfigError(f"report: {err}") from err
        write_report(run_args, report_args, out)
    print(f"\npipeline finished in {(time.perf_counter() - started) / 60:.1f} min (run folder {run.run_dir})",
          file=out, flush=True)
    return markers


def print_metrics(evaluations: dict[str, dict[str, Any]], stream: Any) -> None:
    """The evaluation table: one row per policy (zero-shot first)."""
    columns = list(EVALUATION_METRICS)
    columns = [c for c in columns if any(c in m["metrics"] for m in evaluations.values())]
    width = max(len(name) for name in evaluations) + 2
    print("\nEvaluation on the test tasks (no privileged information):", file=stream)
    print("policy".ljust(width) + "".join(c.rjust(14) for c in columns) + "episodes".rjust(10), file=stream)
    for name, marker in evaluations.items():
        cells = "".join(f"{marker['metrics'].get(c, float('nan')):14.3f}" for c in columns)
        print(name.ljust(width) + cells + f"{marker['counts'].get('episodes', 0):10d}", file=stream)
    stream.flush()
