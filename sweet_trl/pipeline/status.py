"""Where a run stands, read from its markers alone (nothing is loaded, nothing runs)::

    sweet-rl status runs/fair_cpu          # every stage under the folder, studies' rounds and arms included
    sweet-rl status runs/credit --running  # only what is running or was interrupted

Each stage folder is one line: ``done`` with its minutes and counts, ``running`` (its process is alive on this
machine) with how long it has run, ``interrupted`` (its process is gone: the same command resumes it), or
``linked`` when the folder is another run's stage, shown as it stands there. Long studies run in the background;
this is how a researcher sees, without reading logs, which of their stages finished and what each cost.
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

from sweet_trl.pipeline.runner import MARKER, RUNNING, _summary


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
    state: str  # done, running, interrupted, unknown
    minutes: float | None
    summary: str
    linked_to: str | None = None

    def line(self, width: int) -> str:
        state = f"{self.state}, linked" if self.linked_to else self.state
        summary = f"-> {self.linked_to}: {self.summary}" if self.linked_to else self.summary
        minutes = "" if self.minutes is None else f"{self.minutes:.1f}"
        return f"{self.path:<{width}}  {state:<20} {minutes:>7}  {summary}"


def _read(path: Path) -> dict[str, Any] | None:
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


def _short_summary(marker: Mapping[str, Any], limit: int = 90) -> str:
    text = _summary(dict(marker))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def records_so_far(folder: Path) -> str:
    """What a stage that has not finished has written: the lines of each JSONL file it appends to (a collection's
    episodes, say), ``""`` when it has none."""
    counts = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            with path.open("rb") as handle:
                counts.append(f"{sum(1 for _ in handle)} lines in {path.name}")
        except OSError:
            continue
    return "; " + ", ".join(counts) if counts else ""


def stage_status(folder: Path, now: datetime, host: str) -> StageStatus | None:
    """The state of one folder, or ``None`` when it is not a stage's (no marker of either kind)."""
    done, running = _read(folder / MARKER), _read(folder / RUNNING)
    if done is not None:
        return StageStatus("", "done", float(done.get("seconds", 0.0)) / 60, _short_summary(done))
    if running is None:
        return None
    minutes = _since(running.get("started_at"), now)
    pid, where = running.get("pid"), running.get("host")
    so_far = records_so_far(folder)
    if not isinstance(pid, int) or where is None:  # a marker written before the process was recorded
        return StageStatus("", "unknown", minutes, f"started {running.get('started_at')}; no process recorded"
                                                   f"{so_far}")
    if where != host:
        return StageStatus("", "running elsewhere?", minutes, f"pid {pid} on {where}")
    if process_alive(pid):
        return StageStatus("", "running", minutes, f"pid {pid}, started {running.get('started_at')}{so_far}")
    return StageStatus("", "interrupted", minutes,
                       f"started {running.get('started_at')}; the same command resumes{so_far}")


def stage_folders(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every folder under ``root`` that may be a stage's, and whether it is reached through a link (a link is not
    followed further: it is another run's stage, listed once as it stands there)."""
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        if MARKER in files or RUNNING in files:
            subfolders[:] = []  # a stage's own folders (its model, its checkpoints) hold no stage
            yield here, False
            continue
        for name in sorted(subfolders):
            if (here / name).is_symlink():
                yield here / name, True
        subfolders[:] = sorted(name for name in subfolders if not (here / name).is_symlink())


def run_status(root: Path, now: datetime | None = None) -> list[StageStatus]:
    """Every stage under ``root``, in path order."""
    now = now or datetime.now(timezone.utc)
    host = socket.gethostname()
    out = []
    for folder, linked in stage_folders(root):
        status = stage_status(folder.resolve() if linked else folder, now, host)
        if status is None:
            if not linked:
                continue
            status = StageStatus("", "not a stage", None, "")
        status.path = str(folder.relative_to(root)) or "."
        status.linked_to = os.readlink(folder) if linked else None
        out.append(status)
    return sorted(out, key=lambda s: s.path)


def format_status(stages: Sequence[StageStatus], root: Path) -> str:
    if not stages:
        return f"{root}: no stage has started here"
    width = max(len(s.path) for s in stages)
    lines = [f"{'stage':<{width}}  {'state':<20} {'minutes':>7}  counts and metrics (or the process)"]
    lines += [s.line(width) for s in stages]
    own_done = [s for s in stages if s.state == "done" and s.linked_to is None]
    count = {state: sum(s.state == state for s in stages) for state in ("running", "interrupted", "unknown")}
    lines.append(f"{len(own_done)} stages done here in {sum(s.minutes or 0.0 for s in own_done):.1f} min"
                 + "".join(f", {n} {state}" for state, n in count.items() if n))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``sweet-rl status RUN_DIR... [--running]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="sweet-rl status",
                                     description="Every stage under a run folder: done (minutes, counts), running, "
                                                 "interrupted, or linked to another run's stage.")
    parser.add_argument("run_dirs", nargs="+", help="run folders (or any folder above them)")
    parser.add_argument("--running", action="store_true", help="only stages running, interrupted or unknown")
    args = parser.parse_args(argv)
    texts = []
    for name in args.run_dirs:
        root = Path(name)
        if not root.is_dir():
            raise FileNotFoundError(f"{root} is not a folder")
        stages = run_status(root)
        if args.running:
            stages = [s for s in stages if s.state not in ("done", "not a stage")]
        texts.append(format_status(stages, root))
    print("\n\n".join(texts))
    return 0
