"""``fair_study.json``: the protocol, each arm's compute, the test figures and the comparisons at equal rounds."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sweet_trl.study.fair.arms import COMPARED_WITH, START, SWEET_VARIANTS, UPDATE_STAGES
from sweet_trl.study.protocol import ProtocolError, check_equal_compute, protocol_summary, running_code_state
from sweet_trl.study.results import load_results, per_task_rows, policy_entry
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
        ours, _, theirs = name.partition(" - ")
        figure = (entry or {}).get(AIM["templates"])
        if theirs == AIM["against"] and ours.partition("@")[0] in SWEET_VARIANTS and figure is not None:
            variants[ours] = {**figure, "met": figure["difference"] >= AIM["points"] and figure["ci"][0] > 0}
    if not variants:
        return None
    ranked = [name for name in variants if (validation or {}).get(name) is not None]
    top = max((validation[name] for name in ranked), default=None)
    tied = [name for name in ranked if validation[name] == top]
    met = all(variants[name]["met"] for name in tied) if tied else any(v["met"] for v in variants.values())
    return {**AIM, "variants": variants, "chosen": tied[0] if len(tied) == 1 else None, "tied": tied if len(tied) > 1 else [],
            "chosen_on_validation": {name: validation[name] for name in ranked} if ranked else None,
            "unranked": [name for name in variants if name not in ranked] if ranked else [], "met": met}


def aim_lines(verdicts: Mapping[Any, Mapping[str, Any] | None], every_seed: bool = True) -> str:
    """One line per seed (``verdicts``: seed -> :func:`aim_verdict`) and, with ``every_seed``, whether the aim holds
    on every seed."""
    lines = [f"Aim: SWEET-RL's best variant at least {AIM['points'] * 100:.0f} points of success above iterated RFT on "
             f"{AIM['templates']} test templates, interval above 0, on every seed."]
    for seed, verdict in verdicts.items():
        if verdict is None:
            lines.append(f"- seed {seed}: no SWEET-RL variant compared with {AIM['against']} in these files")
            continue
        figures = "; ".join(f"{name} - {AIM['against']} {_points(v)}{' (met)' if v['met'] else ''}"
                            for name, v in verdict["variants"].items())
        chosen, tied, on = verdict.get("chosen"), verdict.get("tied"), verdict.get("chosen_on_validation")
        by = (f"; chosen on validation: {chosen} ({on[chosen] * 100:.1f}%)" if chosen
              else f"; tied on validation: {' and '.join(tied)} ({on[tied[0]] * 100:.1f}%), met if every one is" if tied
              else "; no validation figures to choose by: met if any variant is" if len(verdict["variants"]) > 1
              else "")
        if verdict.get("unranked"):
            by += f" ({', '.join(verdict['unranked'])}: no validation figures, not chosen)"
        lines.append(f"- seed {seed}: {figures}{by}: **{'met' if verdict['met'] else 'not met'}**")
    known = [v for v in verdicts.values() if v is not None]
    if known and every_seed:
        every = len(known) == len(verdicts) and all(v["met"] for v in known)
        lines.append(f"- on every seed: **{'met' if every else 'not met'}**")
    return "\n".join(lines)


def _spent(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each arm's compute without its stage seconds: what arms are compared on (seconds depend on the machine)."""
    return {arm: {k: v for k, v in compute.items() if k != "stage_seconds"} for arm, compute in arms.items()}


def fair_results(study: Any) -> dict[str, Any]:
    args = study.args
    arms = [arm for arm in args.arm_names() if arm not in study.failed]
    compute = {arm: arm_compute(study, arm) for arm in args.arm_names()}
    try:
        equal = check_equal_compute(_spent({arm: compute[arm] for arm in arms})) if arms else None
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


# -- Markdown for RESULTS.md: `sweet-rl fair-report benchmarks/results/fair_study_seed0.json` --------------------------

def _rate(entry: Mapping[str, Any] | None) -> str:
    """``"13.8 [7.5, 20.6]"``: a success rate and its interval, in percent."""
    if not entry or entry.get("success_rate") is None:
        return "-"
    low, high = entry["success_ci"]
    return f"{entry['success_rate'] * 100:.1f} [{low * 100:.1f}, {high * 100:.1f}]"


def _rate_with_parts(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "-"
    parts = entry.get("parts", {})
    seen, unseen = (parts.get(p, {}).get("success_rate") for p in ("seen", "unseen"))
    split = (f" ({seen * 100:.1f} / {unseen * 100:.1f})" if seen is not None and unseen is not None else "")
    return _rate(entry) + split


def _points(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "-"
    low, high = entry["ci"]
    return f"{entry['difference'] * 100:+.1f} [{low * 100:+.1f}, {high * 100:+.1f}]"


def _read_at(results: Mapping[str, Any], arm: str) -> str:
    """`` (at <commit>)`` where an arm's test read was made by other code than the file's (a study read back later)."""
    commit = results.get("protocol", {}).get("read_commits", {}).get(arm)
    settings = results.get("settings", {})
    # a joined file's arm was written by the part that holds it
    own = next((part.get("git_commit") for part in settings.get("joined_from") or [] if arm in part.get("arms", [])),
               settings.get("git_commit"))
    return f" (at {commit[:7]})" if commit and commit != own else ""


def markdown_tables(results: Mapping[str, Any]) -> str:
    """A fair study's JSON as the Markdown tables RESULTS.md quotes: success on validation by arm and round (seen /
    unseen templates in brackets), each arm's compute, its one test read, and the comparisons on test."""
    settings = results.get("settings", {})
    validation = results.get("protocol", {}).get("validation_by_round", {})
    rounds = sorted({r["round"] for entries in validation.values() for r in entries})
    start = {r["round"]: r for r in validation.get(START, [])}
    parts = settings.get("joined_from")
    code = (f"joined from {len(parts)} files (commits {', '.join(sorted({str(p.get('git_commit'))[:7] for p in parts}))})"
            if parts else
            f"commit {str(settings.get('git_commit', '?'))[:7]}{' (dirty)' if settings.get('git_dirty') else ''}")
    lines = [f"Seed {settings.get('seed')}, `{Path(str(settings.get('config', '?'))).name}`, {code}; "
             f"validation `{settings.get('validation_tasks')}`; test reads: "
             + (", ".join(f"{arm} {n}{_read_at(results, arm)}"
                          for arm, n in results.get("protocol", {}).get("test_reads", {}).items()) or "none") + ".", "",
             "| validation success, % (seen / unseen) | " + " | ".join(f"round {r}" for r in rounds) + " |",
             "| --- |" + " --- |" * len(rounds)]
    for arm, entries in validation.items():
        by_round = {**({0: start[0]} if 0 in start else {}), **{r["round"]: r for r in entries}}
        lines.append(f"| {arm} | " + " | ".join(_rate_with_parts(by_round.get(r)) for r in rounds) + " |")
    lines += ["", "| arm | rounds | episodes | candidates sampled | gradient steps | stage minutes |",
              "| --- | --- | --- | --- | --- | --- |"]
    for arm, spent in results.get("arms", {}).items():
        minutes = sum(spent.get("stage_seconds", {}).values()) / 60
        lines.append(f"| {arm} | {spent['rounds']} | {spent['episodes']} | {spent['candidates_sampled']} | "
                     f"{spent['gradient_steps']} | {minutes:.0f} |")
    if results.get("test"):
        lines += ["", "| test success, % | all | seen | unseen |", "| --- | --- | --- | --- |"]
        for arm, entry in results["test"].items():
            parts = entry.get("parts", {})
            lines.append(f"| {arm} | {_rate(entry)} | {_rate(parts.get('seen'))} | {_rate(parts.get('unseen'))} |")
    if results.get("comparisons"):
        lines += ["", "| on test, points of success | all | seen | unseen |", "| --- | --- | --- | --- |"]
        for name, entry in results["comparisons"].items():
            lines.append(f"| {name} | {_points(entry['success'])} | {_points(entry['seen'])} | "
                         f"{_points(entry['unseen'])} |")
    # today's AIM (a file's stored `aim` is its writer's)
    verdict = aim_verdict(results.get("comparisons") or {}, validation_success(results))
    if verdict is not None:
        lines += ["", aim_lines({settings.get("seed"): verdict}, every_seed=False)]
    if results.get("failed"):
        lines += ["", f"Failed arms: {results['failed']}"]
    return "\n".join(lines)


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
        for name, new in (("rows", results[per_task_key]), ("compute", _spent(results.get("arms", {})))):
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
    compute = check_equal_compute(_spent(arms)) if arms else None  # pooled_comparisons refused unequal rounds
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


def comparisons_table(comparisons: Mapping[str, Any], title: str) -> str:
    lines = [f"| {title}, points of success | all | seen | unseen |", "| --- | --- | --- | --- |"]
    for name, entry in comparisons.items():
        lines.append(f"| {name} | {_points(entry['success'])} | {_points(entry['seen'])} | "
                     f"{_points(entry['unseen'])} |")
    return "\n".join(lines)


def pooled_table(pooled: Mapping[str, Any], where: str = "test") -> str:
    seeds = ", ".join(str(s) for s in pooled["seeds"])
    label = f"seeds {seeds} pooled by task" if len(pooled["seeds"]) > 1 else f"seed {seeds}, files joined"
    return comparisons_table(pooled["comparisons"], f"on {where}, {label}")


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


FIGURE_FORMATS = (".svg", ".png", ".pdf")


def write_figure(files: Mapping[str, Mapping[str, Any]], path: str | Path, pooled: bool = False) -> Path:
    """The files' comparisons on test as one figure (:func:`~sweet_trl.report.figures.comparison_intervals`): a
    marker per seed (per file where a seed has several), and the seeds pooled task by task with ``pooled``; the aim
    drawn in its panel."""
    from sweet_trl.report.figures import comparison_intervals, save

    seeds = [results.get("settings", {}).get("seed") for results in files.values()]
    one_per_seed = len(set(seeds)) == len(seeds)
    series = {(f"seed {seed}" if one_per_seed else Path(name).stem): results.get("comparisons") or {}
              for seed, (name, results) in zip(seeds, files.items())}
    if pooled:
        both = pooled_comparisons(files)
        seeds_pooled = ", ".join(map(str, both["seeds"]))
        label = f"seeds {seeds_pooled} pooled" if len(both["seeds"]) > 1 else f"seed {seeds_pooled}, files joined"
        series[label] = both["comparisons"]
    if not any(series.values()):
        raise ValueError("the files hold no comparisons on test (runs that read validation only): nothing to draw")
    figure = comparison_intervals(series, aim=(AIM["templates"], AIM["points"] * 100,
                                               f"aim (- {AIM['against']})"))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save(figure, path)
    return Path(path)


def results_file(path: str) -> str:
    """A results file as given, or the one a fair study's run folder holds (``<run_dir>/fair/fair_study.json``)."""
    folder = Path(path)
    if not folder.is_dir():
        return path
    for found in (folder / "fair" / "fair_study.json", folder / "fair_study.json"):
        if found.is_file():
            return str(found)
    raise ValueError(f"{path} holds no fair_study.json (a study writes <run_dir>/fair/fair_study.json after its "
                     f"first arm is read on test); `sweet-rl status {path}` shows its stages")


def main(argv: Sequence[str] | None = None) -> int:
    """``sweet-rl fair-report FAIR_STUDY_JSON... [--pooled] [--versus]``: each file's tables, one after another; with
    ``--pooled``, then the comparisons of every seed pooled task by task; with ``--versus`` (two files of two runs),
    each arm they share, the second run's against the first's."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl fair-report",
                                     description="A fair study's JSON as Markdown tables (validation by round, "
                                                 "compute, test, comparisons).")
    parser.add_argument("results", nargs="+", help="fair_study.json files (one per seed), or run folders")
    parser.add_argument("--pooled", action="store_true",
                        help="also pool the seeds task by task (each arm's per-task success averaged over seeds); "
                             "files of one seed are joined first (a run's later arms in a file of their own)")
    parser.add_argument("--versus", action="store_true",
                        help="two files of two runs (one changed thing, the train templates say): each arm they share, "
                             "the second run's against the first's, paired by task on the same test tasks")
    parser.add_argument("--runs", nargs="+", default=[],
                        help="each file's run folder, in the same order (a file records its own as settings.run_dir): "
                             "adds the comparisons on validation (each arm's last round); a file written before "
                             "per-task test figures were kept takes them from its run's test-read ledger")
    parser.add_argument("--figure", metavar="OUT",
                        help="also draw the comparisons on test to OUT (.svg, .png or .pdf): all tasks, seen and "
                             "unseen templates, a marker per file (per seed), and the seeds pooled with --pooled")
    parser.add_argument("--join", metavar="OUT",
                        help="write the files of one seed's run (its later arms in files of their own) as one fair "
                             "study JSON to OUT: every arm, and the comparisons of them all")
    args = parser.parse_args(argv)
    if args.figure and Path(args.figure).suffix.lower() not in FIGURE_FORMATS:
        raise ValueError(f"--figure {args.figure}: give a file ending in {', '.join(FIGURE_FORMATS)}")
    if args.runs and len(args.runs) != len(args.results):
        raise ValueError(f"--runs names {len(args.runs)} folders for {len(args.results)} files: one per file")
    texts, files = [], {}
    for index, path in enumerate(map(results_file, args.results)):
        results = load_results(path, ("protocol", "arms"), "a fair study's JSON")
        text = markdown_tables(results)
        needs_run = not results.get("test_per_task") or not results.get("validation_per_task")
        if args.runs and needs_run:
            if not Path(args.runs[index]).is_dir():
                raise ValueError(f"--runs: {args.runs[index]} (the run of {path}) does not exist (moved or deleted); "
                                 "without --runs each file's own figures are printed")
            if not results.get("test_per_task"):
                ledger = test_rows_from_ledger(args.runs[index])
                unread = [arm for arm in results.get("test", {}) if arm not in ledger]
                if unread:
                    raise ValueError(f"the test-read ledger of {args.runs[index]} records no read of {unread} "
                                     f"(the run of {path}?): its per-task test figures cannot be rebuilt")
                results = {**results, "test_per_task": {arm: ledger[arm] for arm in results.get("test", {})}}
            if not results.get("validation_per_task"):  # a file written before it kept them
                results = {**results, "validation_per_task": validation_rows(results, args.runs[index])}
        if results.get("validation_per_task"):
            text += "\n\n" + comparisons_table(validation_comparisons(results["validation_per_task"]),
                                                "on validation (each arm's last round)")
        files[path] = results
        texts.append(f"### {path}\n\n{text}")
    if args.versus:
        if len(files) != 2:
            raise ValueError("--versus compares two files: the run changed from, then the changed run (each arm "
                             "of the second is compared against the same arm of the first)")
        (name_a, base), (name_b, other) = files.items()
        tables = []
        for key, split in (("test_per_task", "test"), ("validation_per_task", "validation (each arm's last round)")):
            if all(results.get(key) for results in files.values()):
                tables.append(comparisons_table(
                    {f"{arm}: {Path(name_b).stem} - {Path(name_a).stem}": entry
                     for arm, entry in versus_comparisons(base, other, per_task_key=key).items()},
                    f"on {split}, {name_b} against {name_a}"))
        if not tables:
            raise ValueError("the two files do not both hold per-task test or validation figures (written before "
                             "they were kept): give their run folders with --runs, or files joined from their "
                             "parts (--join)")
        texts.append("### versus\n\n" + "\n\n".join(tables))
    if args.join:
        if len(files) < 2:
            raise ValueError("--join needs two or more files of one seed's run")
        joined = joined_results(files)
        Path(args.join).parent.mkdir(parents=True, exist_ok=True)
        Path(args.join).write_text(json.dumps(joined, indent=1, default=str), encoding="utf-8")
        texts.append(f"### joined into {args.join}\n\n{markdown_tables(joined)}")
    if args.pooled:
        if len(files) < 2:
            raise ValueError("--pooled needs two or more files (seeds to pool, or parts of one run to join)")
        pooled = [pooled_table(pooled_comparisons(files))]
        by_seed: dict[Any, dict[str, Mapping[str, Any]]] = {}
        for path, results in files.items():
            by_seed.setdefault(results.get("settings", {}).get("seed"), {})[path] = results
        pooled.append(aim_lines({seed: aim_verdict(pooled_comparisons(part)["comparisons"] if len(part) > 1
                                                   else next(iter(part.values())).get("comparisons", {}),
                                                   validation_success_of(part.values()))
                                 for seed, part in by_seed.items()}))
        without = [path for path, results in files.items() if not results.get("validation_per_task")]
        if not without:
            pooled.append(pooled_table(pooled_comparisons(files, per_task_key="validation_per_task"),
                                       "validation (each arm's last round)"))
        else:
            pooled.append(f"Validation not pooled: {', '.join(without)} {'keeps' if len(without) == 1 else 'keep'} "
                          "no per-task validation rows (written before they were kept); give each file's run folder "
                          "with --runs")
        texts.append("### pooled\n\n" + "\n\n".join(pooled))
    if args.figure:
        write_figure(files, args.figure, pooled=args.pooled)
        texts.append(f"Figure: {args.figure}")
    print("\n\n".join(texts))
    return 0
