"""Headroom at the answer turn: how often any of k sampled answers succeeds (pass@k), for a policy and temperature.

Ranking methods (SWEET-RL's turn pairs, a critic's best-of-N) can only prefer answers the policy samples, so the
pass@k of the final turn bounds what one round of them can make of it. This samples N answers at each of the
held-out answer turns of a run's evaluation (the dialogue up to the agent's last message, as the study's critic
judgement does), grades every one with the environment's scorer, and reports, for k = 1, 2, 4, ... N, the unbiased
pass@k (the chance that at least one of k answers drawn from the N passes every test) and the expected tests passed
by the best of k, each with a 95% bootstrap interval over tasks (a task's turns averaged first).

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/answer_pass_at_k.py --config sweet_trl/configs/study_cpu.yaml \\
        --run_dir runs/study_cpu_run3 --states 48 --candidates 16 --temperatures 0.7 1.0 --json out.json
    # the trained policy's headroom on the same turns (an adapter folder is merged into its base), paired with the
    # zero-shot policy's by turn:
    ... --policy_model runs/study_cpu_run3/train_policy/model --baseline out.json --json trained.json

The study measures the same for every policy it trains (`study.answer_turn_states`); this script measures any
model, at several temperatures. Sampled candidates are kept under ``<run_dir>/pass_at_k/`` (one folder per policy,
temperature and setting), so a stopped measurement resumes and a repeated one only recomputes the statistics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweet_trl.study.answer_turns import headroom, paired_with


def measure(config: str, run_dir: Path, policy_model: str | None, evaluation: str, states: int, candidates: int,
            temperatures: Sequence[float], seed: int, overrides: Sequence[str] = ()) -> dict[str, Any]:
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.pipeline import models, release
    from sweet_trl.study.critic_eval import answer_turn_states, grade_candidates
    from sweet_trl.study.runner import Study
    from sweet_trl.trainer_utils import load_rows
    from sweet_trl.turn_pairs import TurnPairsConfig, sample_candidates

    study = Study(config, ["--run_dir", str(run_dir), *overrides])
    run, gen, _ = study.stage_options("sample_candidates", ["--run_dir", str(run_dir)])
    trajectories = run_dir / "evaluate" / evaluation / "trajectories.jsonl"
    if not trajectories.is_file():
        raise SystemExit(f"{trajectories} not found: evaluate the {evaluation!r} policy in {run_dir} first")
    try:
        turn_states = answer_turn_states(trajectories, max_turns=run.max_turns, env_id=run.env_id,
                                         max_states=states, seed=seed)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    tasks = {task.task_id: task for task in resolve_tasks(run.eval_tasks, "backend")}
    model = policy_model or starting_policy(study.config, run_dir, run.policy_model)
    result: dict[str, Any] = {"run_dir": str(run_dir), "policy_model": model, "evaluation": evaluation,
                              "seed": seed, "max_new_tokens": gen.max_new_tokens, "by_temperature": {}}
    backend = None  # loaded only when some temperature still has to be sampled
    try:
        for temperature in temperatures:
            settings = json.dumps([model, evaluation, states, candidates, temperature, gen.max_new_tokens, seed])
            folder = run_dir / "pass_at_k" / hashlib.sha256(settings.encode()).hexdigest()[:12]
            if (folder / "candidates" / "dataset_info.json").exists():
                sampled = load_rows(folder / "candidates").to_list()
            else:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "settings.json").write_text(settings + "\n", encoding="utf-8")
                backend = backend or models.make_backend(gen, model, name=model, run=run)
                sampling = TurnPairsConfig(env_id=run.env_id, max_turns=run.max_turns, num_candidates=candidates,
                                           temperature=temperature, top_p=gen.top_p,
                                           max_new_tokens=gen.max_new_tokens,
                                           generation_batch_size=gen.generation_batch_size, seed=seed)
                sampled = sample_candidates(turn_states, backend, sampling, output_dir=folder / "candidates").to_list()
            result["by_temperature"][str(temperature)] = headroom(grade_candidates(sampled, tasks), seed=seed)
    finally:
        del backend
        release()
    return result


def starting_policy(config: dict[str, Any], run_dir: Path, policy_model: str) -> str:
    """The run's starting policy: its warm-started one when the configuration has a ``warm_start:`` section (what the
    run's "zero-shot" evaluation played), else ``policy_model``."""
    from sweet_trl.pipeline.commands import WARM_START, warm_start_override
    from sweet_trl.pipeline.runner import read_marker

    if WARM_START not in config:
        return policy_model
    marker = read_marker(run_dir / WARM_START)
    if marker is None:
        raise SystemExit(f"error: this configuration starts from a warm start, which is not complete in {run_dir}: "
                         "run `sweet-rl warm-start` with it first, or name the policy with --policy_model")
    return warm_start_override(run_dir, marker)[1]


def _print_by_k(rows: Sequence[dict[str, Any]], unit: str, sign: str = "") -> None:
    def interval(i: dict[str, float]) -> str:
        return f"{100 * i['mean']:{sign}5.1f}{unit} [{100 * i['low']:{sign}.1f}, {100 * i['high']:{sign}.1f}]"

    for row in rows:
        print(f"    k={row['k']:<3} pass@k {interval(row['pass_at_k'])}   best of k's tests passed "
              f"{interval(row['best_tests_passed'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the run's configuration (generation settings, tasks)")
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--evaluation", default="zero_shot", help="whose evaluation gives the answer turns")
    parser.add_argument("--policy_model", help="the policy that samples (default: the run's policy_model)")
    parser.add_argument("--states", type=int, default=48, help="answer turns, drawn at random")
    parser.add_argument("--candidates", type=int, default=16, help="answers sampled per turn")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--baseline", type=Path, help="an earlier result (--json) on the same turns: the paired "
                                                      "difference to it, per temperature they share")
    args, overrides = parser.parse_known_args(argv)
    if args.states < 1 or args.candidates < 1:
        parser.error("--states and --candidates must be at least 1")
    result = measure(args.config, args.run_dir, args.policy_model, args.evaluation, args.states, args.candidates,
                     args.temperatures, args.seed, overrides)
    print(f"{result['policy_model']} on answer turns of {args.run_dir}/evaluate/{args.evaluation}")
    for temperature, entry in result["by_temperature"].items():
        print(f"  temperature {temperature}, {entry['turns']} turns of {entry['tasks']} tasks x {entry['candidates']} "
              "answers (intervals over tasks):")
        _print_by_k(entry["by_k"], "%")
    if args.baseline:
        baseline = json.loads(args.baseline.read_text(encoding="utf-8"))
        for temperature, entry in result["by_temperature"].items():
            if temperature not in baseline["by_temperature"]:
                continue
            entry["minus_baseline"] = paired_with(entry, baseline["by_temperature"][temperature], seed=args.seed)
            print(f"  minus {baseline['policy_model']} at temperature {temperature}, paired on the same turns, by task:")
            _print_by_k(entry["minus_baseline"], " points", sign="+")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
