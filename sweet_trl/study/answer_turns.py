"""Every policy's answers on the same held-out answer turns: the final turn measured apart from the episode.

An episode's outcome mixes the agent's first message with its answer; SWEET-RL ranks and trains turn by turn. So
the study also samples N answers from each evaluated policy at the same held-out answer turns (the zero-shot
evaluation's dialogues up to the agent's final message, the turns the critics are judged on) and grades every
answer with the environment's scorer. Per policy, with bootstrap intervals over tasks (a task's turns averaged
first): the tests passed by one answer, pass@1 and pass@N (the chance that at least one of k answers drawn from the
N passes every test, unbiased estimator) and the best of N's tests passed, which bounds what ranking the policy's own
answers can reach. Paired on the same turns, averaged and resampled by task: each trained policy minus zero-shot,
SWEET-RL minus every other policy.

Files under ``<run_dir>/answer_turns/<policy>/``: ``candidates/`` (a ``datasets`` folder; sampling resumes like the
``sample_candidates`` stage) and ``graded.jsonl`` (the answers' rewards, reused while the policy's evaluation, the
turns and the sampling settings are the same).

    pass_at_k(successes=3, samples=16, k=4)        # one turn: 3 of 16 answers pass every test
    headroom(graded_rows)                          # every k = 1, 2, 4, ... N, with per-turn values for pairing
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.evaluation import pass_at_k
from sweet_trl.study.config import last_best_of_n_round
from sweet_trl.study.critic_eval import SOLVED
from sweet_trl.study.stats import bootstrap_by_task, paired_by_task


def expected_best_of_k(rewards: Sequence[float], k: int) -> float:
    """The expected largest reward among ``k`` of ``rewards`` drawn without replacement: the i-th smallest is the
    largest of the draw in C(i - 1, k - 1) of the C(n, k) draws."""
    n = len(rewards)
    if not 0 < k <= n:
        raise ValueError(f"need 0 < k <= {n}, got {k}")
    ordered = sorted(rewards)
    return sum(r * math.comb(i, k - 1) for i, r in enumerate(ordered)) / math.comb(n, k)


def task_of_turn(row: Mapping[str, Any]) -> str:
    """The task of an answer-turn row: its ``task_id``, else read from its ``state_id``
    (``<task_id>/<seed>/turn<k>``)."""
    if row.get("task_id") is not None:
        return str(row["task_id"])
    return str(row["state_id"]).rsplit("/", 2)[0]


def headroom(rows: Sequence[Mapping[str, Any]], samples: int = 10_000, level: float = 0.95, seed: int = 0
             ) -> dict[str, Any]:
    """pass@k and the best of k's tests passed for k = 1, 2, 4, ... up to the fewest answers of a turn, with
    intervals over tasks, and each turn's values (``per_turn``: state id -> {k: [pass@k, best of k]}; its task in
    ``turn_tasks``) for paired comparisons. Turns the grader could not score (an infrastructure error) are left
    out."""
    usable = [r for r in rows if r["candidate_rewards"] and all(math.isfinite(x) for x in r["candidate_rewards"])]
    graded = {r["state_id"]: r["candidate_rewards"] for r in usable}
    if not graded:
        raise ValueError("no graded answer turn: nothing to measure")
    turn_tasks = {r["state_id"]: task_of_turn(r) for r in usable}
    fewest = min(len(rewards) for rewards in graded.values())
    out: dict[str, Any] = {"turns": len(graded), "tasks": len(set(turn_tasks.values())), "candidates": fewest,
                           "by_k": [], "per_turn": {}, "turn_tasks": turn_tasks}
    for k in [2 ** i for i in range(fewest.bit_length()) if 2 ** i <= fewest]:
        solved = {state: pass_at_k(sum(x >= SOLVED for x in rewards), len(rewards), k)
                  for state, rewards in graded.items()}
        best = {state: expected_best_of_k(rewards, k) for state, rewards in graded.items()}
        out["by_k"].append({
            "k": k,
            "pass_at_k": bootstrap_by_task([(turn_tasks[s], v) for s, v in solved.items()], samples, level,
                                           seed).to_dict(),
            "best_tests_passed": bootstrap_by_task([(turn_tasks[s], v) for s, v in best.items()], samples, level,
                                                   seed).to_dict()})
        for state in graded:
            out["per_turn"].setdefault(state, {})[str(k)] = [solved[state], best[state]]
    return out


def paired_with(entry: Mapping[str, Any], baseline: Mapping[str, Any], samples: int = 10_000, level: float = 0.95,
                seed: int = 0) -> list[dict[str, Any]]:
    """``entry - baseline`` per k (pass@k, best of k's tests passed) on the turns both graded, averaged per task,
    tasks resampled."""
    shared = sorted(set(entry["per_turn"]) & set(baseline["per_turn"]))
    if not shared:
        raise ValueError("no answer turn in common: a paired difference needs the same turns")
    turn_tasks = {**baseline.get("turn_tasks", {}), **entry.get("turn_tasks", {})}
    turn_tasks = {state: turn_tasks.get(state) or task_of_turn({"state_id": state}) for state in shared}
    out = []
    for row in entry["by_k"]:
        k = str(row["k"])
        if any(k not in baseline["per_turn"][state] for state in shared):
            continue
        differences: dict[str, Any] = {"k": row["k"], "turns": len(shared)}
        for index, name in enumerate(("pass_at_k", "best_tests_passed")):
            ours = {state: entry["per_turn"][state][k][index] for state in shared}
            theirs = {state: baseline["per_turn"][state][k][index] for state in shared}
            differences[name] = paired_by_task(ours, theirs, turn_tasks, samples, level, seed).to_dict()
        out.append(differences)
    return out


# -- in the study ------------------------------------------------------------------------------------------------

# the paired differences the study reports: each trained policy against zero-shot, SWEET-RL and the last round of
# best-of-N fine-tuning against the other methods
def _comparisons(policies: Sequence[str]) -> list[tuple[str, str]]:
    pairs = [(name, "zero_shot") for name in policies if name != "zero_shot"] if "zero_shot" in policies else []
    if "sweet" in policies:
        pairs += [("sweet", other) for other in policies if other not in ("sweet", "zero_shot")]
    last_round = last_best_of_n_round(policies)
    if last_round:
        pairs += [(last_round, other) for other in ("rft", "mtdpo", "sweet_no_privileged") if other in policies]
    return pairs


def answer_turn_comparison(study: Any) -> dict[str, Any]:
    """Sample, grade and compare every evaluated policy's answers on the same held-out answer turns."""
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.study.critic_eval import answer_turn_states

    args = study.args
    evaluations = {key.split("/", 1)[1]: marker for key, marker in study.markers.items()
                   if key.startswith("evaluate/")}
    if "zero_shot" not in evaluations:
        raise ValueError("the answer-turn comparison needs the zero-shot evaluation (its dialogues give the turns)")
    run, gen, _ = study.stage_options("sample_candidates", ["--run_dir", str(study.run_dir)])
    if run.kind != "backend":
        raise ValueError("the answer-turn comparison grades code answers: backend runs only")
    trajectories = study.run_dir / evaluations["zero_shot"]["dir"] / "trajectories.jsonl"
    states = answer_turn_states(trajectories, max_turns=run.max_turns, env_id=run.env_id,
                                max_states=args.answer_turn_states, seed=args.seed)
    tasks = {task.task_id: task for task in resolve_tasks(run.eval_tasks, "backend")}
    sampling = {"turns_from": evaluations["zero_shot"]["run_id"], "states": args.answer_turn_states,
                "candidates": args.answer_turn_candidates, "temperature": gen.temperature, "top_p": gen.top_p,
                "max_new_tokens": gen.max_new_tokens, "seed": args.seed}
    print("\n=== answer_turns ===", file=study.out, flush=True)
    entries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for name, marker in evaluations.items():
        settings = {**sampling, "policy": name, "evaluation_run": marker["run_id"],
                    "model": _policy_model(study, marker, run.policy_model)}
        try:
            rows = _graded_answers(study.run_dir / "answer_turns" / name, settings, states, tasks, run, gen)
            entries[name] = headroom(rows, args.bootstrap_samples, args.confidence, args.seed)
        except (OSError, ValueError, RuntimeError) as err:  # one policy's failure leaves the others' results
            failed[name] = f"{type(err).__name__}: {err}"
            print(f"[answer_turns] {name}: not measured: {failed[name]}", file=study.out, flush=True)
            continue
        first, last = entries[name]["by_k"][0], entries[name]["by_k"][-1]
        print(f"[answer_turns] {name}: one answer passes {100 * first['best_tests_passed']['mean']:.1f}% of the "
              f"tests, pass@1 {100 * first['pass_at_k']['mean']:.1f}%, pass@{last['k']} "
              f"{100 * last['pass_at_k']['mean']:.1f}%", file=study.out, flush=True)
    comparisons = {f"{a} - {b}": paired_with(entries[a], entries[b], args.bootstrap_samples, args.confidence,
                                             args.seed)
                   for a, b in _comparisons(list(entries))}
    return {"settings": sampling, "policies": {name: {k: v for k, v in entry.items()
                                                      if k not in ("per_turn", "turn_tasks")}
                                               for name, entry in entries.items()},
            "comparisons": comparisons, "failed": failed}


def _policy_model(study: Any, marker: Mapping[str, Any], base_model: str) -> str:
    """The model an evaluation ran: the run's base policy for zero-shot, else the trained stage's model folder
    beside the evaluation (the ablation and later rounds evaluate in their own sub-folders)."""
    from sweet_trl.pipeline import POLICY_STAGES

    policy = marker["info"]["policy"]
    if policy == "zero_shot":
        return base_model
    if policy not in POLICY_STAGES:
        return policy  # a model given by path or Hub id
    run_dir = (study.run_dir / marker["dir"]).parent.parent
    return str(run_dir / POLICY_STAGES[policy] / "model")


def _graded_answers(folder: Path, settings: dict[str, Any], states: list[dict[str, Any]],
                    tasks: Mapping[str, Any], run: Any, gen: Any) -> list[dict[str, Any]]:
    """One policy's graded answers: read back when sampled with the same settings, else sampled and graded."""
    from sweet_trl.study.critic_eval import sampled_and_graded

    return sampled_and_graded(folder, settings, states, tasks, run, gen, model=settings["model"],
                              name=settings["policy"], num_candidates=settings["candidates"],
                              temperature=settings["temperature"], seed=settings["seed"])
