"""The per-answer grading budget: wall-clock and CPU time over all of an answer's tests.

A looping answer must cost about one test's timeout (the default budget), not one timeout per test,
through gym.make as through the Grader; answers inside their budget score exactly as without one.
"""

from __future__ import annotations

import math
import threading
import time

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401 (registers the ids)
from colbench_gym.execution import Grader, GradeResult, TestStatus, default_grader
from colbench_gym.simulators import ScriptedSimulator

REFERENCE = "def scale(x):\n    return x * 3\n"
TESTS = {f"t{i}": f"scale({i})" for i in range(10)}
ROW = {
    "task_id": "scale",
    "problem_description": "Scale a number. The signature of the function is: def scale(x)",
    "ground_truth": REFERENCE,
    "hidden_information": REFERENCE,
    "test_cases": TESTS,
}
LOOPING = "def scale(x):\n    while True:\n        pass\n"
HANGS_ON_ZERO = "def scale(x):\n    while x == 0:\n        pass\n    return x * 3\n"
# What the machine may add to a budget: the kill, the server's clean-up, a loaded machine's scheduling.
SLACK_S = 1.0


def _make(**kwargs):
    return gym.make("ColBench-Backend-v0", tasks=[ROW], simulator=ScriptedSimulator(["Times three."]), **kwargs)


def _answer(env, code: str) -> tuple[float, dict, float]:
    env.reset(seed=0)
    started = time.monotonic()
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + code)
    assert terminated
    return reward, info, time.monotonic() - started


@pytest.fixture(scope="module")
def warm_default():
    """The shared grader the environments use, started before anything is timed."""
    return default_grader().warm_up()


@pytest.fixture(scope="module")
def grader():
    with Grader(workers=2, timeout_s=1.0, allow_code_execution=True) as g:
        yield g.warm_up()


# -- through gym.make ------------------------------------------------------------------------------


def test_a_looping_answer_costs_one_test_timeout_by_default(warm_default):
    env = _make()
    reward, info, seconds = _answer(env, LOOPING)
    # Without the budget: 10 tests x 2 s.
    assert seconds < 2.0 + SLACK_S, seconds
    assert reward == 0.0 and info["grader"]["status_counts"] == {"timeout": 10}
    budget = {key: info["grader"][key] for key in ("budget_s", "out_of_budget", "tests_cut")}
    assert budget == {"budget_s": 2.0, "out_of_budget": True, "tests_cut": 10}
    assert 1.9 < info["grader"]["spent_s"] < 2.0 + SLACK_S
    first, second = info["tests"][0]["detail"], info["tests"][1]["detail"]
    # a loop spends CPU as fast as wall-clock time on an idle machine: either clock may run out first
    clock = first.rsplit("(", 1)[-1]
    assert clock in ("wall-clock time)", "CPU time)"), first
    assert first == ("the answer's grading budget (2 s of wall-clock and of CPU time over all its tests) ran out "
                     f"during this test ({clock}")
    assert second.startswith("not run: the answer's grading budget (2 s") and second.endswith(f"was spent ({clock}")
    env.close()


def test_each_env_has_its_own_budget_on_the_shared_grader(warm_default):
    short, unlimited = _make(answer_budget_s=0.5), _make(answer_budget_s=math.inf)
    assert short.unwrapped.grader is unlimited.unwrapped.grader is warm_default
    reward, info, seconds = _answer(short, HANGS_ON_ZERO)
    assert seconds < 0.5 + SLACK_S, seconds
    assert reward == 0.0 and info["grader"]["tests_cut"] == 10 and info["grader"]["budget_s"] == 0.5
    # No budget: the hanging test costs its 2 s timeout, the nine after it pass in a fresh child.
    reward, info, seconds = _answer(unlimited, HANGS_ON_ZERO)
    assert reward == pytest.approx(0.9) and info["tests"][0]["detail"] == "exceeded 2 s during this test"
    assert info["grader"]["budget_s"] is None and not info["grader"]["out_of_budget"]
    assert info["grader"]["tests_cut"] == 0 and 2.0 <= seconds < 2.0 + SLACK_S
    short.close()
    unlimited.close()


def test_four_looping_answers_at_once_each_cost_the_budget(warm_default):
    envs = [_make(answer_budget_s=0.5) for _ in range(4)]
    infos: list[dict] = [{} for _ in envs]

    def play(index: int) -> None:
        infos[index] = _answer(envs[index], LOOPING)[1]

    threads = [threading.Thread(target=play, args=(index,)) for index in range(len(envs))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    # Queueing behind another answer is not charged: each answer's own processes ran for the budget.
    assert all(info["grader"]["out_of_budget"] and info["grader"]["tests_cut"] == 10 for info in infos)
    assert all(0.45 < info["grader"]["spent_s"] < 0.5 + SLACK_S for info in infos), [i["grader"] for i in infos]
    assert seconds < 4 * 0.5 + SLACK_S, seconds  # at worst one after the other; 2 workers share them
    for env in envs:
        env.close()


def test_budget_arguments_are_checked():
    with pytest.raises(ValueError, match=r"answer_budget_s must be positive \(math.inf: no budget\), got -1"):
        _make(answer_budget_s=-1)
    with pytest.raises(TypeError, match="answer_budget_s must be a number of seconds"):
        Grader(answer_budget_s="2")
    with pytest.raises(ValueError, match="answer_budget_s must be positive"):
        Grader(answer_budget_s=float("nan"))
    with Grader(workers=1, timeout_s=1.5, allow_code_execution=True) as g:
        assert g.answer_budget_s == 1.5  # default: one test's timeout
        with pytest.raises(ValueError, match="budget_s must be positive"):
            g.grade(REFERENCE, REFERENCE, TESTS, budget_s=0)


# -- the grader ------------------------------------------------------------------------------------


def test_answers_inside_the_budget_score_as_without_one(grader):
    slow = "import time\ndef scale(x):\n    time.sleep(0.03)\n    return x * 3 if x != 4 else None\n"
    for code in (REFERENCE, slow, HANGS_ON_ZERO.replace("x == 0", "x == -1"), "def scale(x):\n    return 1 / x\n"):
        budgeted, unlimited = grader.grade(code, REFERENCE, TESTS), grader.grade(code, REFERENCE, TESTS, budget_s=math.inf)
        assert budgeted.tests == unlimited.tests and budgeted.score == unlimited.score
        assert not budgeted.out_of_budget and budgeted.tests_cut == 0 and budgeted.budget_s == 1.0
        assert 0.0 < budgeted.spent_s < 1.0


def test_a_slow_answer_past_the_budget_is_cut_where_it_ran_out(grader):
    slow = "import time\ndef scale(x):\n    time.sleep(0.3)\n    return x * 3\n"
    result = grader.grade(slow, REFERENCE, TESTS)  # 1 s: three tests (0.9 s), the fourth would end at 1.2 s
    statuses = [test.status for test in result.tests]
    passed = statuses.count(TestStatus.PASSED)
    # A loaded machine may delay the child a little: two tests may pass where three fit. (A sleep that divides the
    # budget, 0.2 s, put the fifth test's end on the deadline itself: a late cut let it pass under load.)
    assert 2 <= passed <= 3 and statuses == [TestStatus.PASSED] * passed + [TestStatus.TIMEOUT] * (10 - passed)
    assert result.out_of_budget and result.tests_cut == 10 - passed
    assert "ran out during this test (wall-clock time)" in result.tests[passed].detail
    assert all(test.detail.startswith("not run:") for test in result.tests[passed + 1:])
    assert result.score == passed / 10


def test_queued_answers_are_not_charged_for_the_wait():
    good, looping = (REFERENCE, REFERENCE, TESTS), (LOOPING, REFERENCE, TESTS)
    with Grader(workers=1, timeout_s=1.0, allow_code_execution=True) as single:
        single.warm_up()
        started = time.monotonic()
        results = single.grade_many([good, looping, good, looping, looping, good], budget_s=0.3)
        seconds = time.monotonic() - started
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert [r.out_of_budget for r in results] == [False, True, False, True, True, False]
    # The third looper waited behind two others on the one worker: it still ran its own 0.3 s only.
    assert all(0.25 < r.spent_s < 0.3 + SLACK_S for r in results if r.out_of_budget), [r.spent_s for r in results]
    assert seconds < 3 * 0.3 + 2 * SLACK_S, seconds


def test_the_cpu_budget_is_the_answers_cpu_limit(grader):
    # What the answer's own process sees: RLIMIT_CPU at what its budget allows, rounded up to the second
    # (without a budget, 1.5 s per test and one more for defining the answer: 4 s).
    limit = "import resource\ndef scale(x):\n    return resource.getrlimit(resource.RLIMIT_CPU)[0]\n"
    expects_two = "def scale(x):\n    return 2\n"
    assert grader.grade(limit, expects_two, {"t": "scale(1)"}, budget_s=1.5).score == 1.0
    unlimited = grader.grade(limit, expects_two, {"t": "scale(1)"}, budget_s=math.inf)
    assert unlimited.tests[0].detail == "returned 4"


def test_the_budget_survives_a_round_trip(grader):
    result = grader.grade(LOOPING, REFERENCE, {"a": "scale(1)", "b": "scale(2)"}, budget_s=0.2)
    row = result.to_dict()
    assert {key: row[key] for key in ("budget_s", "out_of_budget", "tests_cut")} == {
        "budget_s": 0.2, "out_of_budget": True, "tests_cut": 2}
    again = GradeResult.from_dict(row)
    assert again.budget_info() == result.budget_info() and again.tests == result.tests
