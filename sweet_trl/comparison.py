"""Two evaluated policies compared paired by task: ``sweet-rl compare EVAL_A EVAL_B``.

    sweet-rl evaluate --config demo_cpu --run_dir runs/mine --eval_tasks my_tasks.jsonl --policy path/to/model
    sweet-rl evaluate --config demo_cpu --run_dir runs/theirs --eval_tasks my_tasks.jsonl --policy path/to/adapter
    sweet-rl compare runs/mine runs/theirs [--json comparison.json]

Each side is an evaluation folder (``<run_dir>/evaluate/<policy>/``, where ``sweet-rl evaluate`` writes
``per_task.json``) or a run folder that holds exactly one. Printed: each policy's success and tests passed (for the
frontend, its similarity times 100) with percentile-bootstrap intervals over tasks, then B minus A paired by task
with its interval, in points. The numbers are the study's (:func:`sweet_trl.study.results.policy_entry` and
:func:`~sweet_trl.study.results.comparison`): a task's score is the mean over its episodes and tasks are resampled,
so that the difficulty of a task, which both policies share, drops out of the difference.

Policies evaluated on different tasks (other ids, or the same ids with other task texts), in different environments
or with different similarity metrics are not compared: :class:`ComparisonError` says what differs. Other sampling
or environment options (a temperature, more turns) are compared, and printed as part of the difference. On the
procedural tasks the difference is also given on seen and unseen templates apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweet_trl.study.results import comparison, policy_entry
from sweet_trl.study.stats import DEFAULT_LEVEL, DEFAULT_SAMPLES

PER_TASK_FILE = "per_task.json"
METRICS_FILE = "metrics.json"
SETTINGS_FILE = "settings.json"  # what the episodes ran under: the sampling, the env's options, the simulated human
TRAJECTORIES_FILE = "trajectories.jsonl"
# policy_entry keeps success as a fraction and tests passed (the mean reward) in percent; both are printed in percent
SUCCESS_TO_PERCENT = 100.0


class ComparisonError(ValueError):
    """The folders are not evaluations, or not of the same tasks and environment; the message says which."""


@dataclass
class Evaluation:
    """One evaluated policy as ``sweet-rl evaluate`` left it: its per-task rows and headline metrics."""

    folder: Path
    rows: list[dict[str, Any]]
    metrics: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return str(self.metrics.get("policy") or self.folder.name)

    @property
    def kind(self) -> str:
        return str(self.metrics.get("kind") or "backend")

    @property
    def episodes(self) -> int:
        return sum(int(row["episodes"]) for row in self.rows)

    @property
    def score_name(self) -> str:
        """What ``mean_reward`` is: the share of tests passed (backend) or the page similarity (frontend)."""
        return "tests passed" if self.kind == "backend" else "similarity x100"

    def task_texts(self) -> dict[str, tuple[str, str]]:
        """Each task's request and reference as the episodes recorded them (empty without trajectories)."""
        path = self.folder / TRAJECTORIES_FILE
        texts: dict[str, tuple[str, str]] = {}
        if not path.is_file():
            return texts
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a killed writer; the evaluation's own files are what is compared
                task = record.get("task") if isinstance(record, dict) else None
                if isinstance(task, dict) and record.get("task_id") is not None:
                    texts[str(record["task_id"])] = (str(task.get("problem_description")),
                                                     str(task.get("ground_truth")))
        return texts


def find_evaluation_folder(path: str | Path) -> Path:
    """``path`` itself when it holds ``per_task.json``, else the one evaluation of the run folder ``path``."""
    path = Path(path)
    if (path / PER_TASK_FILE).is_file():
        return path
    if not path.is_dir():
        raise ComparisonError(f"{path} does not exist: give an evaluation folder (<run_dir>/evaluate/<policy>) or "
                              "the run folder of one evaluation")
    found = sorted(folder for folder in (path / "evaluate").glob("*") if (folder / PER_TASK_FILE).is_file())
    if not found:  # a study's evaluations lie deeper (<arm>/validation/evaluate/<policy>)
        found = sorted({file.parent for file in path.rglob(PER_TASK_FILE)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise ComparisonError(f"{path} holds no finished evaluation ({PER_TASK_FILE} in it or in "
                              f"{path / 'evaluate'}/<policy>): run `sweet-rl evaluate --run_dir {path} ...` first")
    raise ComparisonError(f"{path} holds {len(found)} evaluations ({', '.join(str(f) for f in found[:6])}"
                          f"{', ...' if len(found) > 6 else ''}): name the one to compare")


def load_evaluation(path: str | Path) -> Evaluation:
    """The evaluation in ``path`` (see :func:`find_evaluation_folder`)."""
    folder = find_evaluation_folder(path)
    try:
        rows = json.loads((folder / PER_TASK_FILE).read_text(encoding="utf-8"))
        metrics_path = folder / METRICS_FILE
        metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
        settings_path = folder / SETTINGS_FILE
        settings = json.loads(settings_path.read_text(encoding="utf-8")) if settings_path.is_file() else {}
    except (OSError, json.JSONDecodeError) as err:
        raise ComparisonError(f"{folder}: unreadable evaluation files ({err})") from err
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "task_id" in r for r in rows):
        raise ComparisonError(f"{folder / PER_TASK_FILE} has no per-task rows: is {folder} an evaluation folder?")
    return Evaluation(folder=folder, rows=rows, metrics=metrics if isinstance(metrics, dict) else {},
                      settings=settings if isinstance(settings, dict) else {})


def intervals(evaluation: Evaluation, samples: int = DEFAULT_SAMPLES, level: float = DEFAULT_LEVEL,
              seed: int = 0) -> dict[str, Any]:
    """Success and the score (tests passed) in percent, each ``[mean, low, high]`` over tasks."""
    entry = policy_entry(evaluation.rows, samples, level, seed)
    return {
        "policy": evaluation.policy, "folder": str(evaluation.folder), "tasks": entry["tasks"],
        "episodes": entry["episodes"],
        "success": [SUCCESS_TO_PERCENT * v for v in (entry["success_rate"], *entry["success_ci"])],
        "tests_passed": [entry["tests_passed"], *entry["tests_passed_ci"]],
    }


def check_comparable(a: Evaluation, b: Evaluation) -> None:
    """Refuse a paired comparison whose pairs would not be the same task scored the same way."""
    if a.kind != b.kind or (a.metrics.get("env_id") and b.metrics.get("env_id")
                            and a.metrics["env_id"] != b.metrics["env_id"]):
        raise ComparisonError(f"A was evaluated in {a.metrics.get('env_id') or a.kind} and B in "
                              f"{b.metrics.get('env_id') or b.kind}: their scores mean different things")
    metric_a, metric_b = a.metrics.get("similarity_metric"), b.metrics.get("similarity_metric")
    if metric_a and metric_b and metric_a != metric_b:
        raise ComparisonError(f"A is scored with {metric_a} similarity and B with {metric_b}: different scales")
    tasks_a, tasks_b = {str(r["task_id"]) for r in a.rows}, {str(r["task_id"]) for r in b.rows}
    if tasks_a != tasks_b:
        only_a, only_b = sorted(tasks_a - tasks_b), sorted(tasks_b - tasks_a)
        raise ComparisonError(
            f"A and B were evaluated on different tasks (A {len(tasks_a)}, B {len(tasks_b)}, "
            f"{len(tasks_a & tasks_b)} in common; only in A: {only_a[:3]}, only in B: {only_b[:3]}): a paired "
            "comparison needs the same tasks; evaluate both with the same --eval_tasks and --max_eval_tasks")
    texts_a, texts_b = a.task_texts(), b.task_texts()
    changed = sorted(task for task in set(texts_a) & set(texts_b) if texts_a[task] != texts_b[task])
    if changed:
        raise ComparisonError(f"A and B were evaluated on tasks of the same ids but other texts ({len(changed)} "
                              f"tasks, e.g. {changed[:3]}): evaluate both on the same task file")


def settings_differences(a: Evaluation, b: Evaluation) -> dict[str, list[Any]]:
    """The settings the two evaluations ran under that differ (``{"sampling.temperature": [A's, B's]}``): not
    refused, since comparing them can be the point (two temperatures, more turns), but part of what ``B - A``
    measures."""
    def flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        out = {}
        for key, value in settings.items():
            if key == "policy" and not prefix:
                continue  # what is compared
            name = f"{prefix}{key}"  # sampling.temperature, simulator.model: whose setting it is
            out.update(flat(value, f"{name}.") if isinstance(value, Mapping) else {name: value})
        return out

    def episodes(evaluation: Evaluation) -> Any:  # per task, from the rows: kept by every evaluation
        counts = sorted({int(row["episodes"]) for row in evaluation.rows})
        return counts[0] if len(counts) == 1 else counts

    flat_a, flat_b = flat(a.settings), flat(b.settings)
    if flat_a and flat_b:  # an evaluation written before its settings were kept has none to compare
        flat_a["episodes_per_task"], flat_b["episodes_per_task"] = episodes(a), episodes(b)
    else:
        flat_a, flat_b = {"episodes_per_task": episodes(a)}, {"episodes_per_task": episodes(b)}
    return {key: [flat_a.get(key), flat_b.get(key)] for key in sorted(flat_a.keys() | flat_b.keys())
            if flat_a.get(key) != flat_b.get(key)}


def b_minus_a(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], samples: int, level: float, seed: int
              ) -> dict[str, list[float]]:
    """``B - A`` paired by task, ``[mean, low, high]`` in points, success and the score."""
    difference = comparison(b_rows, a_rows, samples, level, seed)
    scale = {"success": SUCCESS_TO_PERCENT, "tests_passed": 1.0}  # comparison() keeps the units of policy_entry
    return {metric: [scale[metric] * v for v in (d["difference"], *d["ci"])] for metric, d in difference.items()}


def compare(a: Evaluation, b: Evaluation, samples: int = DEFAULT_SAMPLES, level: float = DEFAULT_LEVEL,
            seed: int = 0) -> dict[str, Any]:
    """Each side's intervals and ``B - A`` paired by task (``[mean, low, high]`` in points); on the procedural tasks
    also on seen and unseen templates apart (``parts``), since a gain on the templates trained on is not transfer."""
    from colbench_gym.tasks.procedural import task_part

    check_comparable(a, b)
    parts = {}
    for part in ("seen", "unseen"):
        rows_a = [row for row in a.rows if task_part(str(row["task_id"])) == part]
        rows_b = [row for row in b.rows if task_part(str(row["task_id"])) == part]
        if rows_a:
            parts[part] = {"tasks": len(rows_a), "b_minus_a": b_minus_a(rows_a, rows_b, samples, level, seed)}
    return {
        "a": intervals(a, samples, level, seed), "b": intervals(b, samples, level, seed),
        "b_minus_a": b_minus_a(a.rows, b.rows, samples, level, seed), "parts": parts,
        "settings_differ": settings_differences(a, b),
        "tasks": len(a.rows), "kind": a.kind, "score_name": a.score_name, "level": level, "samples": samples,
    }


def by_template(a: Evaluation, b: Evaluation) -> list[dict[str, Any]]:
    """Per template of the task ids (procedural families), each side's mean success and ``B - A`` in points, the
    largest gain first: where an overall difference comes from (too few tasks a template for intervals)."""
    from colbench_gym.tasks.procedural import task_part, task_template

    success_b = {str(row["task_id"]): float(row["success_rate"]) for row in b.rows}
    groups: dict[str, list[tuple[float, float]]] = {}
    parts: dict[str, str | None] = {}
    for row in a.rows:
        task = str(row["task_id"])
        name = task_template(task) or "(no template)"
        groups.setdefault(name, []).append((float(row["success_rate"]), success_b[task]))
        parts[name] = task_part(task)
    out = []
    for name, pairs in groups.items():
        mean_a, mean_b = (SUCCESS_TO_PERCENT * sum(side) / len(pairs) for side in zip(*pairs))
        out.append({"template": name, "part": parts[name], "tasks": len(pairs), "a": mean_a, "b": mean_b,
                    "b_minus_a": mean_b - mean_a})
    return sorted(out, key=lambda row: (-row["b_minus_a"], row["template"]))


def moved_tasks(a: Evaluation, b: Evaluation) -> list[dict[str, Any]]:
    """The tasks whose success differs between A and B, the largest gain first (``sweet-rl show FOLDER --task ID``
    shows their dialogues)."""
    success_b = {str(row["task_id"]): float(row["success_rate"]) for row in b.rows}
    out = [{"task_id": str(row["task_id"]), "a": SUCCESS_TO_PERCENT * float(row["success_rate"]),
            "b": SUCCESS_TO_PERCENT * success_b[str(row["task_id"])]} for row in a.rows]
    return sorted((row for row in out if row["a"] != row["b"]), key=lambda row: (row["a"] - row["b"], row["task_id"]))


def format_details(result: Mapping[str, Any], b: Evaluation) -> str:
    """The ``--by-template`` and ``--by-task`` tables, as far as ``result`` holds them."""
    lines = []
    if result.get("by_template"):
        width = max(len(row["template"]) for row in result["by_template"])
        lines += ["", f"{'template':<{width}}  part    tasks  A success %  B success %  B - A points"]
        lines += [f"{row['template']:<{width}}  {row['part'] or '-':<6}  {row['tasks']:>5}  {row['a']:>11.1f}  "
                  f"{row['b']:>11.1f}  {row['b_minus_a']:>+12.1f}" for row in result["by_template"]]
    if "moved_tasks" in result:
        moved = result["moved_tasks"]
        lines += ["", f"{len(moved)} of {result['tasks']} tasks moved (success %, A -> B), the largest gain first:"]
        lines += [f"  {row['task_id']}  {row['a']:.0f} -> {row['b']:.0f}" for row in moved]
        if moved:
            lines.append(f"their dialogues: sweet-rl show {b.folder} --task {moved[0]['task_id']}")
    return "\n" + "\n".join(lines) if lines else ""


def _triple(values: Sequence[float], sign: str = "") -> str:
    mean, low, high = values
    return f"{mean:{sign}.1f} [{low:{sign}.1f}, {high:{sign}.1f}]"


def format_evaluation(evaluation: Evaluation, summary: Mapping[str, Any], level: float = DEFAULT_LEVEL) -> str:
    """``success 12.5 [0.0, 37.5] %   tests passed 40.0 [20.0, 60.0] %`` with the tasks and episodes counted."""
    return (f"{evaluation.policy} ({evaluation.folder}): success {_triple(summary['success'])} %   "
            f"{evaluation.score_name} {_triple(summary['tests_passed'])} %   "
            f"({summary['tasks']} tasks, {summary['episodes']} episodes; {level:.0%} intervals over tasks)")


def format_comparison(result: Mapping[str, Any], a: Evaluation, b: Evaluation) -> str:
    score = result["score_name"]

    def difference(diff: Mapping[str, Sequence[float]]) -> str:
        return f"success {_triple(diff['success'], '+')} points   {score} {_triple(diff['tests_passed'], '+')} points"

    lines = [f"A: {format_evaluation(a, result['a'], result['level'])}",
             f"B: {format_evaluation(b, result['b'], result['level'])}",
             f"B minus A, paired by task ({result['tasks']} tasks): {difference(result['b_minus_a'])}"]
    lines += [f"  {part} templates ({entry['tasks']} tasks): {difference(entry['b_minus_a'])}"
              for part, entry in result.get("parts", {}).items()]
    if result.get("settings_differ"):
        lines.append("Run under other settings (part of the difference): " + ", ".join(
            f"{key} {value_a!r} / {value_b!r}" for key, (value_a, value_b) in result["settings_differ"].items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, stream: Any = None) -> int:
    """``sweet-rl compare EVAL_A EVAL_B``; raises :class:`ComparisonError` on folders it cannot compare."""
    parser = argparse.ArgumentParser(
        prog="sweet-rl compare",
        description="Two evaluated policies, paired by task: success and tests passed of each with intervals over "
                    "tasks, and B minus A with its interval.")
    parser.add_argument("a", type=Path, metavar="EVAL_A",
                        help="an evaluation folder (<run_dir>/evaluate/<policy>) or a run folder holding one")
    parser.add_argument("b", type=Path, metavar="EVAL_B", help="the other one, evaluated on the same tasks")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="bootstrap resamples of the tasks")
    parser.add_argument("--confidence", type=float, default=DEFAULT_LEVEL, help="level of the intervals")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument("--by-template", action="store_true",
                        help="also each template's success in A and B and B - A (procedural task families)")
    parser.add_argument("--by-task", action="store_true",
                        help="also the tasks whose success moved, A -> B, the largest gain first")
    # Every command takes the precision options (`$(python -m sweet_trl.precision)`); a comparison loads no model.
    for option in ("--bf16", "--fp16"):
        parser.add_argument(option, nargs="?", const="true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    a, b = load_evaluation(args.a), load_evaluation(args.b)
    result = compare(a, b, samples=args.samples, level=args.confidence, seed=args.seed)
    if args.by_template:
        result["by_template"] = by_template(a, b)
    if args.by_task:
        result["moved_tasks"] = moved_tasks(a, b)
    print(format_comparison(result, a, b) + format_details(result, b), file=stream or sys.stdout, flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


__all__ = ["ComparisonError", "Evaluation", "by_template", "check_comparable", "compare", "find_evaluation_folder",
           "format_comparison", "format_evaluation", "intervals", "load_evaluation", "main", "moved_tasks"]
