"""``sweet-rl show``: a run's dialogues as a person reads them, without the token ids and log-probs::

    sweet-rl show runs/credit/collect/trajectories.jsonl                 # a trajectories file: its first 3 episodes
    sweet-rl show runs/credit_val/evaluate/zero_shot --failed -n 5       # a stage folder holding one; failed only
    sweet-rl show runs/credit --succeeded --task is_adult                # a run with one trajectories file
    sweet-rl show runs/fair_wide                                         # several: lists them, newest first (exit 2)
    sweet-rl show runs/fair_wide/fair/start/validation/evaluate/merged-46093b --task shorten --reference --full

    sweet-rl show runs/fair_cpu/fair/sweet_best/round1/rank --task is_adult   # ranked candidates: what the critic prefers
    sweet-rl show runs/credit/critic_pairs --task pin_valid                  # the trajectory pairs the critic learns from
    sweet-rl show runs/credit/credit_validation --task age_group -n 2        # Monte Carlo values and each ranker's order

Each episode: its task and episode ids, reward and success, then the dialogue in order (the task's request, each
agent message numbered by turn, each simulated human reply), then how it was graded (tests passed and the failed
tests' messages, or the page similarity). Long messages are wrapped and cut to ``--lines`` lines unless ``--full``.
The privileged information (the hidden reference the simulated human and the critic see, and the test calls) is
shown only with ``--reference``. A malformed line is reported with its number and skipped; ``-n 0`` shows every
matching episode. Exit status: 0 shown, 1 no episode matches the filters, 2 a path with nothing to show.

A ``sweet-rl credit`` folder (or its ``ground_truth``) shows its held-out turn states: the candidates from the highest
Monte Carlo value down, with the place each ranker gives them and, at question turns, the human's first reply.
A ``rank`` stage folder (or its ``ranked`` dataset) shows turn states instead: the last human message, then the
candidates from the selector's first choice down, each with its ranking score, the critic's mean log-prob and the
baseline it is measured against (copies of one message merged and counted). A ``critic_pairs`` stage folder (or its
``pairs.jsonl``) shows each pair the critic is trained on: the chosen trajectory, then the rejected one from the
message where they part.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from colbench_gym.envs.dialogue import render_dialogue
from sweet_trl.pipeline.runner import MARKER
from sweet_trl.pipeline.status import policy_label, read_json_object
from sweet_trl.trajectories import Trajectory, dedupe_latest, normalize_records

FILE_NAME = "trajectories.jsonl"  # what collect and evaluate write in their stage folders
CRITIC_SELECTORS = ("critic", "untrained_critic")  # the rank stage's selectors whose scores are log-prob differences
MAX_REPORTED = 5  # malformed lines named one by one; the rest are counted


class ShowError(Exception):
    """A message for the user and the exit status that goes with it."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def trajectory_files(root: Path) -> list[tuple[Path, list[Path]]]:
    """Every ``trajectories.jsonl`` under ``root`` (stage links followed), newest first: ``(path, other paths that
    are links to the same file)``; the path kept is the one that is no link when there is one."""
    found: dict[Path, list[Path]] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        here = Path(folder)
        if here.resolve() in {parent.resolve() for parent in here.parents[:len(here.parts) - len(root.parts)]}:
            dirs[:] = []  # a link back up the tree
            continue
        dirs.sort()
        if FILE_NAME in files:
            path = Path(folder) / FILE_NAME
            found.setdefault(path.resolve(), []).append(path)
    out = []
    for paths in found.values():
        paths.sort(key=lambda p: (p.resolve() != Path(os.path.abspath(p)), len(p.parts)))  # the unlinked path first
        out.append((paths[0], paths[1:]))
    return sorted(out, key=lambda item: item[0].stat().st_mtime, reverse=True)


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def resolve_file(target: str) -> Path:
    """The trajectories file ``target`` names: the file itself, the one in a stage folder, the only one under a run
    folder; several under a run folder print the list and raise :class:`ShowError`."""
    path = Path(target)
    if not path.exists():
        raise ShowError(f"{target}: no such file or folder")
    if path.is_file():
        return path
    if (path / FILE_NAME).is_file():
        return path / FILE_NAME
    files = trajectory_files(path)
    if not files:
        raise ShowError(f"no {FILE_NAME} under {target} (collect and evaluate write one in their stage folder; "
                        "or name a JSONL file of trajectory records)")
    if len(files) == 1:
        return files[0][0]
    print(f"{len(files)} trajectory files under {target}, newest first:")
    for file, links in files:
        also = f"  (also at {', '.join(str(p.parent) for p in links)})" if links else ""
        marker = read_json_object(file.parent / MARKER)
        policy = policy_label(marker) if marker else None
        print(f"  {count_lines(file):5d} episodes  {file.parent}{f'  (policy {policy})' if policy else ''}{also}")
    raise ShowError(f"several trajectory files under {target}: name one, e.g. sweet-rl show {files[0][0].parent}")


def jsonl_rows(path: Path, kind: str, is_row: Any) -> list[dict[str, Any]]:
    """The objects of a JSONL file that ``is_row`` accepts; any other line is reported (the first few by number) and
    skipped, so that one torn or foreign line does not hide the rest."""
    rows, skipped = [], 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                problem = f"not valid JSON ({err})"
            else:
                if not isinstance(row, dict):
                    problem = f"a JSON {type(row).__name__}, not a record"
                elif not is_row(row):
                    problem = f"not {kind}"
                else:
                    rows.append(row)
                    continue
            skipped += 1
            if skipped <= MAX_REPORTED:
                print(f"sweet-rl show: {path}:{number}: {problem}; line skipped", file=sys.stderr)
    if skipped > MAX_REPORTED:
        print(f"sweet-rl show: {path}: {skipped - MAX_REPORTED} more lines skipped", file=sys.stderr)
    return rows


def read_records(path: Path) -> list[dict[str, Any]]:
    """The file's trajectory records, the later of an episode's records winning; other lines reported, skipped."""
    records = jsonl_rows(path, "a trajectory record (no task or dialogue_history)",
                         lambda row: isinstance(row.get("task"), dict) and isinstance(row.get("dialogue_history"), list))
    return dedupe_latest(normalize_records(records))


def terminal_width(args: Any) -> int:
    return args.width or max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def wrapped(text: str, width: int, max_lines: int | None) -> list[str]:
    """``text`` wrapped to ``width`` (each line on its own, so code keeps its indentation), cut to ``max_lines``."""
    if max_lines is None:
        return text.splitlines() or [""]
    lines = [part for line in text.splitlines() or [""]
             for part in (textwrap.wrap(line, width, break_on_hyphens=False) or [""])]
    if len(lines) > max_lines:
        cut = len(lines) - max_lines + 1
        lines = [*lines[:max_lines - 1], f"[... {cut} more line{'s' * (cut > 1)}; --full shows them]"]
    return lines


def block(gutter: str, text: str, width: int, max_lines: int | None) -> str:
    """``text`` under a gutter of width 5, its later lines aligned after its ``"Role: "`` label."""
    label, _, body = text.partition(": ")
    head = f"{gutter:>3}  {label}: "
    lines = wrapped(body, width - len(head), max_lines)
    return "\n".join([head + lines[0], *(" " * len(head) + line for line in lines[1:])])


def grading(trajectory: Trajectory, reference: bool, full: bool, width: int) -> list[str]:
    """How the episode was graded: tests passed and the failures' messages, or the page's similarity."""
    record, out = trajectory.record, []
    tests = record.get("tests")
    if isinstance(tests, list) and tests:
        calls = _test_calls(trajectory.task) if reference else {}
        failed = [t for t in tests if isinstance(t, dict) and t.get("status") != "passed"]
        out.append(f"Tests: {len(tests) - len(failed)}/{len(tests)} passed")
        shown = failed if full else failed[:5]
        for test in shown:
            call = f" {calls[test.get('name')]}" if test.get("name") in calls else ""
            detail = f": {test['detail']}" if test.get("detail") else ""
            line = f"  {test.get('name')}{call} {test.get('status')}{detail}"
            out.append(line if full or len(line) <= width else line[:width - 3] + "...")
        if len(shown) < len(failed):
            out.append(f"  [... {len(failed) - len(shown)} more failed tests; --full shows them]")
    grader = record.get("grader") if isinstance(record.get("grader"), dict) else {}
    if grader.get("status"):
        out.append(f"Grader: {grader['status']}")
    if grader.get("out_of_budget") or grader.get("infra_error") or record.get("infra_error"):
        out.append("Grader: " + ", ".join(k for k in ("out_of_budget", "infra_error")
                                          if grader.get(k) or record.get(k)))
    if trajectory.similarity is not None:
        out.append(f"Similarity: {trajectory.similarity:.3f} ({record.get('similarity_metric', '?')}), "
                   f"render {record.get('render_status', '?')}")
    for key in ("simulator_errors", "policy_errors", "env_errors"):
        for error in record.get(key) or []:
            if isinstance(error, dict):
                out.append(f"{key.replace('_', ' ')[:-1]} at turn {error.get('turn')}: {error.get('error')}")
    return out


def _test_calls(task: dict[str, Any]) -> dict[str, str]:
    """The test calls of a backend task (``test_cases`` is stored as the text of a dict)."""
    import ast

    cases = task.get("test_cases")
    if isinstance(cases, str):
        try:
            cases = ast.literal_eval(cases)
        except (ValueError, SyntaxError):
            return {}
    return {str(k): str(v) for k, v in cases.items()} if isinstance(cases, dict) else {}


def format_episode(trajectory: Trajectory, width: int, max_lines: int | None, reference: bool) -> str:
    record = trajectory.record
    reward = "none" if trajectory.reward is None else f"{trajectory.reward:.2f}"
    verdict = "SUCCEEDED" if trajectory.succeeded() else "FAILED"
    lines = [f"=== {trajectory.episode_id}  (task {trajectory.task_id})",
             f"reward {reward}  {verdict}  {record.get('outcome', '?')}, {_plural(record.get('turns'), 'turn')}"
             + (f", policy {record['policy']}" if record.get("policy") else ""), ""]
    try:
        messages = trajectory.messages
    except ValueError as err:
        messages = []
        lines.append(f"(the dialogue cannot be read: {err})")
    turn = 0
    for message in messages:
        turn += message["role"] == "assistant"
        gutter = str(turn) if message["role"] == "assistant" else ""
        lines.append(block(gutter, render_dialogue([message], instructions=True), width, max_lines))
    lines += ["", *grading(trajectory, reference, max_lines is None, width)]
    if reference:
        task = trajectory.task
        for key, title in (("ground_truth", "Reference"), ("hidden_information", "Hidden information")):
            value = trajectory.privileged(key)
            if value and (key == "ground_truth" or value != task.get("ground_truth")):
                lines += ["", f"{title} (privileged: hidden from the agent, seen by the simulated human and the "
                              "critic):", *("    " + line for line in wrapped(value, width - 4, max_lines))]
    return "\n".join(lines)


def _plural(count: Any, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def ranked_dataset(target: str) -> Path | None:
    """The ranked candidates ``target`` names (a rank stage folder or its ``ranked`` dataset folder), else None."""
    path = Path(target)
    for folder in (path / "ranked", path):
        if (folder / "dataset_info.json").is_file() and "ranking_scores" in (folder / "dataset_info.json").read_text():
            return folder
    return None


def format_state(row: dict[str, Any], width: int, max_lines: int | None, reference: bool,
                 selector: str = "critic") -> str:
    """One turn state: what the human last said, then its candidates from first choice down (unscored ones last).
    ``selector``: the rank stage's; a critic's score is shown with the two log-probs it is the difference of, another
    selector's (random, the hidden tests) as its score alone."""
    from sweet_trl.losses import RANKING_RULES

    by = row.get("ranking") if selector in CRITIC_SELECTORS else f"the {selector} selector"
    lines = [f"=== {row['state_id']}  (task {row['task_id']}, agent turn {row['turn'] + 1})",
             f"ranked by {by}; the episode's reward {row.get('trajectory_reward')}", ""]
    last_human = next((m for m in reversed(row["prompt"]) if m["role"] == "user"), None)
    if last_human is not None:
        lines.append(block("", render_dialogue([last_human], instructions=True), width, max_lines))
    if row.get("ranking_error"):
        return "\n".join([*lines, f"(not ranked: {row['ranking_error']})"])
    def score(index: int) -> float:
        return float(_number(row["ranking_scores"], index))

    def rank_key(index: int) -> tuple[bool, float]:  # unscored (nan) last, then by score
        return not math.isfinite(score(index)), -score(index)

    # each distinct message at its best-scored copy (a critic scores copies alike, a random selector does not)
    merged: dict[str, int] = {}
    copies: dict[str, int] = {}
    for i, text in enumerate(row["candidates"]):
        if text not in merged or rank_key(i) < rank_key(merged[text]):
            merged[text] = i
        copies[text] = copies.get(text, 0) + 1
    order = sorted(merged, key=lambda text: rank_key(merged[text]))
    rule = RANKING_RULES.get(str(row.get("ranking")))
    baseline = "baseline" if rule is None else rule.baseline + ("" if rule.baseline_sees_c or rule.baseline == "policy"
                                                                 else " without c")
    baselines = row["policy_mean_logprobs"] if baseline == "policy" else row.get("reference_mean_logprobs") or []
    for place, text in enumerate(order, 1):
        i = merged[text]
        tokens = _plural(_number(row["candidate_num_tokens"], i, 0), "token")
        detail = (f"critic {_number(row.get('critic_mean_logprobs') or [], i):.3f}, {baseline} "
                  f"{_number(baselines, i):.3f}, {tokens}" if selector in CRITIC_SELECTORS else tokens)
        lines.append(f"  #{place}{f' x{copies[text]}' if copies[text] > 1 else ''}  score {score(i):+.3f}  "
                     f"({detail})")
        lines.append(block("", f"Agent: {text}", width, max_lines))
    if reference:
        lines += ["", "Reference (privileged: the critic reads it, the policy does not):",
                  *("    " + line for line in wrapped(str(row.get("privileged")), width - 4, max_lines))]
    return "\n".join(lines)


def _number(values: Sequence[Any], index: int, missing: float = float("nan")) -> Any:
    value = values[index] if index < len(values) else None
    return missing if value is None else value


def show_ranked(folder: Path, args: Any) -> int:
    from sweet_trl.trainer_utils import load_rows

    if args.failed or args.succeeded:
        raise ShowError("--failed and --succeeded pick episodes; ranked turn states are picked with --task and -n")
    # the rank stage's marker: which selector ranked (the rows name the rule only)
    marker = read_json_object(folder.parent / MARKER) or {}
    selector = str((marker.get("info") or {}).get("selector", "critic"))
    rows = [row for row in load_rows(folder) if args.task is None or args.task in row["task_id"]]
    if not rows:
        raise ShowError(f"no turn state in {folder} has a task id containing {args.task!r}", status=1)
    shown = rows if args.n == 0 else rows[:args.n]
    width = terminal_width(args)
    print(f"{folder}: {len(rows)} ranked turn states{' matching' if args.task else ''}, showing {len(shown)}\n")
    print("\n\n".join(format_state(row, width, None if args.full else args.lines, args.reference, selector)
                      for row in shown))
    return 0


PAIR_KEYS = ("chosen", "rejected", "chosen_reward", "rejected_reward")  # a critic pair (sweet_trl.pairs)


def critic_pairs_file(target: str) -> Path | None:
    """The critic pairs ``target`` names (a critic_pairs stage folder or its ``pairs.jsonl``), else None."""
    path = Path(target)
    path = path / "pairs.jsonl" if path.is_dir() else path
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as handle:
        first = handle.readline()
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return None
    return path if isinstance(row, dict) and all(key in row for key in PAIR_KEYS) else None


def format_pair(row: dict[str, Any], width: int, max_lines: int | None, reference: bool) -> str:
    """One critic pair: the chosen trajectory, then the rejected one from the turn where they part."""
    chosen, rejected = row["chosen"], row["rejected"]
    same = next((i for i, (a, b) in enumerate(zip(chosen, rejected)) if a != b), min(len(chosen), len(rejected)))
    agent_turns = sum(m["role"] == "assistant" for m in chosen[:same])
    lines = [f"=== {row.get('task_id')}: {row.get('chosen_episode_id')} (reward {row['chosen_reward']}) chosen over "
             f"{row.get('rejected_episode_id')} (reward {row['rejected_reward']})",
             f"they part at message {same + 1} (after {_plural(agent_turns, 'agent turn')} in common)", ""]
    for title, messages in (("chosen", chosen), ("rejected", rejected)):
        lines.append(f"{title}:")
        turn = sum(m["role"] == "assistant" for m in messages[:same if title == "rejected" else 0])
        if title == "rejected" and same:
            lines.append(f"     [... the first {_plural(same, 'message')}, as above]")
        for message in messages[same if title == "rejected" else 0:]:
            turn += message["role"] == "assistant"
            gutter = str(turn) if message["role"] == "assistant" else ""
            lines.append(block(gutter, render_dialogue([message], instructions=True), width, max_lines))
    if reference:
        lines += ["", "Reference (privileged: the critic reads it, the policy does not):",
                  *("    " + line for line in wrapped(str(row.get("privileged")), width - 4, max_lines))]
    return "\n".join(lines)


def show_pairs(path: Path, args: Any) -> int:
    if args.failed or args.succeeded:
        raise ShowError("--failed and --succeeded pick episodes; critic pairs are picked with --task and -n")
    rows = [row for row in jsonl_rows(path, "a critic pair", lambda row: all(key in row for key in PAIR_KEYS))
            if args.task is None or args.task in str(row.get("task_id"))]
    if not rows:
        raise ShowError(f"no critic pair in {path}" + (f" of a task matching {args.task!r}" if args.task else ""),
                        status=1)
    shown = rows if args.n == 0 else rows[:args.n]
    width = terminal_width(args)
    print(f"{path}: {len(rows)} critic pairs{' matching' if args.task else ''}, showing {len(shown)}\n")
    print("\n\n".join(format_pair(row, width, None if args.full else args.lines, args.reference) for row in shown))
    return 0


def credit_values(target: str) -> Path | None:
    """The ground truth ``target`` names (a ``sweet-rl credit`` folder, its ``ground_truth`` folder, or its
    ``values.jsonl``), else None."""
    path = Path(target)
    for found in (path / "ground_truth" / "values.jsonl", path / "values.jsonl", path):
        if found.is_file() and found.name == "values.jsonl" and found.parent.name == "ground_truth":
            return found
    return None


def ranker_scores(folder: Path, ground_truth: Mapping[str, Any] | None) -> dict[str, dict[str, list[float]]]:
    """Every ranker's scores kept in a credit folder's ``scores/`` (one file a ranker, ``:`` written ``__``), by
    state id; a file made for another ground truth (other settings: a stale file) is left out."""
    out: dict[str, dict[str, list[float]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        rows = jsonl_rows(path, "a ranker's scores", lambda row: "state_id" in row and "scores" in row
                          or set(row) == {"settings"})  # the first line: what made the scores
        made_for = next((row["settings"].get("ground_truth") for row in rows
                         if "settings" in row and isinstance(row["settings"], dict)), None)
        if ground_truth is not None and made_for is not None and made_for != ground_truth:
            continue
        out[path.stem.replace("__", ":")] = {str(row["state_id"]): row["scores"] for row in rows if "state_id" in row}
    return out


def places(scores: Sequence[Any]) -> list[int | None]:
    """Each candidate's place in a ranker's order (1: its pick; ties share the better place); ``None`` for a
    candidate it could not score (the figures leave those out too)."""
    finite = [float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None for x in scores]
    return [None if score is None else 1 + sum(other is not None and other > score for other in finite)
            for score in finite]


def format_credit_state(row: dict[str, Any], rankers: Mapping[str, Mapping[str, list[float]]], width: int,
                        max_lines: int | None, reference: bool) -> str:
    """One held-out turn state of the ground truth: the human's last message, then its candidates from the highest
    Monte Carlo value down, each with its standard error, the place each ranker gives it and, at a question turn,
    the human's first reply to it (what the value mostly rides on)."""
    values, errors = row["values"], row.get("value_se") or []
    spread = max(values) - min(values) if values else 0.0
    lines = [f"=== {row['state_id']}  ({row.get('kind')} turn, agent turn {int(row.get('turn', 0)) + 1}; "
             f"values {min(values):.3f}-{max(values):.3f}{', exact' if all(row.get('exact') or [False]) else ''})",
             "(no spread: every ranker is right here; the figures count only states whose values differ)"
             if spread == 0 else ""]
    last_human = next((m for m in reversed(row["prompt"]) if m["role"] == "user"), None)
    if last_human is not None:
        lines.append(block("", render_dialogue([last_human], instructions=True), width, max_lines))
    # every ranker keeps its letter (A, B, ... in the order of the header) whether or not it scored this state
    letters = {name: chr(ord("A") + i) for i, name in enumerate(rankers)}
    placed = {name: places(by_state[row["state_id"]]) for name, by_state in rankers.items()
              if len(by_state.get(row["state_id"]) or []) == len(values)}
    lines.append(f"  value    SE  {' '.join(letters[name] for name in placed)}  candidate (A.. the place each ranker "
                 "gives it, 1 its pick)")
    replies = row.get("first_replies") or []
    exact = row.get("exact") or []

    def place(name: str, i: int) -> str:
        at = placed[name][i]
        return "-" if at is None else str(at) if at < 10 else "+"

    for i in sorted(range(len(values)), key=lambda i: (-values[i], i)):
        se = _number(errors, i)
        error = "exact" if _number(exact, i, False) else "n/a" if math.isnan(se) else f"{se:.3f}"
        head = f"  {values[i]:.3f} {error:>5}  {' '.join(place(name, i) for name in placed)}  "
        text = wrapped(str(row["candidates"][i]), max(width - len(head), 20), max_lines)
        lines += [head + text[0], *(" " * len(head) + line for line in text[1:])]
        said = next(iter(replies[i]), None) if i < len(replies) and replies[i] else None
        if said is not None and row.get("kind") == "question":
            reply = wrapped(f"-> Human: {said}", max(width - len(head), 20), max_lines)
            lines += [" " * len(head) + line for line in reply]
    if reference:
        lines += ["", "Reference (privileged: the critic reads it, the policy does not):",
                  *("    " + line for line in wrapped(str(row.get("privileged")), width - 4, max_lines))]
    return "\n".join(lines)


def show_credit(path: Path, args: Any) -> int:
    if args.failed or args.succeeded:
        raise ShowError("--failed and --succeeded pick episodes; the ground truth's states are picked with --task "
                        "and -n")
    rows = [row for row in jsonl_rows(path, "a valued turn state", lambda row: "state_id" in row and "values" in row
                                      or set(row) == {"settings"})  # the first line: the ground truth's settings
            if "state_id" in row and (args.task is None or args.task in str(row.get("task_id")))]
    if not rows:
        raise ShowError(f"no valued turn state in {path}" + (f" of a task matching {args.task!r}" if args.task
                                                              else ""), status=1)
    with path.open(encoding="utf-8") as handle:
        try:
            first = json.loads(handle.readline())
        except json.JSONDecodeError:
            first = {}
    settings = first.get("settings") if isinstance(first, dict) and isinstance(first.get("settings"), dict) else None
    rankers = ranker_scores(path.parent.parent / "scores", settings)
    shown = rows if args.n == 0 else rows[:args.n]
    width = terminal_width(args)
    print(f"{path}: {len(rows)} turn states{' matching' if args.task else ''}, showing {len(shown)}; rankers: "
          + (", ".join(f"{chr(ord('A') + i)} {name}" for i, name in enumerate(rankers)) or "none scored yet") + "\n")
    print("\n\n".join(format_credit_state(row, rankers, width, None if args.full else args.lines, args.reference)
                      for row in shown))
    return 0


def show(args: Any) -> int:
    values = credit_values(args.target)
    if values is not None:
        return show_credit(values, args)
    ranked = ranked_dataset(args.target)
    if ranked is not None:
        return show_ranked(ranked, args)
    pairs = critic_pairs_file(args.target)
    if pairs is not None:
        return show_pairs(pairs, args)
    path = resolve_file(args.target)
    records = [Trajectory(r) for r in read_records(path)]
    if not records:
        raise ShowError(f"{path}: no trajectory records")
    picked = [t for t in records if args.task is None or args.task in t.task_id]
    if not picked:
        ids = sorted({t.task_id for t in records})
        spread = ids[::max(1, len(ids) // 5)][:5]
        raise ShowError(f"no task id in {path} contains {args.task!r}; its {len(ids)} task ids include "
                        f"{', '.join(spread)}{', ...' if len(ids) > 5 else ''}", status=1)
    if args.failed or args.succeeded:
        picked = [t for t in picked if t.succeeded() == args.succeeded]
    if not picked:
        which = "succeeded" if args.succeeded else "failed"
        raise ShowError(f"no episode {which} in {path}" + (f" of tasks matching {args.task!r}" if args.task else ""),
                        status=1)
    shown = picked if args.n == 0 else picked[:args.n]
    width = terminal_width(args)
    max_lines = None if args.full else args.lines
    print(f"{path}: {len(records)} episodes, {len(picked)} matching, showing {len(shown)}\n")
    print("\n\n".join(format_episode(t, width, max_lines, args.reference) for t in shown))
    if len(shown) < len(picked):
        print(f"\n[{_plural(len(picked) - len(shown), 'more matching episode')}: -n {len(picked)} or -n 0 shows them all]")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``sweet-rl show RUN_OR_FOLDER_OR_FILE [--task S] [--failed | --succeeded] [-n 3] [--full] [--reference]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl show",
                                     description="A run's dialogues as a person reads them: each episode's ids, "
                                                 "reward, messages in order and grading.")
    parser.add_argument("target", help="a trajectories JSONL file, a stage folder holding one, a run folder, a rank "
                                       "stage folder (its ranked candidates), a critic_pairs one (its pairs) or a "
                                       "sweet-rl credit folder (its states' Monte Carlo values and rankers)")
    parser.add_argument("--task", help="only tasks whose id contains this text")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--failed", action="store_true", help="only episodes that did not succeed")
    which.add_argument("--succeeded", action="store_true", help="only episodes that succeeded")
    parser.add_argument("-n", type=int, default=3, help="how many episodes to show (0: all; default 3)")
    parser.add_argument("--full", action="store_true", help="every message whole, as written (no wrap, no cut)")
    parser.add_argument("--lines", type=int, default=24, help="lines kept of a long message (default 24)")
    parser.add_argument("--width", type=int, default=0, help="wrap width (default: the terminal's, 60 to 120)")
    parser.add_argument("--reference", action="store_true",
                        help="also the privileged information: the hidden reference and the test calls")
    args = parser.parse_args(argv)
    if args.n < 0 or args.lines < 2 or args.width < 0:
        parser.error("-n must be >= 0, --lines >= 2, --width >= 0")
    try:
        return show(args)
    except ShowError as err:
        print(f"sweet-rl show: error: {err}", file=sys.stderr)
        return err.status


if __name__ == "__main__":
    sys.exit(main())
