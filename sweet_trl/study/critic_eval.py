"""The critic judged directly, as the paper does: best-of-N selection on held-out answer turns.

For each held-out answer turn (the dialogue up to the agent's final message, on tasks the critic never saw), N
candidate answers are sampled from the policy and each is graded by the environment's own scorer, so its true
reward is known. A critic "selects" the candidate it ranks first; it is right when that candidate has the best
true reward among the N. A random pick is right with probability (number of best candidates) / N. Only turns
whose candidates differ in reward can tell critics apart, so the accuracy is over those turns. The turns where
any candidate passes every test bound what ranking can do for success: a perfect critic succeeds there and nowhere
else.

    rows = sample_answer_candidates(trajectories, backend, num_candidates=8, ...)
    rows = grade_candidates(rows, tasks)
    result = best_of_n_selection(rows, {"privileged": scorer_a, "no_privileged": scorer_b})

    scored = score_turns(rows, rankers)            # the scores kept: judging again, or pooling runs, costs nothing
    result = best_of_n_selection(scored, stored_rankers(scored))
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweet_trl.selectors import grade_candidates
from sweet_trl.study.stats import bootstrap_by_task, paired_by_task

SOLVED = 1.0  # the reward of an answer that passes every hidden test: a success


class NoAnswerTurns(ValueError):
    """No episode of an evaluation ended with an answer: nothing to sample again at the answer turn."""


def answer_turn_states(trajectories: Any, max_turns: int, env_id: str, max_states: int | None = None,
                       seed: int = 0) -> list[dict[str, Any]]:
    """The final agent turn of every usable trajectory that ended with an answer, as a turn state (prompt without
    ``c``, and ``c`` apart). A ``ValueError`` when there is none: a policy that never answers has no answer turn to
    sample again."""
    from colbench_gym.envs.dialogue import ANSWER_MARKER
    from sweet_trl.trajectories import read_trajectories
    from sweet_trl.turn_pairs import TurnPairsConfig, turn_states_from_records

    records = read_trajectories(trajectories)
    config = TurnPairsConfig(state_fraction=1.0, env_id=env_id, max_turns=max_turns, seed=seed)
    states, _ = turn_states_from_records(records, config)
    last = {}
    for state in states:
        if state["episode_id"] not in last or state["turn"] > last[state["episode_id"]]["turn"]:
            last[state["episode_id"]] = state
    chosen = sorted((s for s in last.values() if ANSWER_MARKER in s["original"]), key=lambda s: s["state_id"])
    if not chosen:
        raise NoAnswerTurns(f"no answer turn in {trajectories}: none of its {len(last)} usable episodes ended with an "
                            f"answer ({ANSWER_MARKER!r}), so there is no answer to sample again. Evaluate with "
                            f"force_answer_on_last_turn, or a policy that answers")
    if max_states is not None and len(chosen) > max_states:
        chosen = sorted(random.Random(seed).sample(chosen, max_states), key=lambda s: s["state_id"])
    return chosen


def sampled_and_graded(folder: Any, key: Mapping[str, Any], states: Sequence[Mapping[str, Any]],
                       tasks: Mapping[str, Any], run: Any, gen: Any, *, model: str, name: str, num_candidates: int,
                       temperature: float, seed: int) -> list[dict[str, Any]]:
    """``num_candidates`` answers of ``model`` per turn state, graded: read back from ``folder/graded.jsonl`` when
    its header holds the same ``key``, else sampled into ``folder/candidates`` (resumable) and graded."""
    import json
    from pathlib import Path

    from sweet_trl.pipeline import clear_folder, models, release
    from sweet_trl.turn_pairs import TurnPairsConfig, sample_candidates

    folder, key = Path(folder), dict(key)
    graded_path = folder / "graded.jsonl"
    graded = read_with_settings(graded_path, key)
    if graded is not None:
        return graded
    if (folder / "settings.json").exists() and json.loads((folder / "settings.json").read_text()) != key:
        clear_folder(folder)  # other answers or other sampling: the half-sampled candidates are not these
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(key), encoding="utf-8")
    config = TurnPairsConfig(env_id=run.env_id, max_turns=run.max_turns, num_candidates=num_candidates,
                             temperature=temperature, top_p=gen.top_p, max_new_tokens=gen.max_new_tokens,
                             generation_batch_size=gen.generation_batch_size, seed=seed)
    backend = models.make_backend(gen, model, name=name, run=run)
    try:
        sampled = sample_candidates(list(states), backend, config, output_dir=folder / "candidates").to_list()
    finally:
        del backend
        release()
    rows = grade_candidates(sampled, tasks)
    write_with_settings(graded_path, key, rows)
    return rows


def read_with_settings(path: Any, settings: Mapping[str, Any] | None = None) -> list[dict[str, Any]] | None:
    """The rows of a JSONL file whose first line records the settings they were made under (see
    :func:`write_with_settings`); None when it is absent, unreadable, or made under other ``settings``."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return None
    header, *lines = path.read_text(encoding="utf-8").splitlines() or [""]
    try:
        if settings is not None and json.loads(header).get("settings") != dict(settings):
            return None
        return [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError:
        return None


def settings_of(path: Any) -> dict[str, Any]:
    """The settings recorded on the first line of a file :func:`write_with_settings` wrote."""
    import json
    from pathlib import Path

    with Path(path).open(encoding="utf-8") as handle:
        return json.loads(handle.readline())["settings"]


def write_with_settings(path: Any, settings: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` as JSONL after a first line holding ``settings``, written whole and then renamed (a stopped run
    leaves no partial file to be read as complete)."""
    from pathlib import Path

    from sweet_trl.pipeline.stages import _write_jsonl

    _write_jsonl(Path(path), [{"settings": dict(settings)}, *rows])


# what one pick is judged by: a best candidate (top1), its reward, whether it passes every test
PICK_FIELDS = ("top1", "selected_reward", "selected_success")


def _selection(rewards: Sequence[float], scores: Sequence[float]) -> tuple[float, float, float] | None:
    """(hit, reward, success) of the top-scored candidate, or None when the critic scored none."""
    scored = [(s, r) for s, r in zip(scores, rewards) if math.isfinite(s)]
    if not scored:
        return None
    top_score = max(s for s, _ in scored)
    # ties at the top are split evenly: a critic that cannot tell gets chance credit, not full credit
    return _mean_pick([r for s, r in scored if s == top_score], max(rewards))


def _mean_pick(picked: Sequence[float], best: float) -> tuple[float, float, float]:
    """(hit, reward, success) of a pick made uniformly among ``picked``."""
    n = len(picked)
    return sum(r == best for r in picked) / n, sum(picked) / n, sum(r >= SOLVED for r in picked) / n


# The paper's ablation, judged turn by turn: the same candidates ranked by the critic with and without c.
PRIVILEGED_PAIR = ("critic_privileged", "critic_no_privileged")


def best_of_n_selection(rows: Sequence[Mapping[str, Any]],
                        rankers: Mapping[str, Callable[[Mapping[str, Any]], Sequence[float]]],
                        seed: int = 0, pairs: Sequence[tuple[str, str]] = (PRIVILEGED_PAIR,)) -> dict[str, Any]:
    """How often each ranker's first choice is a best candidate, over turns whose candidates differ in reward.

    ``rankers``: name -> function(row) -> one score per candidate (higher is better). ``random`` and ``oracle``
    are added. Returns, per ranker, ``top1`` (how often its pick is a best candidate), ``selected_reward`` (the
    mean true reward of its picks) and ``selected_success`` (how often its pick passes every test), each averaged
    per task with an interval over tasks, plus the turn counts and
    ``turns_with_a_success``: the turns where any candidate succeeds, the most that any ranking of these
    candidates can turn into successes. ``paired``: for each ``(ours, theirs)`` of ``pairs`` both ranked, their
    difference on the same turns (by default the critic with c against the one without).
    """
    graded = _graded(rows)
    usable = [r for r in graded if _has_reward_spread(r)]
    results: dict[str, Any] = {"turns": len(rows), "turns_with_reward_spread": len(usable),
                               "turns_with_a_success": sum(max(r["candidate_rewards"]) >= SOLVED for r in graded),
                               "rankers": {}}
    if not usable:
        return results

    tasks = [str(row.get("task_id", turn)) for turn, row in enumerate(usable)]

    def summarise(picks: Mapping[int, tuple[float, float, float]]) -> dict[str, Any]:
        return {**{name: bootstrap_by_task([(tasks[turn], pick[index]) for turn, pick in picks.items()],
                                           seed=seed).to_dict()
                   for index, name in enumerate(PICK_FIELDS)},
                "turns_scored": len(picks), "tasks_scored": len({tasks[turn] for turn in picks})}

    by_turn: dict[str, dict[int, tuple[float, float, float]]] = {}
    for name, ranker in rankers.items():
        picks = {}
        for turn, row in enumerate(usable):
            pick = _selection(row["candidate_rewards"], list(ranker(row)))
            if pick is not None:
                picks[turn] = pick
        by_turn[name] = picks
        results["rankers"][name] = summarise(picks) if picks else {"turns_scored": 0, "tasks_scored": 0}
    results["rankers"]["random"] = summarise({turn: _mean_pick(r["candidate_rewards"], max(r["candidate_rewards"]))
                                              for turn, r in enumerate(usable)})
    results["rankers"]["oracle"] = summarise({turn: _mean_pick([max(r["candidate_rewards"])],
                                                               max(r["candidate_rewards"]))
                                              for turn, r in enumerate(usable)})
    for ours, theirs in pairs:
        if ours in by_turn and theirs in by_turn:
            results.setdefault("paired", {})[f"{ours} - {theirs}"] = _paired_picks(by_turn[ours], by_turn[theirs],
                                                                                 tasks, seed=seed)
    return results


def _graded(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if _is_graded(r)]


def _is_graded(row: Mapping[str, Any]) -> bool:
    return len(row["candidate_rewards"]) >= 2 and all(math.isfinite(x) for x in row["candidate_rewards"])


def _has_reward_spread(row: Mapping[str, Any]) -> bool:
    return max(row["candidate_rewards"]) > min(row["candidate_rewards"])


def score_turns(rows: Sequence[Mapping[str, Any]],
                rankers: Mapping[str, Callable[[Mapping[str, Any]], Sequence[float]]]) -> list[dict[str, Any]]:
    """Every turn's true rewards with each ranker's scores (only where the rewards differ: elsewhere no ranker
    can be right or wrong, and scoring is the costly part), as rows that :func:`stored_rankers` reads back."""
    out = []
    for row in rows:
        scores = ({name: [float(x) for x in ranker(row)] for name, ranker in rankers.items()}
                  if _is_graded(row) and _has_reward_spread(row) else {})
        out.append({"state_id": row.get("state_id"), "task_id": row.get("task_id"),
                    "candidate_rewards": list(row["candidate_rewards"]), "scores": scores})
    return out


def stored_rankers(scored: Sequence[Mapping[str, Any]]) -> dict[str, Callable[[Mapping[str, Any]], list[float]]]:
    """The rankers whose scores :func:`score_turns` kept, as ranker functions; a turn it did not score reads as
    unscored (nan)."""
    names = sorted({name for row in scored for name in row["scores"]})

    def stored(name: str) -> Callable[[Mapping[str, Any]], list[float]]:
        return lambda row: row["scores"].get(name) or [math.nan] * len(row["candidate_rewards"])

    return {name: stored(name) for name in names}


def _paired_picks(ours: Mapping[int, tuple[float, float, float]], theirs: Mapping[int, tuple[float, float, float]],
                  tasks: Sequence[str], seed: int) -> dict[str, Any]:
    """``ours - theirs`` on the turns both scored: picks a best candidate, the pick's reward, the pick succeeds.

    Turns of one task are not independent (several episodes of a task, or several runs pooled), so the difference
    is averaged per task and the tasks are resampled, as the study's other intervals do.
    """
    turns = sorted(set(ours) & set(theirs))
    out: dict[str, Any] = {"turns": len(turns), "tasks": len({tasks[t] for t in turns})}
    if turns:
        task_of = {str(t): tasks[t] for t in turns}
        for index, name in enumerate(PICK_FIELDS):
            out[name] = paired_by_task({str(t): ours[t][index] for t in turns},
                                       {str(t): theirs[t][index] for t in turns}, task_of, seed=seed).to_dict()
    return out


def pair_order_by_gap(rows: Sequence[Mapping[str, Any]], gaps: Sequence[float]) -> list[dict[str, Any]]:
    """How often a pair of candidates whose ranking scores differ by more than ``gap`` puts the one with the higher
    true reward first, among pairs whose rewards differ: what ``policy_pairs.min_score_gap`` buys.

    ``rows``: ranked and graded rows (``ranking_scores`` and ``candidate_rewards``); every pair of candidates of a
    row counts, not only those the pairs stage would draw.
    """
    # (score gap, ordered right) of every pair whose rewards differ, once; each gap then counts the pairs it keeps
    pairs = []
    for row in rows:
        scored = [(s, r) for s, r in zip(row["ranking_scores"], row["candidate_rewards"])
                  if s is not None and r is not None and math.isfinite(s) and math.isfinite(r)]
        for (s_i, r_i), (s_j, r_j) in itertools.combinations(scored, 2):
            if r_i != r_j:
                pairs.append((abs(s_i - s_j), (s_i > s_j) == (r_i > r_j)))
    out = []
    for gap in gaps:
        kept = [right for distance, right in pairs if distance > gap]
        out.append({"gap": gap, "pairs": len(kept), "ordered_right": sum(kept) / len(kept) if kept else None})
    return out


def critic_ranker(critic: Any, ranking: str) -> Callable[[Mapping[str, Any]], list[float]]:
    """A :class:`~sweet_trl.critic.SweetCritic` as a ranker: the same scores the ``rank`` stage would give."""
    from sweet_trl.turn_pairs import as_candidate_scorer, ranking_scores

    scorer = as_candidate_scorer(critic, ranking)

    def rank(row: Mapping[str, Any]) -> list[float]:
        dialogue = [m for m in row["prompt"] if m["role"] != "system"]
        results = list(scorer(dialogue, list(row["candidates"]), row["privileged"]))
        critic_logps = [float(c) for c, _ in results]
        reference = [None if r is None else float(r) for _, r in results]
        return ranking_scores(critic_logps, row["policy_mean_logprobs"], reference, ranking)

    return rank
