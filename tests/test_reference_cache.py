"""References' outputs on disk: a new grader, in this process or a fresh one, never runs a reference
again; a damaged entry is run again and rewritten; a change of any part of the key misses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import colbench_gym
from colbench_gym.execution import Grader, TestStatus, reference_cache
from colbench_gym.execution.sandbox import SandboxProcess

REPO_ROOT = Path(__file__).resolve().parents[1]
# Outputs of every kind the cache stores: plain and tagged values (set, Decimal, float specials, big
# int, bytes, an opaque object), None (never passes), an error, a value that cannot leave the sandbox.
REFERENCE = (
    "import decimal\n"
    "class Box:\n"
    "    def __repr__(self):\n"
    "        return 'Box()'\n"
    "    def __eq__(self, other):\n"
    "        return type(other).__name__ == 'Box'\n"
    "def f(kind):\n"
    "    if kind == 'plain':\n"
    "        return [1, 'two', (3.5, None), {'k': True}]\n"
    "    if kind == 'tagged':\n"
    "        return {frozenset({1, 2}), decimal.Decimal('1.50'), 2 ** 100, b'\\x00\\xff', float('inf')}\n"
    "    if kind == 'opaque':\n"
    "        return Box()\n"
    "    if kind == 'none':\n"
    "        return None\n"
    "    if kind == 'error':\n"
    "        raise KeyError(kind)\n"
    "    return [[[0]] * 2] * 10 ** 6\n"
)
TESTS = {name: f"f({name!r})" for name in ("plain", "tagged", "opaque", "none", "error", "huge")}
WRONG = REFERENCE.replace("'two'", "'deux'")


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("COLBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv(reference_cache.CACHE_ENV_VAR, raising=False)
    return tmp_path / "references"


def _grade(code: str = REFERENCE, reference: str = REFERENCE, tests: dict[str, str] = TESTS, **options):
    """Grade with a fresh grader; return its result and cache_info()."""
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, max_items=100_000, **options) as grader:
        result = grader.grade(code, reference, tests)
        return result, grader.cache_info()


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.json")) if folder.exists() else []


def test_a_second_grader_reads_the_entry_without_running_the_reference(cache_home):
    first, info = _grade(WRONG)
    assert (info["reference_runs"], info["disk_hits"], info["disk_writes"]) == (1, 0, 1)
    [entry] = _entries(cache_home)
    assert entry.parent.name == entry.stem[:2] and len(entry.stem) == 64  # content-addressed: a SHA-256
    again, info = _grade(WRONG)
    assert (info["reference_runs"], info["disk_hits"], info["disk_writes"]) == (0, 1, 0)
    assert again.tests == first.tests and again.score == first.score == pytest.approx(2 / 6)
    statuses = {test.name: test.status for test in again.tests}
    assert statuses == {
        "plain": TestStatus.WRONG, "tagged": TestStatus.PASSED, "opaque": TestStatus.PASSED,
        "none": TestStatus.REFERENCE_INVALID, "error": TestStatus.REFERENCE_INVALID,
        "huge": TestStatus.REFERENCE_INVALID,
    }
    assert "KeyError" in again.tests[4].detail and "more than 100000 items" in again.tests[5].detail
    assert _grade()[0].score == pytest.approx(3 / 6)  # the right answer still passes what it should


def test_a_fresh_process_reads_the_entry(cache_home):
    _grade()
    script = (
        "import json\n"
        "from colbench_gym.execution import Grader\n"
        "from tests.test_reference_cache import REFERENCE, TESTS\n"
        "with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, max_items=100_000) as grader:\n"
        "    result = grader.grade(REFERENCE, REFERENCE, TESTS)\n"
        "    print(json.dumps([result.score, grader.cache_info()]))\n"
    )
    environment = {**os.environ, "COLBENCH_CACHE": str(cache_home.parent), "PYTHONPATH": str(REPO_ROOT)}
    environment.pop(reference_cache.CACHE_ENV_VAR, None)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=environment, capture_output=True,
                          text=True, timeout=120, check=True)
    score, info = json.loads(done.stdout.strip().splitlines()[-1])
    assert score == pytest.approx(3 / 6)
    assert info["reference_runs"] == 0 and info["disk_hits"] == 1


def _damage(entry: Path, how: str) -> None:
    text = entry.read_text()
    row = json.loads(text)
    if how == "garbage":
        entry.write_bytes(b"\x00\xffnot json")
    elif how == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif how == "wrong key":
        entry.write_text(json.dumps({**row, "key": "0" * 64}))
    elif how == "an outcome missing":
        entry.write_text(json.dumps({**row, "outcomes": row["outcomes"][:-1]}))
    elif how == "a value the strict decoder refuses":
        row["outcomes"][0] = ["value", ["s", ["l", 1]]]  # a set holding a list
        entry.write_text(json.dumps(row))
    else:
        raise AssertionError(how)


def test_a_damaged_entry_is_run_again_and_rewritten(cache_home):
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, max_items=100_000) as grader:
        grader.grade(REFERENCE, REFERENCE, TESTS)
        [entry] = _entries(cache_home)
        written = entry.read_text()
        for count, how in enumerate(
            ["garbage", "truncated", "wrong key", "an outcome missing", "a value the strict decoder refuses"], 1
        ):
            _damage(entry, how)
            grader.clear_cache()  # memory only: the next grade asks the disk
            result = grader.grade(REFERENCE, REFERENCE, TESTS)
            info = grader.cache_info()
            assert result.score == pytest.approx(3 / 6), how
            assert (info["reference_runs"], info["disk_corrupt"], info["disk_writes"]) == (1 + count, count, 1 + count)
            assert entry.read_text() == written, how  # rewritten whole
            grader.clear_cache()
            grader.grade(REFERENCE, REFERENCE, TESTS)
            assert grader.cache_info()["reference_runs"] == 1 + count, how  # and read again


def test_a_change_of_any_part_of_the_key_misses(cache_home, monkeypatch):
    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, max_items=100_000) as grader:
        grader.grade(REFERENCE, REFERENCE, TESTS)
        for part, reference, tests in [
            ("reference source", REFERENCE + "# changed\n", TESTS),
            ("test calls", REFERENCE, dict(reversed(TESTS.items()))),
            ("the same again", REFERENCE, TESTS),
        ]:
            grader.clear_cache()
            runs, hits = grader.cache_info()["reference_runs"], grader.cache_info()["disk_hits"]
            grader.grade(reference, reference, tests)
            info = grader.cache_info()
            expected = (runs, hits + 1) if part == "the same again" else (runs + 1, hits)
            assert (info["reference_runs"], info["disk_hits"]) == expected, part
        with monkeypatch.context() as patched:
            patched.setattr(reference_cache, "FORMAT", reference_cache.FORMAT + 1)
            grader.clear_cache()
            grader.grade(REFERENCE, REFERENCE, TESTS)
            assert grader.cache_info()["disk_hits"] == hits + 1, "grader version (entry format)"
    # What a grader's sandbox is, read once per grader: a new one for each.
    assert _grade(max_depth=50)[1]["disk_hits"] == 0, "sandbox limits"
    with monkeypatch.context() as patched:
        patched.setattr(colbench_gym, "__version__", "99.0")
        assert _grade()[1]["disk_hits"] == 0, "grader version (package)"
    start = SandboxProcess.start

    def other_interpreter(self):
        start(self)
        self.hello["version"] = "3.99.0 (another build)"

    with monkeypatch.context() as patched:
        patched.setattr(SandboxProcess, "start", other_interpreter)
        assert _grade()[1]["disk_hits"] == 0, "interpreter version"
    assert _grade(reference_batch_size=4)[1]["disk_hits"] == 0, "references sharing a child"
    assert _grade()[1]["disk_hits"] == 1  # and the original key still finds its entry


def test_a_folder_removed_while_grading_is_made_again(cache_home):
    import shutil

    with Grader(workers=1, timeout_s=5.0, allow_code_execution=True, max_items=100_000) as grader:
        grader.grade(REFERENCE, REFERENCE, TESTS)
        shutil.rmtree(cache_home)  # "delete its folder to drop it", with this grader still running
        grader.clear_cache()
        grader.grade(REFERENCE, REFERENCE, TESTS)  # its entry's folder, known to this grader, is gone
        assert (grader.cache_info()["reference_runs"], grader.cache_info()["disk_writes"]) == (2, 2)
    assert len(_entries(cache_home)) == 1


def test_without_a_sandbox_the_disk_is_not_used(cache_home):
    # answers run unconfined there: an entry they forged would be trusted by every later run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, info = _grade(sandbox="none")
    assert result.score == pytest.approx(3 / 6) and info["disk_writes"] == 0 and _entries(cache_home) == []


def test_it_can_be_turned_off_or_pointed_elsewhere(cache_home, monkeypatch):
    assert _grade(reference_disk_cache=False)[1]["disk_writes"] == 0
    monkeypatch.setenv(reference_cache.CACHE_ENV_VAR, "0")
    info = _grade()[1]
    assert (info["disk_writes"], info["reference_runs"]) == (0, 1) and not cache_home.exists()
    monkeypatch.setenv(reference_cache.CACHE_ENV_VAR, str(cache_home.parent / "elsewhere"))
    assert _grade()[1]["disk_writes"] == 1 and len(_entries(cache_home.parent / "elsewhere")) == 1
    assert not cache_home.exists()


def test_only_deterministic_outcomes_are_stored(cache_home):
    looping = "def f(kind):\n    while True:\n        pass\n"
    with Grader(workers=1, timeout_s=0.3, allow_code_execution=True) as grader:
        result = grader.grade(looping, looping, {"t": "f(1)"})
        info = grader.cache_info()
    assert result.tests[0].status is TestStatus.REFERENCE_INVALID and "timeout" in result.tests[0].detail
    assert info["disk_writes"] == 0 and _entries(cache_home) == []  # a timeout may be the machine's load


def test_an_unwritable_folder_warns_once_and_grading_goes_on(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, info = _grade(reference_disk_cache=blocked)
    assert result.score == pytest.approx(3 / 6) and info["disk_writes"] == 0
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "cannot write the reference cache" in messages[0]
    assert "COLBENCH_REFERENCE_CACHE=0" in messages[0]
