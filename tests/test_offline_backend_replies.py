"""The offline human's replies, pinned: a fixed set of questions per task, one sha256 digest per task.

Any change to what the human says on any built-in, procedural or real ColBench task shows up here.
Only digests are stored: the real rows are CC-BY-NC, and nothing derived from them is readable in
the repository. When a reply changes on purpose, record the fixture again:

    python tests/test_offline_backend_replies.py

Run: pytest tests/test_offline_backend_replies.py -q
(the real-row digests need ../shared/colbench-data/backend_dev.jsonl and are skipped without it)
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

import pytest

from colbench_gym.simulators.base import SimulatorRequest
from colbench_gym.simulators.offline_backend import OfflineBackendSimulator
from colbench_gym.tasks import BackendTask, resolve_tasks

FIXTURE = Path(__file__).parent / "data" / "offline_backend_replies.json"
REAL_ROWS = "colbench:backend_dev"
SOURCES = ("train", "test", "procedural:train", "procedural:test")

HUMAN = OfflineBackendSimulator()
TERSE = OfflineBackendSimulator(max_facts=1, max_chars=120)

QUESTIONS = [
    "What should the function return?",
    "Which constants or rates does the formula use?",
    "Are there any thresholds or limits, and are they inclusive?",
    "What happens if the input is empty or missing?",
    "What type is each input, and what does it look like?",
    "How should the result be rounded or formatted? How many decimals?",
    "A few questions:\n1. Is it case sensitive?\n2. How are ties broken?\n3. What is the default value?",
    "Should invalid input raise an error?",
    "Any other requirements or edge cases I should know about?",
    "What is your favourite colour?",
    "",
    "def solve(x):\n    if x > 10:\n        return round(x * 0.5, 2)\n    return x",
]


def task_questions(task: BackendTask) -> list[str]:
    """Questions built from the reference itself: its inputs by name, a constant, its opening lines, and
    a question buried in a long paste."""
    hidden = task.hidden_information
    asked = ["\n".join(hidden.splitlines()[:3]), "x" * 5000 + " What should it return?"]
    try:
        tree = ast.parse(hidden)
    except (SyntaxError, ValueError):
        return asked
    function = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if function is not None:
        asked += [f"What exactly is {a.arg.replace('_', ' ')}?" for a in function.args.args[:2]]
    numbers = [n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]
    if numbers:
        asked.append(f"Should I use {numbers[-1]!r} somewhere?")
    return asked


def replies(task: BackendTask) -> list[list[str | None]]:
    """Every reply (text and error) the human gives to the questions, plus a follow-up turn and a terse human."""
    opening = {"role": "user", "content": task.problem_description}
    out = []
    for question in QUESTIONS + task_questions(task):
        reply = HUMAN.reply(SimulatorRequest(task=task, messages=[opening, {"role": "assistant", "content": question}]))
        out.append([reply.text, reply.error])
    told = out[QUESTIONS.index("Any other requirements or edge cases I should know about?")][0]
    follow_up = HUMAN.reply(SimulatorRequest(task=task, messages=[
        opening, {"role": "assistant", "content": "Any other requirements?"}, {"role": "user", "content": told},
        {"role": "assistant", "content": "Anything else I should know about?"}]))
    out.append([follow_up.text, follow_up.error])
    for question in QUESTIONS[:3]:
        reply = TERSE.reply(SimulatorRequest(task=task, messages=[opening, {"role": "assistant", "content": question}]))
        out.append([reply.text, reply.error])
    return out


def digest(task: BackendTask) -> str:
    return hashlib.sha256(json.dumps(replies(task), ensure_ascii=False).encode("utf-8")).hexdigest()


def digests(tasks: list[BackendTask], keys: list[str]) -> dict[str, str]:
    return {key: digest(task) for key, task in zip(keys, tasks, strict=True)}


def real_rows(folder: Path) -> tuple[list[BackendTask], list[str]]:
    """The real rows, keyed by their position in the file (their ids would be derived from their text)."""
    tasks = resolve_tasks(str(folder / "backend_dev.jsonl"), "backend")
    return tasks, [f"row {index:03d}" for index in range(len(tasks))]  # type: ignore[return-value]


def recorded() -> dict[str, dict[str, str]]:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("source", SOURCES)
def test_replies_to_builtin_and_procedural_tasks_are_unchanged(source: str):
    tasks = resolve_tasks(source, "backend")
    expected = recorded()[source]
    assert len(tasks) == len(expected)
    actual = digests(tasks, [t.task_id for t in tasks])  # type: ignore[misc]
    changed = sorted(key for key in expected if actual.get(key) != expected[key])
    assert not changed, f"{len(changed)} of {len(expected)} {source} tasks get other replies: {changed[:10]}"


def test_replies_to_real_colbench_rows_are_unchanged(colbench_data):
    tasks, keys = real_rows(colbench_data)
    expected = recorded()[REAL_ROWS]
    assert len(tasks) == len(expected)
    actual = digests(tasks, keys)
    changed = sorted(key for key in expected if actual.get(key) != expected[key])
    assert not changed, f"{len(changed)} of {len(expected)} real rows get other replies: {changed[:10]}"


def record() -> None:
    """Write the fixture from the current simulator (the real rows only where they are present)."""
    from conftest import COLBENCH_DATA

    fixture: dict[str, dict[str, str]] = {}
    for source in SOURCES:
        tasks = resolve_tasks(source, "backend")
        fixture[source] = digests(tasks, [t.task_id for t in tasks])  # type: ignore[misc]
    if (COLBENCH_DATA / "backend_dev.jsonl").exists():
        fixture[REAL_ROWS] = digests(*real_rows(COLBENCH_DATA))
    elif FIXTURE.exists() and REAL_ROWS in recorded():
        fixture[REAL_ROWS] = recorded()[REAL_ROWS]
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print({source: len(values) for source, values in fixture.items()}, "->", FIXTURE)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    record()
