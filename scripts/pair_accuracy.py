"""How well a run's critic ranking orders answer candidates by their true reward, for several score gaps.

The ``rank`` stage scores N candidates per turn state; answer-turn candidates can be graded by the environment's
scorer against the task's reference, so each pair's order can be checked. This prints, per gap, the pairs whose
scores differ by more than it and how many of them put the candidate that passes more tests first, plus the
best-of-N pick against a random pick and the best candidate (tests passed, and how often each passes them all):
the measurements behind ``policy_pairs.min_score_gap`` in sweet_trl/configs/*_cpu.yaml. Across states, it says how
well the critic's score of its own pick tells which picks succeed (an AUC), and how often the picks of the
best-scored fraction of the states do: the measurement behind ``train_policy_best.top_fraction``. It also says which
side each order takes toward the code of the agent's first message (the small model's first guess): of two candidates,
how often the higher-scored one is the closer to that code, and how often the one that passes more tests is; a
ranking that prefers closeness more than the tests do teaches the policy to resubmit its first guess. Once the
``policy_pairs`` stage has run, it also grades the pairs the policy trains on at the answer turn.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/pair_accuracy.py runs/demo_cpu
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/pair_accuracy.py runs/study_cpu --gaps 0 0.1 0.3 --json out.json

Only the last agent turn (``max_turns - 1``) is graded: a question turn's value is not the code in it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any


def answer_turn(run: dict[str, Any]) -> int:
    """The index of the agent's answer turn: the last one (``max_turns - 1``), where the answer is forced."""
    return int(run["max_turns"]) - 1


def answer_rows(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rank stage's answer-turn rows and the run settings it recorded."""
    from sweet_trl.trainer_utils import load_rows

    marker = run_dir / "rank" / "_COMPLETE.json"
    if not marker.is_file():
        raise SystemExit(f"{marker} not found: run the rank stage first")
    run = json.loads(marker.read_text())["config"][0]
    rows = [r for r in load_rows(run_dir / "rank" / "ranked").to_list()
            if int(r["turn"]) == answer_turn(run) and not r.get("ranking_error") and len(r["ranking_scores"]) >= 2]
    return rows, run


def closeness_orders(rows: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """Over candidate pairs, the share in which the higher score (and, apart, the higher reward) goes to the
    candidate whose code is closer to the first agent message's code (difflib ratio)."""
    import difflib

    from colbench_gym.execution import extract_code

    counts = {"score": [0, 0], "reward": [0, 0]}
    for row in rows:
        first = extract_code(next(m["content"] for m in row["prompt"] if m["role"] == "assistant"))
        closeness = [difflib.SequenceMatcher(None, first, extract_code(c)).ratio() for c in row["candidates"]]
        for i in range(len(closeness)):
            for j in range(i + 1, len(closeness)):
                if closeness[i] == closeness[j]:
                    continue
                closer = i if closeness[i] > closeness[j] else j
                for key, values in (("score", row["ranking_scores"]), ("reward", row["candidate_rewards"])):
                    if values[i] != values[j]:
                        counts[key][0] += (i if values[i] > values[j] else j) == closer
                        counts[key][1] += 1
    out: dict[str, float | int | None] = {}
    for key, (closer_wins, pairs) in counts.items():
        out[f"higher_{key}_is_closer"] = closer_wins / pairs if pairs else None
        out[f"{key}_pairs"] = pairs
    return out


def picks_by_score(graded: list[dict[str, Any]], fractions: tuple[float, ...] = (1.0, 0.75, 0.5, 0.33, 0.25)
                   ) -> dict[str, Any]:
    """The critic's pick of each graded state, ordered across states by its score: the AUC of that score for "the
    pick passes every test" (ties count half; None without both outcomes), and per fraction of the states, the
    best-scored ones first, how often their picks succeed and their tests passed."""
    from sweet_trl.best_of_n import best_candidate
    from sweet_trl.study.critic_eval import SOLVED

    picks = []
    for row in graded:
        index = best_candidate(row["ranking_scores"])
        if index is not None:
            picks.append((row["ranking_scores"][index], row["candidate_rewards"][index]))
    picks.sort(key=lambda pick: -pick[0])
    right = [score for score, reward in picks if reward >= SOLVED]
    wrong = [score for score, reward in picks if reward < SOLVED]
    auc = (sum((a > b) + 0.5 * (a == b) for a in right for b in wrong) / (len(right) * len(wrong))
           if right and wrong else None)
    by_fraction = []
    for fraction in fractions:
        kept = picks[:max(1, math.ceil(fraction * len(picks)))] if picks else []
        by_fraction.append({"top_fraction": fraction, "states": len(kept),
                            "success": statistics.fmean(r >= SOLVED for _, r in kept) if kept else None,
                            "tests_passed": statistics.fmean(r for _, r in kept) if kept else None})
    return {"auc_success": auc, "by_top_fraction": by_fraction}


def training_pair_orders(graded: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> dict[str, int]:
    """The policy's answer-turn training pairs (the ``policy_pairs`` stage's rows) by graded reward: how many put
    the candidate that passes more tests first, as many (most often two failures: the critic's call alone), or
    fewer. A pair whose turn or answers are not among the graded rows counts as ``ungraded``."""
    by_state = {row["state_id"]: row for row in graded}
    counts = {"chosen_passes_more": 0, "as_many": 0, "chosen_passes_fewer": 0, "ungraded": 0}
    for pair in pairs:
        row = by_state.get(pair["state_id"])
        index = {candidate: i for i, candidate in enumerate(row["candidates"])} if row else {}
        chosen, rejected = (index.get(pair[side][-1]["content"]) for side in ("chosen", "rejected"))
        if chosen is None or rejected is None:
            counts["ungraded"] += 1
            continue
        a, b = row["candidate_rewards"][chosen], row["candidate_rewards"][rejected]
        counts["chosen_passes_more" if a > b else "as_many" if a == b else "chosen_passes_fewer"] += 1
    return counts


def measure(run_dir: Path, gaps: list[float]) -> dict[str, Any]:
    from colbench_gym.tasks.loaders import resolve_tasks
    from sweet_trl.study.critic_eval import SOLVED, grade_candidates, pair_order_by_gap

    rows, run = answer_rows(run_dir)
    tasks = {task.task_id: task for task in resolve_tasks(run["train_tasks"])}
    graded = [r for r in grade_candidates([r for r in rows if r["task_id"] in tasks], tasks)
              if all(math.isfinite(x) for x in r["candidate_rewards"])]  # a grader failure is not a reward
    picks = [r["candidate_rewards"][max(range(len(r["ranking_scores"])), key=r["ranking_scores"].__getitem__)]
             for r in graded]
    share_solved = lambda rewards: statistics.fmean(x >= SOLVED for x in rewards)
    pairs_dir = run_dir / "policy_pairs" / "pairs"
    training = None
    if pairs_dir.exists():
        from sweet_trl.trainer_utils import load_rows

        training = training_pair_orders(graded, [p for p in load_rows(pairs_dir).to_list()
                                                 if int(p["turn"]) == answer_turn(run)])
    return {
        "run_dir": str(run_dir),
        "answer_turns": len(graded),
        "by_gap": pair_order_by_gap(graded, gaps),
        "toward_first_code": closeness_orders(graded),
        "mean_reward": {
            "critic_pick": statistics.fmean(picks) if picks else None,
            "random": statistics.fmean(statistics.fmean(r["candidate_rewards"]) for r in graded) if graded else None,
            "best": statistics.fmean(max(r["candidate_rewards"]) for r in graded) if graded else None,
        },
        # how often the pick passes every test; "best": a candidate does (the most any ranking can give)
        "success": {
            "critic_pick": share_solved(picks) if picks else None,
            "random": statistics.fmean(share_solved(r["candidate_rewards"]) for r in graded) if graded else None,
            "best": share_solved([max(r["candidate_rewards"]) for r in graded]) if graded else None,
        },
        "picks_by_score": picks_by_score(graded),
        "training_pairs": training,  # None before the policy_pairs stage
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--gaps", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.3])
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    result = measure(args.run_dir, args.gaps)
    print(f"{result['answer_turns']} answer turns graded in {result['run_dir']}")
    for entry in result["by_gap"]:
        right = "-" if entry["ordered_right"] is None else f"{100 * entry['ordered_right']:.0f}%"
        print(f"  score gap > {entry['gap']:<5}  pairs with different rewards {entry['pairs']:>5}  ordered right {right}")
    means = {k: "-" if v is None else f"{100 * v:.1f}%" for k, v in result["mean_reward"].items()}
    print(f"  tests passed by the pick: critic {means['critic_pick']}, random {means['random']}, best {means['best']}")
    solved = {k: "-" if v is None else f"{100 * v:.1f}%" for k, v in result["success"].items()}
    print(f"  the pick succeeds: critic {solved['critic_pick']}, random {solved['random']}, any candidate "
          f"{solved['best']}")
    toward = result["toward_first_code"]
    share = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    print(f"  closer to the first message's code: the higher score in {share(toward['higher_score_is_closer'])} of "
          f"{toward['score_pairs']} pairs, the more tests passed in {share(toward['higher_reward_is_closer'])} of "
          f"{toward['reward_pairs']}")
    across = result["picks_by_score"]
    auc = "-" if across["auc_success"] is None else f"{across['auc_success']:.2f}"
    print(f"  across states, the pick's score tells a pick that succeeds with AUC {auc}; the best-scored states' picks "
          "succeed: " + ", ".join(f"top {e['top_fraction']:.0%} ({e['states']}) {share(e['success'])}"
                                   for e in across["by_top_fraction"]))
    training = result["training_pairs"]
    if training:
        print(f"  the policy's answer-turn training pairs: the chosen answer passes more tests in "
              f"{training['chosen_passes_more']}, as many in {training['as_many']}, fewer in "
              f"{training['chosen_passes_fewer']}" + (f" ({training['ungraded']} not graded)" if training["ungraded"]
                                                      else ""))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
