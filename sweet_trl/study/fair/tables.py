"""A fair study's JSON as the Markdown tables RESULTS.md quotes (``sweet-rl fair-report``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.study.fair.arms import START
from sweet_trl.study.fair.results import AIM, aim_verdict, validation_success


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


def comparisons_table(comparisons: Mapping[str, Any], title: str) -> str:
    lines = [f"| {title}, points of success | all | seen | unseen |", "| --- | --- | --- | --- |"]
    for name, entry in comparisons.items():
        lines.append(f"| {name} | {_points(entry['success'])} | {_points(entry['seen'])} | "
                     f"{_points(entry['unseen'])} |")
    return "\n".join(lines)


def pooled_label(seeds: Sequence[Any]) -> str:
    """What :func:`~sweet_trl.study.fair.across_runs.pooled_comparisons` made of its files: seeds pooled by task, or
    the files of one seed joined."""
    named = ", ".join(str(s) for s in seeds)
    return f"seeds {named} pooled by task" if len(seeds) > 1 else f"seed {named}, files joined"


def pooled_table(pooled: Mapping[str, Any], where: str = "test") -> str:
    return comparisons_table(pooled["comparisons"], f"on {where}, {pooled_label(pooled['seeds'])}")


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
