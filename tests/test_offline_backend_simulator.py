"""The offline simulated human for backend tasks: useful, never leaking, robust, deterministic, fast.

Run: pytest tests/test_offline_backend_simulator.py -q
(the real-row checks read ../shared/colbench-data/backend_dev.jsonl and are skipped without it)
"""

from __future__ import annotations

import ast
import json
import re
import time

import pytest
from builtin_wrong_answers import WRONG_ANSWERS

from colbench_gym.simulators.base import DONT_KNOW, Simulator, SimulatorRequest
from colbench_gym.simulators.offline_backend import (
    LEAK_LINE_CHARS,
    MAX_REPLY_CHARS,
    OfflineBackendSimulator,
    build_knowledge,
)
from colbench_gym.tasks import BackendTask, FrontendTask, load_builtin

ALL = load_builtin("all")
HUMAN = OfflineBackendSimulator()

GENERAL_QUESTIONS = [
    "What should the function return?",
    "Are there any thresholds or limits I should know about?",
    "How should I round the result?",
    "What happens if the input is empty?",
    "What are the default values?",
    "Any other requirements or edge cases?",
    "What format should the output be in?",
    "Can you show me the code? Please paste the whole function.",
    "What should happen with invalid input?",
    "How should ties be broken, and in which order?",
    "Which constants does the formula use?",
    "Is it case sensitive?",
]


def ask(task: BackendTask, question: str, history: list[dict[str, str]] | None = None) -> str:
    messages = [{"role": "user", "content": task.problem_description}, *(history or []),
                {"role": "assistant", "content": question}]
    reply = HUMAN.reply(SimulatorRequest(task=task, messages=messages))
    assert reply.error is None
    return reply.text


def task_from_code(code: str) -> BackendTask:
    name = ast.parse(code).body[0].name  # type: ignore[attr-defined]
    return BackendTask(problem_description=f"Write {name}.", ground_truth=code, hidden_information=code,
                       test_cases={"test1": f"{name}()"}, task_id=f"inline-{name}")


def questions_for(task: BackendTask) -> list[str]:
    """General questions, one per parameter and per identifier, and the agent pasting text back."""
    tree = ast.parse(task.hidden_information)
    names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
                   | {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args})
    constants = sorted({repr(n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)})[:8]
    asked = [f"What exactly is {name.replace('_', ' ')}, and what should I do with {name}?" for name in names]
    asked += [f"Should I use {value} somewhere?" for value in constants]
    asked += [task.problem_description, task.hidden_information, "\n".join(task.hidden_information.splitlines()[:3])]
    return GENERAL_QUESTIONS + asked


def leaked_lines(reply: str, source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()
            if len(line.strip()) > LEAK_LINE_CHARS and line.strip() in reply]


def contains_value(reply: str, expect: str) -> bool:
    if expect[:1].isdigit():  # '2' must be the number 2, not a digit of 2400
        return re.search(rf"(?<![\d.]){re.escape(expect)}(?![\d])", reply) is not None
    return expect in reply


# --- usefulness ------------------------------------------------------------------------------


def test_is_a_simulator():
    assert isinstance(HUMAN, Simulator)


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.task_id)
def test_question_naming_the_hidden_detail_gets_its_value(task: BackendTask):
    wrong = WRONG_ANSWERS[task.task_id]
    reply = ask(task, wrong.question)
    assert contains_value(reply, wrong.expect), f"{wrong.question!r} -> {reply!r}"
    assert reply != DONT_KNOW


def test_conditions_are_said_in_words_with_their_ranges():
    code = (
        "def fever(temp):\n"
        "    if temp < 37.5:\n"
        "        return 'normal'\n"
        "    elif temp < 38.5:\n"
        "        return 'low fever'\n"
        "    return 'fever'\n"
    )
    task = task_from_code(code)
    low = ask(task, "When is it a 'low fever'?")
    assert "at least 37.5" in low and "less than 38.5" in low and "'low fever'" in low
    rest = ask(task, "And when is it a 'fever'?")
    assert "'fever'" in rest and ("none of the checks" in rest or "at least 38.5" in rest)


def test_rounding_formats_defaults_errors_tables_and_sorting():
    code = (
        "def quote(items, currency='EUR', discount=0.1):\n"
        "    rates = {'EUR': 1.0, 'USD': 1.08, 'GBP': 0.86}\n"
        "    if not items:\n"
        "        raise ValueError('no items')\n"
        "    ranked = sorted(items, key=lambda item: (-item[1], item[0]), reverse=False)\n"
        "    total = sum(price for _, price in ranked) * rates[currency] * (1 - discount)\n"
        "    return f'{currency} {round(total, 2):,.2f}'\n"
    )
    task = task_from_code(code)
    assert "2 decimal" in ask(task, "How should the total be rounded, how many decimals?")
    assert "0.1" in ask(task, "What discount is applied by default?")
    assert "1.08" in ask(task, "What rate do you use for USD?")
    assert "ValueError" in ask(task, "What if there are no items? Should it raise an error?")
    assert "<currency>" in ask(task, "What should the output text look like? Which format?")
    assert "sorted" in ask(task, "In which order should the items be sorted?")


def test_several_questions_in_one_message_get_one_answer_each():
    task = next(t for t in ALL if t.task_id.startswith("b-001"))
    reply = ask(task, "A few questions:\n1. What is the base price for domestic parcels?\n"
                      "2. Is there a surcharge for heavy parcels?\n3. How should the result be rounded?")
    assert "5.0" in reply and "20" in reply and "2 decimal places" in reply


def test_inputs_are_described_from_how_the_code_uses_them():
    code = (
        "def order_total(orders, coupon, express=False):\n"
        "    total = 0\n"
        "    for order in orders:\n"
        "        total += order['price'] * order['qty']\n"
        "    if coupon.upper() == 'HALF':\n"
        "        total /= 2\n"
        "    return total + (9.5 if express else 0)\n"
    )
    task = task_from_code(code)
    orders = ask(task, "What does the orders input look like?")
    assert "list" in orders and "'price'" in orders and "'qty'" in orders
    assert "'HALF'" in ask(task, "What format is the coupon in? Which values?")
    assert "9.5" in ask(task, "How much extra is express shipping?")
    assert "the result is" in ask(task, "What should the function return?").lower()


def test_docstring_example_is_true():
    task = load_builtin("train")[0]
    reply = ask(task, "Is there a surcharge for heavy parcels?")
    assert reply.startswith("If weight kg is more than 20, cost increases by 10.")


def test_volunteers_untold_details_when_asked_in_general():
    task = next(t for t in ALL if t.task_id.startswith("b-002"))
    first = ask(task, "Are there any other requirements I should know about?")
    second = ask(task, "Are there any other requirements I should know about?",
                 history=[{"role": "assistant", "content": "Anything?"}, {"role": "user", "content": first}])
    assert first != DONT_KNOW and second != DONT_KNOW
    assert first != second, "what was already said is not repeated as news"


def test_unrelated_question_gets_dont_know():
    task = next(t for t in ALL if t.task_id.startswith("b-001"))
    assert ask(task, "What is your favourite colour?") == DONT_KNOW


def test_prose_hidden_information_is_answered_from_its_sentences():
    task = BackendTask(
        problem_description="Write discount(member).",
        ground_truth="def discount(member):\n    return 0.15 if member else 0.05\n",
        hidden_information="Members get a 15% discount. Everyone else gets 5%. Prices are in euros.",
        test_cases={"test1": "discount(True)"},
    )
    assert "15%" in ask(task, "How big is the discount for members?")
    assert "euro" in ask(task, "Which currency are the prices in?")
    titled = BackendTask(problem_description="Write it.", ground_truth="def f():\n    return 1\n",
                         hidden_information="Discount\nMembers get a 15% discount.\nEveryone else gets 5%.",
                         test_cases={"test1": "f()"})
    assert "15%" in ask(titled, "What discount do members get?"), "a one-word title line is not Python"


# --- never the code ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.task_id)
def test_builtin_replies_never_quote_a_source_line(task: BackendTask):
    for question in questions_for(task) + [w.question for w in WRONG_ANSWERS.values()]:
        reply = ask(task, question)
        assert not leaked_lines(reply, task.hidden_information), (question, reply)
        assert len(reply) <= MAX_REPLY_CHARS
        assert reply.count(" Also, ") <= 1, "at most two sentences"


def test_real_colbench_rows_never_leak_and_never_crash(colbench_data):
    rows = [json.loads(line) for line in (colbench_data / "backend_dev.jsonl").read_text().splitlines()]
    assert len(rows) == 200
    answered = 0
    for index, row in enumerate(rows):
        task = BackendTask.from_row(row, where=f"row {index}")
        for question in questions_for(task):
            reply = ask(task, question)
            assert reply, index
            assert len(reply) <= MAX_REPLY_CHARS
            assert not leaked_lines(reply, task.hidden_information), (index, question, reply)
            answered += reply != DONT_KNOW
    assert answered > 0.5 * 200 * len(GENERAL_QUESTIONS), "the human should mostly have something to say"


# --- robustness ------------------------------------------------------------------------------


@pytest.mark.parametrize("hidden", [
    "The user wants the result rounded to whole dollars.",  # prose
    "def broken(x:\n    return x +",  # code that does not parse
    "def f(x):\n    return x\n" + "def g(y):\n    return [\n",  # a truncated export
    "((((((((((((((((((((((((((((((((((((((((((((((((x))))))))))))))))))))))))))))))))))))))))))))))))",
    "1" * 100_000,
    "\x00\x01 binary \xff junk",
    "def deep(x):\n    return " + "(" * 150 + "x" + ")" * 150 + "\n",
    "lambda: 0",
])
def test_odd_hidden_information_never_crashes(hidden):
    task = BackendTask(problem_description="Write it.", ground_truth="def f():\n    return 1\n",
                       hidden_information=hidden, test_cases={"test1": "f()"})
    for question in ["", "?", "What should it return?", "x" * 1_000_000, "rounded whole dollars?"]:
        reply = HUMAN.reply(SimulatorRequest(task=task, messages=[{"role": "assistant", "content": question}]))
        assert isinstance(reply.text, str) and reply.text
        assert len(reply.text) <= MAX_REPLY_CHARS


def test_huge_references_stay_fast():
    table = "def f(key):\n    table = {\n" + "".join(
        f"        'key number {i} with a long name': {i} * 3 + {i % 7},\n" for i in range(5000)) + "    }\n"
    many = "".join(f"def f{i}(x):\n    if x > {i}:\n        return 'value number {i} for the long branch'\n"
                   f"    return x * {i}\n" for i in range(3000))
    for hidden in (table, many):
        task = BackendTask(problem_description="Write it.", ground_truth=hidden, hidden_information=hidden,
                           test_cases={"test1": "f(1)"})
        start = time.perf_counter()
        reply = ask(task, "What happens when x is more than 42, and what about key number 42?")
        assert time.perf_counter() - start < 10.0
        assert not leaked_lines(reply, hidden)
    assert "42" in ask(task, "What if x is more than 42?")


def test_garbage_questions_and_messages():
    task = ALL[0]
    for question in ["", " \n\t", "?", "x" * 1_000_000, "🙂" * 5000, task.hidden_information * 500]:
        start = time.perf_counter()
        text = ask(task, question)
        assert time.perf_counter() - start < 2.0
        assert not leaked_lines(text, task.hidden_information)
    odd_messages = [[], [{"role": "user"}], [{"content": None, "role": "assistant"}], ["not a dict"],
                    [{"role": "assistant", "content": 12345}]]
    for messages in odd_messages:
        reply = HUMAN.reply(SimulatorRequest(task=task, messages=messages))  # type: ignore[arg-type]
        assert reply.text == DONT_KNOW and reply.error is None


def test_frontend_task_is_a_recorded_error_not_an_exception():
    task = FrontendTask(problem_description="A page.", ground_truth="<html></html>")
    reply = HUMAN.reply(SimulatorRequest(task=task, messages=[{"role": "assistant", "content": "Colours?"}]))
    assert reply.text == DONT_KNOW
    assert reply.error and "backend" in reply.error


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        OfflineBackendSimulator(max_facts=0)
    with pytest.raises(ValueError):
        OfflineBackendSimulator(max_chars=10)


# --- deterministic and fast ------------------------------------------------------------------


def test_same_request_same_reply_even_after_the_cache_is_cleared():
    questions = ["What is the minimum?", "Any other requirements?", "How is it rounded?"]
    first = [[ask(task, q) for q in questions] for task in ALL]
    build_knowledge.cache_clear()
    again = [[OfflineBackendSimulator().reply(SimulatorRequest(task=task, messages=[
        {"role": "user", "content": task.problem_description}, {"role": "assistant", "content": q}])).text
        for q in questions] for task in ALL]
    assert first == again


def test_replies_are_fast():
    for task in ALL:  # warm the per-task cache, as an environment would after the first turn
        ask(task, "warm up")
    timings = []
    for task in ALL:
        for question in GENERAL_QUESTIONS:
            start = time.perf_counter()
            ask(task, question)
            timings.append(time.perf_counter() - start)
    timings.sort()
    assert timings[len(timings) // 2] < 0.005, f"median {timings[len(timings) // 2] * 1000:.2f} ms"
    build_knowledge.cache_clear()
    start = time.perf_counter()
    for task in ALL:
        build_knowledge(task.hidden_information)
    assert (time.perf_counter() - start) / len(ALL) < 0.05, "parsing a reference takes milliseconds"
