"""Behaviour of the sandboxed backend grader: API, statuses, scoring, encoding, determinism."""

from __future__ import annotations

import json
import math
import threading
import warnings
from pathlib import Path

import pytest

from colbench_gym.execution import (
    CodeExecutionDisabled,
    Grader,
    GradeResult,
    SandboxWarning,
    TestResult,
    TestStatus,
    default_grader,
    extract_code,
)
from colbench_gym.execution.codec import (
    FrameReader,
    OpaqueValue,
    ProtocolError,
    decode_value,
)
from colbench_gym.execution.mutation import constant_mutants
from colbench_gym.execution.sandbox import isolation as sandbox_isolation

ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = {"test1": "add(1, 2)", "test2": "add(-5, 5)", "test3": "add('a', 'b')"}


@pytest.fixture(scope="module")
def grader():
    with Grader(workers=2, timeout_s=1.0, memory_mb=512, allow_code_execution=True) as g:
        yield g


# -- opt-in ----------------------------------------------------------------------------------


def test_execution_is_opt_in(monkeypatch):
    monkeypatch.delenv("COLBENCH_ALLOW_CODE_EXECUTION", raising=False)
    g = Grader(workers=1)
    with pytest.raises(CodeExecutionDisabled, match="allow_code_execution=True"):
        g.grade(ADD, ADD, ADD_TESTS)
    with pytest.raises(CodeExecutionDisabled, match="COLBENCH_ALLOW_CODE_EXECUTION=1"):
        g.grade_many([(ADD, ADD, ADD_TESTS)])
    g.close()


def test_environment_variable_enables_execution(monkeypatch):
    monkeypatch.setenv("COLBENCH_ALLOW_CODE_EXECUTION", "1")
    with Grader(workers=1, timeout_s=1.0) as g:
        assert g.grade(ADD, ADD, ADD_TESTS).success


def test_default_grader_is_shared_and_enabled():
    first = default_grader(workers=1, timeout_s=1.5)
    assert first is default_grader(workers=1, timeout_s=1.5)
    assert first.allow_code_execution
    assert first.grade(ADD, ADD, ADD_TESTS).score == 1.0
    assert default_grader(workers=1, timeout_s=1.7) is not first


# -- scoring and statuses --------------------------------------------------------------------


def test_reference_answer_passes_everything(grader):
    result = grader.grade(ADD, ADD, ADD_TESTS)
    assert result.score == 1.0 and result.success and not result.infra_error
    assert [t.name for t in result.tests] == ["test1", "test2", "test3"]
    assert result.status_counts() == {"passed": 3}


def test_partial_score_and_wrong_detail(grader):
    answer = "def add(a, b):\n    return a + b if a != 1 else 0\n"
    result = grader.grade(answer, ADD, ADD_TESTS)
    assert result.score == pytest.approx(2 / 3)
    assert not result.success
    assert result.tests[0].status is TestStatus.WRONG
    assert "returned 0" in result.tests[0].detail


def test_error_statuses(grader):
    raising = "def add(a, b):\n    raise ValueError('nope')\n"
    result = grader.grade(raising, ADD, ADD_TESTS)
    assert result.status_counts() == {"error": 3}
    assert "ValueError: nope" in result.tests[0].detail
    syntax = grader.grade("def add(a, b) return a\n", ADD, ADD_TESTS)
    assert syntax.status_counts() == {"error": 3} and "SyntaxError" in syntax.tests[0].detail
    undefined = grader.grade("def other():\n    pass\n", ADD, ADD_TESTS)
    assert undefined.status_counts() == {"error": 3} and "NameError" in undefined.tests[0].detail


def test_reference_none_or_raising_never_passes(grader):
    reference = (
        "def f(x):\n    if x == 0:\n        return None\n    if x == 1:\n        raise KeyError(x)\n    return x\n"
    )
    tests = {"none": "f(0)", "raises": "f(1)", "ok": "f(2)", "bad_call": "f(", "undefined": "g(3)"}
    result = grader.grade(reference, reference, tests)
    statuses = {t.name: t.status for t in result.tests}
    assert statuses == {
        "none": TestStatus.REFERENCE_INVALID,
        "raises": TestStatus.REFERENCE_INVALID,
        "ok": TestStatus.PASSED,
        "bad_call": TestStatus.REFERENCE_INVALID,
        "undefined": TestStatus.REFERENCE_INVALID,
    }
    assert result.score == pytest.approx(1 / 5)
    assert "None" in result.tests[0].detail and "KeyError" in result.tests[1].detail


def test_each_test_gets_its_own_time_limit(grader):
    answer = "def f(x):\n    while x == 2:\n        pass\n    return x * 10\n"
    reference = "def f(x):\n    return x * 10\n"
    tests = {f"t{i}": f"f({i})" for i in range(1, 5)}
    # Without an answer budget (by default one test's timeout: see test_grading_budget.py), the tests
    # after the one that hangs run in a fresh child.
    result = grader.grade(answer, reference, tests, budget_s=math.inf)
    passed, timeout = TestStatus.PASSED, TestStatus.TIMEOUT
    assert [t.status for t in result.tests] == [passed, timeout, passed, passed]
    assert result.score == 0.75


def test_state_is_shared_between_tests_like_colbench(grader):
    # ColBench defines the answer once and evaluates every call in that namespace.
    code = "calls = []\ndef f():\n    calls.append(1)\n    return len(calls)\n"
    result = grader.grade(code, code, {"a": "f()", "b": "f()", "c": "f()"})
    assert result.score == 1.0


def test_output_is_captured_and_bounded(grader):
    answer = "def add(a, b):\n    print('debug', a, b)\n    return a + b\n"
    result = grader.grade(answer, ADD, ADD_TESTS)
    assert result.score == 1.0
    assert result.output.startswith("debug 1 2\n")
    assert 0.0 < result.elapsed_s < 30.0


def test_empty_tests_and_bad_arguments(grader):
    empty = grader.grade(ADD, ADD, {})
    assert empty.score == 0.0 and not empty.success and empty.error == "no test calls"
    with pytest.raises(TypeError):
        grader.grade(123, ADD, ADD_TESTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        grader.grade(ADD, ADD, {"t": 5})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        grader.grade_many([(ADD, ADD)])  # type: ignore[list-item]


def test_grade_many_keeps_order_and_runs_concurrently(grader):
    answers = [ADD, "def add(a, b):\n    return 0\n", "def add(a, b):\n    return a - b\n"] * 4
    results = grader.grade_many([(answer, ADD, ADD_TESTS) for answer in answers])
    assert [round(r.score, 3) for r in results] == [1.0, 0.333, 0.0] * 4  # add(-5, 5) == 0
    assert grader.grade_many([]) == []


def test_threads_share_one_grader(grader):
    scores: list[float] = []
    lock = threading.Lock()

    def work(offset: int) -> None:
        answer = f"def add(a, b):\n    return a + b + {offset}\n"
        result = grader.grade(answer, ADD, {"t": "add(1, 1)"})
        with lock:
            scores.append(result.score)

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(scores) == [0.0] * 3 + [1.0] * 3


def test_reference_outputs_are_cached(grader):
    grader.clear_cache()
    reference = "def sq(x):\n    return x * x\n"
    tests = {f"t{i}": f"sq({i})" for i in range(5)}
    runs = grader.cache_info()["reference_runs"]
    grader.grade(reference, reference, tests)
    grader.grade_many([("def sq(x):\n    return x ** 2\n", reference, tests)] * 3)
    info = grader.cache_info()
    assert info["entries"] == 1 and info["in_flight"] == 0
    assert info["reference_runs"] == runs + 1
    grader.grade(reference, reference, {**tests, "t9": "sq(9)"})  # other calls: another run
    assert grader.cache_info()["reference_runs"] == runs + 2


def test_reference_batches_isolate_and_survive_each_other():
    poisoner = "import builtins\nbuiltins.len = lambda obj: -1\ndef p(x):\n    return x\n"
    looper = "def loop(x):\n    while x:\n        pass\n    return 'fine'\n"
    broken = "def nope(:\n"
    counter = "def count(s):\n    return len(s)\n"
    items = [
        (poisoner, poisoner, {"t": "p(1)"}),
        (looper, looper, {"hangs": "loop(1)", "returns": "loop(0)"}),
        (broken, broken, {"t": "nope()"}),
        (counter, counter, {"a": "count('abc')", "b": "count([])"}),
    ]
    with Grader(workers=1, timeout_s=0.5, allow_code_execution=True, reference_batch_size=8) as g:
        results = g.grade_many(items, budget_s=math.inf)  # the looping answer's second test runs too
        assert g.cache_info()["reference_runs"] == 4
    assert results[0].score == 1.0
    assert [t.status for t in results[1].tests] == [TestStatus.REFERENCE_INVALID, TestStatus.PASSED]
    assert "timeout" in results[1].tests[0].detail
    assert results[2].status_counts() == {"reference_invalid": 1}
    assert results[3].score == 1.0  # len() was restored after the poisoning reference


def test_references_do_not_share_module_state():
    # Each reference runs in its own child by default: one task's random draws or decimal precision
    # cannot change the expected outputs of another task graded in the same batch.
    draw_a = "import random\ndef a():\n    return random.random()\n"
    draw_b = "import random\ndef b():\n    return random.random()\n"
    low_precision = "import decimal\ndecimal.getcontext().prec = 3\ndef c():\n    return 1\n"
    seventh = "from decimal import Decimal\ndef d():\n    return str(Decimal(1) / Decimal(7))\n"
    items = [
        (draw_a, draw_a, {"t": "a()"}),
        (draw_b, draw_b, {"t": "b()"}),
        (low_precision, low_precision, {"t": "c()"}),
        (seventh, seventh, {"t": "d()"}),
        (seventh, seventh, {"t": "d()", "again": "d()"}),
    ]
    with Grader(workers=1, timeout_s=1.0, allow_code_execution=True) as g:
        assert g.reference_batch_size == 1
        results = g.grade_many(items)
        assert [r.score for r in results] == [1.0] * 5
        assert g.cache_info()["reference_runs"] == 5
        # The cached expectation is the one a reference computes alone: a correct answer still passes.
        assert g.grade(seventh, seventh, {"t": "d()"}).score == 1.0
        wrong_precision = "from decimal import Decimal\ndef d():\n    return '0.143'\n"
        assert g.grade(wrong_precision, seventh, {"t": "d()"}).score == 0.0


def test_result_serialisation_round_trip(grader):
    result = grader.grade("def add(a, b):\n    return a\n", ADD, ADD_TESTS)
    row = json.loads(json.dumps(result.to_dict()))
    assert row["status_counts"] == result.status_counts()
    again = GradeResult.from_dict(row)
    assert again.score == result.score and again.tests == result.tests
    assert TestResult("t", TestStatus.PASSED).to_dict() == {"name": "t", "status": "passed", "detail": ""}
    assert str(TestStatus.TIMEOUT) == "timeout" and TestStatus("reference_invalid") is TestStatus.REFERENCE_INVALID


def test_grader_pickles_as_its_configuration(grader):
    import copy
    import pickle

    clone = pickle.loads(pickle.dumps(grader))
    try:
        assert clone is not grader and clone.settings == grader.settings and clone.workers == grader.workers
        assert clone.allow_code_execution and clone.cache_info()["entries"] == 0
        assert clone.grade(ADD, ADD, ADD_TESTS).score == 1.0
    finally:
        clone.close()
    copied = copy.deepcopy(grader)
    assert copied.settings == grader.settings
    copied.close()


def test_closed_grader_refuses_work():
    g = Grader(workers=1, allow_code_execution=True)
    g.close()
    g.close()
    with pytest.raises(RuntimeError, match="closed"):
        g.grade(ADD, ADD, ADD_TESTS)


# -- values cross the process boundary as plain data -----------------------------------------


def test_equality_follows_python_semantics_on_plain_data(grader):
    reference = (
        "from collections import OrderedDict, namedtuple, Counter\n"
        "from decimal import Decimal\n"
        "P = namedtuple('P', 'x y')\n"
        "def f(kind):\n"
        "    return {\n"
        "        'int_float': 2, 'bool_int': True, 'tuple_key': {(1, 'a'): frozenset({1, 2})},\n"
        "        'big': 3 ** 200, 'neg_big': -(7 ** 90), 'bytes': b'\\x00\\xff', 'complex': 1 + 2j,\n"
        "        'set': {'b', 'a'}, 'ordered': OrderedDict(a=1), 'named': P(1, 2), 'decimal': Decimal('1.5'),\n"
        "        'counter': Counter('aab'), 'nested': [[1, [2, (3,)]]], 'inf': float('inf'), 'range': range(3),\n"
        "    }[kind]\n"
    )
    answer = (
        "from decimal import Decimal\n"
        "def f(kind):\n"
        "    return {\n"
        "        'int_float': 2.0, 'bool_int': 1, 'tuple_key': {(1, 'a'): frozenset({2, 1})},\n"
        "        'big': 3 ** 200, 'neg_big': -(7 ** 90), 'bytes': bytearray(b'\\x00\\xff'), 'complex': complex(1, 2),\n"
        "        'set': {'a', 'b'}, 'ordered': {'a': 1}, 'named': (1, 2), 'decimal': Decimal('1.5'),\n"
        "        'counter': {'a': 2, 'b': 1}, 'nested': [[1, [2, (3,)]]], 'inf': float('inf'), 'range': range(3),\n"
        "    }[kind]\n"
    )
    kinds = ["int_float", "bool_int", "tuple_key", "big", "neg_big", "bytes", "complex", "set", "ordered", "named",
             "decimal", "counter", "nested", "inf", "range"]
    result = grader.grade(answer, reference, {k: f"f({k!r})" for k in kinds})
    assert result.status_counts() == {"passed": len(kinds)}, result.to_dict()


def test_type_differences_still_fail(grader):
    reference = "def f(k):\n    return {'list': [1, 2], 'str': '1', 'nan': float('nan'), 'obj': object()}[k]\n"
    answer = "def f(k):\n    return {'list': (1, 2), 'str': 1, 'nan': float('nan'), 'obj': object()}[k]\n"
    result = grader.grade(answer, reference, {k: f"f({k!r})" for k in ["list", "str", "nan", "obj"]})
    assert result.status_counts() == {"wrong": 4}


def test_numpy_values_are_read_as_plain_data(grader):
    pytest.importorskip("numpy")
    reference = "def f():\n    return [1, 2, 3]\n"
    answer = "import numpy as np\ndef f():\n    return np.array([1, 2, 3])\n"
    scalar = "import numpy as np\ndef g():\n    return np.int64(7)\n"
    assert grader.grade(answer, reference, {"t": "f()"}).score == 1.0
    assert grader.grade(scalar, "def g():\n    return 7\n", {"t": "g()"}).score == 1.0


def test_unserializable_and_huge_values(grader):
    reference = "def f():\n    return [1]\n"
    deep = "def f():\n    x = []\n    for _ in range(500):\n        x = [x]\n    return x\n"
    result = grader.grade(deep, reference, {"t": "f()"})
    assert result.tests[0].status is TestStatus.WRONG and "nested deeper" in result.tests[0].detail
    huge = "def f():\n    return 'x' * (40 * 1024 * 1024)\n"
    result = grader.grade(huge, reference, {"t": "f()"})
    assert result.tests[0].status is TestStatus.OUTPUT_LIMIT


def test_deterministic_hash_seed_and_timezone(grader):
    # Set iteration order of str depends on the hash seed: fixed, so equal across processes.
    code = (
        "import time\n"
        "def order():\n    return list({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'})\n"
        "def tz():\n    return time.strftime('%Z')\n"
        "def rnd():\n    import random\n    return random.random()\n"
    )
    tests = {"order": "order()", "tz": "tz()", "rnd": "rnd()"}
    first = grader.grade(code, code, tests)
    assert first.score == 1.0, first.to_dict()
    probe = "def tz():\n    return 'UTC'\n"
    assert grader.grade(probe, code, {"tz": "tz()"}).score == 1.0


def test_clean_environment(grader):
    probe = "import os\ndef env():\n    return sorted(os.environ)\n"
    expected = (
        "def env():\n    return sorted(['LANG', 'LC_ALL', 'MKL_NUM_THREADS', 'NUMEXPR_NUM_THREADS',\n"
        "        'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH', 'PYTHONDONTWRITEBYTECODE',\n"
        "        'PYTHONHASHSEED', 'PYTHONIOENCODING', 'TZ'])\n"
    )
    assert grader.grade(probe, expected, {"t": "env()"}).score == 1.0


def test_sandbox_that_cannot_start_is_an_infra_error(grader):
    with Grader(workers=1, timeout_s=1.0, allow_code_execution=True, python="/nonexistent/python3") as broken:
        result = broken.grade(ADD, ADD, ADD_TESTS)
    assert result.infra_error and result.score == 0.0
    assert result.status_counts() == {"infra_error": 3}
    assert "did not start" in result.tests[0].detail or "cannot start" in result.tests[0].detail
    # One broken grader does not change how others run.
    assert grader.grade(ADD, ADD, ADD_TESTS).score == 1.0


def test_hide_paths_inside_the_python_installation(grader):
    numpy = pytest.importorskip("numpy")
    if grader.warm_up().sandbox_mode != "bwrap":
        pytest.skip("needs the bubblewrap sandbox")
    package = str(Path(numpy.__file__).parent)
    code = "def probe():\n    import numpy\n    return int(numpy.zeros(1)[0]) + 1\n"
    with Grader(workers=1, timeout_s=2.0, allow_code_execution=True, hide_paths=(package,)) as hiding:
        result = hiding.grade(code, "def probe():\n    return 1\n", {"t": "probe()"})
    # The directory is an empty tmpfs inside: `import numpy` finds nothing but a namespace package.
    assert result.tests[0].status is TestStatus.ERROR and "zeros" in result.tests[0].detail
    assert grader.grade(code, "def probe():\n    return 1\n", {"t": "probe()"}).score == 1.0


def test_degraded_mode_warns_and_still_grades(monkeypatch):
    monkeypatch.setattr(sandbox_isolation, "_warned", set())  # the warning is given once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Grader(workers=1, timeout_s=1.0, allow_code_execution=True, sandbox="none") as g:
            assert g.grade(ADD, ADD, ADD_TESTS).score == 1.0
            assert g.sandbox_mode == "none"
            looping = g.grade("def add(a, b):\n    while True:\n        pass\n", ADD, {"t": "add(1, 2)"})
            assert looping.tests[0].status is TestStatus.TIMEOUT
    assert any(issubclass(w.category, SandboxWarning) for w in caught)


# -- codec -------------------------------------------------------------------------------------


def test_decoder_rejects_malformed_input():
    assert decode_value(["d", ["t", 1, 2], ["s", "a"]]) == {(1, 2): {"a"}}
    assert decode_value(["o", "decimal.Decimal", "Decimal('1')"]) == OpaqueValue("decimal.Decimal", "Decimal('1')")
    for bad in (["s", ["l", 1]], ["x", 1], [], {"a": 1}, ["d", 1], ["I", 5], ["c", "1", 2]):
        with pytest.raises(ProtocolError):
            decode_value(bad)


def test_frame_reader_checks_header_and_size():
    nonce = b"n" * 16
    body = b'["ready"]'
    frame = b"CBF1" + nonce + len(body).to_bytes(4, "little") + body
    reader = FrameReader(nonce, 1024)
    assert reader.feed(frame[:10]) == [] and reader.feed(frame[10:] + frame) == [["ready"], ["ready"]]
    with pytest.raises(ProtocolError):
        FrameReader(b"m" * 16, 1024).feed(frame)
    with pytest.raises(ProtocolError):
        FrameReader(nonce, 4).feed(frame)


# -- helpers -----------------------------------------------------------------------------------


def test_extract_code():
    assert extract_code("```python\ndef f():\n    return 1\n```") == "def f():\n    return 1"
    assert extract_code("Here:\n```\nx = 1\n```\nand\n```\ny = 2\n```") == "x = 1\n\ny = 2"
    two = "```python\na = 1\n```\ntext\n```bash\nls\n```\n```py\nb = 2\n```"
    assert extract_code(two) == "a = 1\n\nb = 2"
    assert extract_code("  def f(): pass  \n") == "def f(): pass"
    assert extract_code("```python\ndef f():\n    return 1\n") == "def f():\n    return 1"
    assert extract_code("```js\nlet a = 1;\n```") == "let a = 1;"
    with pytest.raises(TypeError):
        extract_code(None)  # type: ignore[arg-type]


def test_extract_code_keeps_the_models_compile_warnings_out_of_the_log():
    answer = 'I WANT TO ANSWER:\n```python\ndef f(x):\n    return 1if x else "\\d"\n```'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert extract_code(answer) == 'def f(x):\n    return 1if x else "\\d"'
    assert caught == []


def test_extract_code_with_one_unmatched_fence():
    # The opening fence was in the prompt (a forced answer prefix): code, closing fence, then prose.
    assert extract_code("def f(x):\n    return x\n```\nThis returns x.") == "def f(x):\n    return x"
    # Prose, then an opening fence the answer never closed (tagged or not).
    assert extract_code("Sure:\n```python\ndef g():\n    return 2\n") == "def g():\n    return 2"
    assert extract_code("Here is the code:\n```\ndef g():\n    return 2") == "def g():\n    return 2"
    # Whatever is chosen is what gets graded: a solution, not the prose around it.
    assert extract_code("def h():\n    return 3\n```") == "def h():\n    return 3"
    # A closing fence typed at the end of the last line of code.
    assert extract_code("```python\ndef f():\n    return 1```") == "def f():\n    return 1"


def test_extract_code_keeps_fences_inside_strings_of_the_code():
    docstring = "def f():\n    '''Example:\n    ```\n    f()\n    ```\n    '''\n    return 1"
    answer = f"Here:\n```python\n{docstring}\n```\nCall it with:\n```python\nprint(f())\n```"
    assert extract_code(answer) == docstring + "\n\nprint(f())"
    # Also when the answer was cut off before its last fence, and for untagged blocks.
    assert extract_code(f"```python\n{docstring}\n") == docstring
    assert extract_code(f"```\n{docstring}\n```\nDone.") == docstring
    # A fence line inside a longer (four-backtick) block is plain content.
    outer = "````python\nS = '''\n```\n'''\n````"
    assert extract_code(outer) == "S = '''\n```\n'''"
    # Code that does not parse either way keeps the first closing fence: the prose after it stays out.
    broken = "```python\ndef f(:\n```\nThen call it:\n```python\nf()\n```"
    assert extract_code(broken) == "def f(:\n\nf()"


def test_extract_code_markdown_variants():
    assert extract_code("```python def f(): return 1```") == "def f(): return 1"
    assert extract_code("Use ```py x = 2``` here") == "Use ```py x = 2``` here"  # not a fence line
    assert extract_code("```x = 1```") == "x = 1"
    listed = "1. Code:\n   ```python\n   def f():\n       return 1\n\n   X = 2\n   ```\n2. Done"
    assert extract_code(listed) == "def f():\n    return 1\n\nX = 2"
    assert extract_code("```python\r\ndef f():\r\n    return 1\r\n```\r\n") == "def f():\n    return 1"
    assert extract_code("~~~python\nx = 1\n~~~") == "x = 1"
    assert extract_code("```Python title=a.py\nx = 1\n````\nbye") == "x = 1"  # a longer closing fence closes
    assert extract_code("```python\n```\n```\nx = 1\n```") == "x = 1"  # an empty block is skipped
    assert extract_code("```\nout\n```\n```python\nx = 1\n```\n```js\nlet y;\n```") == "x = 1"


def _adversarial_answers(size: int) -> dict[str, str]:
    def repeat(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "unclosed openers": repeat("```python\nx=1\n"),
        "blocks that never parse": repeat("```\n(\n```\n"),
        "one opener, many closers": "```python\nx = (\n" + repeat("```\n"),
        "fences inside one string": "```python\ns = '''\n" + repeat("```\nx\n") + "\n'''\n```",
        "mixed fence characters": repeat("~~~\n(\n```\n"),
        "descending fence lengths": "".join("`" * n + "\n(\n" + "`" * n + "\n" for n in range(450, 2, -1)),
        "one-line fences": repeat("```python f()```\n"),
        "one long fence line": "```" + " " * size + "x",
        "code then many closers": "```python\n" + repeat("x = 1\n")[: size // 4] + "(\n```\n" + repeat("```\nx\n"),
    }


def test_extract_code_is_linear_in_the_answer_length():
    from colbench_gym.execution import extract

    for name, text in _adversarial_answers(200_000).items():
        scan = extract._Scan(text).run()
        # Each line visited about once, each character parsed at most a few times: no quadratic path.
        assert scan.work <= 5 * len(text) + extract._EXTENSION_BUDGET_FLOOR, name
        assert scan.budget >= 0, name
    assert extract_code("```python\nx=1\n" * 20_000) == "\n".join(["x=1"] * 20_000)


def test_constant_mutants():
    code = 'def f(x):\n    """doc"""\n    return x * 2 + len("ab")\n'
    mutants = constant_mutants(code)
    assert len(mutants) == 2
    assert "x * 3" in mutants[0] and "'ab~'" in mutants[1] and all('"""doc"""' in m for m in mutants)
    assert constant_mutants("def broken(:") == []
