"""Trajectory records: the schema and its reader :class:`Trajectory`, crash-safe JSONL files, ``datasets``
conversion, and original ColBench rollouts.

One record per episode (the original ColBench fields first, then ours)::

    {"task": {...task row...}, "dialogue_history": [{"role": "user", "content": problem},
        {"role": "assistant", "content": msg, "input": prompt, "output": raw, "prompt_token_ids": [...],
         "output_token_ids": [...], "logprobs": [...]}, {"role": "user", "content": reply}, ...],
     "answer": str | None, "reward": float | None,
     "episode_id": "<task_id>/<seed>", "env_id": ..., "task_id": ..., "seed": int, "success": bool,
     "outcome": "answered" | "no_answer" | "policy_error" | "env_error", "turns": int,
     "tests": [...], "grader": {...},                                  # backend
     "similarity": float, "similarity_metric": str, "render_status": ...,   # frontend
     "simulator_errors": [{"turn", "error"}], "policy_errors": [{"turn", "error"}],
     "policy_retries": [{"turn", "errors"}], "timing": {"seconds": float}, "policy": str}

Records stay the plain dicts they are on disk; code reads them through :class:`Trajectory`, a view that
answers what a trainer, the evaluation or the report asks of a record (task id, environment, reward,
success, the privileged text ``c``, the dialogue, and why a trainer must leave it out).

``reward`` is ``None`` only when the episode could not be played to its end (``outcome`` is
``"policy_error"`` or ``"env_error"``: an infrastructure failure, not the agent's); trainers that
read rewards skip those records, and :attr:`Trajectory.is_infra_failure` tells them apart. An
environment can also score an episode and flag that its grader or renderer failed;
:attr:`Trajectory.has_infra_error` covers both.

Files are JSON Lines written one whole line at a time with ``flush`` + ``fsync``
(:class:`TrajectoryWriter`), so a killed collector leaves at most one partial last line, which
:func:`repair_jsonl` removes before a resumed run appends. When a file holds two records with the
same ``episode_id`` (an episode re-run with ``retry_errors``), the later one wins.

Original ColBench rollouts (``task``, ``dialogue_history``, ``answer``, ``reward`` only; a JSONL
file or a JSON list) load through :func:`read_trajectories` too: the missing fields are derived
(task id from the task's content, as the environments derive it; ``seed`` = the repeat index of
the task in the file; ``success`` = ``reward >= 1``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.tasks.schema import BackendTask, FrontendTask, TaskFormatError
from colbench_gym.wrappers import json_safe  # the one JSON-safe copy, shared with the recorder
from sweet_trl.tokenization import conversation_messages

logger = logging.getLogger(__name__)

ORIGINAL_FIELDS = ("task", "dialogue_history", "answer", "reward")
OUTCOMES = ("answered", "no_answer", "policy_error", "env_error")
INFRA_OUTCOMES = frozenset({"policy_error", "env_error"})
BACKEND_ENV_ID = "ColBench-Backend-v0"
FRONTEND_ENV_ID = "ColBench-Frontend-v0"
# Dialogue entry fields, in the order the dataset schema lists them.
DIALOGUE_FIELDS = ("role", "content", "input", "output", "prompt_token_ids", "output_token_ids", "logprobs")


def episode_id(task_id: str, seed: int) -> str:
    return f"{task_id}/{seed}"


class Trajectory:
    """One trajectory record as a type: everything the trainers, the evaluation and the report read of a record.

    A view, not a copy: ``record`` is the stored dict itself (the original ColBench fields and ours), so a record
    read from a file is written back unchanged (:meth:`to_json`) and nothing is lost between the file and a
    trainer. Wrap what :func:`read_trajectories` returns; ``Trajectory(trajectory)`` is the same view.
    """

    __slots__ = ("record",)

    def __init__(self, record: Mapping[str, Any] | Trajectory):
        self.record: Mapping[str, Any] = record.record if isinstance(record, Trajectory) else record

    def __repr__(self) -> str:
        return f"Trajectory(episode_id={self.episode_id!r}, reward={self.reward!r})"

    def to_json(self) -> str:
        """The record as one JSONL line (without its newline), as :class:`TrajectoryWriter` writes it."""
        return json.dumps(json_safe(self.record), ensure_ascii=False)

    # -- which episode ------------------------------------------------------------------------------

    @property
    def task(self) -> Mapping[str, Any]:
        """The task row the episode played (``{}`` when the record has none)."""
        return self.record.get("task") or {}

    @property
    def task_id(self) -> str:
        """``task_id``, else ``task["task_id"]``, else the id the environments derive from the task's content
        (:func:`task_id_of`, as :func:`read_trajectories` fills it for original ColBench rows)."""
        task = self.task
        task_id = self.record.get("task_id") or task.get("task_id")
        if task_id:
            return str(task_id)
        if not any(str(task.get(k) or "").strip() for k in ("problem_description", "ground_truth")):
            raise ValueError("trajectory has neither a task_id nor a task with problem_description/ground_truth")
        return task_id_of(task)

    @property
    def episode_id(self) -> str | None:
        value = self.record.get("episode_id")
        return str(value) if value else None

    def episode_key(self, index: int) -> str:
        """The episode id, else ``<task id>#<index>`` (``index``: the record's position among those read), so
        that every trajectory of a training set can be named even without an episode id."""
        return self.episode_id or f"{self.task_id}#{index}"

    @property
    def env_id(self) -> str:
        """The environment that played the episode: ``env_id``, else (original ColBench rows) the one its task
        belongs to (:func:`guess_env_id`)."""
        if self.record.get("env_id"):
            return str(self.record["env_id"])
        return guess_env_id(self.task)

    # -- how it went -------------------------------------------------------------------------------

    @property
    def reward(self) -> float | None:
        """The episode's reward; ``None`` when it has none (an infrastructure failure) or it is not a finite
        number (a bool or NaN is no reward)."""
        return _finite(self.record.get("reward"))

    @property
    def similarity(self) -> float | None:
        """The frontend page similarity; ``None`` for backend episodes and unscored pages."""
        return _finite(self.record.get("similarity"))

    def succeeded(self, success_reward: float = 1.0) -> bool:
        """``success`` when the record has it (ours), else ``reward >= success_reward`` (original ColBench rows).

        :func:`read_trajectories` gives original ColBench rows (``source_format == "colbench"``) a ``success`` of
        ``reward >= 1``; for them a ``success_reward`` other than 1 decides from the reward instead.
        """
        derived = self.record.get("source_format") == "colbench" and success_reward != 1.0
        if isinstance(self.record.get("success"), bool) and not derived:
            return self.record["success"]
        reward = self.reward
        return reward is not None and reward >= success_reward

    def privileged(self, key: str = "ground_truth") -> str | None:
        """The training-time information ``c``: ``task[key]`` (the ground truth by default), ``None`` when blank."""
        value = self.task.get(key)
        return value if isinstance(value, str) and value.strip() else None

    # -- what was said -----------------------------------------------------------------------------

    @property
    def dialogue(self) -> list[dict[str, Any]]:
        """The stored dialogue history, token ids and prompts included."""
        return self.record.get("dialogue_history") or []

    @property
    def messages(self) -> list[dict[str, str]]:
        """The dialogue as ``{"role", "content"}`` messages; ``ValueError`` when a message is malformed."""
        return conversation_messages(self.dialogue)

    @property
    def agent_messages(self) -> list[dict[str, str]]:
        """The agent's turns, in order (``ValueError`` when the dialogue is malformed)."""
        return [m for m in self.messages if m["role"] == "assistant"]

    # -- whether it can be trained on --------------------------------------------------------------

    @property
    def is_infra_failure(self) -> bool:
        """The episode stopped on a policy-backend or environment failure (no reward; not the agent's fault)."""
        return self.record.get("outcome") in INFRA_OUTCOMES

    @property
    def has_infra_error(self) -> bool:
        """An infrastructure failure anywhere in the episode: the policy backend or the environment stopped it
        (:attr:`is_infra_failure`), or the environment scored it but says its grader or renderer failed
        (``grader.infra_error`` for backend tasks, ``infra_error`` for frontend tasks)."""
        if self.is_infra_failure or self.record.get("infra_error") is True:
            return True
        grader = self.record.get("grader")
        return isinstance(grader, Mapping) and grader.get("infra_error") is True

    @property
    def infra_drop_reason(self) -> str | None:
        """Why the trajectory says nothing about the agent, exactly when :attr:`has_infra_error` holds:
        ``"infra_failure"`` (the policy backend or the environment stopped the episode), ``"grader_infra_error"``
        (the backend grader failed) or ``"render_infra_error"`` (the frontend renderer failed); else ``None``."""
        if not self.has_infra_error:
            return None
        if self.is_infra_failure:
            return "infra_failure"
        if self.record.get("infra_error") is True:
            return "render_infra_error"
        return "grader_infra_error"

    @property
    def dialogue_drop_reason(self) -> str | None:
        """``"malformed_dialogue"`` or ``"no_agent_turn"`` when the dialogue cannot be trained on, else ``None``."""
        try:
            messages = self.messages
        except ValueError:
            return "malformed_dialogue"
        if not any(m["role"] == "assistant" for m in messages):
            return "no_agent_turn"
        return None

    def drop_reason(self, privileged_key: str = "ground_truth", needs_reward: bool = True) -> str | None:
        """Why a trainer must leave this trajectory out, else ``None``; the first that applies of
        :attr:`infra_drop_reason`, ``"no_reward"`` (when ``needs_reward``), ``"no_privileged"`` (no ``c`` in
        ``task[privileged_key]``) and :attr:`dialogue_drop_reason`."""
        reason = self.infra_drop_reason
        if reason is not None:
            return reason
        if needs_reward and self.reward is None:
            return "no_reward"
        if self.privileged(privileged_key) is None:
            return "no_privileged"
        return self.dialogue_drop_reason


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def is_infra_failure(record: Mapping[str, Any]) -> bool:
    """:attr:`Trajectory.is_infra_failure` of a plain record."""
    return Trajectory(record).is_infra_failure


def has_infra_error(record: Mapping[str, Any]) -> bool:
    """:attr:`Trajectory.has_infra_error` of a plain record."""
    return Trajectory(record).has_infra_error


# -- original ColBench rollouts -------------------------------------------------------------------

def guess_env_id(task: Mapping[str, Any]) -> str:
    """Backend rows carry ``test_cases``; frontend rows do not."""
    return BACKEND_ENV_ID if "test_cases" in task else FRONTEND_ENV_ID


def task_id_of(task: Mapping[str, Any]) -> str:
    """The id the environments give this task row (its own ``task_id``, else derived from its content)."""
    if task.get("task_id"):
        return str(task["task_id"])
    try:
        if "test_cases" in task:
            return BackendTask.from_row(task).task_id
        return FrontendTask.from_row(task).task_id
    except TaskFormatError:
        # Rows that do not validate as tasks (e.g. test cases stored another way) still get a stable id.
        probe = {"problem_description": str(task.get("problem_description") or "-"),
                 "ground_truth": str(task.get("ground_truth") or "-")}
        return FrontendTask.from_row(probe).task_id.replace("frontend-", "task-")


def normalize_record(record: Mapping[str, Any], seed: int | None = None) -> dict[str, Any]:
    """Fill in our fields for a record in the original ColBench format (ours are returned unchanged).

    ``seed`` stands in for the missing episode seed (the task's repeat index in its file).
    """
    if "episode_id" in record and "task_id" in record:
        return dict(record)
    missing = [key for key in ("task", "dialogue_history") if key not in record]
    if missing:
        raise ValueError(f"not a trajectory record: missing {missing} (keys: {sorted(record)[:8]})")
    task = dict(record["task"])
    task_id = str(record.get("task_id") or task_id_of(task))
    task.setdefault("task_id", task_id)
    seed = int(record.get("seed", seed if seed is not None else 0))
    dialogue = [dict(m) for m in record["dialogue_history"]]
    agent_messages = [m for m in dialogue if m.get("role") == "assistant"]
    answered = bool(agent_messages) and ANSWER_MARKER in str(agent_messages[-1].get("content", ""))
    reward = record.get("reward")
    reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
    normalized = dict(record)
    normalized.update(
        task=task,
        dialogue_history=dialogue,
        answer=record.get("answer"),
        reward=reward,
        episode_id=str(record.get("episode_id") or episode_id(task_id, seed)),
        env_id=record.get("env_id") or guess_env_id(task),
        task_id=task_id,
        seed=seed,
        success=bool(record["success"]) if isinstance(record.get("success"), bool)
        else (reward is not None and reward >= 1.0),
        outcome=record.get("outcome") or ("answered" if answered else "no_answer"),
        turns=len(agent_messages),
        source_format="colbench",
    )
    return normalized


def normalize_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Normalize a whole file's records; repeats of a task get seeds 0, 1, 2, ... in file order."""
    repeats: dict[str, int] = {}
    out = []
    for record in records:
        if "episode_id" in record and "task_id" in record:
            out.append(dict(record))
            continue
        task_id = str(record.get("task_id") or task_id_of(record.get("task") or {}))
        seed = repeats.get(task_id, 0)
        repeats[task_id] = seed + 1
        out.append(normalize_record(record, seed=seed))
    return out


# -- JSONL files -----------------------------------------------------------------------------------

def repair_jsonl(path: str | os.PathLike) -> int:
    """Cut a partial last line (left by a killed writer); returns how many bytes were removed."""
    path = Path(path)
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return 0
        # Scan back to the last newline; the tail after it is an unfinished record.
        block = 1 << 16
        position = size
        keep = 0
        while position > 0:
            start = max(0, position - block)
            handle.seek(start)
            chunk = handle.read(position - start)
            index = chunk.rfind(b"\n")
            if index >= 0:
                keep = start + index + 1
                break
            position = start
        tail = size - keep
        try:  # a complete JSON object without its newline is kept, with the newline added
            handle.seek(keep)
            json.loads(handle.read(tail).decode("utf-8"))
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
            return 0
        except (json.JSONDecodeError, UnicodeDecodeError):
            handle.truncate(keep)
            logger.warning("%s: removed a partial last record (%d bytes)", path, tail)
            return tail


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Records of a JSONL file; a malformed *last* line (an interrupted write) is skipped with a warning."""
    path = Path(path)
    with path.open("rb") as handle:
        lines = handle.read().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            is_last = all(not rest.strip() for rest in lines[number:])
            if is_last:
                logger.warning("%s:%d: skipping a partial last record", path, number)
                return
            raise ValueError(f"{path}:{number}: not valid JSON: {err}") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield record


def dedupe_latest(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per ``episode_id``: the last one written, at the position of the first."""
    order: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for record in records:
        key = record.get("episode_id")
        if key is None:
            out.append(dict(record))
            continue
        if key in order:
            out[order[key]] = dict(record)
        else:
            order[key] = len(out)
            out.append(dict(record))
    return out


def read_trajectories(source: Any, dedupe: bool = True) -> list[dict[str, Any]]:
    """Trajectory records, normalized, from a JSONL file, a JSON list file, a folder (``*.jsonl`` files or a
    ``datasets.save_to_disk`` folder), a ``datasets.Dataset`` or a list of dicts.
    """
    if hasattr(source, "column_names") and hasattr(source, "to_list"):
        return from_dataset(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            if (path / "dataset_info.json").exists() or (path / "state.json").exists():
                return load_dataset_dir(path)
            files = sorted(path.glob("*.jsonl"))
            if not files:
                raise FileNotFoundError(f"{path}: no *.jsonl files and not a saved dataset")
            records = [r for f in files for r in iter_jsonl(f)]
        elif not path.exists():
            raise FileNotFoundError(f"no trajectory file at {path}")
        elif path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise ValueError(f"{path}: expected a JSON list of trajectory records")
            records = data
        else:
            records = list(iter_jsonl(path))
    else:
        records = [dict(r) for r in source]
    normalized = normalize_records(records)
    return dedupe_latest(normalized) if dedupe else normalized


def load_trajectories(source: Any) -> list[dict[str, Any]]:
    """Trajectory records, normalized by :func:`read_trajectories`, from a JSONL file, a JSON list file, a folder
    of JSONL files, a ``datasets.save_to_disk`` folder, a ``datasets.Dataset`` or an iterable of dicts.

    One record per ``episode_id`` (the one written last, so a re-graded episode replaces its failed grading); a
    partial last line of a file (an interrupted writer) is skipped; original ColBench rows get ``task_id``,
    ``episode_id`` (``<task_id>/<repeat index>``) and ``success`` (``reward >= 1``).
    """
    if not isinstance(source, (str, os.PathLike)) and not hasattr(source, "to_list"):
        source = list(source)
        for index, record in enumerate(source):
            if not isinstance(record, Mapping):
                raise TypeError(f"trajectory {index} is a {type(record).__name__}, expected a dict")
    records = read_trajectories(source, dedupe=False)
    latest = dedupe_latest(records)
    if len(latest) < len(records):
        logger.info("trajectories: %d earlier records of re-run episodes replaced by their latest",
                    len(records) - len(latest))
    return latest


class TrajectoryWriter:
    """Append records to a JSONL file, one fsynced line each, holding an exclusive lock while open.

    ``resume=True`` keeps what is there (after :func:`repair_jsonl`) and exposes it as ``existing``;
    otherwise an existing non-empty file is an error unless ``overwrite=True``.
    """

    def __init__(self, path: str | os.PathLike, resume: bool = False, overwrite: bool = False, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        has_data = self.path.exists() and self.path.stat().st_size > 0
        if has_data and not resume and not overwrite:
            raise FileExistsError(f"{self.path} already holds trajectories: pass resume=True to complete the run "
                                  "or overwrite=True to start over")
        # Append mode, locked before anything is changed: a second collector fails without touching the file.
        self._handle = self.path.open("ab")
        try:
            self._lock()
            if resume:
                repair_jsonl(self.path)
            else:
                self._handle.truncate(0)
            self.existing: list[dict[str, Any]] = read_trajectories(self.path) if resume and has_data else []
        except BaseException:
            self._handle.close()
            raise
        self.written = 0

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no protection against two writers
            return
        try:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{self.path} is being written by another collector") from None

    def write(self, record: Mapping[str, Any]) -> None:
        line = Trajectory(record).to_json() + "\n"
        try:
            data = line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (not Unicode) in some text: kept as a JSON escape
            data = (json.dumps(json_safe(record)) + "\n").encode("ascii")
        self._handle.write(data)
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())
        self.written += 1

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trajectories(records: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Write records to a new JSONL file atomically (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(Trajectory(record).to_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return path


# -- datasets ----------------------------------------------------------------------------------------

def _dataset_features():
    datasets = _datasets()
    value, sequence = datasets.Value, datasets.Sequence
    return datasets.Features({
        "episode_id": value("string"), "env_id": value("string"), "task_id": value("string"),
        "seed": value("int64"), "reward": value("float64"), "success": value("bool"), "outcome": value("string"),
        "answer": value("string"), "policy": value("string"), "turns": value("int64"),
        "dialogue_history": [{
            "role": value("string"), "content": value("string"), "input": value("string"),
            "output": value("string"), "prompt_token_ids": sequence(value("int64")),
            "output_token_ids": sequence(value("int64")), "logprobs": sequence(value("float64")),
            "extra_json": value("string"),
        }],
        "task_json": value("string"),
        "extra_json": value("string"),
    })


_COLUMNS = ("episode_id", "env_id", "task_id", "seed", "reward", "success", "outcome", "answer", "policy", "turns")
# Not every record has these (original ColBench rollouts have no policy name): a null means absent.
_OPTIONAL_COLUMNS = frozenset({"policy"})


def _datasets():
    from colbench_gym._optional import require

    return require("datasets", "hub")


def to_dataset(records: Sequence[Mapping[str, Any]]):
    """A ``datasets.Dataset`` with typed columns for the common fields and the dialogue, and the task and
    every other field as JSON text (``task_json``, ``extra_json``), so any record round-trips exactly
    through :func:`from_dataset`."""
    datasets = _datasets()
    rows = []
    for record in normalize_records(records):
        record = json_safe(record)
        dialogue = []
        for message in record.get("dialogue_history") or []:
            entry = {key: message.get(key) for key in DIALOGUE_FIELDS}
            unknown = {k: v for k, v in message.items() if k not in DIALOGUE_FIELDS}
            entry["extra_json"] = json.dumps(unknown, ensure_ascii=False) if unknown else None
            dialogue.append(entry)
        extra = {k: v for k, v in record.items() if k not in _COLUMNS and k not in ("task", "dialogue_history")}
        row = {key: record.get(key) for key in _COLUMNS}
        row["answer"] = None if row["answer"] is None else str(row["answer"])
        row.update(dialogue_history=dialogue, task_json=json.dumps(record.get("task"), ensure_ascii=False),
                   extra_json=json.dumps(extra, ensure_ascii=False))
        rows.append(row)
    return datasets.Dataset.from_list(rows, features=_dataset_features())


def from_dataset(dataset: Any) -> list[dict[str, Any]]:
    """Records back from :func:`to_dataset`'s dataset (dialogue fields that were absent, or ``None``, are dropped)."""
    records = []
    for row in dataset.to_list():
        if "task_json" not in row:  # a dataset of plain records (e.g. the Hub's original rollouts)
            records.append(row)
            continue
        record: dict[str, Any] = {"task": json.loads(row["task_json"])}
        dialogue = []
        for message in row["dialogue_history"]:
            extra = message.pop("extra_json", None)
            entry = {k: v for k, v in message.items() if v is not None}
            entry.update(json.loads(extra) if extra else {})
            dialogue.append(entry)
        record["dialogue_history"] = dialogue
        for key in _COLUMNS:
            if row[key] is not None or key not in _OPTIONAL_COLUMNS:
                record[key] = row[key]
        record.update(json.loads(row["extra_json"]))
        records.append(record)
    return normalize_records(records)


def save_dataset(records: Sequence[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """``to_dataset(records).save_to_disk(path)``; reload with :func:`load_dataset_dir` or ``read_trajectories``."""
    path = Path(path)
    to_dataset(records).save_to_disk(str(path))
    return path


def load_dataset_dir(path: str | os.PathLike) -> list[dict[str, Any]]:
    return from_dataset(_datasets().load_from_disk(str(path)))


def jsonl_to_dataset(jsonl_path: str | os.PathLike, dataset_path: str | os.PathLike) -> Path:
    """Convert a collector's JSONL file (or original ColBench rollouts) to a saved ``datasets`` folder."""
    return save_dataset(read_trajectories(jsonl_path), dataset_path)
