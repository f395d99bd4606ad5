"""Matplotlib figures of a run, returned as inline SVG text (no files, no external assets)."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from colbench_gym._optional import require

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def _pyplot():
    matplotlib = require("matplotlib", "train")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    # Text stays text in the SVG (small, selectable, no glyph outlines to compute); the page's fonts draw it.
    plt.rcParams.update({"svg.fonttype": "none", "font.family": "DejaVu Sans", "svg.hashsalt": "sweet-rl"})
    return plt


def to_svg(fig) -> str:
    """The figure as an ``<svg>`` element (XML prolog and DOCTYPE stripped, so it can sit inside HTML)."""
    plt = _pyplot()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    # Fixed pt sizes would overflow narrow screens; the viewBox keeps the aspect ratio.
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="figure-svg"', svg, count=1)


def save(fig, path) -> None:
    """Write the figure to ``path`` in the format its suffix names (``.svg``, ``.png``, ``.pdf``), and free it."""
    plt = _pyplot()
    fig.savefig(path)
    plt.close(fig)


def _figure(width: float = 6.4, height: float = 3.2):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(width, height), dpi=100, layout="tight")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    return fig, ax


def stage_timings(stages: Sequence[str], seconds: Sequence[float]) -> str:
    """Horizontal bars: wall time of each stage."""
    fig, ax = _figure(6.4, 0.4 * len(stages) + 1.0)
    positions = list(range(len(stages)))[::-1]
    ax.barh(positions, seconds, color=PALETTE[0])
    ax.set_yticks(positions, labels=stages)
    for y, value in zip(positions, seconds):
        ax.text(value, y, f" {value:.0f}s", va="center", fontsize=8)
    ax.set_xlabel("seconds")
    ax.grid(axis="x", alpha=0.3)
    ax.grid(axis="y", visible=False)
    ax.set_title("Wall time per stage")
    return to_svg(fig)


def stage_counts(counts: Mapping[str, int]) -> str:
    """Bars: how many items each stage produced (episodes, pairs, states, candidates, ...)."""
    labels, values = list(counts), list(counts.values())
    fig, ax = _figure(6.4, 0.35 * len(labels) + 1.0)
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, values, color=PALETTE[2])
    ax.set_yticks(positions, labels=labels, fontsize=8)
    for y, value in zip(positions, values):
        ax.text(value, y, f" {value}", va="center", fontsize=8)
    ax.set_xscale("symlog")
    ax.grid(axis="y", visible=False)
    ax.set_title("What each stage produced")
    return to_svg(fig)


def reward_histogram(groups: Mapping[str, Sequence[float]]) -> str:
    """Overlaid histograms of episode rewards (one per group: collected, each evaluated policy)."""
    fig, ax = _figure()
    bins = [i / 10 for i in range(11)]
    for index, (label, rewards) in enumerate(groups.items()):
        if rewards:
            ax.hist(list(rewards), bins=bins, alpha=0.55, label=f"{label} (n={len(rewards)})",
                    color=PALETTE[index % len(PALETTE)])
    ax.set_xlabel("episode reward")
    ax.set_ylabel("episodes")
    ax.set_title("Reward distribution")
    if any(groups.values()):
        ax.legend(fontsize=8, frameon=False)
    return to_svg(fig)


def metric_bars(policies: Mapping[str, Mapping[str, float]], metrics: Sequence[str]) -> str:
    """Grouped bars: each evaluation metric for each policy."""
    fig, ax = _figure()
    names = list(policies)
    width = 0.8 / max(len(names), 1)
    for index, name in enumerate(names):
        xs = [m + (index - (len(names) - 1) / 2) * width for m in range(len(metrics))]
        values = [float(policies[name].get(metric, math.nan)) for metric in metrics]
        bars = ax.bar(xs, values, width=width, label=name, color=PALETTE[index % len(PALETTE)])
        for bar, value in zip(bars, values):
            if not math.isnan(value):
                ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(metrics)), labels=metrics, fontsize=8)
    ax.set_title("Evaluation on the test tasks")
    ax.legend(fontsize=8, frameon=False)
    return to_svg(fig)


def training_curves(title: str, log_history: Sequence[Mapping[str, Any]], keys: Sequence[str] | None = None) -> str | None:
    """Line plots of a trainer's ``log_history`` (loss and its logged metrics against the step)."""
    rows = [row for row in log_history if "step" in row and "train_runtime" not in row]
    if not rows:
        return None
    numeric = {}
    for row in rows:
        for key, value in row.items():
            if key in ("step", "epoch", "learning_rate", "grad_norm", "num_tokens") or key.startswith("eval_runtime"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                numeric.setdefault(key, []).append((row["step"], float(value)))
    if keys is not None:
        numeric = {k: v for k, v in numeric.items() if k in keys} or numeric
    chosen = _curve_keys(numeric)
    if not chosen:
        return None
    plt = _pyplot()
    cols = min(len(chosen), 3)
    rows_n = math.ceil(len(chosen) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.2 * cols, 2.4 * rows_n), dpi=100, squeeze=False,
                             layout="tight")
    for ax in axes.flat[len(chosen):]:
        ax.set_visible(False)
    for index, (ax, key) in enumerate(zip(axes.flat, chosen)):
        steps, values = zip(*numeric[key])
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3,
                color=PALETTE[index % len(PALETTE)])
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return to_svg(fig)


def _curve_keys(numeric: Mapping[str, list]) -> list[str]:
    """Loss first, then the most informative logged metrics, at most six panels."""
    preferred = ("loss", "eval_loss", "pair_accuracy", "margin", "rewards/accuracies", "rewards/margins",
                 "advantages/chosen", "advantages/rejected", "rewards/chosen", "rewards/rejected",
                 "mean_token_accuracy", "eval_pair_accuracy")
    keys = [k for k in preferred if k in numeric]
    keys += sorted(k for k in numeric if k not in keys)
    return keys[:6]


def interval_bars(policies: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, tuple[str, str, float]]) -> str:
    """Per policy, each metric's point estimate with its interval as an error bar.

    ``metrics``: label -> (value key, interval key, scale), e.g. ``{"success %": ("success_rate", "success_ci", 100)}``.
    """
    fig, axes = _figure(width=3.4 * len(metrics), height=3.2)
    plt = _pyplot()
    fig.clear()
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    names = list(policies)
    for ax, (label, (key, ci_key, scale)) in zip(axes, metrics.items()):
        values = [float(policies[n][key]) * scale for n in names]
        lows = [v - float(policies[n][ci_key][0]) * scale for n, v in zip(names, values)]
        highs = [float(policies[n][ci_key][1]) * scale - v for n, v in zip(names, values)]
        ax.bar(range(len(names)), values, yerr=[lows, highs], capsize=4,
               color=[PALETTE[i % len(PALETTE)] for i in range(len(names))])
        for x, value in enumerate(values):
            ax.text(x, value, f"{value:.1f}", ha="left", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), labels=names, fontsize=7, rotation=25, ha="right")
        ax.set_title(label, fontsize=9)
    plt.setp(axes, ylim=(0, None))
    return to_svg(fig)


# The parts of the test tasks a fair study's comparison holds, as its JSON names them, and their panel titles.
COMPARISON_PARTS = {"success": "all test tasks", "seen": "seen templates", "unseen": "unseen templates"}


def comparison_intervals(series: Mapping[str, Mapping[str, Mapping[str, Any]]],
                         parts: Mapping[str, str] = COMPARISON_PARTS, aim: Mapping[str, Any] | None = None):
    """Paired differences in success with their intervals: a panel per part of the tasks (all, seen templates,
    unseen templates), a row per comparison, a marker per series (a seed's file, the seeds pooled).

    ``series``: label -> comparisons as ``fair_study.json`` holds them (``{"<arm> - <arm>": {"success":
    {"difference", "ci"}, "seen": ..., "unseen": ...}}``, fractions, drawn as points; a part without tasks, None, is
    left out). ``aim``: ``{"part", "points", "rows", "label"}``, a dashed mark at ``points`` in that part's panel on
    the rows the aim is about. Returns the matplotlib figure (:func:`to_svg`, or :func:`save` to a file).
    """
    names = list(dict.fromkeys(name for comparisons in series.values() for name in comparisons))
    if not names:
        raise ValueError("no comparisons to draw")
    plt = _pyplot()
    from matplotlib.lines import Line2D
    fig, axes = plt.subplots(1, len(parts), sharex=True, sharey=True, squeeze=False, dpi=100, layout="constrained",
                             figsize=(3.2 * len(parts) + 2.4, 0.32 * len(names) * max(1, len(series) / 2) + 1.4))
    rows = {name: len(names) - 1 - index for index, name in enumerate(names)}  # the first comparison on top
    spread = 0.7 / len(series)
    handles: dict[str, Any] = {}  # one legend entry per series, whichever panel drew it
    for ax, (part, title) in zip(axes[0], parts.items()):
        for index, (label, comparisons) in enumerate(series.items()):
            offset = (len(series) - 1) / 2 * spread - index * spread
            drawn = [(rows[name] + offset, (entry or {})[part]) for name, entry in comparisons.items()
                     if (entry or {}).get(part)]
            if not drawn:
                continue
            ys = [y for y, _ in drawn]
            xs = [100 * e["difference"] for _, e in drawn]
            # a difference a rounding outside its own interval would make a negative bar, which matplotlib refuses
            lows = [max(0.0, x - 100 * e["ci"][0]) for x, (_, e) in zip(xs, drawn)]
            highs = [max(0.0, 100 * e["ci"][1] - x) for x, (_, e) in zip(xs, drawn)]
            handles.setdefault(label, ax.errorbar(xs, ys, xerr=[lows, highs], fmt="o", markersize=4, capsize=2,
                                                  linewidth=1, color=PALETTE[index % len(PALETTE)], label=label))
        ax.axvline(0, color="#444444", linewidth=0.8)
        if aim and aim["part"] == part:
            marked = [rows[name] for name in aim["rows"] if name in rows]
            ax.vlines([aim["points"]] * len(marked), [y - 0.45 for y in marked], [y + 0.45 for y in marked],
                      colors="#444444", linewidth=0.8, linestyles="--", label=aim["label"])
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("points of success", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_yticks(list(rows.values()), labels=list(rows))
    axes[0][0].set_ylim(-0.7, len(names) - 0.1)
    labels = [*handles, *([aim["label"]] if aim and aim.get("rows") else [])]
    entries = [*handles.values(), *([Line2D([], [], color="#444444", linewidth=0.8, linestyle="--")]
                                    if aim and aim.get("rows") else [])]
    fig.legend(entries, labels, fontsize=7, frameon=False, loc="outside right upper")
    return fig
