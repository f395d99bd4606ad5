"""The stages that roll out, pair, sample, rank and evaluate (the training stages are in ``stages_training``),
with what they share: the run's tasks, its simulated human, the trajectories they read."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from colbench_gym.tasks import is_test_split
from sweet_trl.pipeline import models  # models.make_backend is looked up when a stage runs (tests replace it)
from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.models import ProgressBackend, release, sampling_params
from sweet_trl.pipeline.runner import StageContext, StageResult
from sweet_trl.pipeline_config import (
    CandidateArguments,
    CollectArguments,
    ConfigError,
    CriticPairsArguments,
    EvaluateArguments,
    GenerationArguments,
    PolicyPairsArguments,
    RankArguments,
    RunArguments,
)

# --------------------------------------------------------------------------------------------------------------
# Shared helpers of the stages
# --------------------------------------------------------------------------------------------------------------

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


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------------------------

def stage_collect(ctx: StageContext, gen: GenerationArguments, args: CollectArguments) -> StageResult:
    """Roll out the base policy on the training tasks (or import trajectories)."""
    from sweet_trl.trajectories import Trajectory, read_trajectories, write_trajectories

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
        ctx.expect(len(tasks) * args.episodes_per_task, "episodes", out.name)
        backend = models.make_backend(gen, ctx.run.policy_model, name=ctx.run.policy_model, run=ctx.run)
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
    trajectories = [Trajectory(record) for record in records]
    rewards = [t.reward for t in trajectories if t.reward is not None]
    return StageResult(
        counts={"episodes": len(records), "tasks": len({t.task_id for t in trajectories}),
                "successes": sum(t.succeeded() for t in trajectories),
                "infra_failures": len(records) - len(rewards)},
        metrics={"mean_reward": _mean(rewards), "success_rate": _mean([float(t.succeeded()) for t in trajectories]),
                 "mean_turns": _mean([r.get("turns", 0) for r in records])},
        outputs={"trajectories": out.name},
        info={"collector": stats, **({} if args.trajectories else {"policy": ctx.run.policy_model})},
    )


def stage_critic_pairs(ctx: StageContext, args: CriticPairsArguments) -> StageResult:
    """Pairs of trajectories of one task with different rewards, for the critic."""
    from sweet_trl.pairs import PAIR_RULE_PRESETS, build_critic_pairs
    from sweet_trl.trajectories import load_trajectories

    preset = PAIR_RULE_PRESETS[ctx.run.kind]
    rule = {
        "rule": args.pair_rule or preset["rule"],
        "require_success": preset["require_success"] if args.require_success is None else args.require_success,
        "min_reward_gap": preset["min_reward_gap"] if args.min_reward_gap is None else args.min_reward_gap,
    }
    records = load_trajectories(trajectories_source(ctx, args.trajectories))
    pairs, stats = build_critic_pairs(records, **rule, max_pairs_per_task=args.max_pairs_per_task,
                                      seed=args.pairs_seed, told_differs_only=args.told_differs_only)
    ctx.log(stats.summary())
    if not pairs:
        raise StageError(f"no critic pair: {stats.why_no_pairs()} ({stats.summary()})")
    out = ctx.dir / "pairs.jsonl"
    _write_jsonl(out, pairs)
    return StageResult(
        counts={"pairs": stats.pairs, "tasks_with_pairs": stats.tasks_with_pairs, "tasks": stats.tasks,
                "trajectories": stats.trajectories},
        metrics={"mean_reward_gap": _mean([p["chosen_reward"] - p["rejected_reward"] for p in pairs])},
        outputs={"pairs": out.name},
        info={"rule": rule, "dropped": dict(stats.dropped),
              **({"told_alike_left_out": stats.told_alike} if args.told_differs_only else {})},
    )


def _turn_pairs_config(run: RunArguments, **kwargs: Any) -> Any:
    from sweet_trl.turn_pairs import TurnPairsConfig

    return TurnPairsConfig(env_id=run.env_id, max_turns=run.max_turns, **kwargs)


def stage_sample_candidates(ctx: StageContext, gen: GenerationArguments, args: CandidateArguments) -> StageResult:
    """Turn states from the collected trajectories and N candidate next turns per state from the policy."""
    from sweet_trl.turn_pairs import sample_candidates, select_turn_states

    config = _turn_pairs_config(
        ctx.run, state_fraction=args.state_fraction, max_states=args.max_states, state_turns=args.state_turns,
        num_candidates=args.num_candidates, temperature=gen.temperature, top_p=gen.top_p,
        max_new_tokens=gen.max_new_tokens, generation_batch_size=gen.generation_batch_size, seed=args.candidates_seed,
    )
    states = select_turn_states(ctx.input_path("collect", "trajectories"), config, output_dir=ctx.dir / "states")
    ctx.log(f"{len(states)} turn states; sampling {args.num_candidates} candidates each")
    ctx.expect(len(states), "turn states", "candidates.partial.jsonl", header_lines=1)  # turn_pairs' resumable file
    backend = models.make_backend(gen, ctx.run.policy_model, name=ctx.run.policy_model, run=ctx.run)
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


def stage_rank(ctx: StageContext, args: RankArguments) -> StageResult:
    """Score every candidate with the trained critic (or another selector, :mod:`sweet_trl.selectors`); the critic
    also scores the turns of a few collected trajectories, for the report."""
    from sweet_trl.turn_pairs import rank_candidates

    candidates = ctx.input_path("sample_candidates", "candidates")
    total = ctx.inputs["sample_candidates"]["counts"]["turn_states"]
    ctx.expect(total, "turn states", "ranked.partial.jsonl", header_lines=1)
    critic, scorer, ranking = _selector(ctx, args, candidates)
    config = _turn_pairs_config(ctx.run, ranking=ranking, scoring_batch_size=args.scoring_batch_size)
    ranked = rank_candidates(candidates, _progress_scorer(scorer, ctx, total), config, output_dir=ctx.dir / "ranked")
    errors = sum(1 for e in ranked["ranking_error"] if e)
    advantages = [a for row in ranked["advantages"] for a in row if a is not None]
    ctx.log(f"ranked {len(ranked)} turn states by {args.selector} ({errors} failed)")
    examples = _score_trajectories(ctx, critic, args.report_trajectories)
    del critic
    release()
    return StageResult(
        counts={"turn_states": len(ranked), "ranking_errors": errors, "scored_trajectories": len(examples)},
        metrics={"mean_candidate_advantage": _mean(advantages),
                 "candidate_advantage_std": _std(advantages)},
        outputs={"ranked": "ranked", "trajectory_advantages": "trajectory_advantages.jsonl"},
        info={"selector": args.selector, "ranking": ranking},
    )


def _selector(ctx: StageContext, args: RankArguments, candidates: Path) -> tuple[Any, Callable, str]:
    """``(critic or None, scorer, ranking)`` of the rank stage's selector."""
    from sweet_trl import selectors
    from sweet_trl.turn_pairs import as_candidate_scorer

    if args.uses_critic:
        from sweet_trl.critic import SweetCritic
        from sweet_trl.precision import accelerator_device

        critic = SweetCritic.from_pretrained(ctx.input_path("train_critic", "model"),
                                             batch_size=args.scoring_batch_size)
        if args.selector == "untrained_critic":
            critic = critic.untrained()
        device = accelerator_device()
        if device is not None:  # from_pretrained loads on the CPU
            critic.to(device)
        scorer = as_candidate_scorer(critic, args.ranking)
        if args.selector == "untrained_critic":
            scorer.name = f"untrained:{scorer.name}"  # a resumed ranking must not take the trained critic's scores
        return critic, scorer, args.ranking
    if args.selector == "random":
        return None, selectors.random_scorer(args.selector_seed), selectors.SELECTOR_RANKING
    if args.selector != "true_reward":  # a selector named in SELECTORS with no branch here would grade silently
        raise ValueError(f"the rank stage has no scorer for selector {args.selector!r}")
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.trainer_utils import load_rows
    from sweet_trl.trajectories import read_trajectories

    rows = load_rows(candidates).to_list()
    # the tasks as they were played: every collected episode carries its task's row
    played = {str(r["task"]["task_id"]): r["task"] for r in read_trajectories(ctx.input_path("collect", "trajectories"))
              if r.get("task")}
    tasks = {task.task_id: task for task in resolve_tasks(list(played.values()), ctx.run.kind)}
    return None, selectors.true_reward_scorer(rows, tasks, seed=args.selector_seed), selectors.SELECTOR_RANKING


def _progress_scorer(scorer: Callable, ctx: StageContext, total: int) -> Callable:
    """``scorer`` as ``turn_pairs.rank_candidates``'s, logging progress every tenth of the states."""
    done = 0

    def score(dialogue: list[dict[str, str]], candidates: list[str], privileged: str):
        nonlocal done
        scores = scorer(dialogue, candidates, privileged)
        done += 1
        if done % max(1, total // 10) == 0 or done == total:
            ctx.log(f"scored {done}/{total} turn states")
        return scores

    score.name = getattr(scorer, "name", None)  # which scorer: a resumed ranking must be the same one's
    return score


def _std(values: Sequence[float]) -> float:
    mean = _mean(values)
    return _mean([(v - mean) ** 2 for v in values]) ** 0.5 if values else float("nan")


def _score_trajectories(ctx: StageContext, critic: Any, limit: int) -> list[dict[str, Any]]:
    """Per-turn critic advantages of some collected trajectories (tasks with both a success and a failure
    first: there the critic's credit assignment is visible), for the report; none without a critic."""
    from sweet_trl.trajectories import Trajectory, read_trajectories

    if critic is None or limit <= 0:
        _write_jsonl(ctx.dir / "trajectory_advantages.jsonl", [])
        return []

    scored = [t for t in map(Trajectory, read_trajectories(ctx.input_path("collect", "trajectories")))
              if t.reward is not None]
    by_task: dict[str, list[Trajectory]] = {}
    for trajectory in scored:
        by_task.setdefault(trajectory.task_id, []).append(trajectory)
    contrasted = [task for task, group in by_task.items() if len({t.reward for t in group}) > 1]
    chosen: list[Trajectory] = []
    for task_id in contrasted + [task for task in by_task if task not in contrasted]:
        group = sorted(by_task[task_id], key=lambda t: -t.reward)
        for trajectory in (group[0], group[-1]) if len(group) > 1 else group[:1]:
            if len(chosen) < limit:
                chosen.append(trajectory)
    rows = []
    if chosen:
        advantages = critic.turn_advantages([t.record for t in chosen])
        for trajectory, values in zip(chosen, advantages):
            rows.append({
                "episode_id": trajectory.episode_id, "task_id": trajectory.task_id,
                "reward": trajectory.reward, "success": trajectory.succeeded(),
                "dialogue_history": trajectory.messages,
                "advantages": [None if v != v else float(v) for v in values],
            })
    _write_jsonl(ctx.dir / "trajectory_advantages.jsonl", rows)
    return rows


def stage_policy_pairs(ctx: StageContext, args: PolicyPairsArguments) -> StageResult:
    """Turn-level pairs: a candidate of the critic's upper half over one of its lower half, per turn state."""
    from sweet_trl.turn_pairs import build_turn_pairs

    config = _turn_pairs_config(ctx.run, pairs_per_turn=args.pairs_per_turn, min_score_gap=args.min_score_gap,
                                turns=args.turns, seed=args.pairs_seed)
    pairs = build_turn_pairs(ctx.input_path("rank", "ranked"), config, output_dir=ctx.dir / "pairs")
    gaps = [c - r for c, r in zip(pairs["chosen_score"], pairs["rejected_score"])]
    return StageResult(
        counts={"pairs": len(pairs), "turn_states": len(set(pairs["state_id"]))},
        metrics={"mean_score_gap": _mean(gaps)},
        outputs={"pairs": "pairs"},
    )


POLICY_STAGES = {"sweet": "train_policy", "sweet_best": "train_policy_best", "rft": "baseline_rft",
                 "mtdpo": "baseline_mtdpo"}
# The paper's metrics (% tests passed and success rate for backend; similarity and win rate for frontend) and
# what explains them.
EVALUATION_METRICS = ("tests_passed", "success_rate", "mean_similarity", "win_rate", "mean_reward", "answered_rate",
                      "mean_turns")


def _evaluate_inputs(args: EvaluateArguments) -> list[str]:
    return [POLICY_STAGES[args.policy]] if args.policy in POLICY_STAGES else []


def is_run_policy(policy: str) -> bool:
    """Whether ``policy`` names a policy of the run (its starting policy or a stage's), rather than one of one's
    own (a folder, a Hub id, a served model), which needs nothing of the run."""
    return policy == "zero_shot" or policy in POLICY_STAGES


def _evaluate_folder(args: EvaluateArguments) -> str:
    """``evaluate/<policy>`` for the run's own policies; a model given by path or id also gets a short hash,
    so that two checkpoints with the same folder name do not share results (nor one adapter on two bases)."""
    if is_run_policy(args.policy):
        return f"evaluate/{args.policy}"
    identity = args.policy if args.policy_base is None else f"{args.policy}\x1f{args.policy_base}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:6]
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
    if args.policy_base is not None and is_run_policy(args.policy):
        raise ConfigError(f"policy_base is for an adapter folder given as --policy, not the run's {args.policy!r}")
    tasks = load_tasks(ctx.run, "eval")
    if is_test_split(ctx.run.eval_tasks):
        ctx.log(f"reads the test tasks ({ctx.run.eval_tasks}): a figure to report, not to choose settings on "
                f"(choose them on a validation split, as `sweet-rl fair-study` does)")
    base = f" on {args.policy_base}" if args.policy_base else ""
    ctx.log(f"policy {name} ({model}{base}): {len(tasks)} tasks x {args.eval_episodes_per_task} episodes")
    ctx.expect(len(tasks) * args.eval_episodes_per_task, "episodes", "trajectories.jsonl")
    backend = models.make_backend(gen, model, name=name, workdir=ctx.dir, run=ctx.run, base=args.policy_base)
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
    metrics.update({k: float(v) for k, v in result.metrics.items() if k.startswith("pass@")})
    outputs = {"trajectories": "trajectories.jsonl"}
    if ctx.run.kind == "frontend":
        renders = _render_pages(ctx, result.records, limit=6)
        if renders:
            outputs["renders"] = renders
    counts = {k: int(result.metrics.get(k) or 0)
              for k in ("episodes", "tasks", "infra_errors", "simulator_errors", "generated_tokens")}
    info = {"policy": args.policy, "model": model, **({"policy_base": args.policy_base} if args.policy_base else {})}
    return StageResult(counts=counts, metrics=metrics, outputs=outputs, info=info)


def _render_pages(ctx: StageContext, records: Sequence[dict[str, Any]], limit: int) -> str | None:
    """Frontend: the agent's final page and the target page as PNGs, shown side by side in the report."""
    from colbench_gym.envs.frontend import extract_html
    from colbench_gym.rendering import RendererUnavailable, shared_renderer
    from sweet_trl.trajectories import Trajectory

    try:
        renderer = shared_renderer()
    except (RendererUnavailable, ImportError) as err:
        ctx.log(f"no renders for the report: {err}")
        return None
    folder = ctx.dir / "renders"
    folder.mkdir(exist_ok=True)
    rows = []
    for index, record in enumerate([r for r in records if r.get("answer")][:limit]):
        trajectory = Trajectory(record)
        row = {"episode_id": trajectory.episode_id, "task_id": trajectory.task_id, "reward": trajectory.reward}
        for key, html in (("agent", extract_html(record["answer"])), ("target", trajectory.task["ground_truth"])):
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
