"""Fair study files read together: seeds pooled task by task, the files of one seed's run joined into one, and two
runs' shared arms compared."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sweet_trl.study.fair.results import (
    aim_verdict,
    arm_comparison,
    comparison_names,
    spent_compute,
    validation_success_of,
)
from sweet_trl.study.protocol import check_equal_compute


def _joined_by_seed(files: Mapping[str, Mapping[str, Any]], per_task_key: str) -> dict[Any, dict[str, Any]]:
    """Per seed, every arm's per-task figures and compute over that seed's files (several files of one seed are
    parts of one run: arms added later, say); an arm two files of one seed disagree on is refused."""
    joined: dict[Any, dict[str, Any]] = {}
    for path, results in files.items():
        if not results.get(per_task_key):
            raise ValueError(f"{path} has no per-task figures ({per_task_key}): written before they were "
                             "kept; run the same `sweet-rl fair-study` command again to rewrite it (it runs and "
                             "reads nothing again), or give its run folder with --runs")
        seed = results.get("settings", {}).get("seed")
        part = joined.setdefault(seed, {"rows": {}, "compute": {}})
        for name, new in (("rows", results[per_task_key]), ("compute", spent_compute(results.get("arms", {})))):
            for arm, value in new.items():
                if part[name].setdefault(arm, value) != value:
                    raise ValueError(f"arm {arm} differs between the files of seed {seed} ({path}): files of one "
                                     "seed must be parts of one run")
    for part in joined.values():
        check_equal_compute(part["compute"])  # a study's arms at equal rounds, whichever file they came in
    return joined


def pooled_comparisons(files: Mapping[str, Mapping[str, Any]], samples: int = 10_000, seed: int = 0,
                       per_task_key: str = "test_per_task") -> dict[str, Any]:
    """The comparisons of the files' arms, pooled task by task over seeds: each arm's per-task success averaged over
    the seeds, then ``ours - theirs`` paired by task, overall and on seen and unseen templates. Files of one seed are
    joined first (a run's later arms in a file of their own compare with its earlier ones). Only arms present on
    every seed; refused (``ValueError``) when an arm's compute differs between arms or seeds, an arm read other
    tasks on another seed, or two files of one seed disagree."""
    joined = _joined_by_seed(files, per_task_key)
    first = next(iter(joined.values()))
    arms = [arm for arm in first["rows"] if all(arm in part["rows"] for part in joined.values())]
    for arm in arms:
        spent = {s: part["compute"].get(arm) for s, part in joined.items()}
        if len({json.dumps(v, sort_keys=True) for v in spent.values()}) > 1:
            raise ValueError(f"arm {arm} spent different compute on different seeds: {spent}")

    def per_task(arm: str) -> list[dict[str, Any]]:
        by_task: dict[str, list[Mapping[str, Any]]] = {}
        tasks = None
        for s, part in joined.items():
            rows = part["rows"][arm]
            if tasks is not None and {r["task_id"] for r in rows} != tasks:
                raise ValueError(f"arm {arm} read other tasks on seed {s}")
            tasks = {r["task_id"] for r in rows}
            for row in rows:
                by_task.setdefault(str(row["task_id"]), []).append(row)
        return [{"task_id": task, "episodes": sum(int(r["episodes"]) for r in rows),
                 **{key: sum(float(r[key]) for r in rows) / len(rows) for key in ("success_rate", "mean_reward")}}
                for task, rows in sorted(by_task.items())]

    pooled = {arm: per_task(arm) for arm in arms}
    return {"seeds": sorted(joined, key=str),
            "comparisons": {f"{a} - {b}": arm_comparison(pooled[a], pooled[b], samples, seed)
                            for a, b in comparison_names(arms)}}


def joined_results(files: Mapping[str, Mapping[str, Any]], samples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """One fair study's JSON from the files of one seed's run (later arms run into files of their own): every arm's
    compute, protocol, test figures and failures, and the comparisons of all its arms, paired by task, as
    :func:`pooled_comparisons` joins them (refused, ``ValueError``, where it refuses, or for files of several seeds).
    ``settings`` are the first file's less what differs by file (its arms, path and commit), with the joined arms and
    ``joined_from``: each file, its commit and its arms."""
    seeds = {results.get("settings", {}).get("seed") for results in files.values()}
    if len(seeds) != 1:
        raise ValueError(f"a joined file holds one seed's run; these files are of seeds {sorted(seeds, key=str)}")
    comparisons = pooled_comparisons(files, samples, seed)["comparisons"]
    parts = list(files.values())

    def union(*keys: str) -> dict[str, Any]:
        joined: dict[str, Any] = {}
        for results in parts:
            value: Any = results
            for key in keys:
                value = (value or {}).get(key)
            joined.update(value or {})
        return joined

    arms = union("arms")
    compute = check_equal_compute(spent_compute(arms)) if arms else None  # pooled_comparisons refused unequal rounds
    protocol_keys = sorted({key for results in parts for key in results.get("protocol", {})})
    return {
        # the first part's settings, less what differs by part (its arms, file and commit: in joined_from)
        "settings": {**{key: value for key, value in parts[0].get("settings", {}).items()
                        if key not in ("arms", "variants", "results_path", "git_commit", "git_dirty")},
                     "arms": list(arms),
                     "joined_from": [{"file": str(path), "git_commit": results.get("settings", {}).get("git_commit"),
                                      "arms": list(results.get("arms", {}))} for path, results in files.items()]},
        "protocol": {key: union("protocol", key) for key in protocol_keys},
        "arms": arms, "compute": compute,
        "test": union("test"), "test_per_task": union("test_per_task"),
        "validation_per_task": union("validation_per_task"),
        "comparisons": comparisons, "failed": union("failed"),
        "aim": aim_verdict(comparisons, validation_success_of(parts)),
    }


def versus_comparisons(base: Mapping[str, Any], other: Mapping[str, Any], samples: int = 10_000, seed: int = 0,
                       per_task_key: str = "test_per_task") -> dict[str, Any]:
    """The arms two runs share, each run's against the other's on the same test tasks: ``other - base`` per arm,
    paired by task (a run that changed one thing, the train templates say, against the run it changed); with
    ``per_task_key="validation_per_task"``, on the validation tasks (each arm's last round). Refused
    (``ValueError``) when the runs read other tasks, an arm spent other compute, or no arm is in both."""
    rows_a, rows_b = base.get(per_task_key) or {}, other.get(per_task_key) or {}
    split = per_task_key.split("_")[0]
    arms = [arm for arm in rows_a if arm in rows_b]
    if not arms:
        raise ValueError(f"the two files share no arm with per-task {split} figures: nothing to compare")
    for arm in arms:
        if {r["task_id"] for r in rows_a[arm]} != {r["task_id"] for r in rows_b[arm]}:
            raise ValueError(f"arm {arm} read other {split} tasks in the two runs: a paired comparison needs the "
                             "same")
        spent_a, spent_b = ({k: v for k, v in f.get("arms", {}).get(arm, {}).items() if k != "stage_seconds"}
                            for f in (base, other))
        if spent_a and spent_b and spent_a != spent_b:
            raise ValueError(f"arm {arm} spent other compute in the two runs: {spent_a} against {spent_b}")
    return {arm: arm_comparison(rows_b[arm], rows_a[arm], samples, seed) for arm in arms}
