"""The run report as one self-contained HTML file: inline CSS, inline SVG plots, base64 images, no scripts."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.report import figures
from sweet_trl.report.data import RunData, iter_jsonl, load_log_history, rewards_of
from sweet_trl.trajectories import Trajectory, dedupe_latest

EVAL_METRICS = ("tests_passed", "success_rate", "mean_similarity", "win_rate", "mean_reward", "answered_rate",
                "mean_turns")
RATE_METRICS = ("success_rate", "mean_similarity", "win_rate", "mean_reward", "answered_rate")

CSS = """
body { font-family: system-ui, -apple-system, "DejaVu Sans", sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
.subtitle { color: #57606a; margin: 0 0 16px; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figure { margin: 12px 0; text-align: center; }
.figure-svg { width: 100%; max-width: 640px; height: auto; }
.figure.wide .figure-svg { max-width: 1000px; }
.figure figcaption { color: #57606a; font-size: 0.85em; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 12px; }
.trajectory { border: 1px solid #d0d7de; border-radius: 6px; margin: 12px 0; padding: 8px 12px; }
.trajectory header { font-weight: 600; margin-bottom: 6px; }
.turn { border-radius: 6px; padding: 6px 10px; margin: 4px 0; white-space: pre-wrap; font-size: 0.85em;
        font-family: ui-monospace, "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
.turn.human { background: #f6f8fa; border-left: 3px solid #8c959f; }
.turn.agent { border-left: 3px solid #0969da; }
.turn .who { font-weight: 600; font-family: system-ui, sans-serif; display: block; margin-bottom: 2px; }
.adv { float: right; font-family: system-ui, sans-serif; font-weight: 600; }
.legend { display: flex; align-items: center; gap: 8px; font-size: 0.85em; color: #57606a; }
.legend .bar { width: 240px; height: 12px; border-radius: 3px;
   background: linear-gradient(90deg, rgba(207,34,46,0.7), rgba(255,255,255,1), rgba(26,127,55,0.7)); border: 1px solid #d0d7de; }
.renders { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.renders img { width: 100%; border: 1px solid #d0d7de; }
.muted { color: #57606a; } .good { color: #1a7f37; } .partial { color: #9a6700; } .bad { color: #cf222e; }
details pre { font-size: 0.8em; overflow-x: auto; background: #f6f8fa; padding: 8px; }
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    return esc(value)


def figure(name: str, svg: str | None, caption: str, wide: bool = False) -> str:
    if not svg:
        return ""
    css = "figure wide" if wide else "figure"
    return (f'<figure class="{css}" data-figure="{esc(name)}">{svg}'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric_from: int = 1, css_class: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{fmt(v)}</td>' if i >= numeric_from and isinstance(v, (int, float)) else f"<td>{v}</td>"
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def advantage_color(advantage: float, scale: float) -> str:
    """Green for turns the critic credits, red for turns it blames; the stronger, the deeper."""
    t = max(-1.0, min(1.0, advantage / scale)) if scale > 0 else 0.0
    alpha = 0.08 + 0.6 * abs(t)
    rgb = "26,127,55" if t >= 0 else "207,34,46"
    return f"rgba({rgb},{alpha:.3f})"


# --------------------------------------------------------------------------------------------------------------

def render_report(data: RunData, examples: int = 6) -> str:
    """The whole report as an HTML string."""
    config = data.config
    total = sum(m.get("seconds", 0.0) for m in data.markers.values())
    # the folder read, not the run_dir its stages were configured with (a run moved, or joined from others)
    title = f"SWEET-RL run: {Path(data.run_dir).resolve().name}"
    header = (
        f"<h1>{esc(title)}</h1><p class='subtitle'>{esc(config.get('env_id', '?'))} · policy "
        f"{esc(config.get('policy_model', '?'))} · critic {esc(config.get('critic_model') or config.get('policy_model', '?'))}"
        f" · {len(data.markers)} stages · {total / 60:.1f} min of stage time</p>"
    )
    parts = [
        header,
        _study_section(data),
        _results_section(data),
        _stages_section(data),
        _rewards_section(data),
        _training_section(data),
        _trajectories_section(data, examples),
        _episodes_section(data, examples),
        _renders_section(data, examples),
        _config_section(data),
    ]
    body = "\n".join(p for p in parts if p)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>\n"
    )


def _results_section(data: RunData) -> str:
    evaluations = data.evaluations()
    if not evaluations:
        return "<section id='results'><h2>Results</h2><p class='muted'>No policy has been evaluated yet.</p></section>"
    metrics = [m for m in EVAL_METRICS if any(m in e.get("metrics", {}) for e in evaluations.values())]
    rows = [[f"<b>{esc(name)}</b>", *[e["metrics"].get(m, math.nan) for m in metrics],
             e.get("counts", {}).get("episodes", 0)] for name, e in evaluations.items()]
    shown = {name: e["metrics"] for name, e in evaluations.items()}
    bar_metrics = [m for m in metrics if m in RATE_METRICS]
    return (
        "<section id='results'><h2>Results</h2>"
        "<p>Each policy on the evaluation tasks, without privileged information.</p>"
        + table(["policy", *metrics, "episodes"], rows)
        + figure("evaluation", figures.metric_bars(shown, bar_metrics) if bar_metrics else None,
                 "Per policy: success rate (every hidden test passes), mean reward (fraction of tests passed, or "
                 "similarity to the target page) and the share of episodes that ended with an answer.")
        + "</section>"
    )


def _study_section(data: RunData) -> str:
    """The study's table with intervals, paired differences and the critics' best-of-N selection."""
    study = data.study
    if not study:
        return ""
    level = round(100 * study["study"]["confidence"])

    def cell(value: float, ci: Sequence[float], scale: float) -> str:
        return f"{value * scale:.1f} [{ci[0] * scale:.1f}, {ci[1] * scale:.1f}]"

    policies = study["policies"]
    rows = []
    for name, entry in policies.items():
        parts = entry.get("parts", {})
        rows.append([f"<b>{esc(name)}</b>", cell(entry["success_rate"], entry["success_ci"], 100),
                     cell(entry["tests_passed"], entry["tests_passed_ci"], 1),
                     *[cell(parts[p]["success_rate"], parts[p]["success_ci"], 100) if p in parts else "" for p in
                       ("seen", "unseen")], entry["episodes"], entry["tasks"]])
    comparison_rows = [[esc(label), f"{100 * c['success']['difference']:+.1f} [{100 * c['success']['ci'][0]:+.1f}, "
                        f"{100 * c['success']['ci'][1]:+.1f}]", f"{c['tests_passed']['difference']:+.1f} "
                        f"[{c['tests_passed']['ci'][0]:+.1f}, {c['tests_passed']['ci'][1]:+.1f}]"]
                       for label, c in study["comparisons"].items()]
    selection = study.get("critic_selection") or {}
    selection_rows = [[esc(name), f"{100 * e['top1']['mean']:.1f} [{100 * e['top1']['low']:.1f}, "
                       f"{100 * e['top1']['high']:.1f}]", f"{100 * e['selected_reward']['mean']:.1f}",
                       f"{100 * e['selected_success']['mean']:.1f}" if "selected_success" in e else "",
                       e["turns_scored"]]
                      for name, e in selection.get("rankers", {}).items() if "top1" in e]
    shown = {"success %": ("success_rate", "success_ci", 100.0), "tests passed %": ("tests_passed", "tests_passed_ci", 1.0)}
    return (
        "<section id='study'><h2>Study</h2>"
        f"<p>Every policy on the same held-out tasks ({esc(study.get('eval_tasks'))}) with the same episode seeds; "
        f"{level}% percentile-bootstrap intervals over tasks. Seen/unseen: test tasks of templates that training "
        "used (with other hidden values) or never used.</p>"
        + table(["policy", "success %", "tests passed %", "success % (seen)", "success % (unseen)", "episodes",
                 "tasks"], rows, numeric_from=5)
        + figure("study", figures.interval_bars(policies, shown),
                 f"Success rate and tests passed per policy, with {level}% bootstrap intervals over tasks.")
        + "<h3>Paired differences (per task, then bootstrapped)</h3>"
        + table(["comparison", "success (points)", "tests passed (points)"], comparison_rows, numeric_from=3)
        + ("<h3>The critics judged directly: best-of-N selection on held-out answer turns</h3>"
           + table(["ranker", "picks a best candidate %", "reward of its pick %", "its pick succeeds %", "turns"],
                   selection_rows, numeric_from=4)
           + (f"<p>Any candidate succeeds on {selection['turns_with_a_success']} of {selection['turns']} turns: the "
              "most successes that ranking these candidates can give.</p>" if "turns_with_a_success" in selection
              else "") if selection_rows else "")
        + (f"<h3>The critics judged directly</h3><p>Not measured: {esc(selection['error'])}</p>"
           if "error" in selection else "")
        + _answer_turn_tables(study.get("answer_turns") or {})
        + f"<p class='muted'>Stage time {study['stage_seconds_total'] / 60:.1f} min.</p></section>"
    )


def _answer_turn_tables(answer_turns: dict[str, Any]) -> str:
    """Every policy's answers on the same held-out answer turns, and SWEET-RL's paired differences there."""
    if "error" in answer_turns:
        return f"<h3>The answer turn alone</h3><p>Not measured: {esc(answer_turns['error'])}</p>"
    if not answer_turns.get("policies"):
        return ""

    def cell(i: dict[str, float], sign: str = "") -> str:
        return f"{100 * i['mean']:{sign}.1f} [{100 * i['low']:{sign}.1f}, {100 * i['high']:{sign}.1f}]"

    n = answer_turns["settings"]["candidates"]
    rows = [[f"<b>{esc(name)}</b>", cell(e["by_k"][0]["best_tests_passed"]), cell(e["by_k"][0]["pass_at_k"]),
             cell(e["by_k"][-1]["pass_at_k"]), cell(e["by_k"][-1]["best_tests_passed"]), e["turns"]]
            for name, e in answer_turns["policies"].items()]
    rows += [[f"<b>{esc(name)}</b>", f"not measured: {esc(why)}", "", "", "", ""]
             for name, why in answer_turns.get("failed", {}).items()]
    differences = [[esc(label), cell(r[0]["best_tests_passed"], "+"), cell(r[0]["pass_at_k"], "+"),
                    cell(r[-1]["pass_at_k"], "+")] for label, r in answer_turns["comparisons"].items()]
    return ("<h3>The answer turn alone: every policy's answers on the same held-out turns</h3>"
            f"<p>{n} answers per turn and policy at temperature {answer_turns['settings']['temperature']}, each graded "
            "by the environment's scorer; intervals over turns. pass@k: the chance that at least one of k answers "
            "passes every test. The best of the answers bounds what ranking the policy's own samples can reach.</p>"
            + table(["policy", "tests passed %, one answer", "pass@1 %", f"pass@{n} %",
                     f"tests passed %, best of {n}", "turns"], rows, numeric_from=5)
            + table(["paired by turn (points)", "tests passed, one answer", "pass@1", f"pass@{n}"], differences,
                    numeric_from=4))


def _stages_section(data: RunData) -> str:
    ordered = data.ordered()
    if not ordered:
        return ""
    rows, counts = [], {}
    for folder, marker in ordered:
        marker_counts = marker.get("counts", {})
        summary = ", ".join(f"{esc(k)}: {fmt(v)}" for k, v in {**marker_counts, **marker.get("metrics", {})}.items())
        peak = marker.get("info", {}).get("peak_rss_mb")
        rows.append([f"<code>{esc(folder)}</code>", marker.get("seconds", 0.0),
                     peak if isinstance(peak, (int, float)) else "–", summary or "<span class='muted'>–</span>"])
        main = next(iter(marker_counts.items()), None)  # a stage lists what it made first
        if main and isinstance(main[1], (int, float)) and main[1] > 0:
            counts[f"{folder}: {main[0]}"] = main[1]
    timings = figures.stage_timings([f for f, _ in ordered], [m.get("seconds", 0.0) for _, m in ordered])
    return (
        "<section id='stages'><h2>Stages</h2>"
        + table(["stage", "seconds", "process peak RSS (MB)", "what it made"], rows)
        + "<div class='grid'>"
        + figure("stage-timings", timings, "Wall time of each stage.")
        + figure("stage-counts", figures.stage_counts(counts) if counts else None,
                 "What each stage made: episodes, pairs, turn states, training steps (log scale).")
        + "</div></section>"
    )


def _rewards_section(data: RunData) -> str:
    groups: dict[str, list[float]] = {}
    collect = data.first("collect")
    if collect:
        groups["collected (train)"] = rewards_of(data.output(collect, "trajectories"))
    for name, marker in data.evaluations().items():
        groups[f"{name} (test)"] = rewards_of(data.output(marker, "trajectories"))
    if not any(groups.values()):
        return ""
    return ("<section id='rewards'><h2>Rewards</h2>"
            + figure("rewards", figures.reward_histogram(groups),
                     "Episode rewards: fraction of unit tests passed (backend) or render similarity (frontend).")
            + "</section>")


def _training_section(data: RunData) -> str:
    panels = []
    for stage, title in (("warm_start", "Warm start (SFT on scripted expert dialogues)"),
                         ("train_critic", "Critic (Bradley-Terry on trajectory pairs)"),
                         ("train_policy", "Policy (turn-level DPO on critic-ranked pairs)"),
                         ("baseline_rft", "Baseline: rejection fine-tuning"),
                         ("baseline_mtdpo", "Baseline: multi-turn DPO")):
        marker = data.first(stage)
        history = load_log_history(data.output(marker, "log_history"))
        svg = figures.training_curves(title, history) if history else None
        if svg:
            panels.append(figure(f"training-{stage}", svg, f"{title}: logged training metrics per step.", wide=True))
    if not panels:
        return ""
    return "<section id='training'><h2>Training curves</h2>" + "".join(panels) + "</section>"


def _trajectories_section(data: RunData, examples: int) -> str:
    marker = data.first("rank")
    rows = list(iter_jsonl(data.output(marker, "trajectory_advantages"), limit=examples))
    if not rows:
        return ""
    values = [a for row in rows for a in row.get("advantages", []) if isinstance(a, (int, float))]
    scale = max((abs(a) for a in values), default=0.0)
    blocks = [_trajectory_html(row, scale) for row in rows]
    return (
        "<section id='trajectories'><h2>Credit assignment by the critic</h2>"
        "<p>Collected trajectories; each agent turn is shaded by the advantage the trained critic gives it "
        "(it saw the reference solution, the policy did not).</p>"
        f"<div class='legend'><span>blamed</span><span class='bar'></span><span>credited</span>"
        f"<span>(|advantage| up to {scale:.3g})</span></div>"
        + "".join(blocks) + "</section>"
    )


def _episodes_section(data: RunData, examples: int) -> str:
    """What each evaluated policy said: a few of its episodes, successes and failures alike, in the order run."""
    blocks = []
    for name, marker in data.evaluations().items():
        # an episode retried after an infrastructure failure is written again: its last record stands
        rows = dedupe_latest(iter_jsonl(data.output(marker, "trajectories")))
        succeeded = [r for r in rows if Trajectory(r).succeeded()]
        failed = [r for r in rows if not Trajectory(r).succeeded()]
        half = max(examples // 2, examples - len(failed))  # the slots one kind cannot fill go to the other
        picked = succeeded[:half] + failed[:examples - min(len(succeeded), half)]
        if picked:
            blocks.append(f"<h3>{esc(name)}</h3>" + "".join(_trajectory_html(row, 0.0) for row in picked))
    if not blocks:
        return ""
    return ("<section id='episodes'><h2>Episodes of the evaluations</h2>"
            f"<p>Up to {examples} episodes of each evaluated policy, half of them successes where it has any "
            "(<code>sweet-rl show</code> prints any of them in a terminal).</p>" + "".join(blocks) + "</section>")


def _trajectory_html(row: Mapping[str, Any], scale: float) -> str:
    advantages = list(row.get("advantages", []))
    reward = Trajectory(row).reward
    status = "good" if row.get("success") else ("partial" if reward is not None and reward > 0 else "bad")
    out = [
        f"<article class='trajectory' data-episode='{esc(row.get('episode_id', ''))}'>"
        f"<header>{esc(row.get('task_id', row.get('episode_id', 'trajectory')))} · reward "
        f"<span class='{status}'>{fmt(reward) if reward is not None else '?'}</span></header>"
    ]
    agent_turn = 0
    for message in row.get("dialogue_history", []):
        content = esc(message.get("content", ""))
        if message.get("role") == "assistant":
            advantage = advantages[agent_turn] if agent_turn < len(advantages) else None
            if isinstance(advantage, (int, float)):
                style = f" style='background:{advantage_color(float(advantage), scale)}'"
                badge = f"<span class='adv'>{float(advantage):+.3g}</span>"
                data_attr = f" data-advantage='{float(advantage):.6g}'"
            else:
                style, badge, data_attr = "", "", ""
            out.append(f"<div class='turn agent'{style}{data_attr}>{badge}<span class='who'>Agent, turn "
                       f"{agent_turn + 1}</span>{content}</div>")
            agent_turn += 1
        else:
            out.append(f"<div class='turn human'><span class='who'>Human</span>{content}</div>")
    out.append("</article>")
    return "".join(out)


def _renders_section(data: RunData, examples: int) -> str:
    """Frontend runs: the agent's page and the target page, side by side."""
    blocks = []
    for name, marker in data.evaluations().items():
        index = data.output(marker, "renders")
        if index is None:
            continue
        for row in iter_jsonl(index, limit=examples):
            images = []
            for key, label in (("agent", "agent's page"), ("target", "target page")):
                path = index.parent / str(row.get(key, ""))
                if row.get(key) and path.is_file():
                    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
                    images.append(f"<figure><img alt='{esc(label)}' src='data:image/png;base64,{encoded}'>"
                                  f"<figcaption>{esc(label)}</figcaption></figure>")
                else:
                    images.append(f"<figure><p class='muted'>no render ({esc(row.get(key + '_error', 'missing'))})"
                                  f"</p><figcaption>{esc(label)}</figcaption></figure>")
            similarity = Trajectory(row).reward
            blocks.append(
                f"<div class='render-pair' data-episode='{esc(row.get('episode_id', ''))}'><h3>{esc(name)} · "
                f"{esc(row.get('task_id', ''))} · similarity {fmt(similarity) if similarity is not None else '?'}</h3>"
                f"<div class='renders'>{''.join(images)}</div></div>"
            )
    if not blocks:
        return ""
    return "<section id='renders'><h2>Pages: agent and target</h2>" + "".join(blocks) + "</section>"


def _config_section(data: RunData) -> str:
    items = []
    for folder, marker in data.ordered():
        config = json.dumps(marker.get("config", []), indent=1, default=str, sort_keys=True)
        items.append(f"<details><summary><code>{esc(folder)}</code> configuration</summary><pre>{esc(config)}</pre></details>")
    versions = next((m.get("versions") for _, m in data.ordered() if m.get("versions")), {})
    versions_line = ", ".join(f"{esc(k)} {esc(v)}" for k, v in versions.items())
    return ("<section id='config'><h2>Configuration</h2>" + "".join(items)
            + (f"<p class='muted'>{versions_line}</p>" if versions_line else "") + "</section>")
