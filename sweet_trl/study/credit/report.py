"""``critic_credit.json`` as the Markdown tables RESULTS.md quotes::

    sweet-rl credit-report benchmarks/results/critic_credit.json
    sweet-rl credit-report benchmarks/results/critic_credit_validation.json --kind question

One table per part of the file: what the ground truth holds, every ranker's three figures at each kind of turn,
the paired differences, the scaling table, where each critic's training pairs differ before the answer
(:mod:`~sweet_trl.study.credit.pair_signal`) and the critic variants (each against its untrained start). Figures are
means with their 95% intervals resampled by task; top-1 and pick value in points (pick value: the Monte Carlo value
of the ranker's pick, in points of tests passed), Spearman as a correlation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.study.results import load_results

KINDS = ("question", "answer")
FIGURES = (("top1", "top-1", 100.0), ("pick_value", "pick value", 100.0), ("spearman", "Spearman", 1.0))


def _cell(figure: Mapping[str, Any] | None, scale: float, signed: bool = False) -> str:
    """``"18.2 [6.1, 30.3]"`` (``signed``: ``"+0.0 [-10.6, +10.6]"``); ``-`` where a figure is missing."""
    if not figure or figure.get("mean") is None:
        return "-"
    digits = 1 if scale > 1 else 2
    form = f"{{:{'+' if signed else ''}.{digits}f}}"
    mean, low, high = (form.format(figure[key] * scale) for key in ("mean", "low", "high"))
    return f"{mean} [{low}, {high}]"


def _figure_columns(kinds: Sequence[str]) -> tuple[str, str]:
    names = [f"{kind} {label}" for kind in kinds for _, label, _ in FIGURES]
    return "| " + " | ".join(names) + " |", "|" + " --- |" * len(names)


def _figure_cells(entry: Mapping[str, Any] | None, kinds: Sequence[str], signed: bool = False) -> str:
    cells = [_cell((entry or {}).get(f"{kind}_turns", {}).get(key) if entry else None, scale, signed)
             for kind in kinds for key, _, scale in FIGURES]
    return " | ".join(cells)


def _states(entry: Mapping[str, Any] | None, kinds: Sequence[str]) -> str:
    """``"40 / 28"``: the states with a value spread scored at each kind of turn (the figures' denominators)."""
    return " / ".join(str((entry or {}).get(f"{kind}_turns", {}).get("states", "-")) for kind in kinds)


def _pair_signal_table(result: Mapping[str, Any]) -> list[str]:
    """Where each critic's pairs differ before the answer (``pairs_by_what_the_human_told``); a variant's row only
    where its pairs differ from every row above (most variants train on the run's own pairs)."""
    from sweet_trl.pairs import DIFFERENCES as CLASSES

    entries = [(entry["label"], entry.get("pairs_by_what_the_human_told")) for entry in result.get("scaling", [])]
    for entry in result.get("variants", []):
        signal = entry.get("pairs_by_what_the_human_told")
        if signal not in [earlier for _, earlier in entries]:
            entries.append((f"variant {entry['label']}", signal))
    entries = [(label, signal) for label, signal in entries if signal]
    if not entries:
        return []
    lines = ["", "| critic pairs of | pairs | " + " | ".join(name.replace("_", " ") for name in CLASSES) + " |",
             "| --- | --- |" + " --- |" * len(CLASSES)]
    for label, signal in entries:
        cells = [f"{signal['counts'][name]} ({100 * (signal['fractions'][name] or 0):.0f}%)" for name in CLASSES]
        lines.append(f"| {label} | {signal['pairs']} | " + " | ".join(cells) + " |")
    return lines


def _written_by(provenance: Mapping[str, Any] | None) -> list[str]:
    """The line naming the command and commit that wrote the file (files written before it was recorded: none)."""
    if not provenance:
        return []
    commit = (provenance.get("git_commit") or "unknown")[:10] + (" (uncommitted changes)" if provenance.get("git_dirty")
                                                                  else "")
    return [f"Written by `{provenance.get('command')}` at {commit}."]


def markdown_tables(result: Mapping[str, Any], kinds: Sequence[str] = KINDS) -> str:
    """Every table of one credit file, for the kinds of turn asked for."""
    settings = result.get("settings", {})
    turns = f", question states at turns {settings['question_turns']}" if settings.get("question_turns") else ""
    lines = [f"N = {settings.get('N')} candidates x M = {settings.get('M')} continuations, up to "
             f"{settings.get('states_per_kind')} states per kind of turn{turns}; held out: {settings.get('held_out')}; "
             f"run `{result.get('run_dir', '?')}`"
             + (f"; a critic's row without `:<ranking>` ranks by the run's `{settings['run_ranking']}`"
                if settings.get("run_ranking") else "") + ".", *_written_by(result.get("provenance")), "",
             "| ground truth | states | tasks | one message only | distinct candidates (mean) | "
             "with value spread (scored) | continuations | mean value SE | spread that is the reply |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in kinds:
        truth = result.get("ground_truth", {}).get(f"{kind}_turns", {})
        mean_distinct, se, share = (truth.get(key) for key in ("mean_distinct_candidates", "mean_value_se",
                                                                "reply_share"))
        lines.append(f"| {kind} turns | {truth.get('states', '-')} | {truth.get('tasks', '-')} | "
                     f"{truth.get('states_with_one_message', '-')} | "
                     f"{'-' if mean_distinct is None else f'{mean_distinct:.1f}'} | "
                     f"{truth.get('states_with_value_spread', '-')} | {truth.get('continuations', '-')} | "
                     f"{'exact' if se is None else f'{se:.3f}'} | {'-' if share is None else f'{100 * share:.0f}%'} |")
    ceiling = {kind: result.get("noise_ceiling", {}).get(f"{kind}_turns") for kind in kinds}
    if any(ceiling.values()):
        lines += ["", "| what the values themselves tell (scored against half the continuations) | states | "
                  + " | ".join(label for _, label, _ in FIGURES) + " |", "| --- | --- |" + " --- |" * len(FIGURES)]
        for kind, entry in ceiling.items():
            for name, label in (("split_half", "knows the other half"), ("random", "random pick")):
                if entry and entry.get(name):
                    lines.append(f"| {kind} turns, {label} | {entry['states']} | "
                                 + " | ".join(_cell(entry[name].get(key), scale) for key, _, scale in FIGURES) + " |")
    header, rule = _figure_columns(kinds)
    lines += ["", "| ranker " + header, "| --- " + rule]
    lines += [f"| {name} | {_figure_cells(entry, kinds)} |" for name, entry in result.get("rankers", {}).items()]
    if result.get("paired"):
        lines += ["", "| paired, by task " + header, "| --- " + rule]
        lines += [f"| {name} | {_figure_cells(entry, kinds, signed=True)} |"
                  for name, entry in result["paired"].items()]
    if result.get("scaling"):
        lines += ["", f"| critic trained on | trajectories | critic pairs | states ({' / '.join(kinds)}) " + header,
                  "| --- | --- | --- | --- " + rule]
        for entry in result["scaling"]:
            lines.append(f"| {entry['label']} | {entry.get('trajectories', '-')} | {entry.get('critic_pairs', '-')} | "
                         f"{_states(entry, kinds)} | {_figure_cells(entry, kinds)} |")
        lines += ["", "| critic trained on, minus its untrained start " + header, "| --- " + rule]
        lines += [f"| {entry['label']} | {_figure_cells(entry.get('paired_with_untrained'), kinds, signed=True)} |"
                  for entry in result["scaling"]]
    lines += _pair_signal_table(result)
    if result.get("variants"):
        lines += ["", "| variant (ranking), minus the untrained start | settings | steps | train loss " + header,
                  "| --- | --- | --- | --- " + rule]
        for entry in result["variants"]:
            loss = entry.get("train_loss")
            changed = ", ".join(f"{k} {v}" for k, v in entry.get("settings", {}).items()) or "as the run's critic"
            for ranking, figures in entry.get("rankings", {}).items():
                lines.append(f"| {entry['label']} ({ranking}) | {changed} | {entry.get('steps', '-')} | "
                             f"{'-' if loss is None else f'{loss:.3f}'} | "
                             f"{_figure_cells(figures.get('paired_with_untrained'), kinds, signed=True)} |")
    return "\n".join(lines)


def results_files(path: str) -> list[str]:
    """A credit file as given, or those of a run folder (``<run_dir>/<output_name>/critic_credit.json``, one per
    measurement: ``credit``, ``credit_validation``, ...)."""
    folder = Path(path)
    if not folder.is_dir():
        return [path]
    found = sorted(map(str, [*folder.glob("critic_credit.json"), *folder.glob("*/critic_credit.json")]))
    if not found:
        raise ValueError(f"{path} holds no critic_credit.json (sweet-rl credit writes "
                         "<run_dir>/<credit.output_name>/critic_credit.json)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``sweet-rl credit-report CRITIC_CREDIT_JSON... [--kind question|answer]``: each file's tables in turn."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl credit-report",
                                     description="A credit file (sweet-rl credit) as Markdown tables: ground truth, "
                                                 "rankers, paired differences, scaling, variants.")
    parser.add_argument("results", nargs="+", help="critic_credit.json files, or run folders")
    parser.add_argument("--kind", choices=KINDS, action="append",
                        help="only this kind of turn (repeatable; default: both)")
    args = parser.parse_args(argv)
    texts = []
    for path in [found for given in args.results for found in results_files(given)]:
        result = load_results(path, ("rankers", "ground_truth"), "a credit file of `sweet-rl credit`")
        texts.append(f"### {path}\n\n{markdown_tables(result, tuple(args.kind or KINDS))}")
    print("\n\n".join(texts))
    return 0
