"""The credit file: every ranker's figures, the paired differences, the scaling and variant tables, what the ground
truth holds and what wrote it; the terminal's table."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from sweet_trl.study.credit import metrics
from sweet_trl.study.credit.arguments import CreditArguments
from sweet_trl.study.credit.mc_values import KINDS

# what training adds (each ranking of the trained critic against its untrained start), what c adds, the baseline
PAIRED = (("trained_with_c", "untrained_with_c"), ("trained_with_c", "trained_without_c"),
          ("trained_with_c", "value_function"))


def paired_names(rankers: Sequence[str]) -> list[tuple[str, str]]:
    """:data:`PAIRED`, every ranking of the trained critic against the untrained one, and every ranker against a
    random pick, for the rankers present."""
    variants = [(name, "untrained_with_c") for name in rankers if name.startswith("trained_with_c:")]
    chance = [(name, "random") for name in rankers if name != "random"]
    return [(a, b) for a, b in (*PAIRED, *variants, *chance) if a in rankers and b in rankers]


def provenance(command: Sequence[str]) -> dict[str, Any]:
    """What wrote the file: the command line and the code's commit (cached parts may come from earlier calls;
    each score file's identity says which critic and ground truth it belongs to)."""
    from sweet_trl.study.protocol import running_code_state

    commit, dirty = running_code_state()
    return {"command": shlex.join(command), "git_commit": commit, "git_dirty": dirty}


# what says nothing about the critic itself: where it ran and was written
_PLACES = {"run_dir", "output_dir", "policy_model", "critic_model", "logging_dir", "hub_token", "force"}


def critic_settings(marker: Mapping[str, Any]) -> dict[str, Any]:
    """A ``train_critic`` marker's settings, every section's options in one mapping (places left out)."""
    return {key: value for section in marker.get("config", []) if isinstance(section, dict)
            for key, value in section.items() if key not in _PLACES}


def credit_report(rows: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Sequence[float]]],
                  args: CreditArguments, scaling_runs: Mapping[str, Mapping[str, Any]] | None = None,
                  variant_runs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON: per ranker and kind of turn the three figures; the paired differences; the scaling and variant
    tables; the ground truth's settings and what it holds."""
    scored = [{**row, "scores": {name: list(s[i]) for name, s in scores.items()}} for i, row in enumerate(rows)]
    by_kind = {kind: [r for r in scored if r["kind"] == kind] for kind in KINDS}
    samples, seed = args.bootstrap_samples, args.seed

    def figures(name: str) -> dict[str, Any]:
        return {f"{kind}_turns": metrics.summarise(by_kind[kind], name, seed=seed, samples=samples) for kind in KINDS}

    rankers = {name: figures(name) for name in [*scores, "random"]
               if not name.startswith(("scaling:", "variant:"))}

    def paired_with(name: str, other: str) -> dict[str, Any] | None:
        if other not in scores:
            return None
        return {f"{kind}_turns": metrics.paired(by_kind[kind], name, other, seed=seed, samples=samples)
                for kind in KINDS}

    paired = {f"{a} - {b}": {f"{kind}_turns": metrics.paired(by_kind[kind], a, b, seed=seed, samples=samples)
                             for kind in KINDS}
              for a, b in paired_names(list(rankers))}
    scaling = []
    for label, data in (scaling_runs or {}).items():
        name = "trained_with_c" if label == "1x" else f"scaling:{label}"
        if name not in scores:
            continue
        scaling.append({"label": label, **data, **figures(name),
                        "paired_with_untrained": paired_with(name, "untrained_with_c")})
    variants = []
    for label, data in (variant_runs or {}).items():
        rankings = {}
        for suffix, ranking in (("", "run_ranking"), (":critic_advantage", "critic_advantage")):
            name, shipped = f"variant:{label}{suffix}", f"trained_with_c{suffix}"
            if name in scores:
                rankings[ranking] = {**figures(name), "paired_with_untrained": paired_with(name, "untrained_with_c"),
                                     "paired_with_run_critic": paired_with(name, shipped)}
        variants.append({"label": label, **data, "rankings": rankings})
    return {"settings": {"N": args.num_candidates, "M": args.continuations, "states_per_kind": args.states_per_kind,
                         **({"question_turns": args.question_turns} if args.question_turns else {}),
                         "held_out": args.held_out or (f"the zero-shot policy on {args.held_out_tasks}"
                                                       if args.held_out_tasks else
                                                       "the run's zero-shot evaluation (evaluate/zero_shot)"),
                         "seed": seed, "bootstrap_samples": samples},
            "ground_truth": ground_truth_summary(rows),
            "noise_ceiling": {f"{kind}_turns": metrics.noise_ceiling(by_kind[kind], seed=seed, samples=samples)
                              for kind in KINDS if kind == "question"},  # answers are graded exactly
            "rankers": rankers, "paired": paired, "scaling": scaling, "variants": variants}


def ground_truth_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the ground truth holds per kind of turn: states, distinct candidates (a message sampled twice is one),
    the states whose distinct candidates' values differ (the only ones scored), exact values, continuations played,
    the mean standard error of an estimated value; at question turns, the share of the values' spread that is which
    reply each question drew (:func:`~sweet_trl.study.credit.metrics.reply_share`)."""
    import math

    out = {}
    for kind in KINDS:
        group = [r for r in rows if r["kind"] == kind]
        estimated = [se for r in group for se, exact in zip(r["value_se"], r["exact"])
                     if not exact and math.isfinite(se)]
        finite = [[v for v in metrics.distinct_values(r)[0] if math.isfinite(v)] for r in group]
        distinct = [len(set(r["candidates"])) if "candidates" in r else len(r["values"]) for r in group]
        out[f"{kind}_turns"] = {
            "states": len(group), "tasks": len({r["task_id"] for r in group}),
            "states_with_one_message": sum(n == 1 for n in distinct),
            "mean_distinct_candidates": sum(distinct) / len(distinct) if distinct else None,
            "states_with_value_spread": sum(len(v) >= 2 and max(v) > min(v) for v in finite),
            "candidates": sum(len(r["values"]) for r in group),
            "exact_values": sum(sum(r["exact"]) for r in group),
            "continuations": sum(n for r in group for n, exact in zip(r["samples"], r["exact"]) if not exact),
            "candidates_without_value": sum(not math.isfinite(v) for r in group for v in r["values"]),
            "mean_value_se": sum(estimated) / len(estimated) if estimated else None,
        }
        if kind == "question":
            share = metrics.reply_share(group)
            out[f"{kind}_turns"]["reply_share"] = None if share is None else share["share"]
    return out


def format_report(result: Mapping[str, Any]) -> str:
    """The table a terminal shows: per ranker, top-1 and Spearman at question and answer turns."""
    def cell(figure: Mapping[str, Any] | None, scale: float = 100.0) -> str:
        if not figure:
            return "-"
        return f"{figure['mean'] * scale:6.1f} [{figure['low'] * scale:6.1f}, {figure['high'] * scale:6.1f}]"

    lines = [f"{'ranker':<44} {'question top-1':>24} {'answer top-1':>24} {'question spearman':>24}"]
    for name, figures in result["rankers"].items():
        q, a = figures["question_turns"], figures["answer_turns"]
        lines.append(f"{name:<44} {cell(q['top1']):>24} {cell(a['top1']):>24} {cell(q['spearman'], 1.0):>24}")
    for name, figures in result["paired"].items():
        q, a = figures["question_turns"], figures["answer_turns"]
        lines.append(f"{name:<44} {cell(q['top1']):>24} {cell(a['top1']):>24} {cell(q['spearman'], 1.0):>24}")
    ceiling = result.get("noise_ceiling", {}).get("question_turns") or {}
    for name, label in (("split_half", "values, half against half"), ("random", "random, against half")):
        if ceiling.get(name):
            figure = ceiling[name]
            lines.append(f"{label:<44} {cell(figure['top1']):>24} {'':>24} {cell(figure['spearman'], 1.0):>24}")
    return "\n".join(lines)
