"""The grader's pipeline per worker: the next child is handed to the server while one runs, results
are read when a child has exited (or every observe period), kills go through the kill pipe.

These check that nothing of that shows: answers interleaved with hangs, crashes, floods of output
and large values score exactly as each would alone, and signals an answer sends to the server or to
itself change nothing.
"""

from __future__ import annotations

import math
import time

import pytest

from colbench_gym.execution import Grader, TestStatus

REFERENCE = "def f(x):\n    return [x, x * 2]\n"
TESTS = {"a": "f(1)", "b": "f(2)", "c": "f(3)"}
GOOD = REFERENCE
HANG_SECOND = "def f(x):\n    if x == 2:\n        while True:\n            pass\n    return [x, x * 2]\n"
CRASH_FIRST = "import os\ndef f(x):\n    if x == 1:\n        os._exit(3)\n    return [x, x * 2]\n"
SIGNALS = (
    "import os, signal\n"
    "def f(x):\n"
    "    for pid in (1, os.getppid(), os.getpid()):\n"
    "        try:\n"
    "            os.kill(pid, signal.SIGURG)\n"
    "        except OSError:\n"
    "            pass\n"
    "    return [x, x * 2]\n"
)


@pytest.fixture(scope="module")
def single():
    # One worker: every answer goes through the same server, two in flight at a time. No answer budget:
    # these are about each test's own limit (the budget's pipeline: test_grading_budget.py).
    with Grader(workers=1, timeout_s=1.0, allow_code_execution=True, answer_budget_s=math.inf) as grader:
        grader.warm_up()
        yield grader


def test_hangs_and_crashes_between_pipelined_answers(single):
    items = [(code, REFERENCE, TESTS) for code in (GOOD, HANG_SECOND, GOOD, CRASH_FIRST, GOOD, HANG_SECOND, GOOD)]
    results = single.grade_many(items)
    statuses = [[t.status for t in r.tests] for r in results]
    passed = [TestStatus.PASSED] * 3
    assert statuses[0] == statuses[2] == statuses[4] == statuses[6] == passed
    assert statuses[1] == statuses[5] == [TestStatus.PASSED, TestStatus.TIMEOUT, TestStatus.PASSED]
    assert statuses[3] == [TestStatus.CRASHED, TestStatus.PASSED, TestStatus.PASSED]


def test_signals_to_the_server_and_to_itself_change_nothing(single):
    results = single.grade_many([(SIGNALS, REFERENCE, TESTS), (GOOD, REFERENCE, TESTS)] * 3)
    assert all(r.score == 1.0 for r in results), [r.to_dict() for r in results]


def test_output_past_the_pipe_and_past_the_limit(single):
    chatty = "def f(x):\n    print('y' * 200_000)\n    return [x, x * 2]\n"
    result = single.grade(chatty, REFERENCE, TESTS)
    assert result.score == 1.0 and result.output.startswith("y" * 100)
    flood = "def f(x):\n    while True:\n        print('z' * 100_000)\n"
    started = time.monotonic()
    result = single.grade(flood, REFERENCE, TESTS)
    assert {t.status for t in result.tests} == {TestStatus.OUTPUT_LIMIT}
    assert time.monotonic() - started < 20
    assert single.grade(GOOD, REFERENCE, TESTS).score == 1.0


def test_large_values_come_through():
    # Values of 0.6 to 2 MB: more than a pipe holds, so the child is held up until they are read.
    reference = "def f(x):\n    return list(range(x * 100_000))\n"
    with Grader(workers=1, timeout_s=10.0, allow_code_execution=True) as grader:
        result = grader.grade(reference, reference, TESTS)
    assert result.score == 1.0, result.to_dict()


def test_a_slow_answer_is_timed_per_test(single):
    # Each test takes 0.4 s of a 1 s budget: all pass, though the answer takes 1.2 s in all.
    slow = "import time\ndef f(x):\n    time.sleep(0.4)\n    return [x, x * 2]\n"
    assert single.grade(slow, REFERENCE, TESTS).score == 1.0


def test_long_answers_are_compiled_in_the_child(single):
    # Past 16 KiB the grader sends source, which the child compiles under its own limits and deadline.
    long_answer = "".join(f"def g{i}(x):\n    return x + {i}\n" for i in range(1500)) + REFERENCE
    assert len(long_answer) > 16 << 10
    assert single.grade(long_answer, REFERENCE, TESTS).score == 1.0
    broken = long_answer + "def broken(:\n"
    result = single.grade(broken, REFERENCE, TESTS)
    assert result.score == 0 and "SyntaxError" in result.tests[0].detail
