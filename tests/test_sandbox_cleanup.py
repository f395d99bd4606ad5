"""The fork server cleans up after a child only when the child left something, and then completely.

The check is cheap (a ``stat`` of each wiped directory, three IPC counts); these tests make sure it
never lets a trace through: traces of every kind, left back to back (well within one timestamp
tick of the previous clean-up), each followed by an answer that looks for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from colbench_gym.execution import Grader, SandboxWarning
from colbench_gym.execution.sandbox.isolation import sandbox_path

LOOK_SOURCE = """
import os
def look():
    found = sorted(os.listdir('.'))
    for folder in PLACES:
        try:
            found += [folder + '/' + name for name in os.listdir(folder) if name not in KEEP]
        except OSError:
            pass
    for kind in ('shm', 'sem', 'msg'):
        try:
            with open('/proc/sysvipc/' + kind) as handle:
                found += [kind] * (len(handle.read().splitlines()) - 1)
        except OSError:
            pass
    return found
"""


def _look(grader: Grader) -> str:
    """An answer listing what is left: the work directory and IPC objects, and inside bubblewrap
    (where they are the sandbox's own, not the host's) /tmp, /dev/shm and /dev/mqueue."""
    places = ("/tmp", "/dev/shm", "/dev/mqueue") if grader.sandbox_mode == "bwrap" else ()
    # The sandbox's work directory is there for every answer; nothing else is, wherever the checkout or the
    # virtual environment lives (under /tmp too: the sandbox's /tmp is its own).
    return LOOK_SOURCE.replace("PLACES", repr(places)).replace("KEEP", repr(["work"]))


EMPTY = "def look():\n    return []\n"

# Each leaves one kind of trace, and nothing else.
LEAVE = {
    "file": "open('left.txt', 'w').write('x')",
    "directory": "os.mkdir('left')",
    "nested": "os.makedirs('a/b/c')\nopen('a/b/c/left', 'w').close()",
    "locked": "os.makedirs('locked/inner')\nos.chmod('locked/inner', 0o500)\nos.chmod('locked', 0)",
    "renamed": "open('x', 'w').close()\nos.rename('x', 'y')",
    "dev-shm": "open('/dev/shm/left', 'w').close()",
    "mqueue": "ctypes.CDLL(None).mq_open(b'/left', os.O_CREAT | os.O_RDWR, 0o600, None)",
    "sysv-shm": "ctypes.CDLL(None).shmget(4242, 4096, 0o1600)",
    "sysv-sem": "ctypes.CDLL(None).semget(4243, 1, 0o1600)",
    "sysv-msg": "ctypes.CDLL(None).msgget(4244, 0o1600)",
}
# Outside bubblewrap /dev/shm and /dev/mqueue are the host's, which the server leaves alone.
SANDBOX_ONLY = {"dev-shm", "mqueue"}


def _leaver(body: str) -> str:
    lines = "\n".join("        " + line for line in body.splitlines())
    return f"import ctypes, os\ndef look():\n    try:\n{lines}\n    except OSError:\n        pass\n    return []\n"


@pytest.fixture(scope="module", params=["auto", "none"])
def single(request):
    if request.param == "none" and os.geteuid() != 0:
        pytest.skip("without bubblewrap, only root gives the server an IPC namespace of its own")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        grader = Grader(workers=1, timeout_s=5.0, allow_code_execution=True, sandbox=request.param).warm_up()
    with grader:
        yield grader


def test_answers_that_touch_nothing_cost_no_clean_up(single):
    look = _look(single)
    single.grade_many([(look, EMPTY, {"t": "look()"})] * 3)
    before = single.cpu_breakdown()
    results = single.grade_many([(look, EMPTY, {"t": "look()"})] * 10)
    after = single.cpu_breakdown()
    assert all(r.score == 1.0 for r in results), [r.to_dict() for r in results]
    # The last child's exit record is read with the next job: the window may be off by one child.
    assert 9 <= after["children"] - before["children"] <= 11
    if single.sandbox_mode == "bwrap":  # elsewhere the work directory may not be on tmpfs: always wiped
        assert after["cleaned"] == before["cleaned"]


@pytest.mark.parametrize("kind", list(LEAVE))
def test_every_trace_is_removed_before_the_next_answer(single, kind):
    if single.sandbox_mode != "bwrap" and (kind in SANDBOX_ONLY or kind.startswith("sysv")):
        pytest.skip("without bubblewrap, the host's /dev/shm, /dev/mqueue and IPC namespace are not wiped")
    # Alternate leaving and looking, back to back: every look must find nothing.
    items = []
    for _ in range(6):
        items.append((_leaver(LEAVE[kind]), EMPTY, {"t": "look()"}))
        items.append((_look(single), EMPTY, {"t": "look()"}))
    before = single.cpu_breakdown()
    results = single.grade_many(items)
    after = single.cpu_breakdown()
    looks = results[1::2]
    assert all(r.score == 1.0 for r in looks), [r.tests[0].detail for r in looks]
    assert after["cleaned"] - before["cleaned"] >= 6


def test_traces_from_many_answers_in_a_row(single):
    kinds = [kind for kind in LEAVE if single.sandbox_mode == "bwrap" or kind not in SANDBOX_ONLY | {"sysv-shm", "sysv-sem", "sysv-msg"}]
    leavers = [_leaver(LEAVE[kind]) for kind in kinds]
    items = [(code, EMPTY, {"t": "look()"}) for code in leavers * 2] + [(_look(single), EMPTY, {"t": "look()"})]
    result = single.grade_many(items)[-1]
    assert result.score == 1.0, result.tests[0].detail


def test_an_interpreter_under_tmp_leaves_the_sandbox_tmp_private(tmp_path):
    """A virtual environment under /tmp (where CI clones often are) is shown elsewhere in the sandbox: its /tmp
    holds only the work directory, so answers that touch nothing cost no clean-up there either."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    assert str(python).startswith("/tmp/") or not str(tmp_path).startswith("/tmp/")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        grader = Grader(workers=1, timeout_s=5.0, allow_code_execution=True, python=str(python)).warm_up()
    with grader:
        if grader.sandbox_mode != "bwrap":
            pytest.skip("the private /tmp is bubblewrap's")
        # The answers run in that environment (seen where the sandbox shows it), not in the base interpreter.
        expected = f"def where():\n    return {sandbox_path(str(venv))!r}\n"
        [prefix] = grader.grade_many([("import sys\ndef where():\n    return sys.prefix\n", expected, {"t": "where()"})])
        assert prefix.score == 1.0, prefix.tests[0].detail
        look = _look(grader)
        grader.grade_many([(look, EMPTY, {"t": "look()"})] * 3)
        before = grader.cpu_breakdown()
        results = grader.grade_many([(look, EMPTY, {"t": "look()"})] * 10)
        after = grader.cpu_breakdown()
    assert all(r.score == 1.0 for r in results), [r.tests[0].detail for r in results]
    assert after["cleaned"] == before["cleaned"]
