"""Where a run stands, read from its markers alone (nothing is loaded, nothing runs)::

    sweet-rl status runs/fair_cpu          # every stage under the folder, studies' rounds and arms included
    sweet-rl status runs/credit --running  # only what is running, was interrupted or failed

Each stage folder is one line: ``done`` with its minutes and key figures (an evaluation's with the policy it
evaluated; ``done, stale`` when an input stage was made again since: the command that made it would run it again;
``output missing`` when files its marker names are gone), ``running`` (its process is alive on this machine) with
how long it has run and how far it got (a trainer: its last checkpoint's step and loss, the time a step takes and
the time left), ``interrupted`` (its process is gone: the same command resumes it), ``failed`` with the error it
raised, or ``linked`` when the folder is another run's stage, shown as it stands there. ``sweet-rl credit``'s
measurement is listed as a stage of its run. Long studies run in the background; this is how a researcher sees, without reading logs, which of their
stages finished and what each cost.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.runner import EXPECTED, FAILED, MARKER, RUNNING


def process_alive(pid: int) -> bool:
    """Whether a process of this id exists on this machine (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


@dataclass
class StageStatus:
    path: str  # relative to the folder asked about
    state: str  # done, running, interrupted, failed, unknown
    minutes: float | None
    summary: str
    linked_to: str | None = None
    stale: str | None = None  # done, but an input stage was made again since: which, in a few words
    missing: tuple[str, ...] = ()  # done, but output files its marker names are gone (deleted, never copied over)

    def line(self, width: int) -> str:
        state = (self.state + (", linked" if self.linked_to else "") + (", stale" if self.stale else "")
                 + (", output missing" if self.missing else ""))
        summary = f"({self.stale}) {self.summary}" if self.stale else self.summary
        summary = f"(no {', '.join(self.missing)}) {summary}" if self.missing else summary
        summary = f"-> {self.linked_to}: {summary}" if self.linked_to else summary
        minutes = "" if self.minutes is None else f"{self.minutes:.1f}"
        return f"{self.path:<{width}}  {state:<20} {minutes:>7}  {summary}"


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or ``None``: missing, being written (torn), or not an object. The readers of run folders
    take a stage's marker this way, since a stage may be writing it as they read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _since(started_at: str | None, now: datetime) -> float | None:
    try:
        return (now - datetime.fromisoformat(str(started_at))).total_seconds() / 60
    except (TypeError, ValueError):
        return None


# What tells most of a stage's outcome comes first (a line is cut at SUMMARY_LIMIT); an error count follows them
# when it is not zero, the other counts and metrics after, in the stage's own order, and zero error counts last.
KEY_FIGURES = ("success_rate", "mean_reward", "pass@1", "train_loss", "pair_accuracy", "steps", "episodes", "pairs",
               "turn_states", "candidates", "mean_reward_gap", "mean_candidate_advantage",
               "question_top1_trained_minus_untrained", "answer_top1_trained_minus_untrained")  # the last: credit's
SUMMARY_LIMIT = 110


def _short_summary(marker: Mapping[str, Any], limit: int = SUMMARY_LIMIT) -> str:
    figures = {**(marker.get("counts") or {}), **(marker.get("metrics") or {})}
    failures = [k for k in figures if ("error" in k or "fail" in k) and k not in KEY_FIGURES]
    order = [k for k in KEY_FIGURES if k in figures] + [k for k in failures if figures[k]]
    order += [k for k in figures if k not in order and k not in failures] + [k for k in failures if not figures[k]]
    parts = [f"{k}={figures[k]:.3f}" if isinstance(figures[k], float) else f"{k}={figures[k]}" for k in order]
    text = ", ".join(parts)
    shown = len(parts)
    while len(text) > limit and shown > 1:  # whole figures only, and how many more there are
        shown -= 1
        text = ", ".join(parts[:shown]) + f" (+{len(parts) - shown} more)"
    return text or "no counts"


def policy_label(marker: Mapping[str, Any]) -> str | None:
    """The policy an evaluation's marker names, short: a local model by its last folders (``sweet_best/round2/
    train_policy_best``; an evaluation folder's own name is a hash of it), a Hub id or a run's name as it is."""
    policy = (marker.get("info") or {}).get("policy")
    if not isinstance(policy, str) or not policy:
        return None
    parts = list(Path(policy).parts)
    while len(parts) > 1 and parts[-1] in ("merged", "model"):  # a stage's model folder: the stage names it
        parts.pop()
    return "/".join(parts[-3:]) if Path(policy).is_absolute() or len(parts) > 2 else policy


def _lines(path: Path) -> int | None:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except OSError:
        return None


def records_so_far(folder: Path, skip: Sequence[str] = ()) -> str:
    """What a stage that has not finished has written: the lines of each JSONL file it appends to (a collection's
    episodes, say), ``""`` when it has none."""
    counts = [f"{n} lines in {path.name}" for path in sorted(folder.glob("*.jsonl"))
              if path.name not in skip and (n := _lines(path)) is not None]
    return "; " + ", ".join(counts) if counts else ""


# the figures of a trainer's last logged step that say whether it is learning (a critic's, a policy's)
TRAINING_FIGURES = ("loss", "pair_accuracy", "rewards/accuracies")


def training_progress(folder: Path, now: datetime) -> str:
    """A trainer's newest checkpoint: ``step N/M``, its last logged loss (and pair accuracy), and, from the steps
    made since training started (``StageContext.training_from``), the time a step takes and the time left;
    ``""`` without a checkpoint."""
    states = []
    for path in [*folder.glob("checkpoint-*/trainer_state.json"), *folder.glob("*/checkpoint-*/trainer_state.json")]:
        state = read_json_object(path)
        if state is not None and isinstance(state.get("global_step"), int):
            states.append((state["global_step"], path, state))
    if not states:
        return ""
    step, path, state = max(states, key=lambda s: s[0])
    total = state.get("max_steps")
    text = f"; step {step}/{total} at its last checkpoint" if total else f"; step {step} at its last checkpoint"
    logged = [row for row in state.get("log_history") or [] if isinstance(row, dict) and "loss" in row]
    figures = [f"{key} {logged[-1][key]:.3f}" for key in TRAINING_FIGURES
               if logged and isinstance(logged[-1].get(key), (int, float))]
    text += f" ({', '.join(figures)})" if figures else ""
    began = read_json_object(folder / EXPECTED) or {}
    started, first = _when(began.get("at")), began.get("from_step")
    if began.get("unit") == "steps" and started is not None and isinstance(first, int) and step > first:
        saved = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        per_step = (saved - started).total_seconds() / (step - first)
        if per_step <= 0:  # the file's clock behind the writer's (another machine's disk): no rate to tell
            return text
        text += f"; {per_step:.1f} s a step since step {first}"
        if total:
            left = max((total - step) * per_step - (now - saved).total_seconds(), 0.0)
            text += f", about {left / 60:.0f} min left"
    return text


def progress(folder: Path, now: datetime | None = None) -> tuple[str, tuple[str, ...]]:
    """How far a running stage got, as far as its files tell cheaply (``""`` when they do not): a trainer's last
    checkpoint (:func:`training_progress`), or the rows written of those the stage said it has to do
    (``_EXPECTED.json``); and the files read for it."""
    trained = training_progress(folder, now or datetime.now(timezone.utc))
    if trained:
        return trained, ()
    expected = read_json_object(folder / EXPECTED)  # what the stage said it has to do (StageContext.expect)
    if not isinstance(expected, dict) or not isinstance(expected.get("total"), int):
        return "", ()
    name = str(expected.get("file"))
    lines = _lines(folder / name)
    # a retried row (an episode whose infrastructure failed) is a line more: never past the total
    done = min(max((lines or 0) - int(expected.get("header_lines") or 0), 0), expected["total"])
    return f"; {done}/{expected['total']} {expected.get('unit')} in {name}", (name,)


def _run_dir(folder: Path, relative: Any) -> Path | None:
    """The run a stage folder belongs to: ``folder`` less the stage's own folder in it (``evaluate/sweet``)."""
    parts = Path(str(relative)).parts if relative else ()
    if not parts or folder.parts[-len(parts):] != parts:
        return None
    return folder.parents[len(parts) - 1]


def stale_reason(folder: Path, marker: Mapping[str, Any], memo: dict[Path, str | None] | None = None) -> str | None:
    """Why a finished stage no longer stands for its inputs, or ``None``: an input stage made again since (another
    fingerprint, or with ``input_runs`` recorded another run), not complete now, or itself stale. From the markers
    alone; ``memo`` keeps each folder's answer across a run's stages."""
    memo = {} if memo is None else memo
    # a linked stage (a round's link to the start's critic) has its inputs beside the folder it links to
    folder = key = folder.resolve()
    if key in memo:
        return memo[key]
    memo[key] = None  # a cycle (not made by the runner) reads as fresh rather than looping
    run_dir = _run_dir(folder, marker.get("dir"))
    runs = marker.get("input_runs") or {}
    reason = None
    for name, fingerprint in (marker.get("inputs") or {}).items() if run_dir is not None else ():
        upstream = read_json_object(run_dir / name / MARKER)
        if upstream is None:
            reason = f"{name} not complete"
        elif upstream.get("fingerprint") != fingerprint or (name in runs and runs[name] != upstream.get("run_id")):
            reason = f"{name} changed since"
        elif (inner := stale_reason(run_dir / name, upstream, memo)) is not None:
            reason = inner if ", via " in inner else f"{inner}, via {name}"
        if reason is not None:
            break
    memo[key] = reason
    return reason


def missing_outputs(folder: Path, marker: Mapping[str, Any]) -> tuple[str, ...]:
    """The output files a finished stage's marker names that are not in its folder: a stage whose outputs were
    deleted, or whose marker was copied or joined without them, is done in name only (a stage reading it fails)."""
    outputs = marker.get("outputs")
    names = [name for name in outputs.values() if isinstance(name, str)] if isinstance(outputs, dict) else []
    return tuple(name for name in names if not (folder / name).exists())


def stage_status(folder: Path, now: datetime, host: str,
                 memo: dict[Path, str | None] | None = None) -> StageStatus | None:
    """The state of one folder, or ``None`` when it is not a stage's (no marker of either kind)."""
    done, running = read_json_object(folder / MARKER), read_json_object(folder / RUNNING)
    if done is not None:
        policy = policy_label(done)
        summary = f"policy {policy}: {_short_summary(done)}" if policy else _short_summary(done)
        return StageStatus("", "done", float(done.get("seconds", 0.0)) / 60, summary,
                           stale=stale_reason(folder, done, memo), missing=missing_outputs(folder, done))
    if running is None:
        return None
    minutes = _since(running.get("started_at"), now)
    pid, where = running.get("pid"), running.get("host")
    failed = read_json_object(folder / FAILED)
    if failed is not None:  # cleared when an attempt starts: this is the last attempt's end
        lasted = _since(running.get("started_at"), _when(failed.get("failed_at")) or now)
        return StageStatus("", "failed", lasted, f"{failed.get('error')}; at {failed.get('failed_at')}"
                                                 f"{records_so_far(folder)}")
    if not isinstance(pid, int) or where is None:  # a marker written before the process was recorded
        return StageStatus("", "unknown", minutes, f"started {running.get('started_at')}; no process recorded"
                                                   f"{records_so_far(folder)}")
    if where != host:
        return StageStatus("", "running elsewhere?", minutes, f"pid {pid} on {where}")
    how_far, counted = progress(folder, now)
    so_far = how_far + records_so_far(folder, skip=counted)
    if process_alive(pid):
        return StageStatus("", "running", minutes, f"pid {pid}, started {running.get('started_at')}{so_far}")
    return StageStatus("", "interrupted", minutes,
                       f"started {running.get('started_at')}; the same command resumes{so_far}")


def _when(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def stage_folders(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every folder under ``root`` that may be a stage's, and whether it is reached through a link (a link is not
    followed further: it is another run's stage, listed once as it stands there)."""
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        if MARKER in files or RUNNING in files:
            yield here, False
            marker = read_json_object(here / (MARKER if MARKER in files else RUNNING)) or {}
            if not marker.get("holds_stages"):  # a stage's own folders (its model, its checkpoints) hold no stage
                subfolders[:] = []
                continue
            # work that is not a stage says it holds some (runner.seen_by_status: `sweet-rl credit`, whose folder
            # holds the held-out evaluation it prepares): they are listed under it
        for name in sorted(subfolders):
            if (here / name).is_symlink():
                yield here / name, True
        subfolders[:] = sorted(name for name in subfolders if not (here / name).is_symlink())


def run_status(root: Path, now: datetime | None = None) -> list[StageStatus]:
    """Every stage under ``root``, in path order."""
    now = now or datetime.now(timezone.utc)
    host = socket.gethostname()
    out, memo = [], {}
    for folder, linked in stage_folders(root):
        status = stage_status(folder.resolve() if linked else folder, now, host, memo)
        if status is None:
            if not linked:
                continue
            status = StageStatus("", "not a stage", None, "")
        status.path = str(folder.relative_to(root)) or "."
        status.linked_to = os.readlink(folder) if linked else None
        out.append(status)
    return sorted(out, key=lambda s: s.path)


def format_status(stages: Sequence[StageStatus], root: Path, only_active: bool = False) -> str:
    """A line per stage and a last line that counts them all; ``only_active`` lists only the stages not done (the
    count still covers every stage)."""
    if not stages:
        return f"{root}: no stage has started here"
    shown = [s for s in stages if s.state not in ("done", "not a stage")] if only_active else list(stages)
    if shown:
        width = max(len(s.path) for s in shown)
        lines = [f"{'stage':<{width}}  {'state':<20} {'minutes':>7}  key figures first (or the process, or the error)"]
        lines += [s.line(width) for s in shown]
    else:
        lines = [f"{root}: no stage running, interrupted, failed or unknown"]
    own_done = [s for s in stages if s.state == "done" and s.linked_to is None]
    count = {state: sum(s.state == state for s in stages) for state in ("running", "interrupted", "failed", "unknown")}
    count["stale"] = sum(s.stale is not None for s in stages)
    count["with output missing"] = sum(bool(s.missing) for s in stages)
    lines.append(f"{len(own_done)} stages done here in {sum(s.minutes or 0.0 for s in own_done):.1f} min"
                 + "".join(f", {n} {state}" for state, n in count.items() if n))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``sweet-rl status RUN_DIR... [--running]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl status",
                                     description="Every stage under a run folder: done (minutes, key figures; stale "
                                                 "when an input was made again since), running, interrupted, failed, "
                                                 "or linked to another run's stage.")
    parser.add_argument("run_dirs", nargs="+", help="run folders (or any folder above them)")
    parser.add_argument("--running", action="store_true", help="only stages running, interrupted, failed or unknown")
    args = parser.parse_args(argv)
    texts = []
    for name in args.run_dirs:
        root = Path(name)
        if not root.is_dir():
            raise FileNotFoundError(f"{root} is not a folder")
        texts.append(format_status(run_status(root), root, only_active=args.running))
    print("\n\n".join(texts))
    return 0
