"""The study's critic judgement: held-out answer turns, N graded candidates each, each critic's first choice.

Files under ``<run_dir>/critic_eval/``: ``candidates/`` (a ``datasets`` folder; sampling resumes like the
``sample_candidates`` stage), ``graded.jsonl`` (candidates with their true rewards), ``scores.jsonl`` (every
critic's scores of them, computed again only when a critic was retrained; ``scripts/pool_critic_judgements.py``
pools these of several runs) and ``selection.json`` (the result).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweet_trl.study.critic_eval import (
    answer_turn_states,
    best_of_n_selection,
    critic_ranker,
    read_with_settings,
    sampled_and_graded,
    score_turns,
    stored_rankers,
    write_with_settings,
)

SCORES_FILE = "scores.jsonl"


def _critics(study: Any) -> dict[str, Path]:
    critics = {"privileged": study.run_dir / "train_critic"}
    if "sweet_no_privileged" in study.args.methods:
        critics["no_privileged"] = study.run_dir / "no_privileged" / "train_critic"
    return {name: folder for name, folder in critics.items() if (folder / "_COMPLETE.json").exists()}


def judge_critics(study: Any) -> dict[str, Any]:
    out_dir = study.run_dir / "critic_eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    critics = _critics(study)
    run, gen, _ = study.stage_options("sample_candidates", ["--run_dir", str(study.run_dir)])
    (_, rank_args) = study.stage_options("rank", ["--run_dir", str(study.run_dir)])
    settings = {
        "critics": {name: json.loads((folder / "_COMPLETE.json").read_text())["run_id"]
                    for name, folder in critics.items()},
        "zero_shot_run": study.markers["evaluate/zero_shot"]["run_id"],
        "states": study.args.critic_eval_states, "candidates": study.args.critic_eval_candidates,
        "ranking": rank_args.ranking, "seed": study.args.seed,
    }
    scored = read_with_settings(out_dir / SCORES_FILE, settings)
    if scored is None:
        scored = _score(study, out_dir, critics, settings, run, gen, rank_args)
    else:
        print("[critic_eval] skipped: scored", file=study.out, flush=True)
    result = best_of_n_selection(scored, stored_rankers(scored), seed=study.args.seed)
    result["settings"] = settings
    (out_dir / "selection.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _score(study: Any, out_dir: Path, critics: dict[str, Path], settings: dict[str, Any], run: Any, gen: Any,
           rank_args: Any) -> list[dict[str, Any]]:
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.pipeline import release

    print("\n=== critic_eval ===", file=study.out, flush=True)

    trajectories = study.run_dir / "evaluate" / "zero_shot" / "trajectories.jsonl"
    states = answer_turn_states(trajectories, max_turns=run.max_turns, env_id=run.env_id,
                                max_states=study.args.critic_eval_states, seed=study.args.seed)
    tasks = {task.task_id: task for task in resolve_tasks(run.eval_tasks, "backend")}
    rows = sampled_and_graded(out_dir, {k: settings[k] for k in _GRADED_KEYS}, states, tasks, run, gen,
                              model=run.policy_model, name=run.policy_model,
                              num_candidates=study.args.critic_eval_candidates, temperature=gen.temperature,
                              seed=study.args.seed)

    from sweet_trl.critic import SweetCritic

    rankers = {}
    loaded = []
    for name, folder in critics.items():
        critic = SweetCritic.from_pretrained(folder / "model", batch_size=rank_args.scoring_batch_size)
        loaded.append(critic)
        rankers[f"critic_{name}"] = critic_ranker(critic, rank_args.ranking)
    if "critic_privileged" in rankers and loaded[0].is_peft:
        # The same ranking before any critic training (the base model as critic and reference), to show what
        # training adds to it; under "critic_advantage" every candidate scores 0, a random pick.
        from sweet_trl.study.credit.scoring import untrained_critic

        untrained = untrained_critic(loaded[0], rank_args.scoring_batch_size)
        loaded.append(untrained)
        rankers["untrained_critic"] = critic_ranker(untrained, rank_args.ranking)
    scored = score_turns(rows, rankers)
    del loaded, rankers
    release()
    write_with_settings(out_dir / SCORES_FILE, settings, scored)
    return scored


_GRADED_KEYS = ("zero_shot_run", "states", "candidates", "seed")
