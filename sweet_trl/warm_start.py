"""The warm start: supervised fine-tuning on scripted expert dialogues before reinforcement learning.

A policy that never succeeds gives a ranking method nothing to rank (SmolLM2-135M zero-shot passes every test on
about 1% of the procedural test tasks). The warm start gives it a starting point like the paper's: an expert plays
each task of a template pool that neither the train nor the test tasks use
(:data:`colbench_gym.tasks.procedural.WARM_START_TEMPLATES`): it asks one question that names every hidden detail
of the task ("What is the base shipping charge, and how much is added per kilogram of weight?"), reads the
simulated human's reply, and answers with the reference. On the multi-fact family's pool
(``procedural_multi:warm_start``, :data:`colbench_gym.tasks.procedural_multi.WARM_START_TEMPLATES`), whose human
tells only what a question names, it asks in general first ("What should the function do?": the outline comes back,
the function in words with every detail named), then for every detail by the outline's names in one question ("What
is the free minutes, the hourly rate and the daily maximum?"), then answers: the form of a several-turn dialogue, not
a strategy for any held-out task. With ``expert_forms: varied`` each dialogue asks for the details in an order and
grouping of its own (all in one question, one a turn, or a split between, as the turns allow): every form gets every
fact, and which one pays when turns run short is left to what the policy learns. The dialogues are played in
the real environment with the run's simulated human and graded there, then the policy imitates the expert's turns
(the loss of rejection fine-tuning: agent turns only, never the instructions or the human's replies).

In the pipeline it is the stage ``warm_start``, run first by ``sweet-rl pipeline`` and ``sweet-rl study`` when the
configuration has a ``warm_start:`` section; every later stage then starts from its model (``policy_model``, and the
critic's base unless ``critic_model`` is set), and "zero-shot" is the warm-started policy::

    sweet-rl warm-start --config warm_start_cpu

From Python::

    from colbench_gym.tasks.procedural import warm_start_tasks
    from sweet_trl.warm_start import expert_dialogues
    records = expert_dialogues(warm_start_tasks(400), max_turns=2)

    from colbench_gym.tasks import procedural_multi
    records = expert_dialogues(procedural_multi.warm_start_tasks(400), max_turns=5)  # two questions, one answer

The pipeline's ``warm_start`` stage plays the pool of ``warm_start.warm_start_family`` (``procedural_multi`` for the
multi-fact one, with ``expert_forms``); to imitate dialogues of your own, give their file as
``warm_start.demonstrations``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from colbench_gym.envs.dialogue import ANSWER_MARKER

EXPERT_POLICY = "expert"
EXPERT_FORMS = ("one", "varied")  # how the multi-fact expert groups its questions (choose_plan)


def expert_questions(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The expert's questions for a warm-start task row, one per turn: the one question of a procedural warm-start
    template that names every hidden detail, or, for a multi-fact one (:mod:`colbench_gym.tasks.procedural_multi`,
    whose human tells only the facts a question names), the general question and then one naming every detail."""
    return expert_plans(row)[0]


def expert_plans(row: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Every form the expert's questions may take for a warm-start task row (the first is
    :func:`expert_questions`): one for a procedural template, every order and grouping of the details for a
    multi-fact one (:meth:`colbench_gym.tasks.procedural_multi.FactTemplate.expert_plans`); a registered family's
    warm-start templates as their kind says."""
    from colbench_gym.tasks.procedural import task_families

    template = row.get("template")
    for family, _ in task_families().values():
        try:
            plans = family.warm_start_template(str(template)).expert_plans()
        except KeyError:
            continue
        if not plans:
            raise ValueError(f"warm-start template {template!r} has no expert question")
        return plans
    raise ValueError(f"task {row.get('task_id')!r} is not from the warm-start pool (template {template!r}): "
                     "expert dialogues are scripted for the warm-start templates only")


def choose_plan(plans: Sequence[tuple[str, ...]], max_turns: int, forms: str, rng: random.Random
                ) -> tuple[str, ...]:
    """The questions of one dialogue: the first plan (``forms="one"``), or one drawn among those whose questions
    leave the last turn for the answer (``"varied"``; the first when none does, :func:`question_turns` fits it)."""
    if forms not in EXPERT_FORMS:
        raise ValueError(f"forms must be one of {EXPERT_FORMS}, got {forms!r}")
    if forms == "one":
        return plans[0]
    fitting = [plan for plan in plans if len(plan) <= max_turns - 1]
    return rng.choice(fitting) if fitting else plans[0]


def question_turns(questions: Sequence[str], max_turns: int) -> list[str]:
    """The expert's question messages within ``max_turns`` (the last turn is the answer): one question per turn,
    and the questions that do not fit asked together in the last question turn, so that the expert always asks for
    every detail when it may ask at all."""
    room = max_turns - 1
    if room < 1 or not questions:
        return []
    if len(questions) <= room:
        return list(questions)
    return [*questions[:room - 1], " ".join(questions[room - 1:])]


def expert_answer(code: str) -> str:
    """The expert's answer: the answer marker and the reference in a code block, without its whole-line comments
    (the simulated human reads them out; an answer needs none). The same text the answer forcing of a small
    policy starts (``force_answer_on_last_turn``), so imitating it teaches what forced turns continue."""
    lines = [line for line in code.strip().splitlines() if not re.match(r"^\s*#", line)]
    body = "\n".join(lines)
    return f"{ANSWER_MARKER}\n```python\n{body}\n```"


def expert_dialogues(rows: Sequence[Mapping[str, Any]], *, env_id: str = "ColBench-Backend-v0", max_turns: int = 2,
                     simulator: Any = None, seed: int = 0, forms: str = "one") -> list[dict[str, Any]]:
    """Play one expert episode per task row in the environment and return the trajectory records.

    With two turns or more the expert asks its questions first (:func:`question_turns`: one a turn, as many as fit;
    a multi-fact task's expert asks for the outline, then for the details by its names: all in one question, or with
    ``forms="varied"`` in a form drawn per dialogue with ``seed``, :func:`choose_plan`); with one it answers at once.
    Each record is the
    collector's (:func:`sweet_trl.rollouts.build_record`), graded by the environment: an episode that does not
    pass every test, or whose human could not reply, is kept and marked so (``success`` false,
    ``simulator_errors``), and the imitation leaves it out.
    """
    import gymnasium as gym

    import colbench_gym  # noqa: F401 (registers the environments)
    from sweet_trl.generation import Generation
    from sweet_trl.rollouts import EpisodeSpec, build_record

    if "Backend" not in env_id:
        raise ValueError(f"expert dialogues answer with a reference function: backend only, got {env_id!r}")
    if not rows:
        raise ValueError("no task to play expert dialogues on")
    rng = random.Random(seed)
    # refuses a task outside the pool before any episode
    questions = [choose_plan(expert_plans(row), max_turns, forms, rng) for row in rows]
    kwargs: dict[str, Any] = {"max_turns": max_turns}
    if simulator is not None:
        kwargs["simulator"] = simulator
    env = gym.make(env_id, tasks=list(rows), **kwargs)
    records = []
    try:
        for index, (row, asked) in enumerate(zip(rows, questions)):
            started = time.perf_counter()
            spec = EpisodeSpec(str(row["task_id"]), seed + index)
            _, info = env.reset(seed=spec.seed, options={"task_id": spec.task_id})
            turns = [*question_turns(asked, max_turns), expert_answer(row["ground_truth"])]
            simulator_errors = []
            reward = None
            for turn, text in enumerate(turns, 1):
                _, reward, terminated, truncated, info = env.step(text)
                if info.get("simulator_error"):
                    simulator_errors.append({"turn": turn, "error": info["simulator_error"]})
                if terminated or truncated:
                    break
            task = env.unwrapped.task
            records.append(build_record(spec, env_id, task, info.get("messages", []), info, reward,
                                        [Generation(text=t) for t in turns], simulator_errors, [], EXPERT_POLICY,
                                        time.perf_counter() - started))
    finally:
        env.close()
    return records


def dialogue_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """How the expert did: episodes, successes, and how often the human's reply was "I don't know"."""
    from colbench_gym.simulators.base import DONT_KNOW

    records = list(records)
    replies = [m["content"] for r in records for m in r.get("dialogue_history", [])[1:] if m.get("role") == "user"]
    successes = sum(bool(r.get("success")) for r in records)
    return {"episodes": len(records), "successes": successes,
            "success_rate": successes / len(records) if records else 0.0,
            "dont_know_replies": sum(DONT_KNOW.lower() in reply.lower() for reply in replies)}


# -- a trained warm start, kept as a small adapter -------------------------------------------------------------------
# Training the warm start takes 15-55 minutes on two CPU cores; its LoRA adapter is 20 MB. The package
# ships the adapter of `warm_start_cpu` so that `make demo` and a user's first run start from it at once
# (`warm_start.adapter`), and `export_adapter` writes one from any finished warm start.

ADAPTERS_DIR = Path(__file__).parent / "adapters"
PROVENANCE = "warm_start.json"
HISTORY = "log_history.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def shipped_adapters() -> list[str]:
    """Names of the warm-start adapters shipped with the package."""
    return sorted(p.name for p in ADAPTERS_DIR.iterdir() if (p / PROVENANCE).exists()) if ADAPTERS_DIR.is_dir() else []


def resolve_adapter(spec: str) -> Path:
    """A warm-start adapter folder: a path, or the name of a shipped adapter. A missing or incomplete one is a
    ``FileNotFoundError`` that says how to make it."""
    path = Path(spec).expanduser()
    if not path.exists() and (ADAPTERS_DIR / spec.rstrip("/")).is_dir() and "/" not in spec.rstrip("/"):
        path = ADAPTERS_DIR / spec.rstrip("/")
    if not path.is_dir():
        shipped = ", ".join(shipped_adapters()) or "none in this installation"
        raise FileNotFoundError(
            f"no warm-start adapter at {spec!r} (shipped: {shipped}). Train one with `sweet-rl warm-start --config "
            f"warm_start_cpu` and export it with the repository's scripts/export_warm_start.py, or remove "
            f"warm_start.adapter to train the warm start in this run")
    missing = [name for name in ADAPTER_FILES if not (path / name).exists()]
    if missing:
        raise FileNotFoundError(f"{path} is not a LoRA adapter folder: {', '.join(missing)} missing")
    return path


def read_provenance(adapter_dir: Path) -> dict[str, Any]:
    """What a shipped or exported adapter was trained from (``warm_start.json``); empty for a bare adapter."""
    path = Path(adapter_dir) / PROVENANCE
    return json.loads(path.read_text()) if path.exists() else {}


def same_base(trained_on: Mapping[str, Any], policy_model: str) -> bool:
    """Whether ``policy_model`` names the base an adapter was trained on (its recorded name or Hub id; the embedded
    model's aliases are one model)."""
    from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES

    def canonical(name: Any) -> Any:
        return "embedded" if isinstance(name, str) and name.lower() in EMBEDDED_ALIASES else name

    return canonical(policy_model) in {canonical(trained_on.get("base_model")), trained_on.get("base_model_id")}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def merge_adapter(base_model: str, adapter_dir: Path, out_dir: Path) -> None:
    """The policy a run starts from: ``adapter_dir`` merged into ``base_model`` (a path), saved in ``out_dir``, in
    the dtype a trained warm start's merge has (float32 on CPU, the base's own on a GPU). The adapter's own
    ``base_model_name_or_path`` is not read: the run names its base."""
    import peft
    import torch
    import transformers

    dtype = "auto" if torch.cuda.is_available() else torch.float32  # as sweet_trl.pipeline.load_causal_lm
    model = transformers.AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
    # half-precision adapter weights are cast to the base's dtype on load (peft's autocast_adapter_dtype)
    model = peft.PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    model.save_pretrained(out_dir)
    transformers.AutoTokenizer.from_pretrained(base_model).save_pretrained(out_dir)


def export_adapter(stage_dir: Path, out_dir: Path, *, base_model_id: str | None = None,
                   dtype: str = "float32") -> dict[str, Any]:
    """Write a finished warm start's adapter (``<run_dir>/warm_start``) as a small, self-describing folder: the
    LoRA weights cast to ``dtype``, its config (``base_model_name_or_path`` set to ``base_model_id`` when given,
    since the run's own is a local path), its training curve, and ``warm_start.json``: the base model, the run's
    settings, its training figures and the weights' digest (``warm_start.adapter`` checks the run's base model
    and the file against them)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    stage_dir = Path(stage_dir)
    marker_path = stage_dir / "_COMPLETE.json"
    if not marker_path.exists():
        raise FileNotFoundError(f"{stage_dir} holds no finished warm start (no _COMPLETE.json)")
    marker = json.loads(marker_path.read_text())
    source = stage_dir / marker["outputs"]["model"]
    missing = [name for name in ADAPTER_FILES if not (source / name).exists()]
    if missing:
        raise FileNotFoundError(f"{source} holds no LoRA adapter ({', '.join(missing)} missing): only a warm start "
                                f"trained with use_peft exports as an adapter")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(source / "adapter_model.safetensors"))
    save_file({k: v.to(getattr(torch, dtype)).contiguous() for k, v in weights.items()},
              str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter_config = json.loads((source / "adapter_config.json").read_text())
    if base_model_id:
        adapter_config["base_model_name_or_path"] = base_model_id
    (out_dir / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    history = stage_dir / marker["outputs"].get("log_history", "log_history.json")
    if history.is_file():  # the training curve, for the report of a run that starts from the adapter
        shutil.copyfile(history, out_dir / HISTORY)
    else:
        (out_dir / HISTORY).unlink(missing_ok=True)
    run, model_args, training, args = marker["config"][0], marker["config"][1], marker["config"][-2], marker["config"][-1]
    provenance = {
        "base_model": run["policy_model"],
        "base_model_id": base_model_id,
        "env_id": run["env_id"],
        "max_turns": run["max_turns"],
        "simulator": run["simulator"],
        "warm_start": args,
        "lora": {k: model_args.get(k) for k in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")},
        "training": {k: training.get(k) for k in ("learning_rate", "num_train_epochs", "per_device_train_batch_size",
                                                  "gradient_accumulation_steps", "max_length", "seed")},
        "fingerprint": marker["fingerprint"],
        "counts": marker.get("counts", {}),
        "metrics": marker.get("metrics", {}),
        "trained_seconds": marker.get("seconds"),
        "finished_at": marker.get("finished_at"),
        "dtype": dtype,
        "source_sha256": file_digest(source / "adapter_model.safetensors"),
        "sha256": file_digest(out_dir / "adapter_model.safetensors"),
    }
    (out_dir / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")
    return provenance
