"""The procedural task family: format, determinism, held-out values and templates, discriminating tests.

Run: pytest tests/test_procedural_tasks.py -q

References are the package's own trusted code, so they run in this process. For every task, each hidden
value swapped for another value of its pool (a guess instead of a question) must fail at least one test.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from colbench_gym.tasks import resolve_tasks
from colbench_gym.tasks.procedural import (
    SIGNATURE_MARKER,
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    generate_tasks,
    load_procedural,
    task_part,
)

TRAIN = load_procedural("train")
TEST = load_procedural("test")
TEMPLATES = {t.name: t for t in TRAIN_TEMPLATES + UNSEEN_TEMPLATES}


def run_call(source: str, call: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<reference>", "exec"), namespace)  # noqa: S102 - our own generated references
    return eval(compile(call, "<test>", "eval"), namespace)


def test_sizes_templates_and_parts():
    assert len(TRAIN) == 400 and len(TEST) == 80
    assert len(TRAIN_TEMPLATES) >= 20 and len(UNSEEN_TEMPLATES) >= 5
    assert {r["template"] for r in TRAIN} == {t.name for t in TRAIN_TEMPLATES}
    parts = [task_part(r["task_id"]) for r in TEST]
    assert parts.count("unseen") == 32 and parts.count("seen") == 48
    assert {r["template"] for r in TEST if task_part(r["task_id"]) == "unseen"} == {t.name for t in UNSEEN_TEMPLATES}
    # any prefix keeps the proportion, so max_eval_tasks cuts a balanced test set
    first = [task_part(r["task_id"]) for r in TEST[:20]]
    assert first.count("unseen") == 8
    ids = [r["task_id"] for r in TRAIN + TEST]
    assert len(set(ids)) == len(ids)


def test_deterministic_for_a_seed_and_different_across_seeds():
    assert generate_tasks(50, "test", seed=3) == generate_tasks(50, "test", seed=3)
    assert generate_tasks(50, "test", seed=3) != generate_tasks(50, "test", seed=4)
    assert load_procedural("train") == TRAIN


def test_test_tasks_use_values_and_references_no_train_task_uses():
    train_code = {r["ground_truth"] for r in TRAIN}
    assert not train_code & {r["ground_truth"] for r in TEST}
    train_templates = {r["template"] for r in TRAIN}
    assert not train_templates & {r["template"] for r in TEST if task_part(r["task_id"]) == "unseen"}


@pytest.mark.parametrize("row", TRAIN + TEST, ids=lambda r: r["task_id"])
def test_row_format_and_reference(row):
    task = resolve_tasks([row])[0]
    assert row["hidden_information"] == row["ground_truth"]
    assert list(row["test_cases"]) == [f"test{i}" for i in range(1, 11)]
    tree = ast.parse(row["ground_truth"])
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    signature = row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[1]
    assert signature == row["ground_truth"].splitlines()[0].rstrip(":")
    outputs = [run_call(task.ground_truth, call) for call in task.test_cases.values()]
    assert all(o is not None for o in outputs)
    assert len({repr(o) for o in outputs}) >= 2, "ten tests with one answer probe nothing"
    assert all(call.startswith(f"{function.name}(") for call in task.test_cases.values())


def _values_of(row) -> dict[str, Any]:
    template = TEMPLATES[row["template"]]
    split = "test" if row["task_id"].startswith("proc-test") else "train"
    for values in template.values_for(split, whole_pools=task_part(row["task_id"]) == "unseen"):
        if template.row(values, split, "x")["ground_truth"] == row["ground_truth"]:
            return values
    raise AssertionError(f"{row['task_id']}: no values of its template make it")


@pytest.mark.parametrize("row", TRAIN[::7] + TEST, ids=lambda r: r["task_id"])
def test_a_guessed_hidden_value_fails_a_test(row):
    """Every hidden value matters: any other value of its pool (a guess) fails some test."""
    template = TEMPLATES[row["template"]]
    values = _values_of(row)
    expected = [run_call(row["ground_truth"], call) for call in row["test_cases"].values()]
    for name, pool in template.pools.items():
        for other in dict.fromkeys(pool):
            if other == values[name]:
                continue
            guess = template.code.format(**{**values, name: other})
            got = []
            for call in row["test_cases"].values():
                try:
                    got.append(run_call(guess, call))
                except Exception:  # noqa: BLE001 - a crash is a failed test
                    got.append(object())
            assert got != expected, f"guessing {name}={other!r} instead of {values[name]!r} passes every test"


def test_description_does_not_state_the_hidden_values():
    for row in TRAIN + TEST:
        request = row["problem_description"].rsplit(SIGNATURE_MARKER, 1)[0]
        for value in _values_of(row).values():
            if isinstance(value, (int, float)) and value >= 2:
                assert str(value) not in request, row["task_id"]


def test_bad_requests_are_refused_clearly():
    with pytest.raises(ValueError, match="make only"):
        generate_tasks(10_000, "train")
    with pytest.raises(ValueError, match="make only"):
        generate_tasks(500, "test", templates="unseen")
    with pytest.raises(ValueError, match="unknown procedural templates"):
        generate_tasks(5, "train", templates=["no_such_template"])
    with pytest.raises(ValueError, match="never appear in the train split"):
        generate_tasks(5, "train", templates="unseen")
    with pytest.raises(ValueError, match="positive int"):
        generate_tasks(0, "train")
    with pytest.raises(ValueError, match="split"):
        load_procedural("validation")
    with pytest.raises(ValueError, match="backend"):
        resolve_tasks("procedural:train", kind="frontend")
