"""Hostile answers: each must leave the grader alive, earn no undeserved points, and get the
status that says what happened. Small limits keep the whole module fast."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from colbench_gym.execution import Grader, TestStatus
from colbench_gym.execution.codec import MAX_ITEMS_PER_HASH, OpaqueValue, ProtocolError, decode_value
from colbench_gym.execution.sandbox import server as sandbox_server

REFERENCE = "def solve(x):\n    return [x, x * 2, 'ok']\n"
TESTS = {"t1": "solve(1)", "t2": "solve(2)"}
ONE_TEST = {"t1": "solve(1)"}
TIMEOUT_S = 1.0  # generous enough for a loaded machine; the hostile cases still end at once


@pytest.fixture(scope="module")
def grader():
    with Grader(
        workers=2,
        timeout_s=TIMEOUT_S,
        memory_mb=256,
        allow_code_execution=True,
        output_limit_bytes=64 * 1024,
        file_size_mb=4,
        max_processes=8,
    ) as g:
        g.warm_up()
        yield g


@pytest.fixture(scope="module")
def bwrap_grader(grader):
    if grader.sandbox_mode != "bwrap":
        pytest.skip("needs the bubblewrap sandbox (bwrap on PATH and working)")
    return grader


def _answer(body: str, header: str = "") -> str:
    """``solve(x)`` whose body is ``body`` (indented here), after module-level ``header``."""
    indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"{header}\ndef solve(x):\n{indented}\n"


def _assert_alive(grader: Grader) -> None:
    """The grader still grades a correct answer correctly."""
    assert grader.grade(REFERENCE, REFERENCE, TESTS).score == 1.0


def _statuses(result) -> set[TestStatus]:
    return {test.status for test in result.tests}


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


# -- runaway computation ----------------------------------------------------------------------


def test_infinite_loop(grader):
    result = grader.grade(_answer("while True:\n    pass"), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.TIMEOUT}
    _assert_alive(grader)


@pytest.mark.parametrize(
    "body",
    [
        "return 10 ** 10 ** 7",  # one C call of many seconds; no bytecode boundary for signals
        "import re\nreturn re.match(r'(a+)+$', 'a' * 64 + 'b')",  # catastrophic backtracking, in C
    ],
    ids=["huge-int-power", "catastrophic-regex"],
)
def test_c_level_loops_are_killed_from_outside(grader, body):
    start = time.monotonic()
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 0 and _statuses(result) <= {TestStatus.TIMEOUT, TestStatus.MEMORY}
    assert time.monotonic() - start < 10 * TIMEOUT_S + 3
    _assert_alive(grader)


def test_signal_tricks_do_not_stop_the_timeout(grader):
    header = (
        "import signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})\n"
    )
    result = grader.grade(_answer("while True:\n    pass", header), REFERENCE, ONE_TEST)
    assert result.score == 0 and _statuses(result) == {TestStatus.TIMEOUT}
    _assert_alive(grader)


def test_recursion_bombs(grader):
    plain = grader.grade(_answer("return solve(x + 1)"), REFERENCE, ONE_TEST)
    assert plain.score == 0 and _statuses(plain) == {TestStatus.ERROR}
    assert "RecursionError" in plain.tests[0].detail
    # With the limit lifted, recursion through C (repr of nested lists) overflows the C stack.
    header = "import sys\nsys.setrecursionlimit(10 ** 8)\n"
    deep = _answer("a = []\nfor _ in range(10 ** 6):\n    a = [a]\nreturn repr(a)", header)
    result = grader.grade(deep, REFERENCE, ONE_TEST)
    assert result.score == 0
    assert _statuses(result) <= {TestStatus.CRASHED, TestStatus.ERROR, TestStatus.MEMORY, TestStatus.TIMEOUT}
    _assert_alive(grader)


# -- resources --------------------------------------------------------------------------------


def test_fork_bomb(grader):
    body = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 0
    assert _statuses(result) <= {TestStatus.TIMEOUT, TestStatus.CRASHED, TestStatus.ERROR}
    _assert_alive(grader)


def test_process_flood_leaves_no_survivor(grader):
    marker = f"4343.{os.getpid()}{int(time.time() * 1000) % 100000}"
    body = (
        "import os\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        f"            os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    except OSError:\n"
        "        pass"
    )
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 0 and _statuses(result) == {TestStatus.TIMEOUT}
    assert _processes_with(marker) == []
    _assert_alive(grader)


def test_orphan_processes_are_killed(grader):
    marker = f"4242.{os.getpid()}{int(time.time() * 1000) % 100000}"
    body = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "return [x, x * 2, 'ok']"
    )
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 1.0  # it did return the right value: honest score
    # The result comes back as soon as the answer has reported; the server kills what the child left
    # once the child has exited, a few milliseconds later (and always before it runs the next job).
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _processes_with(marker) == []
    _assert_alive(grader)


def test_huge_allocation(grader):
    result = grader.grade(_answer("block = bytearray(10 * 1024 ** 3)\nreturn [x, x * 2, 'ok']"), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.MEMORY}
    _assert_alive(grader)


def test_output_flood(grader):
    result = grader.grade(_answer("while True:\n    print('x' * 4096)"), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.OUTPUT_LIMIT}
    assert len(result.output) <= 4096
    _assert_alive(grader)


def test_one_gigabyte_file(grader):
    body = (
        "with open('big.bin', 'wb') as handle:\n"
        "    for _ in range(1024):\n"
        "        handle.write(b'0' * (1 << 20))\n"
        "return [x, x * 2, 'ok']"
    )
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 0 and _statuses(result) == {TestStatus.OUTPUT_LIMIT}
    assert "file size limit" in result.tests[0].detail
    _assert_alive(grader)


# -- the host ---------------------------------------------------------------------------------


def test_rm_rf_outside_the_work_dir(bwrap_grader, tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("still here")
    body = (
        "import shutil, os\n"
        f"shutil.rmtree({str(canary)!r}, ignore_errors=True)\n"
        f"os.system('rm -rf {canary}')\n"
        "return [x, x * 2, 'ok']"
    )
    bwrap_grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert (canary / "keep.txt").read_text() == "still here"


def test_no_network_even_to_loopback(bwrap_grader):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept_loop)
    thread.start()
    try:
        body = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=0.2).sendall(b'leak')\n"
            "    return True\n"
            "except OSError as exc:\n"
            "    return type(exc).__name__"
        )
        reference = "def solve(x):\n    return True\n"
        result = bwrap_grader.grade(_answer(body), reference, TESTS)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert accepted == []
    assert result.score == 0 and _statuses(result) == {TestStatus.WRONG}


def test_environment_secrets_are_not_visible(monkeypatch):
    secret = "colbench-secret-token-8c1f"
    monkeypatch.setenv("COLBENCH_TEST_SECRET", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    body = (
        "import os\n"
        "found = [v for v in os.environ.values() if 'secret-token' in v]\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        with open(f'/proc/{pid}/environ', 'rb') as handle:\n"
        "            if b'secret-token' in handle.read():\n"
        "                found.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "return bool(found) or os.environ.get('HOME')"
    )
    reference = "def solve(x):\n    return True\n"
    # A fresh grader, started while the secrets are in this process's environment.
    with Grader(workers=1, timeout_s=2.0, allow_code_execution=True) as fresh:
        result = fresh.grade(_answer(body), reference, ONE_TEST)
    assert result.score == 0 and result.tests[0].detail == "returned None"


# Source for hostile answers: finds the marker a + b in bytes without ever holding it as one object.
_HAS_MARKER = (
    "def has_marker(data):\n"
    "    start = data.find(a)\n"
    "    while start >= 0:\n"
    "        if data[start + len(a):start + len(a) + len(b)] == b:\n"
    "            return True\n"
    "        start = data.find(a, start + 1)\n"
    "    return False\n"
)


def test_reference_is_not_on_the_candidates_filesystem_or_in_its_memory(bwrap_grader, tmp_path):
    marker_a, marker_b = "REFERENCE-MARK", "ER-51d0c9"  # the whole marker never exists as one object here
    reference = f"def solve(x):\n    # {marker_a}{marker_b}\n    return True\n"
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(reference)
    project = Path(__file__).resolve().parents[1]
    body = (
        "import os\n"
        f"a, b = {marker_a!r}.encode(), {marker_b!r}.encode()\n"
        + _HAS_MARKER +
        "hits = []\n"
        f"for root in [{str(tmp_path)!r}, {str(project)!r}, '/work', '/root', '/home', '/tmp', os.getcwd()]:\n"
        "    for folder, dirs, files in os.walk(root):\n"
        "        dirs[:] = [d for d in dirs if d not in ('.venv', '.pyenv', 'site-packages')]  # the interpreter\n"
        "        for name in files:\n"
        "            try:\n"
        "                with open(os.path.join(folder, name), 'rb') as handle:\n"
        "                    if has_marker(handle.read(1 << 20)):\n"
        "                        hits.append(name)\n"
        "            except OSError:\n"
        "                pass\n"
        "for pid in os.listdir('/proc'):\n"
        "    if not pid.isdigit():\n"
        "        continue\n"
        "    for part in ('cmdline', 'environ'):\n"
        "        try:\n"
        "            with open(f'/proc/{pid}/{part}', 'rb') as handle:\n"
        "                if has_marker(handle.read()):\n"
        "                    hits.append(pid + part)\n"
        "        except OSError:\n"
        "            pass\n"
        "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
        "    for line in maps:\n"
        "        span, perms = line.split()[:2]\n"
        "        start, end = (int(v, 16) for v in span.split('-'))\n"
        "        if perms[0] != 'r' or end - start > 1 << 28:\n"
        "            continue\n"
        "        try:\n"
        "            mem.seek(start)\n"
        "            if has_marker(mem.read(end - start)):\n"
        "                hits.append('memory')\n"
        "        except (OSError, OverflowError, ValueError):\n"
        "            pass\n"
        "return hits or None"
    )
    # One worker, so the reference has just run in a child of the very server the answer forks from.
    with Grader(workers=1, timeout_s=10.0, allow_code_execution=True) as single:
        single.grade(reference, reference, ONE_TEST)
        result = single.grade(_answer(body), reference, {f"t{i}": "solve(0)" for i in range(2)})
    assert [t.detail for t in result.tests] == ["returned None"] * 2, result.to_dict()


# -- faking a pass ----------------------------------------------------------------------------


def test_always_equal_object(grader):
    header = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
    result = grader.grade(_answer("return Anything()", header), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.WRONG}


def test_subclass_with_lying_eq(grader):
    header = (
        "class Liar(list):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    def __iter__(self):\n        return iter([1, 2, 'ok'])\n"
        "    def __repr__(self):\n        return \"[1, 2, 'ok']\"\n"
    )
    result = grader.grade(_answer("return Liar()", header), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.WRONG}
    assert result.tests[0].detail == "returned []"


@pytest.mark.parametrize(
    "body, status",
    [
        ("import sys\nsys.exit(0)", TestStatus.ERROR),
        ("import os\nos._exit(0)", TestStatus.CRASHED),
        # 71 is the status of a child that could not set itself up (an infrastructure error, which
        # makes trainers drop the episode): from the answer, it is just a crash.
        ("import os\nos._exit(71)", TestStatus.CRASHED),
    ],
    ids=["sys.exit", "os._exit", "os._exit(71)"],
)
def test_exit_before_returning(grader, body, status):
    result = grader.grade(_answer(body), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {status} and not result.infra_error
    _assert_alive(grader)


def test_exit_71_while_defining_the_answer(grader):
    result = grader.grade("import os\nos._exit(71)\n", REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.CRASHED} and not result.infra_error


# The harness's own frame writer, found from the answer's frame: it sends well-framed bodies.
FORGE = """
import json, sys
frame = sys._getframe(0)
while frame and 'send_data' not in frame.f_locals:
    frame = frame.f_back
send = frame.f_locals['send_data']
"""


@pytest.mark.parametrize(
    "value",
    [
        ["c", 10**400, 0],  # a complex whose real part no float can hold
        ["I", "z"],  # not hexadecimal
        ["s", ["l", 1]],  # unhashable set item
        ["x", 1],  # unknown tag
        ["D", "1E+99999"],  # a Decimal past the bounds the encoder keeps to
        ["Q", 1, 0],  # a Fraction over zero
        ["r", 0, ["I", "f" * 20000], 1],  # a range too large to compare cheaply
        ["DT", 2020, 13, 1, 0, 0, 0, 0, 0, None],  # month 13
    ],
    ids=["overflowing-complex", "bad-hex", "unhashable", "unknown-tag", "huge-decimal", "zero-denominator",
         "huge-range", "bad-date"],
)
def test_forged_undecodable_frame_is_the_answers_crash(grader, value):
    body = FORGE + f"send(json.dumps(['ok', 0, {value!r}]).encode())\nreturn [x, x * 2, 'ok']"
    result = grader.grade(_answer(body), REFERENCE, TESTS)
    assert result.score == 0 and not result.infra_error, result.to_dict()
    assert result.tests[0].status is TestStatus.CRASHED and "malformed result" in result.tests[0].detail
    _assert_alive(grader)


def test_monkeypatching_builtins_and_harness(grader):
    header = (
        "import builtins, json, os, sys\n"
        "class Fake:\n    def __eq__(self, other):\n        return True\n"
        "builtins.type = lambda *a: list\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.repr = lambda *a: \"[1, 2, 'ok']\"\n"
        "builtins.len = lambda *a: 3\n"
        "json.dumps = lambda *a, **k: '[\"ok\", 0, [\"l\", 1, 2, \"ok\"]]'\n"
        "main = sys.modules['__main__']\n"
        "for name in dir(main):\n"
        "    if name.startswith('_') and callable(getattr(main, name)) and not name.startswith('__'):\n"
        "        setattr(main, name, lambda *a, **k: None)\n"
    )
    result = grader.grade(_answer("return Fake()", header), REFERENCE, TESTS)
    assert result.score == 0
    assert _statuses(result) <= {TestStatus.WRONG, TestStatus.CRASHED, TestStatus.ERROR}
    _assert_alive(grader)


def test_forged_result_line_on_stdout(grader):
    body = (
        "import sys\n"
        "sys.stdout.write('CBF1' + '0' * 32 + '[\"ok\",0,[\"l\",1,2,\"ok\"]]\\n')\n"
        "sys.stdout.write('{\"passed\": true, \"score\": 1.0}\\n')\n"
        "sys.stdout.flush()\n"
        "return None"
    )
    result = grader.grade(_answer(body), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.WRONG}


def test_writing_forged_frames_to_the_result_channel(grader):
    # Even a frame written straight to the private pipe only reports a value; here a wrong one,
    # followed by an early exit: the grader must not count anything it did not receive whole.
    body = (
        "import os, struct\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, b'CBF1' + os.urandom(16) + struct.pack('<I', 9) + b'[\"done\"]')\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)"
    )
    result = grader.grade(_answer(body), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) <= {TestStatus.CRASHED}
    _assert_alive(grader)


def test_forged_frames_on_every_descriptor_change_neither_score_nor_cached_reference():
    # Graded cold (the task's reference not cached yet, so it runs just before), the answer finds its
    # own nonce in its process and writes forged frames -- reference-like results, "start", "ready",
    # "done", made with that nonce and with a random one -- to every descriptor it holds and to every
    # one it can reopen through /proc/self/fd, which it also opens for reading to swallow whatever
    # frames it can before the grader reads them. Expected outputs come from a child the answer
    # never shares: it can break its own report, never pass, never change the cached outputs.
    body = (
        "import json, os, struct, sys\n"
        "frame = sys._getframe()\n"
        "nonces = [os.urandom(16)]\n"
        "while frame is not None:\n"
        "    found = frame.f_locals.get('nonce')\n"
        "    if isinstance(found, bytes) and len(found) == 16:\n"
        "        nonces.append(found)\n"
        "    frame = frame.f_back\n"
        "def pack(nonce, message):\n"
        "    data = json.dumps(message).encode()\n"
        "    return b'CBF1' + nonce + struct.pack('<I', len(data)) + data\n"
        "messages = [['start'], ['ready'], ['ok', 0, 'FORGED'], ['ok', 1, 'FORGED'], ['done']]\n"
        "forged = b''.join(pack(n, m) for n in nonces for m in messages)\n"
        "for fd in range(64):\n"
        "    try:\n"
        "        os.write(fd, forged)\n"
        "    except OSError:\n"
        "        pass\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):\n"
        "        try:\n"
        "            fd = os.open('/proc/self/fd/' + name, flags)\n"
        "        except OSError:\n"
        "            continue\n"
        "        try:\n"
        "            if flags & os.O_WRONLY:\n"
        "                os.write(fd, forged)\n"
        "            else:\n"
        "                os.read(fd, 1 << 16)\n"
        "        except OSError:\n"
        "            pass\n"
        "        finally:\n"
        "            os.close(fd)\n"
        "return 'FORGED'"
    )
    hostile = _answer(body)
    with Grader(workers=1, timeout_s=TIMEOUT_S, allow_code_execution=True) as honest:
        honest.grade(REFERENCE, REFERENCE, TESTS)
        expected = list(honest._cache.values())
    for order in ((hostile, REFERENCE), (REFERENCE, hostile)):
        with Grader(workers=2, timeout_s=TIMEOUT_S, allow_code_execution=True) as cold:
            results = cold.grade_many([(answer, REFERENCE, TESTS) for answer in order])
            scores = {answer: result.score for answer, result in zip(order, results)}
            assert scores == {hostile: 0.0, REFERENCE: 1.0}, [r.to_dict() for r in results]
            assert list(cold._cache.values()) == expected
            assert cold.grade(REFERENCE, REFERENCE, TESTS).score == 1.0
            assert cold.grade(hostile, REFERENCE, TESTS).score == 0.0
            assert list(cold._cache.values()) == expected


# The reference's output is made at run time (no constant of its code holds it); an answer reads
# every readable page of its own process looking for it (through /proc/self/mem, or ctypes where that
# cannot be opened), without ever holding the whole marker as one object itself.
_OUTPUT_MARK_REFERENCE = "def solve(x):\n    parts = ['RESULT-', 'MARK-', 'e7c2a1']\n    return ''.join(parts) + str(x)\n"
_MEMORY_SEARCH = (
    "import ctypes, os\n"
    "a, b = 'RESULT-MA'.encode(), 'RK-e7c2a1'.encode()\n"
    + _HAS_MARKER +
    "try:\n"
    "    mem = open('/proc/self/mem', 'rb', 0)\n"
    "except OSError:\n"
    "    mem = None\n"
    "def read(start, end):\n"
    "    if mem is None:\n"
    "        return ctypes.string_at(start, end - start)\n"
    "    mem.seek(start)\n"
    "    return mem.read(end - start)\n"
    "hits = []\n"
    "with open('/proc/self/maps') as maps:\n"
    "    for line in maps:\n"
    "        fields = line.split()\n"
    "        start, end = (int(v, 16) for v in fields[0].split('-'))\n"
    "        if fields[1][0] != 'r' or end - start > 1 << 28 or fields[-1] in ('[vvar]', '[vsyscall]'):\n"
    "            continue\n"
    "        try:\n"
    "            if has_marker(read(start, end)):\n"
    "                hits.append(line)\n"
    "        except (OSError, OverflowError, ValueError):\n"
    "            pass\n"
    "return hits or None"
)


def test_answer_graded_cold_finds_no_trace_of_its_references_outputs():
    # Graded while its reference is not cached, so that the reference runs just before it. Were the
    # reference run in the answer's own process -- even in a namespace of its own, before the answer,
    # everything it left deleted -- its outputs would still be in freed memory (CPython does not clear
    # it): a trial of that design on 200 real tasks recovered expected outputs from there.
    answer = _answer(_MEMORY_SEARCH)
    with Grader(workers=1, timeout_s=10.0, allow_code_execution=True) as cold:
        results = cold.grade_many([(answer, _OUTPUT_MARK_REFERENCE, ONE_TEST), (answer, _OUTPUT_MARK_REFERENCE, TESTS)])
    for result in results:
        assert {t.detail for t in result.tests} == {"returned None"}, result.to_dict()


def test_killing_the_parent(grader):
    body = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn [x, x * 2, 'ok']"
    result = grader.grade(_answer(body), REFERENCE, TESTS)
    if grader.sandbox_mode == "bwrap":
        # The server is PID 1 of the sandbox: immune; the answer is judged on what it returned.
        assert result.score == 1.0
    else:
        assert not result.infra_error or result.score < 1.0
    _assert_alive(grader)


@pytest.mark.filterwarnings("ignore::colbench_gym.execution.SandboxWarning")
def test_killing_the_server_without_bubblewrap():
    body = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn [x, x * 2, 'ok']"
    with Grader(workers=1, timeout_s=1.0, allow_code_execution=True, sandbox="none") as degraded:
        result = degraded.grade(_answer(body), REFERENCE, TESTS)
        # Children keep the server's user here, so they can kill it: each test that does is lost
        # (never passed), the server is restarted, and grading goes on.
        assert result.score <= 1.0 and len(result.tests) == 2
        assert all(t.status in (TestStatus.PASSED, TestStatus.CRASHED, TestStatus.INFRA_ERROR) for t in result.tests)
        assert degraded.grade(REFERENCE, REFERENCE, TESTS).score == 1.0


# -- what an answer leaves behind -------------------------------------------------------------

def _leave_traces(outside_the_work_dir: bool) -> str:
    """An answer that leaves files, directories it locked and nested 1500 deep, and System V IPC
    objects behind; it returns what it managed to make. Without bubblewrap, /tmp and /dev/shm are
    the host's, which the test leaves alone."""
    places = "('/tmp', '/dev', '/dev/shm', '/dev/mqueue')" if outside_the_work_dir else "()"
    return _answer(
        f"""
made = []
open('left.txt', 'w').write('x')
for folder in {places}:
    try:
        open(folder + '/left', 'w').close()
        made.append(folder)
    except OSError:
        pass
os.makedirs('locked/inner', exist_ok=True)
os.chmod('locked/inner', 0o500)
os.chmod('locked', 0)
here = os.open('.', os.O_RDONLY)
for _ in range(1500):  # deeper than a recursive clean-up can go
    os.mkdir('d')
    os.chdir('d')
os.fchdir(here)
libc = ctypes.CDLL(None, use_errno=True)
for kind, make in (('shm', lambda: libc.shmget(4242, 1 << 20, 0o1600)), ('sem', lambda: libc.semget(4242, 1, 0o1600)),
                   ('msg', lambda: libc.msgget(4242, 0o1600))):
    if make() >= 0:
        made.append(kind)
return made
""",
        "import ctypes, os\n",
    )


FIND_TRACES = _answer(
    """
found = os.listdir('.')
for folder in ('/tmp', '/dev', '/dev/shm', '/dev/mqueue'):
    try:
        found += [folder + '/' + name for name in os.listdir(folder) if name == 'left']
    except OSError:
        pass
for kind in ('shm', 'sem', 'msg'):
    try:
        with open('/proc/sysvipc/' + kind) as handle:
            found += [kind] * (len(handle.read().splitlines()) - 1)
    except OSError:
        pass
return found
""",
    "import os\n",
)


def _assert_nothing_is_left(single: Grader, uid: int | None = None) -> None:
    reference = "def solve(x):\n    return []\n"
    single.warm_up()
    sandboxed = single.sandbox_mode == "bwrap"
    made = single.grade(_leave_traces(sandboxed), reference, ONE_TEST).tests[0].detail
    expected = ["/tmp", "/dev/shm", "/dev/mqueue"] if sandboxed else []  # /dev itself is read-only
    if uid is not None:  # children of another user than the server's: /tmp is not theirs either
        expected = [place for place in expected if place != "/tmp"]
    assert made == f"returned {expected + ['shm', 'sem', 'msg']!r}"
    found = single.grade(FIND_TRACES, reference, ONE_TEST)
    assert found.score == 1.0, found.to_dict()
    if uid is not None:
        assert single.grade("import os\ndef uid():\n    return os.getuid()\n", f"def uid():\n    return {uid}\n",
                            {"t": "uid()"}).score == 1.0


@pytest.mark.filterwarnings("ignore::colbench_gym.execution.SandboxWarning")
@pytest.mark.parametrize("mode", ["auto", "none"])
def test_nothing_an_answer_leaves_reaches_the_next(mode):
    if mode == "none" and os.geteuid() != 0:
        pytest.skip("without bubblewrap, only root gives the server an IPC namespace of its own")
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, sandbox=mode) as single:
        _assert_nothing_is_left(single)


@pytest.mark.filterwarnings("ignore::colbench_gym.execution.SandboxWarning")
@pytest.mark.parametrize("mode", ["auto", "none"])
def test_nothing_is_left_when_children_drop_to_nobody(mode, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("children drop to nobody only when the grader runs as root")
    # Root drops children to nobody when they can read the interpreter; pretend they can (they only
    # use modules the server has already imported here).
    monkeypatch.setattr(sandbox_server, "_world_readable", lambda path: True)
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, sandbox=mode) as single:
        _assert_nothing_is_left(single, uid=65534)


def test_shared_memory_is_size_limited(bwrap_grader):
    # 3 MiB files (under the file size limit), 96 MiB in all: more than the 64 MiB of /dev/shm.
    body = "for i in range(32):\n    with open(f'/dev/shm/{i}', 'wb') as handle:\n        handle.write(b'0' * (3 << 20))"
    result = bwrap_grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert result.score == 0 and "No space left on device" in result.tests[0].detail


# -- equality as in-process ------------------------------------------------------------------

HEADER = (
    "import collections, datetime, decimal, fractions\n"
    "from collections import Counter, OrderedDict\n"
    "from datetime import date, datetime as dt, time as tm, timedelta, timezone\n"
    "from decimal import Decimal\n"
    "from fractions import Fraction\n"
    "class P:\n    pass\n"
)
# (reference value, answer value): the grader must score each pair as `reference == answer` does
# in one process, for values that do not compare by their repr.
SAME_AS_IN_PROCESS = {
    "decimal-scale": ("Decimal('1.5')", "Decimal('1.50')"),
    "decimal-float": ("0.5", "Decimal('0.5')"),
    "decimal-inexact-float": ("0.1", "Decimal('0.1')"),
    "decimal-int": ("Decimal('2E+3')", "2000"),
    "fraction-float": ("0.5", "Fraction(1, 2)"),
    "fraction-decimal": ("Decimal('0.25')", "Fraction(1, 4)"),
    "counter-zero-count": ("Counter(b=1)", "Counter(a=0, b=1)"),
    "counter-dict": ("{'b': 1}", "Counter(b=1)"),
    "ordered-dicts-in-another-order": ("OrderedDict(a=1, b=2)", "OrderedDict(b=2, a=1)"),
    "ordered-dict-and-dict": ("OrderedDict(a=1, b=2)", "{'b': 2, 'a': 1}"),
    "empty-ranges": ("range(0)", "range(5, 5)"),
    "range-list": ("range(0, 10, 2)", "[0, 2, 4, 6, 8]"),
    "ranges": ("range(0, 9, 3)", "range(0, 8, 3)"),
    "aware-datetimes-one-instant": ("dt(2020, 1, 1, 12, tzinfo=timezone.utc)",
                                    "dt(2020, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))"),
    "aware-datetimes-two-instants": ("dt(2020, 1, 1, 12, tzinfo=timezone.utc)",
                                     "dt(2020, 1, 1, 12, tzinfo=timezone(timedelta(hours=1)))"),
    "naive-and-aware": ("dt(2020, 1, 1, 12)", "dt(2020, 1, 1, 12, tzinfo=timezone.utc)"),
    "datetime-and-date": ("date(2020, 1, 1)", "dt(2020, 1, 1)"),
    "timedeltas": ("timedelta(hours=1)", "timedelta(minutes=60)"),
    "aware-times": ("tm(12, tzinfo=timezone.utc)", "tm(14, tzinfo=timezone(timedelta(hours=2)))"),
    "timezones": ("timezone(timedelta(hours=1))", "timezone(timedelta(minutes=60), 'CET')"),
    "bare-objects": ("object()", "object()"),
    "instances-without-eq": ("P()", "P()"),
    "functions": ("len", "len"),
    "nested": ("{'when': [dt(2020, 1, 1)], 'cost': Decimal('1.10')}", "{'cost': Decimal('1.1'), 'when': [dt(2020, 1, 1)]}"),
}


@pytest.mark.parametrize("reference, answer", list(SAME_AS_IN_PROCESS.values()), ids=list(SAME_AS_IN_PROCESS))
def test_equality_is_that_of_python(grader, reference, answer):
    namespace: dict = {}
    exec(HEADER, namespace)  # noqa: S102 - the imports of the pairs above, run here to compute the expected result
    expected = eval(reference, namespace) == eval(answer, namespace)
    result = grader.grade(f"{HEADER}def f():\n    return {answer}\n", f"{HEADER}def f():\n    return {reference}\n",
                          {"t": "f()"})
    assert result.tests[0].status is (TestStatus.PASSED if expected else TestStatus.WRONG), result.to_dict()


def test_aware_datetimes_of_any_tzinfo_compare_as_instants(grader):
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone data")
    paris = "from datetime import datetime\nfrom zoneinfo import ZoneInfo\ndef f():\n    return datetime(2020, 7, 1, 14, tzinfo=ZoneInfo('Europe/Paris'))\n"
    utc = "from datetime import datetime, timezone\ndef f():\n    return datetime(2020, 7, 1, 12, tzinfo=timezone.utc)\n"
    assert grader.grade(paris, utc, {"t": "f()"}).score == 1.0
    assert grader.grade(utc.replace("12,", "13,"), paris, {"t": "f()"}).score == 0


def test_decimal_against_a_huge_int_is_compared_at_once(grader):
    # Python converts the int to a Decimal to compare: 10 s for 3 million bits, on the grader's thread.
    start = time.monotonic()
    result = grader.grade("def f():\n    return 1 << 3_000_000\n", "from decimal import Decimal\ndef f():\n    return Decimal('1.5')\n",
                          {"t": "f()"})
    assert result.tests[0].status is TestStatus.WRONG and time.monotonic() - start < 5


def test_opaque_values_that_compare_by_identity_equal_nothing():
    first, second = decode_value(["i", "builtins.object", "<object object at 0x1>"]), decode_value(
        ["i", "builtins.object", "<object object at 0x1>"]
    )
    assert first == first and first != second and len({first, second}) == 2
    assert decode_value(["o", "m.P", "P(1)"]) == OpaqueValue("m.P", "P(1)")


# -- forged frames that would be slow to decode ------------------------------------------------

COLLIDING = (1 << 61) - 1  # hash(k * COLLIDING) == 0 for every int k


@pytest.mark.parametrize(
    "value",
    [
        "['s'] + [k * M for k in range(1, 60000)]",
        "['f'] + [['t', k * M] for k in range(1, 60000)]",  # tuples inherit their items' collisions
        "['d'] + [v for k in range(1, 60000) for v in (k * M, 0)]",
    ],
    ids=["set", "frozenset-of-tuples", "dict"],
)
def test_forged_hash_collisions_are_rejected_at_once(grader, value):
    # 60000 items sharing one hash: ~2e9 comparisons to build the set, on the grader's thread.
    body = FORGE + f"M = {COLLIDING}\nsend(json.dumps(['ok', 0, {value}]).encode())\nreturn [x, x * 2, 'ok']"
    start = time.monotonic()
    result = grader.grade(_answer(body), REFERENCE, ONE_TEST)
    assert time.monotonic() - start < 5 * TIMEOUT_S
    assert result.tests[0].status is TestStatus.CRASHED and "share a hash" in result.tests[0].detail
    _assert_alive(grader)


def test_decoder_bounds_hash_collisions_but_keeps_honest_values():
    with pytest.raises(ProtocolError, match="share a hash"):
        decode_value(["s", *[k * COLLIDING for k in range(MAX_ITEMS_PER_HASH + 1)]])
    few = [k * COLLIDING for k in range(MAX_ITEMS_PER_HASH)]
    assert decode_value(["s", *few, -1, -2]) == {*few, -1, -2}  # a few collisions are honest
    # Equal items may share a hash however many there are (two opaque values with one repr).
    assert decode_value(["s", *[["o", "m.P", "P()"]] * 1000]) == {OpaqueValue("m.P", "P()")}
    assert decode_value(["d", *[1, "a"] * 1000, 2, "b"]) == {1: "a", 2: "b"}


# -- the fork server's memory -----------------------------------------------------------------

# Swaps min and max in the builtins of the process that forked this child (the fork server): the
# child is a copy of it, so the builtins dict's key table sits at the same address in both.
SWAP_MIN_MAX_IN_THE_SERVER = _answer(
    """
server = os.getppid()
try:
    mem = open(f'/proc/{server}/mem', 'r+b', 0)
except OSError as exc:
    return type(exc).__name__
keys = ctypes.c_void_p.from_address(id(builtins.__dict__) + 32).value  # PyDictObject.ma_keys
table = ctypes.string_at(keys, 16384)
low, high = table.find(struct.pack('@P', id(min))), table.find(struct.pack('@P', id(max)))
with mem:
    mem.seek(keys + low)
    mem.write(struct.pack('@P', id(max)))
    mem.seek(keys + high)
    mem.write(struct.pack('@P', id(min)))
return 'rewritten'
""",
    "import builtins, ctypes, os, struct\n",
)


@pytest.mark.filterwarnings("ignore::colbench_gym.execution.SandboxWarning")
@pytest.mark.parametrize("mode", ["auto", "none"])
def test_answer_cannot_rewrite_the_servers_memory(mode):
    lowest = "def lo(xs):\n    return min(xs)\n"
    with Grader(workers=1, timeout_s=3.0, allow_code_execution=True, sandbox=mode) as single:
        single.warm_up()
        if single.sandbox_mode == "none" and os.geteuid() == 0:
            pytest.skip("children of a root server without bubblewrap may keep CAP_SYS_PTRACE")
        attack = single.grade(SWAP_MIN_MAX_IN_THE_SERVER, REFERENCE, ONE_TEST)
        assert attack.tests[0].detail == "returned 'PermissionError'", attack.to_dict()
        # The next child, forked from the same server, still has the real min.
        wrong = single.grade("def lo(xs):\n    return 3\n", lowest, {"t": "lo([3, 1, 2])"})
        assert wrong.score == 0 and wrong.tests[0].detail == "returned 3"
        assert single.grade(lowest, lowest, {"t": "lo([3, 1, 2])"}).score == 1.0


@pytest.mark.filterwarnings("ignore::colbench_gym.execution.SandboxWarning")
def test_deep_tree_left_by_an_answer_that_kills_the_server():
    # Without bubblewrap a child may kill the server before it wipes the work directory; the grader
    # then removes it, nested deeper than any recursive removal can go.
    body = (
        "import os, signal\n"
        "for _ in range(1500):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        "return [x, x * 2, 'ok']"
    )
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, sandbox="none") as degraded:
        result = degraded.grade(_answer(body), REFERENCE, ONE_TEST)
        assert not result.infra_error, result.to_dict()
        _assert_alive(degraded)


# -- broken answers and tasks -----------------------------------------------------------------


def test_missing_module_import(grader):
    result = grader.grade(_answer("return x", "import numpy_that_does_not_exist\n"), REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.ERROR}
    assert "ModuleNotFoundError" in result.tests[0].detail


def test_syntax_error(grader):
    result = grader.grade("def solve(x)\n    return x\n", REFERENCE, TESTS)
    assert result.score == 0 and _statuses(result) == {TestStatus.ERROR}
    assert "SyntaxError" in result.tests[0].detail


def test_test_call_that_is_not_an_expression(grader):
    tests = {"good": "solve(1)", "statement": "x = solve(1)", "broken": "solve(1", "import": "import os"}
    result = grader.grade(REFERENCE, REFERENCE, tests)
    statuses = {t.name: t.status for t in result.tests}
    assert statuses["good"] is TestStatus.PASSED
    assert {statuses["statement"], statuses["broken"], statuses["import"]} == {TestStatus.REFERENCE_INVALID}
    assert result.score == 0.25


def test_hostile_reference_is_sandboxed_too(bwrap_grader, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("intact")
    reference = f"import os\nos.system('rm -f {canary}')\ndef solve(x):\n    return x\n"
    result = bwrap_grader.grade(reference, reference, ONE_TEST)
    assert result.score == 1.0 and canary.read_text() == "intact"
