"""Where tasks come from: built-in splits, local JSONL files, and the Hugging Face Hub.

``resolve_tasks(source, kind)`` is what the environments call with their ``tasks=`` keyword:

* a built-in split name: ``"train"`` / ``"test"`` / ``"all"`` (tasks written for this package);
* a path to a JSONL file in the ColBench row format;
* a list of rows (dicts) or task objects;
* ``"hub:train"`` / ``"hub:test"``: the ColBench files on the Hub (``facebook/collaborative_agent_bench``);
* ``"procedural:train"`` / ``"procedural:validation"`` / ``"procedural:test"`` (and ``"procedural:warm_start"``):
  generated one-line tasks for small models (:mod:`colbench_gym.tasks.procedural`; backend only);
* ``"procedural_multi:train"`` / ``"procedural_multi:validation"`` / ``"procedural_multi:test"`` (and
  ``"procedural_multi:warm_start"``): generated tasks with two or three hidden details, each told only when asked
  for (:mod:`colbench_gym.tasks.procedural_multi`; backend only);
* ``"procedural_wide:train"`` / ``"procedural_wide:validation"`` / ``"procedural_wide:test"`` (and
  ``"procedural_wide:warm_start"``): procedural tasks whose train split draws from 40 templates, procedural's 20 and
  20 more; the other splits are procedural's own rows (:mod:`colbench_gym.tasks.procedural_wide`; backend only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from colbench_gym._optional import require
from colbench_gym.tasks.schema import BackendTask, FrontendTask, Task, TaskFormatError

Kind = Literal["backend", "frontend"]
BUILTIN_SPLITS = ("train", "test", "all")
COLBENCH_REPO = "facebook/collaborative_agent_bench"
# The released SWEET-RL evaluation uses the first 1000 rows of the backend test file.
COLBENCH_TEST_ROWS = 1000
_TASK_CLASS = {"backend": BackendTask, "frontend": FrontendTask}


def parse_rows(rows: Iterable[Any], kind: Kind, origin: str = "rows") -> list[Task]:
    """Validate rows into task objects; a bad row raises :class:`TaskFormatError` naming it."""
    cls = _TASK_CLASS[kind]
    tasks: list[Task] = []
    for index, row in enumerate(rows):
        if isinstance(row, cls):
            tasks.append(row)
            continue
        tasks.append(cls.from_row(row, where=f"{origin} row {index}"))
    if not tasks:
        raise TaskFormatError(f"{origin}: no tasks")
    _check_unique_ids(tasks, origin)
    return tasks


def _check_unique_ids(tasks: Sequence[Task], origin: str) -> None:
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise TaskFormatError(f"{origin}: duplicate task_id {task.task_id!r}")
        seen.add(task.task_id)


def load_jsonl(path: str | os.PathLike, kind: Kind = "backend", limit: int | None = None) -> list[Task]:
    """Load a ColBench-format JSONL file (one task row per line; blank lines skipped)."""
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if limit is not None and len(rows) >= limit:
                break
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise TaskFormatError(f"{path}:{line_no}: not valid JSON: {err}") from err
    return parse_rows(rows, kind, origin=str(path))


def load_builtin(split: str = "train", kind: Kind = "backend") -> list[Task]:
    """Tasks shipped with the package (written for it; Apache-2.0)."""
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"unknown built-in split {split!r}; choose one of {BUILTIN_SPLITS}")
    splits = ("train", "test") if split == "all" else (split,)
    tasks: list[Task] = []
    for name in splits:
        data = resources.files("colbench_gym.tasks") / "data" / f"{kind}_{name}.jsonl"
        with resources.as_file(data) as path:
            tasks.extend(load_jsonl(path, kind))
    _check_unique_ids(tasks, f"built-in {kind} {split}")
    return tasks


def load_hub(
    split: str = "train",
    kind: Kind = "backend",
    repo_id: str = COLBENCH_REPO,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> list[Task]:
    """Download (or read from the local HF cache) a ColBench file from the Hub.

    Files are ``{kind}_tasks/{split}.jsonl`` in ``repo_id``. As in the released evaluation, the
    backend test split is the first 1000 rows of ``backend_tasks/test.jsonl``.
    Set ``HF_HUB_OFFLINE=1`` to use only what is already cached.
    """
    if split not in ("train", "test"):
        raise ValueError(f"hub split must be 'train' or 'test', got {split!r}")
    hub = require("huggingface_hub", "hub")
    path = hub.hf_hub_download(
        repo_id=repo_id,
        filename=f"{kind}_tasks/{split}.jsonl",
        repo_type="dataset",
        revision=revision,
        cache_dir=cache_dir,
    )
    limit = COLBENCH_TEST_ROWS if (kind == "backend" and split == "test") else None
    return load_jsonl(path, kind, limit=limit)


def is_test_split(source: Any) -> bool:
    """Whether a ``tasks=`` source names a test split: ``"test"``, ``"hub:test"`` or ``"<family>:test"``. Settings
    are chosen on other tasks; a file or a list of rows is not judged."""
    return isinstance(source, str) and (source == "test" or source.endswith(":test"))


def resolve_tasks(source: Any = "train", kind: Kind = "backend") -> list[Task]:
    """Turn the ``tasks=`` keyword of the environments into a list of validated tasks."""
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if text in BUILTIN_SPLITS:
            return load_builtin(text, kind)
        if text.startswith("hub:"):
            return load_hub(text.removeprefix("hub:"), kind)
        from colbench_gym.tasks.procedural import task_families  # generated in code: procedural, multi-fact, ...

        family_name, _, split = text.partition(":")
        if split and family_name in task_families():
            if kind != "backend":
                raise ValueError(f"{family_name} tasks exist for the backend environment only")
            return parse_rows(task_families()[family_name][1](split), kind, origin=text)
        if Path(text).exists():
            return load_jsonl(text, kind)
        raise FileNotFoundError(
            f"tasks={text!r} is neither a built-in split {BUILTIN_SPLITS}, 'hub:<split>', '<family>:<split>' for a "
            f"task family {sorted(task_families())}, nor an existing file"
        )
    if isinstance(source, (BackendTask, FrontendTask, dict)):
        source = [source]
    if isinstance(source, Iterable):
        return parse_rows(list(source), kind)
    raise TypeError(f"tasks= must be a split name, a path or a list of rows, got {type(source).__name__}")
