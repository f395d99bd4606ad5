"""The study's numbers: per-policy intervals, paired differences, timings, seeds and versions, as JSON and text.

``study.json`` (also copied to ``study.results_path``) holds one entry per policy::

    {"success_rate": 0.31, "success_ci": [0.24, 0.38], "tests_passed": 52.0, "tests_passed_ci": [46.1, 57.9],
     "episodes": 320, "tasks": 80, "parts": {"seen": {...}, "unseen": {...}}}

(``success_rate`` is a fraction, ``tests_passed`` a percentage, as in the evaluation metrics), ``comparisons``
(paired differences by task, same units), ``critic_selection``, ``answer_turns`` (every policy's answers on the same
held-out answer turns, `sweet_trl.study.answer_turns`), ``stages`` (seconds per stage), ``seeds``,
``versions`` and ``wall_seconds`` (this call's: a resumed study counts only its own time there, while ``stages``
keeps each stage's seconds from the call that ran it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from colbench_gym.tasks.procedural import task_part
from sweet_trl.study.config import last_best_of_n_round
from sweet_trl.study.stats import Interval, bootstrap_mean, paired_difference, per_task_means

METRICS = {"success": ("success_rate", 1.0), "tests_passed": ("mean_reward", 100.0)}


def per_task_rows(marker: Mapping[str, Any], run_dir: Path) -> list[dict[str, Any]]:
    """An evaluate stage's per-task rows (its marker's ``dir`` is relative to ``run_dir``)."""
    path = run_dir / marker["dir"] / "per_task.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _scaled(interval: Interval, scale: float) -> Interval:
    return Interval(interval.mean * scale, interval.low * scale, interval.high * scale, interval.tasks,
                    interval.level)


def policy_entry(rows: list[dict[str, Any]], samples: int, level: float, seed: int) -> dict[str, Any]:
    """Success and tests passed with intervals over tasks, for all tasks and for each procedural part."""
    def summary(subset: list[dict[str, Any]]) -> dict[str, Any]:
        success = bootstrap_mean([r["success_rate"] for r in subset], samples, level, seed)
        tests = _scaled(bootstrap_mean([r["mean_reward"] for r in subset], samples, level, seed), 100.0)
        return {"success_rate": success.mean, "success_ci": [success.low, success.high],
                "tests_passed": tests.mean, "tests_passed_ci": [tests.low, tests.high],
                "episodes": sum(int(r["episodes"]) for r in subset), "tasks": len(subset)}

    entry = summary(rows)
    parts: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        part = task_part(str(row["task_id"]))
        if part:
            parts.setdefault(part, []).append(row)
    if parts:
        entry["parts"] = {name: summary(subset) for name, subset in sorted(parts.items())}
    return entry


def comparison(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], samples: int, level: float, seed: int
               ) -> dict[str, Any]:
    out = {}
    for name, (key, scale) in METRICS.items():
        diff = _scaled(paired_difference(per_task_means(ours, key), per_task_means(theirs, key), samples, level,
                                         seed), scale)
        out[name] = {"difference": diff.mean, "ci": [diff.low, diff.high], "excludes_zero": diff.excludes_zero(),
                     "tasks": diff.tasks}
    return out


def _seeds(markers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    seeds: dict[str, Any] = {}
    for key, marker in markers.items():
        for section in marker.get("config", []):
            for field, value in section.items():
                if "seed" in field and value is not None:
                    seeds.setdefault(key, {})[field] = value
    return seeds


def study_results(study: Any, critic_selection: dict[str, Any] | None, wall_seconds: float) -> dict[str, Any]:
    args = study.args
    samples, level, seed = args.bootstrap_samples, args.confidence, args.seed
    evaluations = {k.split("/", 1)[1]: m for k, m in study.markers.items() if k.startswith("evaluate/")}
    rows = {name: per_task_rows(marker, study.run_dir) for name, marker in evaluations.items()}
    policies = {name: policy_entry(r, samples, level, seed) for name, r in rows.items()}
    comparisons: dict[str, Any] = {}

    def compare(ours: str, theirs: str, label: str | None = None) -> None:
        if ours in rows and theirs in rows:
            comparisons[label or f"{ours} - {theirs}"] = comparison(rows[ours], rows[theirs], samples, level, seed)

    compare("sweet", "zero_shot")
    baselines = [b for b in ("rft", "mtdpo") if b in policies]
    if baselines:
        best = max(baselines, key=lambda b: (policies[b]["success_rate"], policies[b]["tests_passed"]))
        compare("sweet", best, f"sweet - best baseline ({best})")
    for other in ("rft", "mtdpo", "sweet_no_privileged"):
        compare("sweet", other)
        compare(other, "zero_shot")
    compare("sweet_best", "zero_shot")
    for other in ("sweet", "rft", "mtdpo", "sweet_no_privileged"):
        compare("sweet_best", other)
    last_round = last_best_of_n_round(rows)
    for other in ("sweet", "rft", "mtdpo", "sweet_no_privileged") if last_round else ():
        compare(last_round, other)  # the last round, against every other method, as round 1 above
    for name in rows:
        if name.startswith("sweet_round"):
            compare(name, "sweet", f"{name} - sweet (round 1)")
        if name.startswith("sweet_best_round"):
            compare(name, "zero_shot")
            compare(name, "sweet_best", f"{name} - sweet_best (round 1)")
    first = next(iter(study.markers.values()))
    run_config = first["config"][0]
    return {
        "config": study.config_path,
        "env_id": run_config.get("env_id"),
        "train_tasks": run_config.get("train_tasks"), "eval_tasks": run_config.get("eval_tasks"),
        "max_train_tasks": run_config.get("max_train_tasks"), "max_eval_tasks": run_config.get("max_eval_tasks"),
        "policy_model": run_config.get("policy_model"),
        "study": {k: v for k, v in vars(args).items()},
        "policies": policies,
        "comparisons": comparisons,
        "failed": dict(study.failed),
        "critic_selection": critic_selection,
        "answer_turns": study.answer_turns,
        "stages": [{"stage": key, "dir": m["dir"], "seconds": round(float(m["seconds"]), 1),
                    "finished_at": m["finished_at"]} for key, m in study.markers.items()],
        "stage_seconds_total": round(sum(float(m["seconds"]) for m in study.markers.values()), 1),
        "wall_seconds": round(wall_seconds, 1),
        "seeds": _seeds(study.markers),
        "versions": first.get("versions", {}),
    }


def format_table(results: Mapping[str, Any]) -> str:
    """The printed summary: one row per policy, then the paired differences."""
    level = round(100 * results["study"]["confidence"])
    lines = [f"Held-out test tasks ({results['eval_tasks']}), {level}% bootstrap intervals over tasks:",
             f"{'policy':<22}{'success %':>24}{'tests passed %':>26}{'episodes':>10}"]
    for name, entry in results["policies"].items():
        success = Interval(entry["success_rate"], *entry["success_ci"], entry["tasks"]).format()
        tests = Interval(entry["tests_passed"], *entry["tests_passed_ci"], entry["tasks"]).format(scale=1.0)
        lines.append(f"{name:<22}{success:>24}{tests:>26}{entry['episodes']:>10}")
    for name, why in results.get("failed", {}).items():
        lines.append(f"{name:<22}not trained or evaluated: {why}")
    if results["comparisons"]:
        lines.append("Paired differences (points):")
        for label, comp in results["comparisons"].items():
            s, t = comp["success"], comp["tests_passed"]
            lines.append(f"  {label:<38} success {100 * s['difference']:+6.1f} [{100 * s['ci'][0]:+.1f}, "
                         f"{100 * s['ci'][1]:+.1f}]   tests {t['difference']:+6.1f} [{t['ci'][0]:+.1f}, "
                         f"{t['ci'][1]:+.1f}]")
    lines.extend(selection_lines(results.get("critic_selection") or {}, results["study"]["critic_eval_candidates"]))
    lines.extend(_answer_turn_lines(results.get("answer_turns") or {}))
    lines.append(f"Stage time {results['stage_seconds_total'] / 60:.1f} min (wall {results['wall_seconds'] / 60:.1f} "
                 "min this call)" + ("" if results.get("complete", True) else "; the study goes on"))
    return "\n".join(lines)


def selection_lines(selection: Mapping[str, Any], candidates: int | str = "N") -> list[str]:
    """The critics' best-of-N judgement (:func:`~sweet_trl.study.critic_eval.best_of_n_selection`) as text."""
    if "error" in selection:
        return [f"Critics' best-of-{candidates} judgement: not measured ({selection['error']})"]
    if not selection.get("rankers"):
        return []
    tasks = max((entry.get("tasks_scored", 0) for entry in selection["rankers"].values()), default=0)
    lines = [f"Best-of-{candidates} selection on {selection['turns_with_reward_spread']} held-out answer turns whose "
             f"candidates differ ({tasks} tasks; intervals over tasks):"]
    for name, entry in selection["rankers"].items():
        if "top1" in entry:
            top, success = entry["top1"], entry.get("selected_success")
            lines.append(f"  {name:<26} picks a best candidate {100 * top['mean']:5.1f}% "
                         f"[{100 * top['low']:.1f}, {100 * top['high']:.1f}]"
                         + (f", its pick succeeds {100 * success['mean']:5.1f}%" if success else ""))
    for label, diff in (selection.get("paired") or {}).items():
        if "top1" in diff:
            top, reward = diff["top1"], diff["selected_reward"]
            lines.append(f"  {label} (paired on {diff['turns']} turns of {diff.get('tasks', '?')} tasks): best pick "
                         f"{100 * top['mean']:+.1f} [{100 * top['low']:+.1f}, {100 * top['high']:+.1f}] points, pick's "
                         f"reward {reward['mean']:+.3f} [{reward['low']:+.3f}, {reward['high']:+.3f}]")
    if "turns_with_a_success" in selection:
        lines.append(f"  any candidate succeeds on {selection['turns_with_a_success']} of {selection['turns']} turns")
    return lines


def _answer_turn_lines(answer_turns: Mapping[str, Any]) -> list[str]:
    if "error" in answer_turns:
        return [f"Answer turns: not measured ({answer_turns['error']})"]
    if not answer_turns.get("policies"):
        return []

    def interval(i: Mapping[str, float], sign: str = "") -> str:
        return f"{100 * i['mean']:{sign}.1f} [{100 * i['low']:{sign}.1f}, {100 * i['high']:{sign}.1f}]"

    settings = answer_turns["settings"]
    n = settings["candidates"]
    first_entry = next(iter(answer_turns["policies"].values()))
    lines = [f"Answer turns ({first_entry['turns']} held-out turns of {first_entry.get('tasks', '?')} tasks x {n} "
             f"answers at temperature {settings['temperature']}; intervals over tasks):",
             f"  {'policy':<22}{'tests passed %, one answer':>28}{'pass@1 %':>22}{f'pass@{n} %':>22}"]
    for name, entry in answer_turns["policies"].items():
        first, last = entry["by_k"][0], entry["by_k"][-1]
        lines.append(f"  {name:<22}{interval(first['best_tests_passed']):>28}{interval(first['pass_at_k']):>22}"
                     f"{interval(last['pass_at_k']):>22}")
    for name, why in answer_turns.get("failed", {}).items():
        lines.append(f"  {name:<22}not measured: {why}")
    for label, rows in answer_turns["comparisons"].items():
        first = rows[0]
        lines.append(f"  {label:<38} tests {interval(first['best_tests_passed'], '+')}   "
                     f"pass@1 {interval(first['pass_at_k'], '+')}")
    return lines


def write_results(study: Any, results: dict[str, Any], report: bool = True) -> Path:
    """``study.json`` (and the results path's copy) and the table; with ``report``, the run's HTML report too."""
    path = study.run_dir / "study.json"
    path.write_text(json.dumps(results, indent=1), encoding="utf-8")
    if study.args.results_path:
        target = Path(study.args.results_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    print("\n" + format_table(results), file=study.out, flush=True)
    if not report:
        return path
    from sweet_trl.pipeline import write_report
    from sweet_trl.pipeline_config import ReportArguments

    run_args = study.stage_options("collect", ["--run_dir", str(study.run_dir)])[0]
    write_report(run_args, ReportArguments(), study.out)
    return path


def other_reader(results: Any) -> str:
    """Which reader a results file is for, said where another refuses it (``""`` when none fits)."""
    if not isinstance(results, dict):
        return ""
    for keys, command in ((("protocol", "arms"), "fair-report"), (("rankers", "ground_truth"), "credit-report"),
                          (("policies", "study"), "study-report")):
        if all(key in results for key in keys):
            return f": it is read by `sweet-rl {command}`"
    return ""


def load_results(path: str | Path, keys: tuple[str, ...], kind: str, lacking: str | None = None) -> dict[str, Any]:
    """A results file that holds ``keys``; else ``ValueError`` saying it is not ``kind`` (it has no ``lacking``, by
    default the keys) and which reader reads it."""
    results = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(results, dict) or not all(key in results for key in keys):
        raise ValueError(f"{path} is not {kind} (no {lacking or ' or '.join(keys)})" + other_reader(results))
    return results


def main(argv: Any = None) -> int:
    """``sweet-rl study-report STUDY_JSON_OR_RUN_DIR...``: each ``sweet-rl study`` results file (or the
    ``study.json`` of a run folder) as the table the study printed when it wrote it."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl study-report",
                                     description="A `sweet-rl study` results JSON as the table the study prints "
                                                 "(fair studies: sweet-rl fair-report; credit: sweet-rl credit-report).")
    parser.add_argument("results", nargs="+", help="study JSON files, or run folders holding study.json")
    args = parser.parse_args(argv)
    texts = []
    for name in args.results:
        path = Path(name) / "study.json" if Path(name).is_dir() else Path(name)
        if not path.is_file():
            raise ValueError(f"{name} holds no study.json (`sweet-rl study` writes <run_dir>/study.json as its "
                             "policies are evaluated)" if Path(name).is_dir() else f"{name}: no such file")
        results = load_results(path, ("policies", "study"), "a `sweet-rl study` JSON", "policies or study settings")
        texts.append(f"### {path}\n\n{format_table(results)}")
    print("\n\n".join(texts))
    return 0
