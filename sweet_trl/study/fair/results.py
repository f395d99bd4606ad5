"""What a fair study's JSON holds (``<run_dir>/fair/fair_study.json``): each arm's compute, its test figures, the
comparisons at equal rounds, the aim's verdict; the per-task figures read back from a run folder (its evaluations,
its test-read ledger); the table the study prints; and the guard against overwriting another run's file."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sweet_trl.study.fair.arms import COMPARED_WITH, START, SWEET_VARIANTS, UPDATE_STAGES
from sweet_trl.study.protocol import ProtocolError, check_equal_compute, protocol_summary, running_code_state
from sweet_trl.study.results import per_task_rows, policy_entry
from sweet_trl.study.stats import paired_difference, per_task_means

PER_TASK_KEYS = ("task_id", "success_rate", "mean_reward", "episodes")
# What the study is for: SWEET-RL's best variant this far above iterated RFT in success on unseen test templates,
# its interval excluding 0, on every seed.
AIM = {"against": "rft", "templates": "unseen", "points": 0.05}


def arm_compute(study: Any, arm: str) -> dict[str, Any]:
    """What ``arm`` spent: rounds trained, episodes collected, candidates sampled, optimizer steps, and the seconds
    of every stage it used (shared stages count in full for every arm that used them)."""
    episodes = candidates = steps = 0
    seconds: dict[str, float] = {}
    for key, stage in study.used.get(arm, {}).items():
        marker = study.markers.get(key)
        if marker is None:
            continue
        counts = marker.get("counts", {})
        episodes += counts.get("episodes", 0) if stage == "collect" else 0
        candidates += counts.get("candidates", 0) if stage == "sample_candidates" else 0
        steps += counts.get("steps", 0) if stage in UPDATE_STAGES.values() else 0
        seconds[stage] = round(seconds.get(stage, 0.0) + float(marker.get("seconds", 0.0)), 1)
    rounds = sum(1 for key, stage in study.used.get(arm, {}).items()
                 if stage in UPDATE_STAGES.values() and key in study.markers)
    return {"rounds": rounds, "episodes": episodes, "candidates_sampled": candidates, "gradient_steps": steps,
            "stage_seconds": seconds}


def _test_rows(study: Any, arm: str) -> list[dict[str, Any]] | None:
    marker = study.markers.get(f"{arm}/test")
    return None if marker is None else per_task_rows(marker, study.run_dir)


def _difference(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]], key: str, scale: float,
                samples: int, seed: int) -> dict[str, Any] | None:
    a, b = per_task_means(ours, key), per_task_means(theirs, key)
    if not set(a) & set(b):
        return None
    diff = paired_difference(a, b, samples, 0.95, seed)
    return {"difference": diff.mean * scale, "ci": [diff.low * scale, diff.high * scale], "tasks": diff.tasks,
            "excludes_zero": diff.excludes_zero()}


def arm_comparison(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]], samples: int, seed: int
                   ) -> dict[str, Any]:
    """``ours - theirs`` on the test tasks, paired by task: success (points, 0-1) and tests passed (points of 100),
    overall and on seen and unseen templates."""
    from colbench_gym.tasks.procedural import task_part

    out = {"success": _difference(ours, theirs, "success_rate", 1.0, samples, seed),
           "tests_passed": _difference(ours, theirs, "mean_reward", 100.0, samples, seed)}
    for part in ("seen", "unseen"):
        pick = [r for r in ours if task_part(str(r["task_id"])) == part]
        other = [r for r in theirs if task_part(str(r["task_id"])) == part]
        out[part] = _difference(pick, other, "success_rate", 1.0, samples, seed) if pick and other else None
    return out


def comparison_names(arms: Sequence[str]) -> list[tuple[str, str]]:
    """Each SWEET-RL variant against every baseline and control present, each arm variant (``sweet@nll1``) against
    its arm (and, a SWEET-RL arm's, against the baselines and controls too), then every other arm against the
    start."""
    pairs = [(ours, theirs) for ours in SWEET_VARIANTS if ours in arms
             for theirs in (*SWEET_VARIANTS, *COMPARED_WITH) if theirs in arms and theirs != ours]
    pairs = [p for i, p in enumerate(pairs) if (p[1], p[0]) not in pairs[:i]]
    # a variant (`sweet@nll1`) against the arm it varies, when both ran
    pairs += [(arm, arm.partition("@")[0]) for arm in arms if "@" in arm and arm.partition("@")[0] in arms]
    pairs += [(arm, theirs) for arm in arms if arm.partition("@")[0] in SWEET_VARIANTS and "@" in arm
              for theirs in COMPARED_WITH if theirs != START and theirs in arms]
    pairs += [(arm, START) for arm in arms if arm != START and (arm, START) not in pairs]
    return pairs


def validation_success(results: Mapping[str, Any]) -> dict[str, float]:
    """Each arm's validation success at the round that read (or would read) the test tasks: the ledger's record
    where the arm read them, else the round the study's ``test_round`` picks (its last; its best, earliest on ties,
    with ``best_on_validation``)."""
    protocol = results.get("protocol") or {}
    best = (results.get("settings") or {}).get("test_round") == "best_on_validation"
    success = {}
    for arm, rounds in (protocol.get("validation_by_round") or {}).items():
        if rounds:
            pick = (max(rounds, key=lambda r: (r["success_rate"], -r["round"])) if best
                    else max(rounds, key=lambda r: r["round"]))
            success[arm] = pick["success_rate"]
    for arm, record in (protocol.get("validation") or {}).items():
        figure = (record.get("figures") or {}).get(f"round{(record.get('settings') or {}).get('round')}")
        if figure and figure.get("success_rate") is not None:
            success[arm] = figure["success_rate"]
    return success


def validation_success_of(files: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """:func:`validation_success` over the files of one seed's run (parts holding other arms)."""
    return {arm: rate for results in files for arm, rate in validation_success(results).items()}


def judged_by_aim(comparison: str) -> bool:
    """Whether :data:`AIM` judges this comparison: a SWEET-RL variant (an arm variant too) against iterated RFT."""
    ours, _, theirs = comparison.partition(" - ")
    return theirs == AIM["against"] and ours.partition("@")[0] in SWEET_VARIANTS


def aim_verdict(comparisons: Mapping[str, Any], validation: Mapping[str, float] | None = None
                ) -> dict[str, Any] | None:
    """:data:`AIM` on one seed's comparisons: per SWEET-RL variant compared with iterated RFT (``sweet``,
    ``sweet_best`` and their arm variants), its difference on unseen templates and whether it gets there (at least 5
    points, interval above 0). The verdict is the variant's that ``validation`` (arm -> validation success,
    :func:`validation_success`) puts first, since choosing among them by their test figures would choose on the test
    tasks (variants tied there: ``met`` only when every one of them gets there; a variant without validation figures
    is not chosen, and named in ``unranked``); without validation figures for any, ``met`` when any variant gets
    there (``chosen`` is then None).
    ``None`` where no variant meets RFT in these comparisons (a file of later arms alone: ``sweet-rl fair-report
    --pooled`` joins the files of a seed and says it per seed)."""
    variants = {}
    for name, entry in comparisons.items():
        figure = (entry or {}).get(AIM["templates"])
        if judged_by_aim(name) and figure is not None:
            variants[name.partition(" - ")[0]] = {**figure, "met": figure["difference"] >= AIM["points"]
                                                  and figure["ci"][0] > 0}
    if not variants:
        return None
    ranked = [name for name in variants if (validation or {}).get(name) is not None]
    top = max((validation[name] for name in ranked), default=None)
    tied = [name for name in ranked if validation[name] == top]
    met = all(variants[name]["met"] for name in tied) if tied else any(v["met"] for v in variants.values())
    return {**AIM, "variants": variants, "chosen": tied[0] if len(tied) == 1 else None, "tied": tied if len(tied) > 1 else [],
            "chosen_on_validation": {name: validation[name] for name in ranked} if ranked else None,
            "unranked": [name for name in variants if name not in ranked] if ranked else [], "met": met}


def spent_compute(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each arm's compute without its stage seconds: what arms are compared on (seconds depend on the machine)."""
    return {arm: {k: v for k, v in compute.items() if k != "stage_seconds"} for arm, compute in arms.items()}


def fair_results(study: Any) -> dict[str, Any]:
    args = study.args
    arms = [arm for arm in args.arm_names() if arm not in study.failed]
    compute = {arm: arm_compute(study, arm) for arm in args.arm_names()}
    try:
        equal = check_equal_compute(spent_compute({arm: compute[arm] for arm in arms})) if arms else None
    except ProtocolError as err:
        equal = {"error": str(err)}
    tested = {arm: rows for arm in [START, *arms] if (rows := _test_rows(study, arm)) is not None}
    comparisons = {}
    if equal is not None and "error" not in equal:
        comparisons = {f"{a} - {b}": arm_comparison(tested[a], tested[b], args.bootstrap_samples, args.seed)
                       for a, b in comparison_names(list(tested))}
    commit, dirty = running_code_state()  # the code that writes this file; each test read's: protocol.read_commits
    return {
        "settings": {**asdict(args), "config": str(study.config_path), "run_dir": str(study.run_dir),
                     "git_commit": commit, "git_dirty": dirty},
        "protocol": {**protocol_summary(study.run_dir), "validation_by_round": study.validation},
        "arms": compute, "compute": equal,
        "test": {arm: policy_entry(rows, args.bootstrap_samples, 0.95, args.seed) for arm, rows in tested.items()},
        # per task, so that seeds can be pooled task by task (`sweet-rl fair-report --pooled`)
        "test_per_task": {arm: [{key: row[key] for key in PER_TASK_KEYS} for row in rows]
                          for arm, rows in tested.items()},
        # each arm's last round on validation, per task: the file alone pairs arms (and runs) there, where settings
        # are chosen, even after the run folder's stages were made again with other settings
        "validation_per_task": _validation_rows(study),
        "comparisons": comparisons,
        "aim": aim_verdict(comparisons, validation_success({"protocol": {**protocol_summary(study.run_dir),
                                                                         "validation_by_round": study.validation}})),
        "failed": dict(study.failed),
    }


def _validation_rows(study: Any) -> dict[str, list[dict[str, Any]]]:
    rows = {}
    for arm, entries in study.validation.items():
        try:
            rows.update(validation_rows({"protocol": {"validation_by_round": {arm: entries}}}, study.run_dir))
        except ValueError:  # an evaluation read back from a marker whose folder is gone: left out, not guessed
            continue
    return rows


def evaluation_rows(run_dir: str | Path, arm: str, part: str, evaluation: str | None) -> list[dict[str, Any]]:
    """The per-task rows of ``arm``'s evaluation whose run id is ``evaluation``, under
    ``<run_dir>/fair/<arm>/<part>/`` (``part``: ``test`` or ``validation``)."""
    from sweet_trl.pipeline.runner import MARKER

    found = [path.parent for path in (Path(run_dir) / "fair" / arm / part).rglob(MARKER)
             if evaluation and json.loads(path.read_text(encoding="utf-8")).get("run_id") == evaluation]
    if not found:
        raise ValueError(f"the {part} evaluation {evaluation} of arm {arm} is not under {run_dir}/fair/{arm}/{part}")
    per_task = json.loads((found[0] / "per_task.json").read_text(encoding="utf-8"))
    return [{key: row[key] for key in PER_TASK_KEYS} for row in per_task]


def test_rows_from_ledger(run_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Each arm's per-task test figures as the protocol recorded them: the evaluation its latest read names in
    ``<run_dir>/protocol/test_reads.json``. For a study JSON written before it kept ``test_per_task``."""
    from sweet_trl.study.protocol import recorded_reads

    if not Path(run_dir).is_dir():
        raise ValueError(f"run folder {run_dir} does not exist (moved or deleted): the file's own figures are "
                         "printed without --runs")
    read_by_arm = {str(read["arm"]): read.get("evaluation") for read in recorded_reads(run_dir)}
    return {arm: evaluation_rows(run_dir, arm, "test", evaluation) for arm, evaluation in read_by_arm.items()}


def validation_rows(results: Mapping[str, Any], run_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Each arm's per-task validation figures at its last round (the start's: round 0), from the evaluations the
    study JSON names."""
    return {arm: evaluation_rows(run_dir, arm, "validation", max(entries, key=lambda e: e["round"])["evaluation"])
            for arm, entries in results.get("protocol", {}).get("validation_by_round", {}).items() if entries}


def validation_comparisons(rows: Mapping[str, Sequence[Mapping[str, Any]]], samples: int = 10_000, seed: int = 0
                           ) -> dict[str, Any]:
    """The study's comparisons on validation (each arm's last round), paired by task: how finely validation, where
    settings are chosen, tells the arms apart."""
    return {f"{ours} - {theirs}": arm_comparison(rows[ours], rows[theirs], samples, seed)
            for ours, theirs in comparison_names(list(rows))}


def format_table(results: Mapping[str, Any]) -> str:
    def cell(entry: Mapping[str, Any] | None) -> str:
        if not entry:
            return "-"
        return f"{entry['difference'] * 100:+6.1f} [{entry['ci'][0] * 100:+6.1f}, {entry['ci'][1] * 100:+6.1f}]"

    lines = [f"{'test, success (points)':<34} {'all':>24} {'seen':>24} {'unseen':>24}"]
    for name, entry in results["comparisons"].items():
        lines.append(f"{name:<34} {cell(entry['success']):>24} {cell(entry['seen']):>24} {cell(entry['unseen']):>24}")
    return "\n".join(lines)


def check_results_path(args: Any, run_dir: Path) -> None:
    """Refuse (``ProtocolError``), before any stage runs, to overwrite a results file that holds what this run
    would not write again: another run's figures (its ``settings.run_dir``), test reads where this run reads only
    validation, or arms this run does not run. ``--fair.overwrite_results true`` overwrites anyway."""
    path = Path(args.results_path) if args.results_path else None
    if path is None or args.overwrite_results or args.plan or not path.exists():
        return
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        earlier = {"unreadable": str(err)}
    settings = earlier.get("settings") if isinstance(earlier, dict) else None
    if not isinstance(settings, dict) or "protocol" not in earlier:
        why = "it is not a fair study's JSON"
    elif settings.get("run_dir") and Path(str(settings["run_dir"])).resolve() != Path(run_dir).resolve():
        why = f"it holds the figures of the run in {settings['run_dir']}, not of {run_dir}"
    elif (earlier.get("protocol") or {}).get("test_reads") and not args.read_test:
        why = "it holds test reads and this run reads validation only (--fair.read_test false)"
    elif lost := sorted(set(earlier.get("arms") or {}) - set(args.arm_names())):
        why = f"it holds arms this run does not run ({', '.join(lost)})"
    else:
        return
    raise ProtocolError(f"fair.results_path {path}: {why}; writing it would replace them. Name another file "
                        "(--fair.results_path) or --fair.overwrite_results true")


def write_fair_results(study: Any, results: Mapping[str, Any]) -> Path:
    text = json.dumps(results, indent=1, default=str)
    path = study.folder / "fair_study.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if study.args.results_path:
        Path(study.args.results_path).parent.mkdir(parents=True, exist_ok=True)
        Path(study.args.results_path).write_text(text, encoding="utf-8")
    print(format_table(results), file=study.out, flush=True)
    return path
