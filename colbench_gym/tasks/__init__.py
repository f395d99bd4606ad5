"""ColBench task rows: schema, loaders and the built-in task set."""

from colbench_gym.tasks.loaders import (
    BUILTIN_SPLITS,
    COLBENCH_REPO,
    is_test_split,
    load_builtin,
    load_hub,
    load_jsonl,
    parse_rows,
    resolve_tasks,
)
from colbench_gym.tasks.schema import BackendTask, FrontendTask, Task, TaskFormatError

__all__ = [
    "BUILTIN_SPLITS", "COLBENCH_REPO", "BackendTask", "FrontendTask", "Task", "TaskFormatError",
    "is_test_split", "load_builtin", "load_hub", "load_jsonl", "parse_rows", "resolve_tasks",
]
