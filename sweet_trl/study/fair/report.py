"""``sweet-rl fair-report``: fair study JSON files as RESULTS.md's tables, seeds pooled, a seed's files joined, two
runs compared, and the comparisons drawn.

    sweet-rl fair-report benchmarks/results/fair_study_seed0.json                 # one file's tables
    sweet-rl fair-report seed0.json seed1.json --pooled --figure fair.svg          # + seeds pooled, and drawn
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.study.fair.across_runs import (
    joined_results,
    pooled_comparisons,
    versus_comparisons,
)
from sweet_trl.study.fair.results import (
    AIM,
    aim_verdict,
    judged_by_aim,
    test_rows_from_ledger,
    validation_comparisons,
    validation_rows,
    validation_success_of,
)
from sweet_trl.study.fair.tables import aim_lines, comparisons_table, markdown_tables, pooled_label, pooled_table
from sweet_trl.study.results import load_results

FIGURE_FORMATS = (".svg", ".png", ".pdf")


def write_figure(files: Mapping[str, Mapping[str, Any]], path: str | Path,
                 pooled: Mapping[str, Any] | None = None) -> Path:
    """The files' comparisons on test as one figure (:func:`~sweet_trl.report.figures.comparison_intervals`): a
    marker per file, named by its seed where the seed has one file (else by the file), and ``pooled``
    (:func:`~sweet_trl.study.fair.across_runs.pooled_comparisons` of the files) as one more; the aim marked on the
    rows it judges."""
    from sweet_trl.report.figures import comparison_intervals, save

    seeds = [results.get("settings", {}).get("seed") for results in files.values()]
    labels = [f"seed {seed}" if seed is not None and seeds.count(seed) == 1 else Path(name).stem
              for seed, name in zip(seeds, files)]
    if len(set(labels)) < len(labels):  # run folders all hold a fair_study.json: their paths tell them apart
        labels = list(files)
    series = {label: results.get("comparisons") or {} for label, results in zip(labels, files.values())}
    if pooled:
        series[pooled_label(pooled["seeds"])] = pooled["comparisons"]
    if not any(series.values()):
        raise ValueError("the files hold no comparisons on test (runs that read validation only): nothing to draw")
    judged = [name for comparisons in series.values() for name in comparisons if judged_by_aim(name)]
    aim = {"part": AIM["templates"], "points": AIM["points"] * 100, "rows": list(dict.fromkeys(judged)),
           "label": f"aim: SWEET-RL - {AIM['against']} at least +{AIM['points'] * 100:.0f} on {AIM['templates']}, "
                    "interval above 0"}
    figure = comparison_intervals(series, aim=aim)
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
    pooled_test = None
    if args.pooled:
        if len(files) < 2:
            raise ValueError("--pooled needs two or more files (seeds to pool, or parts of one run to join)")
        pooled_test = pooled_comparisons(files)
        pooled = [pooled_table(pooled_test)]
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
        write_figure(files, args.figure, pooled=pooled_test)
        texts.append(f"Figure: {args.figure}")
    print("\n\n".join(texts))
    return 0
