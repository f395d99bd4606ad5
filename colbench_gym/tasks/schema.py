"""Task rows in the original ColBench format, validated once at load time.

Backend row (field for field as in ``facebook/collaborative_agent_bench``)::

    {"problem_description": str, "ground_truth": str (reference Python function),
     "hidden_information": str (what the simulated human knows), "test_cases": {"test1": "<call>", ...}}

Frontend row::

    {"problem_description": str, "ground_truth": str (target HTML page)}

Rows may carry an optional ``task_id``; without one, a stable id is derived from the content,
so the same row always gets the same id wherever it is loaded from.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class TaskFormatError(ValueError):
    """A task row does not follow the ColBench format; the message names the row and the field."""


def _content_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:12]
    return f"{prefix}-{digest}"


def _require_str(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TaskFormatError(f"{where}: field {key!r} must be a non-empty string, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class BackendTask:
    """One backend programming task: the human wants a Python function; details are hidden."""

    problem_description: str
    ground_truth: str
    hidden_information: str
    test_cases: dict[str, str]
    task_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any], where: str = "task row") -> BackendTask:
        if not isinstance(row, Mapping):
            raise TaskFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
        problem = _require_str(row, "problem_description", where)
        ground_truth = _require_str(row, "ground_truth", where)
        hidden = row.get("hidden_information", ground_truth)
        if not isinstance(hidden, str):
            raise TaskFormatError(f"{where}: field 'hidden_information' must be a string")
        tests = row.get("test_cases")
        if isinstance(tests, str):  # some exports store the dict as a JSON string
            try:
                tests = json.loads(tests)
            except json.JSONDecodeError as err:
                raise TaskFormatError(f"{where}: 'test_cases' is a string but not JSON: {err}") from err
        if not isinstance(tests, Mapping) or not tests:
            raise TaskFormatError(f"{where}: field 'test_cases' must be a non-empty mapping name -> call")
        for name, call in tests.items():
            if not isinstance(call, str):
                raise TaskFormatError(f"{where}: test {name!r} must be a string call expression")
            try:
                ast.parse(call, mode="eval")
            except SyntaxError as err:
                raise TaskFormatError(f"{where}: test {name!r} is not a Python expression: {call[:80]!r}") from err
        known = {"problem_description", "ground_truth", "hidden_information", "test_cases", "task_id"}
        task_id = row.get("task_id") or _content_id("backend", problem, ground_truth)
        return cls(
            problem_description=problem,
            ground_truth=ground_truth,
            hidden_information=hidden,
            test_cases={str(k): v for k, v in tests.items()},
            task_id=str(task_id),
            extra={k: v for k, v in row.items() if k not in known},
        )

    def to_row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "problem_description": self.problem_description,
            "ground_truth": self.ground_truth,
            "hidden_information": self.hidden_information,
            "test_cases": dict(self.test_cases),
            **self.extra,
        }

    @property
    def privileged(self) -> dict[str, Any]:
        """Training-time information (``c`` in the paper): never shown to the policy."""
        return {
            "ground_truth": self.ground_truth,
            "hidden_information": self.hidden_information,
            "test_cases": dict(self.test_cases),
        }


@dataclass(frozen=True)
class FrontendTask:
    """One frontend design task: the human wants a web page like the hidden target."""

    problem_description: str
    ground_truth: str
    task_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any], where: str = "task row") -> FrontendTask:
        if not isinstance(row, Mapping):
            raise TaskFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
        problem = _require_str(row, "problem_description", where)
        html = _require_str(row, "ground_truth", where)
        task_id = row.get("task_id") or _content_id("frontend", problem, html)
        known = {"problem_description", "ground_truth", "task_id"}
        return cls(problem, html, str(task_id), {k: v for k, v in row.items() if k not in known})

    def to_row(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "problem_description": self.problem_description,
                "ground_truth": self.ground_truth, **self.extra}

    @property
    def privileged(self) -> dict[str, Any]:
        return {"ground_truth": self.ground_truth}


Task = BackendTask | FrontendTask
