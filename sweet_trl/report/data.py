"""Read what a run left on disk: stage markers, trainer logs, trajectories, critic advantages, renders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweet_trl.trajectories import Trajectory

MARKER = "_COMPLETE.json"
# Stage order for display; anything else follows alphabetically.
STAGE_ORDER = ("collect", "critic_pairs", "train_critic", "sample_candidates", "rank", "policy_pairs",
               "train_policy", "baseline_rft", "baseline_mtdpo", "evaluate")


@dataclass
class RunData:
    """Everything the report shows, loaded once."""

    run_dir: Path
    markers: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage folder -> marker
    study: dict[str, Any] | None = None  # <run_dir>/study.json, written by `sweet-rl study`

    def ordered(self) -> list[tuple[str, dict[str, Any]]]:
        def key(item):
            name = item[1].get("stage", item[0])
            rank = STAGE_ORDER.index(name) if name in STAGE_ORDER else len(STAGE_ORDER)
            return rank, item[1].get("started_at", ""), item[0]

        return sorted(self.markers.items(), key=key)

    def first(self, stage: str) -> dict[str, Any] | None:
        for folder, marker in self.ordered():
            if marker.get("stage") == stage:
                return marker
        return None

    def evaluations(self) -> dict[str, dict[str, Any]]:
        """Policy label -> evaluate marker."""
        out = {}
        for folder, marker in self.ordered():
            if marker.get("stage") == "evaluate":
                out[marker.get("info", {}).get("policy", folder.split("/")[-1])] = marker
        return out

    def output(self, marker: dict[str, Any] | None, name: str) -> Path | None:
        if marker is None or name not in marker.get("outputs", {}):
            return None
        path = self.run_dir / marker["dir"] / marker["outputs"][name]
        return path if path.exists() else None

    @property
    def config(self) -> dict[str, Any]:
        for _, marker in self.ordered():
            if marker.get("config"):
                return marker["config"][0]
        return {}


def not_a_run(folder: Path) -> None:
    """Refuse (``ValueError``, saying what to give instead) a folder whose report would be empty or misleading: a
    stage's own folder, or a fair study's, whose arms and rounds are runs of their own."""
    folder = folder.resolve()  # `sweet-rl report .` inside a stage: its run is found among the parents
    marker = folder / MARKER
    if marker.is_file():
        try:
            parts = len(Path(str(json.loads(marker.read_text(encoding="utf-8")).get("dir") or ".")).parts)
        except (OSError, json.JSONDecodeError):
            parts = 1
        run = folder.parents[max(parts - 1, 0)]
        raise ValueError(f"{folder} is a stage's folder; the report is of the run that holds it: "
                         f"sweet-rl report --run_dir {run}")
    if (folder / "fair").is_dir() and (folder / "protocol").is_dir():
        raise ValueError(f"{folder} is a fair study: `sweet-rl fair-report {folder}` prints its tables, `sweet-rl "
                         f"status {folder}` its stages; each arm's round is a run of its own "
                         f"(sweet-rl report --run_dir {folder}/fair/<arm>/round<N>)")


def load_run(run_dir: str | Path) -> RunData:
    """Find every complete stage under ``run_dir`` (stage folders may nest one level, like ``evaluate/sweet``)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}")
    not_a_run(run_dir)
    data = RunData(run_dir=run_dir)
    for path in sorted(run_dir.glob(f"*/{MARKER}")) + sorted(run_dir.glob(f"*/*/{MARKER}")):
        try:
            marker = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        folder = path.parent.relative_to(run_dir).as_posix()
        marker.setdefault("dir", folder)
        data.markers[folder] = marker
    study = run_dir / "study.json"
    if study.exists():
        try:
            data.study = json.loads(study.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            data.study = None
    return data


def iter_jsonl(path: Path | None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; unreadable lines are skipped (a report never fails on one bad record)."""
    if path is None or not path.exists():
        return
    count = 0
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and count >= limit:
                return
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                count += 1
                yield row


def rewards_of(path: Path | None) -> list[float]:
    """The rewards of a trajectory file's episodes (those without one, infrastructure failures, left out)."""
    rewards = (Trajectory(row).reward for row in iter_jsonl(path))
    return [reward for reward in rewards if reward is not None]


def load_log_history(path: Path | None) -> list[dict[str, Any]]:
    """A trainer's ``log_history`` from ``log_history.json`` or a ``trainer_state.json``."""
    if path is None or not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    if isinstance(data, dict):
        data = data.get("log_history", [])
    return [row for row in data if isinstance(row, dict)]
