"""Policies evaluated in different runs, side by side on the same tasks: intervals, paired differences, behaviour.

A study compares the policies of one run. An ablation that retrains one stage in another run folder (other pairs,
another learning rate) is compared here instead: each evaluation folder (``<run>/evaluate/<policy>``) gives success
and tests passed per task with 95% bootstrap intervals over tasks, and every folder after the first gets its paired
difference to the first (the folders must cover the same tasks). For backend dialogues it also says how often the
final answer repeats the code of the agent's first message unchanged, and the tests passed with and without a
repeat: the small model's typical failure is to hear the decisive fact and resubmit its first guess. And how often
the human's replies state a number of the reference solution that the task text does not (the hidden detail, where
it is a number), how often the final answer then contains that number, and the tests passed either way: whether a
policy's questions get the fact, and whether its answer uses it.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/compare_evaluations.py runs/study_cpu_run3/evaluate/sweet \\
        runs/study_cpu_run3_answer/evaluate/sweet --json out.json

With ``--pooled``, the folders are pairs (ours, theirs), one pair per seed of the same comparison: each task's
difference is averaged over the seeds, then tasks are resampled (one interval for both seeds, paired by task):

    .venv/bin/python scripts/compare_evaluations.py --pooled runs/a_seed0/evaluate/x runs/b_seed0/evaluate/y \\
        runs/a_seed1/evaluate/x runs/b_seed1/evaluate/y
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from colbench_gym.execution import extract_code
from sweet_trl.study.results import comparison, policy_entry
from sweet_trl.study.stats import DEFAULT_LEVEL, bootstrap_mean

SUCCESS_TO_POINTS = 100.0  # the study keeps success as a fraction and tests passed in percent


def _episodes(folder: Path) -> list[dict[str, Any]] | None:
    """The evaluation's recorded episodes, or None without a ``trajectories.jsonl``."""
    path = folder / "trajectories.jsonl"
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _percent_mean(values: list[float]) -> float | None:
    return 100.0 * sum(values) / len(values) if values else None


def repeats(folder: Path) -> dict[str, Any] | None:
    """How often the answer is the first agent message's code unchanged, and the tests passed either way."""
    records = _episodes(folder)
    if records is None:
        return None
    rewards: dict[bool, list[float]] = {True: [], False: []}
    for record in records:
        agent = [m["content"] for m in record.get("dialogue_history", []) if m["role"] == "assistant"]
        if len(agent) < 2 or record.get("answer") is None or record.get("reward") is None:
            continue  # answered at once, or never: nothing to repeat
        repeated = extract_code(agent[0]).strip() == extract_code(record["answer"]).strip()
        rewards[repeated].append(float(record["reward"]))
    total = len(rewards[True]) + len(rewards[False])
    if not total:
        return None
    return {"episodes": total, "repeat_rate": 100.0 * len(rewards[True]) / total,
            "tests_passed_when_repeated": _percent_mean(rewards[True]),
            "tests_passed_otherwise": _percent_mean(rewards[False])}


# Numbers as written in code or prose; a leading minus or a trailing unit does not matter, 0 and 1 are too common.
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\w)")
_TOO_COMMON = {"0", "1"}


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text or "")) - _TOO_COMMON


def disclosures(folder: Path) -> dict[str, Any] | None:
    """In how many episodes the human stated a number of the reference that the task text does not, and whether the
    final answer then contains one of them (tests passed when it does and when it does not)."""
    records = _episodes(folder)
    if records is None:
        return None
    episodes, told = 0, {True: [], False: []}
    for record in records:
        task, history = record.get("task") or {}, record.get("dialogue_history") or []
        if record.get("reward") is None or not history or "ground_truth" not in task:
            continue
        episodes += 1
        hidden = _numbers(task["ground_truth"]) - _numbers(task.get("problem_description", ""))
        human = " ".join(m["content"] for m in history[1:] if m["role"] == "user")
        stated = hidden & _numbers(human)
        if stated:
            told[bool(stated & _numbers(record.get("answer") or ""))].append(float(record["reward"]))
    if not episodes:
        return None
    disclosed = len(told[True]) + len(told[False])
    return {"episodes": episodes, "disclosed_rate": 100.0 * disclosed / episodes,
            "answer_uses_it_rate": 100.0 * len(told[True]) / disclosed if disclosed else None,
            "tests_passed_when_used": _percent_mean(told[True]),
            "tests_passed_when_not_used": _percent_mean(told[False])}


def _per_task(folder: Path) -> list[dict[str, Any]]:
    """An evaluation folder's per-task rows (``per_task.json``)."""
    path = folder / "per_task.json"
    if not path.is_file():
        raise SystemExit(f"{path} not found: is {folder} an evaluation folder (<run>/evaluate/<policy>)?")
    return json.loads(path.read_text(encoding="utf-8"))


def compare(folders: list[Path], samples: int, seed: int) -> dict[str, Any]:
    """The study's own statistics (``policy_entry``, ``comparison``) on each folder's ``per_task.json``, in points."""
    rows = {str(folder): _per_task(folder) for folder in folders}
    base = str(folders[0])
    out: dict[str, Any] = {"baseline": base, "policies": {}}
    for name, task_rows in rows.items():
        summary = policy_entry(task_rows, samples, DEFAULT_LEVEL, seed)
        entry: dict[str, Any] = {
            "tasks": summary["tasks"],
            "success": [SUCCESS_TO_POINTS * v for v in (summary["success_rate"], *summary["success_ci"])],
            "tests_passed": [summary["tests_passed"], *summary["tests_passed_ci"]],
        }
        if name != base:
            for metric, diff in comparison(task_rows, rows[base], samples, DEFAULT_LEVEL, seed).items():
                scale = SUCCESS_TO_POINTS if metric == "success" else 1.0
                entry[f"{metric}_minus_baseline"] = [scale * v for v in (diff["difference"], *diff["ci"])]
        entry["repeats"] = repeats(Path(name))
        entry["disclosures"] = disclosures(Path(name))
        out["policies"][name] = entry
    return out


def pooled(folders: list[Path], samples: int, seed: int) -> dict[str, Any]:
    """``ours - theirs`` over (ours, theirs) pairs of folders (one pair per seed), averaged per task over the pairs,
    tasks resampled; every pair must cover the same tasks."""
    if len(folders) < 2 or len(folders) % 2:
        raise SystemExit(f"--pooled takes pairs of folders (ours, theirs), got {len(folders)} folders")
    differences: dict[str, dict[str, list[float]]] = {"success": {}, "tests_passed": {}}
    tasks = None
    for ours, theirs in zip(folders[::2], folders[1::2]):
        rows = {folder: {r["task_id"]: r for r in _per_task(folder)} for folder in (ours, theirs)}
        pair_tasks = set(rows[ours]) & set(rows[theirs])
        if set(rows[ours]) != set(rows[theirs]) or (tasks is not None and pair_tasks != tasks):
            raise SystemExit(f"{ours} and {theirs} must cover the same tasks as every other pair")
        tasks = pair_tasks
        for task in tasks:
            for metric, key in (("success", "success_rate"), ("tests_passed", "mean_reward")):
                difference = 100.0 * (rows[ours][task][key] - rows[theirs][task][key])
                differences[metric].setdefault(task, []).append(difference)
    out: dict[str, Any] = {"pairs": [[str(a), str(b)] for a, b in zip(folders[::2], folders[1::2])]}
    for metric, by_task in differences.items():
        interval = bootstrap_mean([sum(v) / len(v) for _, v in sorted(by_task.items())], samples=samples, seed=seed)
        out[metric] = [interval.mean, interval.low, interval.high]
    out["tasks"] = len(tasks or ())
    return out


def _fmt(triple: list[float] | None, sign: str = "") -> str:
    return "-" if triple is None else f"{triple[0]:{sign}.1f} [{triple[1]:{sign}.1f}, {triple[2]:{sign}.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="evaluation folders; the first is the baseline")
    parser.add_argument("--samples", type=int, default=10_000, help="bootstrap samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--pooled", action="store_true",
                        help="folders are (ours, theirs) pairs, one per seed: one paired difference over the seeds")
    args = parser.parse_args(argv)
    if args.pooled:
        result = pooled(args.folders, args.samples, args.seed)
        print(f"{len(result['pairs'])} pairs pooled by task ({result['tasks']} tasks), ours minus theirs: success "
              f"{_fmt(result['success'], '+')}   tests passed {_fmt(result['tests_passed'], '+')} points")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        return 0
    result = compare(args.folders, args.samples, args.seed)
    for name, entry in result["policies"].items():
        print(f"{name} ({entry['tasks']} tasks)")
        print(f"  success {_fmt(entry['success'])} %   tests passed {_fmt(entry['tests_passed'])} %")
        if "success_minus_baseline" in entry:
            print(f"  minus the first: success {_fmt(entry['success_minus_baseline'], '+')}   "
                  f"tests passed {_fmt(entry['tests_passed_minus_baseline'], '+')} points")
        when = lambda v: "-" if v is None else f"{v:.1f}"
        rep = entry["repeats"]
        if rep:
            print(f"  answer repeats the first message's code: {rep['repeat_rate']:.0f}% of {rep['episodes']} "
                  f"episodes (tests passed {when(rep['tests_passed_when_repeated'])} % then, "
                  f"{when(rep['tests_passed_otherwise'])} % otherwise)")
        told = entry["disclosures"]
        if told:
            print(f"  the human stated a hidden number of the reference in {told['disclosed_rate']:.0f}% of "
                  f"{told['episodes']} episodes; the answer contains it in {when(told['answer_uses_it_rate'])}% of "
                  f"those (tests passed {when(told['tests_passed_when_used'])} % then, "
                  f"{when(told['tests_passed_when_not_used'])} % otherwise)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
