"""The warm start: supervised fine-tuning on scripted expert dialogues before reinforcement learning.

A policy that never succeeds gives a ranking method nothing to rank (SmolLM2-135M zero-shot passes every test on
about 1% of the procedural test tasks). The warm start gives it a starting point like the paper's: an expert plays
each task of a template pool that neither the train nor the test tasks use
(:data:`colbench_gym.tasks.procedural.WARM_START_TEMPLATES`): it asks one question that names every hidden detail
of the task ("What is the base shipping charge, and how much is added per kilogram of weight?"), reads the
simulated human's reply, and answers with the reference. The dialogues are played in the real environment with
the run's simulated human and graded there, then the policy imitates the expert's turns (the loss of rejection
fine-tuning: agent turns only, never the instructions or the human's replies).

In the pipeline it is the stage ``warm_start``, run first by ``sweet-rl pipeline`` and ``sweet-rl study`` when the
configuration has a ``warm_start:`` section; every later stage then starts from its model (``policy_model``, and the
critic's base unless ``critic_model`` is set), and "zero-shot" is the warm-started policy::

    sweet-rl warm-start --config warm_start_cpu

From Python::

    from colbench_gym.tasks.procedural import warm_start_tasks
    from sweet_trl.warm_start import expert_dialogues
    records = expert_dialogues(warm_start_tasks(400), max_turns=2)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from colbench_gym.envs.dialogue import ANSWER_MARKER

EXPERT_POLICY = "expert"


def expert_question(row: Mapping[str, Any]) -> str:
    """The expert's question for a procedural task row: the one its warm-start template names every hidden
    detail with."""
    from colbench_gym.tasks.procedural import warm_start_template

    template = row.get("template")
    try:
        question = warm_start_template(str(template)).question
    except KeyError:
        raise ValueError(f"task {row.get('task_id')!r} is not from the warm-start pool (template {template!r}): "
                         "expert dialogues are scripted for the warm-start templates only") from None
    if not question:
        raise ValueError(f"warm-start template {template!r} has no expert question")
    return question


def expert_answer(code: str) -> str:
    """The expert's answer: the answer marker and the reference in a code block, without its whole-line comments
    (the simulated human reads them out; an answer needs none). The same text the answer forcing of a small
    policy starts (``force_answer_on_last_turn``), so imitating it teaches what forced turns continue."""
    lines = [line for line in code.strip().splitlines() if not re.match(r"^\s*#", line)]
    body = "\n".join(lines)
    return f"{ANSWER_MARKER}\n```python\n{body}\n```"


def expert_dialogues(rows: Sequence[Mapping[str, Any]], *, env_id: str = "ColBench-Backend-v0", max_turns: int = 2,
                     simulator: Any = None, seed: int = 0) -> list[dict[str, Any]]:
    """Play one expert episode per task row in the environment and return the trajectory records.

    With two turns or more the expert asks its question first; with one it answers at once. Each record is the
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
    questions = [expert_question(row) for row in rows]  # refuses a task outside the pool before any episode
    kwargs: dict[str, Any] = {"max_turns": max_turns}
    if simulator is not None:
        kwargs["simulator"] = simulator
    env = gym.make(env_id, tasks=list(rows), **kwargs)
    records = []
    try:
        for index, (row, question) in enumerate(zip(rows, questions)):
            started = time.perf_counter()
            spec = EpisodeSpec(str(row["task_id"]), seed + index)
            _, info = env.reset(seed=spec.seed, options={"task_id": spec.task_id})
            turns = [question] if max_turns >= 2 else []
            turns.append(expert_answer(row["ground_truth"]))
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
