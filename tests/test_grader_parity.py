"""The sandboxed grader scores exactly like the original in-process ColBench scorer on the real rows.

Default run: every reference answer, and one constant mutant per task (400 answers).
``pytest -m slow tests/test_grader_parity.py``: up to five mutants per task.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal

import pytest

from colbench_gym.execution import Grader, TestStatus
from colbench_gym.execution.mutation import constant_mutants


class _Alarm(Exception):
    pass


def _raise_alarm(signum, frame):
    raise _Alarm()


def in_process_score(answer: str, reference: str, tests: dict[str, str]) -> float:
    """The original method: exec both, eval each call under a 1 s alarm, compare with ==."""
    reference_ns: dict = {}
    answer_ns: dict = {}
    exec(reference, reference_ns)
    try:
        exec(answer, answer_ns)
    except Exception:  # noqa: BLE001
        return 0.0
    passed = 0
    previous = signal.signal(signal.SIGALRM, _raise_alarm)
    try:
        for call in tests.values():
            try:
                signal.alarm(1)
                expected = eval(call, reference_ns)
                signal.alarm(0)
            except BaseException:  # noqa: BLE001
                signal.alarm(0)
                continue
            if expected is None:
                continue
            try:
                signal.alarm(1)
                got = eval(call, answer_ns)
                signal.alarm(0)
            except BaseException:  # noqa: BLE001
                signal.alarm(0)
                continue
            if expected == got:
                passed += 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return passed / len(tests)


@pytest.fixture(scope="module")
def rows(colbench_data):
    path = colbench_data / "backend_dev.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def grader():
    # A generous timeout: parity is about semantics, not about how loaded the test machine is.
    with Grader(timeout_s=10.0, allow_code_execution=True) as g:
        yield g


def _check_mutant_parity(grader: Grader, rows: list[dict], mutants_per_task: int) -> int:
    items, expected = [], []
    for row in rows:
        reference, tests = row["ground_truth"], row["test_cases"]
        for mutant in constant_mutants(reference, limit=mutants_per_task):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                expected.append(in_process_score(mutant, reference, tests))
            items.append((mutant, reference, tests))
    results = grader.grade_many(items)
    mismatches = [
        (index, want, got.score, got.status_counts())
        for index, (want, got) in enumerate(zip(expected, results))
        if abs(want - got.score) > 1e-9
    ]
    assert not mismatches, mismatches[:10]
    assert not any(result.infra_error for result in results)
    # The family is a real test of the grader: most mutants lose points, some keep them all.
    assert sum(score < 1.0 for score in expected) > len(expected) / 2
    return len(items)


def test_every_reference_scores_one(grader, rows):
    assert len(rows) == 200
    results = grader.grade_many([(row["ground_truth"], row["ground_truth"], row["test_cases"]) for row in rows])
    failing = [(i, r.status_counts()) for i, r in enumerate(results) if r.score != 1.0]
    assert not failing, failing[:10]
    assert all(test.status is TestStatus.PASSED for result in results for test in result.tests)


def test_constant_mutants_score_like_in_process_evaluation(grader, rows):
    assert _check_mutant_parity(grader, rows, mutants_per_task=1) >= 150


@pytest.mark.slow
def test_constant_mutant_family_scores_like_in_process_evaluation(grader, rows):
    assert _check_mutant_parity(grader, rows, mutants_per_task=5) >= 600
